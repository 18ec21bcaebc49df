"""Model shapes for the memory estimate: the few numbers of a Hugging Face ``config.json`` that size a model.

Where a shape comes from, in order:
  1. ``base_model`` is a local directory with a ``config.json`` (or the recipe's `base_model_config` names one);
  2. the bundled table ``configs/model_shapes.yaml``: the config.json numbers of popular families and of
     every model the Axolotl examples use, each with where it was read, so plans work offline;
  3. the Hugging Face cache, then the Hub (``huggingface_hub``, a few-KB download, `HF_TOKEN` for gated
     repos; skipped when `HF_HUB_OFFLINE` is set);
  4. none of these: `UnknownModel`, which says how to give the size. The plan never guesses ("any GPU"
     for an unsized Mixtral-8x22B was the bug this replaced).

`shape_from_config` reads any architecture's config: dense and MoE decoders (Mixtral, Qwen-MoE, DeepSeek,
gpt-oss), multi-head latent attention, plain (2-matrix) MLPs (GPT-NeoX, BLOOM, Falcon, phi-2), T5-style
encoder-decoders (mT0), multimodal configs (the text model, plus the vision tower's parameters). Layers it
cannot take apart (state-space mixers, linear attention) are counted from the published parameter total
when the table has one (`params_published`), so the weights are right even where the activations are
approximated by the dense formula.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from . import hub

# model_type values whose MLP is two matrices (up, down) instead of SwiGLU's three
_PLAIN_MLP = {"gpt2", "gpt_neox", "gptj", "bloom", "falcon", "phi", "mpt", "starcoder2", "opt", "gpt_bigcode",
              "codegen", "stablelm_epoch", "cerebras", "replit_lm", "mamba", "arcee"}  # arcee: ReLU^2
# The activation of a two-matrix MLP, where config.json does not name it: Hugging Face's default per model_type
_PLAIN_ACT = {"gpt2": "gelu_new", "gptj": "gelu_new", "codegen": "gelu_new", "phi": "gelu_new", "opt": "relu"}
# What attention kernels transformers 5 has for a model_type's class (a test checks the ones in
# configs/model_shapes.yaml against the installed transformers). Without either, training runs eager
# attention, whose scores and probabilities grow with the square of the sequence; without SDPA, it does so
# unless FlashAttention-2 is there (flash-attn installed, an Ampere or newer GPU).
_EAGER_ONLY = {"bloom", "mpt", "xglm", "openai-gpt", "gpt_neox_japanese", "cpmant", "deepseek_v4", "hy_v4"}
_FLASH_NOT_SDPA = {"gemma2", "gpt_oss", "gpt_neo", "vaultgemma", "granite_swa", "granitemoe_swa", "mimo_v2_flash",
                   "flint"}
# model_type values whose attention normalises queries and keys with a weighted RMSNorm (QK-norm, per head or
# over the whole projection: each saves an fp32 copy of its input and its 16-bit output); the config keys below
# switch it on for the others (Llama 4's is weightless: the fp32 copy only)
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "olmo2", "olmo3", "olmoe",
            "flex_olmo", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "apertus",
            "lfm2", "lfm2_moe", "minimax_m2", "chameleon"}
_QK_NORM_KEYS = ("use_qk_norm", "qk_layernorm", "qk_norm")
# model_type values whose RMSNorm multiplies by its weight in fp32 and casts back after (Gemma's 1 + w, OLMo-2/3,
# gpt-oss, Qwen3-Next/3.5): each norm saves its normalised output in fp32, not 16-bit; and those with a norm
# before and after each sublayer (Gemma 2 onwards: four a layer). Measured: tests/train/test_activation_memory.py
_NORM_FP32_SCALE = {"gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text",
                    "vaultgemma", "recurrent_gemma", "olmo2", "olmo3", "flex_olmo", "olmo_hybrid", "gpt_oss",
                    "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "vaultgemma"}
# model_type values normalised by LayerNorm (it keeps its 16-bit input and two statistics per token, no fp32 copy)
_LAYER_NORM = {"gpt2", "gpt_neox", "gptj", "phi", "stablelm", "stablelm_epoch", "starcoder2", "falcon", "bloom", "opt",
               "mpt", "gpt_bigcode", "codegen", "persimmon", "btlm", "cerebras", "replit_lm", "dbrx", "phimoe"}
# model_type values that tie the output head to the embeddings when config.json does not say
_TIED_BY_DEFAULT = {"gpt2", "bloom", "falcon", "gemma", "gemma2", "gemma3", "gemma3_text", "mpt", "t5", "mt5",
                    "opt", "starcoder2", "gpt_bigcode", "btlm", "replit_lm", "mamba", "codegen"}


class UnknownModel(RecipeError):
    """The model cannot be sized offline or from the Hub."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a model. Dense decoders use the first eight fields; MoE layers add the
    expert fields (`intermediate` is then the dense layers' MLP size), `extra_params` holds parameters
    outside the per-layer formula (vision tower, state-space mixers, the gap to a published total)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool = False
    head_dim: int | None = None
    gated_mlp: bool = True
    hidden_act: str = "silu"  # the MLP's activation as config.json names it (what autograd saves depends on it)
    experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # all shared experts together
    dense_layers: int = 0  # layers with a dense MLP in an MoE model
    attention_params: int | None = None  # per layer, when not q/k/v/o (multi-head latent attention)
    attention_layers: int = -1  # hybrids: layers with attention (-1: all)
    mlp_layers: int = -1  # hybrids: layers with an MLP or MoE block (-1: all)
    moe_layer_count: int = -1  # MoE blocks (-1: every MLP layer but the first `dense_layers`)
    ssm_params: int = 0  # state-space (Mamba) mixers, all layers together
    extra_params: int = 0
    source: str = ""
    #: the memory-efficient kernels transformers has for it: "flash+sdpa" (most), "flash" (no SDPA: Gemma-2,
    #: gpt-oss), "" (BLOOM, MPT: eager attention only, whose memory grows with the square of the sequence)
    attention_kernels: str = "flash+sdpa"
    model_type: str = ""  # config.json's, when known
    qk_norm: str = ""  # "rms": queries and keys go through a weighted RMSNorm; "l2": a weightless one (Llama 4)
    norms_per_layer: int = 2
    norm_fp32: bool = False  # the norms scale by their weight in fp32 (their saved output is fp32)
    layer_norm: bool = False  # LayerNorm, not RMSNorm
    # the model's own code builds its ALiBi bias as a [heads, seq, seq] tensor, caches it, and adds the padding
    # mask into a second [batch, heads, seq, seq] one that every layer reads (Baichuan-13B and Baichuan2-13B)
    alibi_mask: bool = False

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.hd

    @property
    def n_attention_layers(self) -> int:
        return self.layers if self.attention_layers < 0 else self.attention_layers

    @property
    def n_mlp_layers(self) -> int:
        return self.layers if self.mlp_layers < 0 else self.mlp_layers

    @property
    def moe_layers(self) -> int:
        if not self.experts:
            return 0
        return self.n_mlp_layers - self.dense_layers if self.moe_layer_count < 0 else self.moe_layer_count

    def module_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module of one dense layer, by its usual HF name (LoRA's targets)."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}
        if self.gated_mlp:
            dims.update({"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)})
        else:
            dims.update({"up_proj": (h, i), "down_proj": (i, h)})
        return dims

    @property
    def attn_params(self) -> int:
        if self.attention_params is not None:
            return self.attention_params
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim

    def _mlp(self, inter: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * inter

    @property
    def expert_params(self) -> int:
        """Every routed expert's weights (all of them stay resident, whichever are picked)."""
        return self.moe_layers * self.experts * self._mlp(self.moe_intermediate)

    @property
    def linear_params(self) -> int:
        """Weights of the decoder layers' linear modules (what 4-bit/8-bit quantisation stores compressed)."""
        dense = (self.n_mlp_layers - self.moe_layers) * self._mlp(self.intermediate)
        moe = self.expert_params + self.moe_layers * (self._mlp(self.shared_intermediate)
                                                      + self.hidden * self.experts)  # + the router
        return self.n_attention_layers * self.attn_params + dense + moe + self.ssm_params + self.extra_params

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.linear_params + self.embedding_params + norms

    @property
    def active_intermediate(self) -> int:
        """MLP width one token goes through in an MoE layer (its experts and the shared ones)."""
        if not self.experts:
            return self.intermediate
        return self.experts_per_tok * self.moe_intermediate + self.shared_intermediate

    @property
    def largest_module_params(self) -> int:
        """The biggest tensor ZeRO-3 gathers at once: the embedding matrix, or one layer's weights."""
        return max(self.vocab * self.hidden, self.largest_layer_params)

    @property
    def largest_layer_params(self) -> int:
        """One decoder layer's weights (the largest kind, where MoE and dense layers differ): an FSDP unit."""
        return self.attn_params + max(self._mlp(self.intermediate), self.experts * self._mlp(self.moe_intermediate))


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def shape_from_config(config: Mapping[str, Any], name: str = "config.json") -> ModelShape:
    """A `ModelShape` from a Hugging Face ``config.json`` mapping (or a `model_shapes.yaml` entry, which
    uses the same keys). Raises KeyError/TypeError/ValueError for a config without the basic sizes."""
    top = dict(config)
    cfg = dict(top.get("text_config") or top.get("llm_config") or top)  # multimodal configs nest the LM
    for k, v in top.items():  # a table entry may set sizes beside a nested config
        if k in ("params_published", "source", "vision_params"):
            cfg.setdefault(k, v)
    mtype = str(cfg.get("model_type") or top.get("model_type") or "")
    h = int(_first(cfg, "hidden_size", "d_model", "n_embd", "dim", "model_dim"))
    heads = int(_first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads", default=1 if mtype == "mamba" else None))
    kv = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "num_kv")
    if kv is None and cfg.get("multi_query"):
        kv = 1
    act = str(_first(cfg, "hidden_act", "mlp_hidden_act", "activation_function", "hidden_activation",
                     default=_PLAIN_ACT.get(mtype, "gelu" if mtype in _PLAIN_MLP else "silu")))
    gated = mtype not in _PLAIN_MLP and act not in (
        "relu2", "xielu")  # Nemotron's squared ReLU and Apertus's xIELU MLPs are up/down only
    ff = str(cfg.get("feed_forward_proj") or "")
    if mtype in ("t5", "mt5", "umt5"):
        gated = ff.startswith("gated")
    inter = int(_first(cfg, "intermediate_size", "ffn_hidden_size", "d_ff", "n_inner", "ffn_dim", default=0)
                or 4 * h)
    if not gated and mtype == "mpt":
        inter = int((cfg.get("expansion_ratio") or 4) * h)
    if mtype == "qwen":  # Qwen(1)'s config states twice the width of each of its two MLP halves
        inter //= 2
    layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers"))
    vocab = int(_first(cfg, "vocab_size", "padded_vocab_size", "n_vocab"))
    tied = cfg.get("tie_word_embeddings", top.get("tie_word_embeddings"))
    tied = (mtype in _TIED_BY_DEFAULT) if tied is None else bool(tied)
    head_dim = cfg.get("head_dim") or cfg.get("d_kv")
    experts = int(_first(cfg, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts",
                         default=0) or 0)
    shape_kw: dict[str, Any] = {}
    attention_params = None
    if cfg.get("kv_lora_rank"):  # DeepSeek's multi-head latent attention
        nope, rope = int(cfg.get("qk_nope_head_dim") or 128), int(cfg.get("qk_rope_head_dim") or 64)
        vdim, kvr = int(cfg.get("v_head_dim") or 128), int(cfg["kv_lora_rank"])
        qr = cfg.get("q_lora_rank")
        q = h * int(qr) + int(qr) * heads * (nope + rope) if qr else h * heads * (nope + rope)
        attention_params = q + h * (kvr + rope) + kvr * heads * (nope + vdim) + heads * vdim * h
    decoder_layers = 0
    if mtype in ("t5", "mt5", "umt5"):  # encoder layers + decoder layers (which add cross-attention)
        decoder_layers = int(cfg.get("num_decoder_layers") or layers)
    if experts:
        per_tok = int(_first(cfg, "num_experts_per_tok", "moe_top_k", "top_k", "num_selected_experts", default=2))
        moe_inter = int(_first(cfg, "moe_intermediate_size", "expert_intermediate_size", default=inter))
        n_shared = int(_first(cfg, "n_shared_experts", "num_shared_experts", default=0) or 0)
        shared = int(cfg.get("shared_expert_intermediate_size") or n_shared * moe_inter)
        dense = int(_first(cfg, "first_k_dense_replace", "num_dense_layers", default=0) or 0)
        if cfg.get("mlp_only_layers"):
            dense += len(cfg["mlp_only_layers"])
        step = int(_first(cfg, "decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step", default=1) or 1)
        if step > 1:
            dense = max(dense, layers - layers // step)
        shape_kw.update(experts=experts, experts_per_tok=per_tok, moe_intermediate=moe_inter,
                        shared_intermediate=shared, dense_layers=dense)
    shape_kw.update(_hybrid_layout(cfg, mtype, h, layers, inter))
    if mtype in _QK_NORM or any(cfg.get(k) is True for k in _QK_NORM_KEYS):
        shape_kw["qk_norm"] = "l2" if mtype.startswith("llama4") else "rms"
    if mtype == "baichuan" and "max_position_embeddings" not in cfg:
        # Baichuan's 13B code (v1 and v2) uses ALiBi and its config.json has no max_position_embeddings; the 7B
        # code uses RoPE and states it (a model_shapes.yaml entry for a 7B must state it too)
        shape_kw["alibi_mask"] = True
    shape_kw.update(norm_fp32=mtype in _NORM_FP32_SCALE, norms_per_layer=4 if mtype in _FOUR_NORMS else 2,
                    layer_norm=mtype in _LAYER_NORM)
    shape = ModelShape(
        name=name, hidden=h, intermediate=inter, layers=layers + decoder_layers, heads=heads,
        kv_heads=int(kv or heads), vocab=vocab, tied_embeddings=tied, head_dim=int(head_dim) if head_dim else None,
        gated_mlp=gated, hidden_act=act, attention_params=attention_params, source=str(cfg.get("source") or ""),
        attention_kernels="" if mtype in _EAGER_ONLY else "flash" if mtype in _FLASH_NOT_SDPA else "flash+sdpa",
        model_type=mtype, **shape_kw)
    extra = decoder_layers * shape.attn_params  # T5 decoder layers' cross-attention
    vision = top.get("vision_params") or _vision_params(top.get("vision_config"))
    extra += int(vision or 0)
    published = cfg.get("params_published")
    if published:  # the table knows the real total: make up what the formula cannot take apart
        counted = replace(shape, extra_params=extra).params
        if abs(float(published) - counted) > 0.02 * float(published):
            extra += int(float(published)) - counted
    return replace(shape, extra_params=extra) if extra else shape


def _mamba2_params(cfg: Mapping[str, Any], h: int) -> int:
    """One Mamba-2 mixer: in_proj (x, z, B, C, dt) + out_proj, from the keys the HF configs use."""
    heads = int(_first(cfg, "mamba_n_heads", "mamba_num_heads", default=0) or 0)
    d_head = int(_first(cfg, "mamba_d_head", "mamba_head_dim", default=0) or 0)
    d_ssm = int(_first(cfg, "mamba_d_ssm", default=0) or heads * d_head or 2 * h)
    state = int(_first(cfg, "mamba_d_state", "ssm_state_size", default=128))
    groups = int(_first(cfg, "mamba_n_groups", "n_groups", default=1))
    return h * (2 * d_ssm + 2 * groups * state + heads) + d_ssm * h


def _hybrid_layout(cfg: Mapping[str, Any], mtype: str, h: int, layers: int, inter: int) -> dict[str, Any]:
    """Which layers have attention, an MLP, an MoE block or a Mamba mixer, for the hybrid families."""
    if mtype == "mamba":  # every layer one Mamba-1 mixer, no attention, no MLP
        d_inner = int(cfg.get("intermediate_size") or int(cfg.get("expand") or 2) * h)
        state, rank = int(cfg.get("state_size") or 16), int(cfg.get("time_step_rank") or -(-h // 16))
        mixer = h * 2 * d_inner + d_inner * h + d_inner * (rank + 2 * state) + rank * d_inner
        return {"attention_layers": 0, "mlp_layers": 0, "ssm_params": layers * mixer}
    if mtype == "jamba":
        period, offset = int(cfg.get("attn_layer_period") or 8), int(cfg.get("attn_layer_offset") or 4)
        e_period, e_offset = int(cfg.get("expert_layer_period") or 2), int(cfg.get("expert_layer_offset") or 1)
        attn = sum(1 for i in range(layers) if i % period == offset)
        d_inner = int(cfg.get("mamba_expand") or 2) * h
        rank, state = int(cfg.get("mamba_dt_rank") or 256), int(cfg.get("mamba_d_state") or 16)
        mixer = h * 2 * d_inner + d_inner * h + d_inner * (rank + 2 * state) + rank * d_inner
        return {"attention_layers": attn, "ssm_params": (layers - attn) * mixer,
                "moe_layer_count": sum(1 for i in range(layers) if i % e_period == e_offset)}
    pattern = cfg.get("hybrid_override_pattern")
    if mtype == "nemotron_h" and isinstance(pattern, str):  # M = Mamba-2, E = MoE, * = attention, - = MLP
        return {"attention_layers": pattern.count("*"), "mlp_layers": pattern.count("E") + pattern.count("-"),
                "moe_layer_count": pattern.count("E"), "ssm_params": pattern.count("M") * _mamba2_params(cfg, h)}
    types = cfg.get("layer_types")
    if mtype == "granitemoehybrid" and isinstance(types, list):  # a Mamba-2 or attention mixer, then the MoE
        attn = sum(1 for t in types if t == "attention")
        return {"attention_layers": attn, "ssm_params": (len(types) - attn) * _mamba2_params(cfg, h)}
    if mtype == "falcon_h1":  # attention and Mamba-2 side by side in every layer
        return {"ssm_params": layers * _mamba2_params(cfg, h)}
    return {}


def _vision_params(vcfg: Any) -> int:
    """A ViT tower's parameters (~12 h^2 per layer) from a `vision_config`; 0 when there is none."""
    if not isinstance(vcfg, Mapping):
        return 0
    try:
        h = int(_first(vcfg, "hidden_size", "embed_dim", "width"))
        layers = int(_first(vcfg, "num_hidden_layers", "depth", "num_layers", "layers"))
        inter = int(_first(vcfg, "intermediate_size", "mlp_dim", default=4 * h))
    except (TypeError, ValueError):
        return 0
    return layers * (4 * h * h + 2 * h * inter)


@lru_cache(maxsize=1)
def bundled_shapes() -> dict[str, dict[str, Any]]:
    """``configs/model_shapes.yaml``: {hub id (lower case): config.json numbers + source}."""
    from .settings import _load_yaml

    raw = _load_yaml("model_shapes.yaml").get("models", {})
    table = {str(k).lower(): dict(v) for k, v in raw.items()}
    for key, entry in list(table.items()):  # resolve `same_as` chains (a re-upload or fine-tune)
        seen = {key}
        while "same_as" in entry:
            base = str(entry["same_as"]).lower()
            if base in seen or base not in table:
                break
            seen.add(base)
            entry = {**table[base], **{k: v for k, v in entry.items() if k != "same_as"}}
        table[key] = entry
    return table


_TUNE_SUFFIX = re.compile(r"(-hf|-instruct|-chat|-it|-base)+$")


def _lookup(key: str) -> dict[str, Any] | None:
    table = bundled_shapes()
    if key in table:
        return table[key]
    matches = [v for k, v in table.items() if k.split("/")[-1] == key.split("/")[-1]]  # no organisation
    return matches[0] if len(matches) == 1 else None


def _from_table(base_model: str) -> ModelShape | None:
    key = base_model.strip().rstrip("/").lower()
    # an -Instruct/-chat/-hf variant has its base's shape
    entry = _lookup(key) or _lookup(_TUNE_SUFFIX.sub("", key))
    return shape_from_config(entry, name=base_model) if entry else None


def _local_config(base_model: str, base_dir: Path | None) -> Path | None:
    text = base_model[len("file://"):] if base_model.startswith("file://") else base_model
    if "://" in text or base_model.startswith("builtin:"):
        return None
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path / "config.json" if (path / "config.json").is_file() else None


def _read_config(path: Path, name: str) -> ModelShape:
    try:
        return shape_from_config(json.loads(path.read_text(encoding="utf-8")), name=name)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnknownModel(f"{path}: cannot read the model's sizes from it ({type(exc).__name__}: {exc})") from None


def _hub_cache_file(repo_id: str) -> Path:
    from ..settings import cache_dir

    return cache_dir() / "model-configs" / (repo_id.replace("/", "--") + ".json")


def _from_hub(repo_id: str) -> tuple[ModelShape | None, str]:
    """(shape, why not) from the HF cache or launchpad's own, then the Hub unless HF_HUB_OFFLINE is set."""
    if not hub.is_repo_id(repo_id):
        return None, "not a Hugging Face repo id"
    if not hub.available():
        return None, "huggingface_hub is not installed"
    if cached := hub.hf_cached(repo_id, "config.json"):
        return _read_config(cached, repo_id), ""
    own = _hub_cache_file(repo_id)
    if own.is_file():
        return _read_config(own, repo_id), ""
    if hub.offline():
        return None, "its config.json is not cached and HF_HUB_OFFLINE is set"
    try:
        status, text = hub.get(repo_id, "config.json")
    except hub.HubUnreachable as exc:
        return None, f"its config.json cannot be downloaded ({exc})"
    if status != 200:
        hint = " (a gated or private repo: set HF_TOKEN)" if status in (401, 403) else ""
        return None, f"the Hub answered {status} for its config.json{hint}"
    try:
        config = json.loads(text)
    except ValueError:
        return None, "the Hub's config.json is not JSON"
    own.parent.mkdir(parents=True, exist_ok=True)
    tmp = own.with_suffix(".tmp")
    tmp.write_text(json.dumps(config), encoding="utf-8")
    tmp.replace(own)  # whole or absent
    return _read_config(own, repo_id), ""


def resolve_shape(base_model: str, base_dir: Path | None = None, model_config: Any = None) -> ModelShape:
    """The shape of `base_model` (see the module docstring for the order). `model_config` is the recipe's
    override: a mapping of config.json keys or a path to a config.json. Raises `UnknownModel`."""
    if isinstance(model_config, Mapping):
        try:
            return shape_from_config(model_config, name=base_model)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnknownModel(f"base_model_config: missing or bad size ({exc}); it needs hidden_size, "
                               "num_hidden_layers, num_attention_heads and vocab_size") from None
    if model_config:
        path = Path(str(model_config)).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if path.is_dir():
            path = path / "config.json"
        if path.is_file():
            return _read_config(path, base_model)
        return resolve_shape(str(model_config), base_dir)  # Axolotl's use: another Hub id's config
    if local := _local_config(base_model, base_dir):
        return _read_config(local, base_model)
    if base_model.startswith("builtin:"):
        from ..train.tiny import CONFIG as TINY_CONFIG

        return shape_from_config(TINY_CONFIG, name=base_model)
    if shape := _from_table(base_model):
        return shape
    shape, why = _from_hub(base_model)
    if shape is not None:
        return shape
    raise UnknownModel(
        f"cannot size model {base_model!r}: not in launchpad's bundled table, and {why}. Give its shape with "
        "`base_model_config:` (a path to its config.json, or its hidden_size/intermediate_size/num_hidden_layers/"
        "num_attention_heads/num_key_value_heads/vocab_size), or point base_model at a local folder that has one")


def try_shape(base_model: str, base_dir: Path | None = None, model_config: Any = None) -> ModelShape | None:
    try:
        return resolve_shape(base_model, base_dir, model_config)
    except UnknownModel:
        return None
