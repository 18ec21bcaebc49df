"""The model side of a run: precision, attention kernel, optimizer and the base model with its adapter.

Hygiene the field guides ask for, decided here once:
  - precision: bf16 when the recipe allows it and the GPU supports it, fp16 with loss scaling on older
    GPUs, fp32 on CPU (CPU autocast is slow and buys nothing here);
  - `use_cache=False` while training (the KV cache only serves generation);
  - attention: FlashAttention-2 only when `flash_attn` is installed, a CUDA GPU of compute capability
    >= 8.0 is present and the weights are 16-bit; otherwise PyTorch SDPA. Said once in the log;
  - qlora: 4-bit NF4 with double quantisation, compute in the training precision (bf16 on a modern GPU),
    `prepare_model_for_kbit_training` and gradient checkpointing always on (as Axolotl does);
  - optimizer: the recipe's, else the one the planner's memory estimate assumes (DEFAULT_OPTIMIZER), so
    the plan and the run agree. bitsandbytes optimizers without bitsandbytes fall back to adamw_torch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BadInput

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
# Mirrors configs/planner.yaml `memory.optimizer` (a test keeps them equal): the trainer must not need
# the configs folder on the instance, and the plan's memory estimate must describe what actually runs.
DEFAULT_OPTIMIZER = {"qlora": "paged_adamw_8bit", "lora": "adamw_8bit", "full": "paged_adamw_8bit"}
_BNB_OPTIMIZERS = ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit")


@dataclass(frozen=True)
class Precision:
    """What the run computes in: `bf16`/`fp16` are TrainingArguments flags; `dtype` names the torch
    dtype of 16-bit weights and of QLoRA's compute ("float32" on CPU)."""

    bf16: bool
    fp16: bool

    @property
    def dtype(self) -> str:
        return "bfloat16" if self.bf16 else "float16" if self.fp16 else "float32"

    def as_args(self) -> dict[str, Any]:
        return {"bf16": self.bf16, "fp16": self.fp16}


def choose_precision(recipe, log: Callable[[str], None] = print) -> Precision:
    """bf16 where the recipe allows it and the GPU supports it; fp16 (loss-scaled) on older GPUs; fp32 on CPU."""
    import torch

    if recipe.bf16 is False or not torch.cuda.is_available():
        if recipe.bf16 is True:
            log("bf16 requested but there is no GPU here: training in fp32")
        return Precision(bf16=False, fp16=False)
    if torch.cuda.is_bf16_supported():
        return Precision(bf16=True, fp16=False)
    log("this GPU has no bf16: training in fp16 with loss scaling")
    return Precision(bf16=False, fp16=True)


def choose_attention(prec: Precision, wanted: bool | str = "auto") -> tuple[str, str]:
    """(attn_implementation, why): flash_attention_2 only where it can run, else sdpa. `wanted` is the
    recipe's flash_attention (true was checked by envcheck before we get here)."""
    if wanted is False:
        return "sdpa", "flash_attention: false in the recipe"
    if importlib.util.find_spec("flash_attn") is None:
        if wanted is not True:  # auto: PyTorch's own kernel only where asked for, until measured on a GPU
            return "sdpa", "flash-attn is not installed"
        from .varlen_attention import NAME, unavailable_reason

        reason = unavailable_reason(prec.bf16 or prec.fp16)
        if reason:
            return "sdpa", f"flash-attn is not installed, and PyTorch's own FlashAttention cannot run: {reason}"
        return NAME, "flash_attention: true; flash-attn is not installed: PyTorch's own FlashAttention varlen kernel"
    import torch

    if not torch.cuda.is_available():
        return "sdpa", "no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        return "sdpa", f"FlashAttention-2 needs compute capability >= 8.0, this GPU has {major}.{minor}"
    if not (prec.bf16 or prec.fp16):
        return "sdpa", "FlashAttention-2 needs 16-bit weights"
    from transformers.utils import is_flash_attn_2_available

    if not is_flash_attn_2_available():  # installed but built for another torch/CUDA
        return "sdpa", "flash-attn is installed but does not load with this torch/CUDA"
    return "flash_attention_2", f"compute capability {major}.{minor}"


def attention_support(model_path: str) -> tuple[str, bool, bool] | None:
    """(class name, has FlashAttention-2, has SDPA) of the class transformers builds for `model_path`'s
    config; None when it cannot tell (an unknown or remote-code architecture: the load says what is wrong)."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        cls: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model_path))]
    except Exception:  # noqa: BLE001 (any failure here is reported by from_pretrained itself)
        return None
    flash = bool(getattr(cls, "_supports_flash_attn", False) or getattr(cls, "_supports_flash_attn_2", False))
    return cls.__name__, flash, bool(getattr(cls, "_supports_sdpa", False))


def fit_attention(attn: str, why: str, support: tuple[str, bool, bool] | None) -> tuple[str, str]:
    """The kernel `choose_attention` picked, stepped down to one the model's class has: transformers refuses
    to load a model with an implementation its class lacks (BLOOM and MPT have neither FlashAttention-2 nor
    SDPA, Gemma-3 and Llama-4 no FlashAttention-2), which would fail the job after the machine booted."""
    if support is None:
        return attn, why
    name, flash, sdpa = support
    if attn in ("flash_attention_2", "launchpad_varlen") and not flash:  # the same attention-function contract
        attn, why = "sdpa", f"{name} has no FlashAttention-2 in transformers"
    if attn == "sdpa" and not sdpa:
        attn, why = "eager", (f"{why}; " if why.startswith(name) else "") + (
            f"{name} has no SDPA in transformers: eager attention, whose memory grows with the square of sequence_len")
    return attn, why


def choose_optimizer(recipe, log: Callable[[str], None] = print) -> str:
    """The HF `optim` name for the run."""
    name = getattr(recipe, "optimizer", None) or DEFAULT_OPTIMIZER[recipe.adapter]
    if name in ("adamw_torch_8bit", "adamw_torch_4bit") and importlib.util.find_spec("torchao") is None:
        fallback = "adamw_bnb_8bit" if importlib.util.find_spec("bitsandbytes") else "adamw_torch"
        log(f"optimizer {name} needs torchao, which is not installed: using {fallback}")
        name = fallback
    if name in _BNB_OPTIMIZERS and importlib.util.find_spec("bitsandbytes") is None:
        log(f"optimizer {name} needs bitsandbytes, which is not installed: using adamw_torch")
        return "adamw_torch"
    if name.startswith("paged_"):
        import torch

        if not torch.cuda.is_available():
            # bitsandbytes would warn and run it unpaged anyway; say so once, in our words.
            log(f"optimizer {name}: paging needs a CUDA GPU; on CPU it runs unpaged")
    return name


def _int8_config():
    from transformers import BitsAndBytesConfig

    if importlib.util.find_spec("bitsandbytes") is None:
        raise BadInput("load_in_8bit needs bitsandbytes: pip install 'launchpad[train]' (or leave it out)")
    return BitsAndBytesConfig(load_in_8bit=True)  # LLM.int8


def _quantization_config(prec: Precision, zero_stage: int):
    import torch
    from transformers import BitsAndBytesConfig

    if importlib.util.find_spec("bitsandbytes") is None:
        raise BadInput("adapter: qlora needs bitsandbytes: pip install 'launchpad[train]' (or use adapter: lora)")
    extra = {}
    if zero_stage >= 3:  # packed 4-bit weights stored as the compute dtype, so ZeRO-3 can shard them
        extra["bnb_4bit_quant_storage"] = getattr(torch, prec.dtype)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=getattr(torch, prec.dtype),
        **extra,
    )


def _set_special_tokens(tokenizer: Any, tokens: dict[str, str], log: Callable[[str], None]) -> int:
    """Set the recipe's special tokens on the tokenizer; the number of tokens new to its vocabulary."""
    if not tokens:
        return 0
    before = len(tokenizer)
    tokenizer.add_special_tokens(dict(tokens))
    added = len(tokenizer) - before
    log("special tokens: " + ", ".join(f"{k}={v!r}" for k, v in tokens.items())
        + (f" ({added} new: the embeddings grow)" if added else ""))
    return added


def _set_chat_template(tokenizer: Any, value: str | None, log: Callable[[str], None]) -> None:
    from .chat_templates import NAMED, resolve

    template = resolve(value)
    if template is None:
        return
    tokenizer.chat_template = template
    log(f"chat template: {value}" if value in NAMED else "chat template: the recipe's own (Jinja)")


def build_model(recipe, model_path: str, prec: Precision | dict[str, bool], log: Callable[[str], None] = print,
                *, zero_stage: int = 0):
    """(model, tokenizer, peft_config or None) for the recipe's adapter, ready for SFTTrainer.
    `zero_stage` is the DeepSpeed ZeRO stage of the run (0 without DeepSpeed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(prec, dict):
        prec = Precision(**prec)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    added = _set_special_tokens(tokenizer, getattr(recipe, "special_tokens", None) or {}, log)
    _set_chat_template(tokenizer, getattr(recipe, "chat_template", None), log)
    if tokenizer.pad_token is None:  # many base models ship without one; eos is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    attn, why = fit_attention(*choose_attention(prec, getattr(recipe, "flash_attention", "auto")),
                              attention_support(model_path))
    log(f"attention: {attn} ({why})")
    if attn == "launchpad_varlen":
        from transformers import AutoConfig

        from .envcheck import EnvironmentMismatch
        from .varlen_attention import model_unsupported, register

        why_not = model_unsupported(AutoConfig.from_pretrained(model_path))
        if why_not:
            raise EnvironmentMismatch(f"flash_attention: true: {why_not}, which PyTorch's own FlashAttention (used "
                                      "where flash-attn is not installed) does not do: pip install flash-attn, "
                                      "or flash_attention: auto")
        register()
    kwargs: dict[str, Any] = {"attn_implementation": attn}
    eight_bit = recipe.adapter == "lora" and bool(getattr(recipe, "load_in_8bit", False))
    if recipe.adapter == "qlora" or eight_bit:  # a quantised, frozen base under LoRA
        kwargs["quantization_config"] = (_quantization_config(prec, zero_stage) if recipe.adapter == "qlora"
                                         else _int8_config())
        kwargs["dtype"] = getattr(torch, prec.dtype)
        if torch.cuda.is_available() and zero_stage < 3:
            import os

            kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}  # one full copy per rank
    elif recipe.adapter == "lora":
        kwargs["dtype"] = getattr(torch, prec.dtype)  # the frozen base lives in 16-bit on a GPU
    elif getattr(recipe, "fp32_master_weights", True) or not prec.bf16 or zero_stage:  # fp16 needs fp32 params (GradScaler)
        kwargs["dtype"] = torch.float32  # fp32 master weights; autocast (or DeepSpeed's bf16 engine) does 16-bit
    else:
        kwargs["dtype"] = getattr(torch, prec.dtype)  # pure 16-bit: weights, grads and AdamW states
    model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    model.config.use_cache = False  # the KV cache is for generation; it wastes memory while training
    if added:
        model.resize_token_embeddings(len(tokenizer))
    if recipe.adapter == "qlora" or eight_bit:
        from peft import prepare_model_for_kbit_training

        # Casts norms/embeddings to fp32 and enables input grads so checkpointing works with a frozen base.
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=uses_gradient_checkpointing(recipe),
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
        if eight_bit:
            log("base model in 8-bit (bitsandbytes LLM.int8), LoRA adapters in 16/32-bit")
    peft_config = None
    if recipe.adapter in ("lora", "qlora"):
        from peft import LoraConfig

        targets: Any = recipe.lora_target_modules  # a str is a regular expression: PEFT full-matches module names
        if targets == ["all-linear"]:
            targets = "all-linear"  # PEFT's name: every nn.Linear but the output head
        elif isinstance(targets, str):
            import re

            rx = re.compile(targets)
            chosen = [name for name, _ in model.named_modules() if rx.fullmatch(name)]
            if not chosen:
                example = next((n for n, m in model.named_modules() if type(m).__name__ == "Linear"), "?")
                raise BadInput(f"lora_target_modules: {targets!r} matches no module of {recipe.base_model} (PEFT "
                               f"matches the whole dotted name, e.g. {example!r}): fix the expression or list the names")
            log(f"lora_target_modules: {targets!r} selects {len(chosen)} modules, e.g. {chosen[0]}")
        elif targets is None:
            names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
            targets = [p for p in ATTENTION_PROJECTIONS if p in names] or None  # None: PEFT's per-model default
        peft_config = LoraConfig(
            r=recipe.lora_r,
            lora_alpha=recipe.lora_alpha,
            lora_dropout=recipe.lora_dropout,
            target_modules=targets,
            modules_to_save=recipe.lora_modules_to_save,
            task_type="CAUSAL_LM",
        )
    return model, tokenizer, peft_config


def uses_gradient_checkpointing(recipe) -> bool:
    """QLoRA always checkpoints (the planner's estimate assumes it too); others as the recipe says."""
    return bool(recipe.gradient_checkpointing or recipe.adapter == "qlora")
