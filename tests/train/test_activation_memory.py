"""The memory estimate against what torch really keeps, on CPU. Per layer: tiny random-init models in bf16, the
bytes of every tensor autograd saves for the backward pass (saved_tensors_hooks, each storage once, parameters
left out, only tensors with the token dimension), one layer against two, for Llama and the architectures that
differ from it, PEFT's LoRA and the trainer's own QLoRA/LoRA models. Whole steps: the peak from torch's memory
profiler over a real step, for TRL's tiled LM head and foreach AdamW's step. Kernels differ between CPU and GPU
(dropout's mask, TRL's Triton tile kernel): each test says what it adds or bounds for that."""

from __future__ import annotations

import functools
import tempfile
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from launchpad.planner.memory import TrainSetup, estimate_memory  # noqa: E402
from launchpad.planner.shapes import shape_from_config  # noqa: E402

SIZES: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000}
TOKENS = 192  # a length no model dimension is a multiple of: activations are the tensors with it in their shape


def _recorder(saved: dict[int, int]):
    def keep(t):
        if any(d and d % TOKENS == 0 for d in t.shape):  # per token: not a weight (autocast's casts of the adapters)
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    return keep


@functools.cache
def saved_bytes_per_token_and_layer(model_type: str, extra: tuple[tuple[str, Any], ...] = ()) -> float:
    """Bytes autograd saves per token for one decoder layer of `model_type` (two layers minus one); `extra`:
    config keys beside SIZES."""

    def build(layers: int):
        config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=layers, **SIZES, **dict(extra))
        torch.manual_seed(0)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                             attn_implementation="sdpa").train()

    return _per_layer(build, autocast=False)


def estimated_bytes_per_token_and_layer(model_type: str, extra: tuple[tuple[str, Any], ...] = ()) -> float:
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=1, **SIZES, **dict(extra))
    shape = shape_from_config(config.to_dict())
    est = estimate_memory(shape, TrainSetup(adapter="full", sequence_len=TOKENS, micro_batch_size=1,
                                            gradient_checkpointing=False))
    return est.parts["activations"] * 2**30 / TOKENS


def test_one_llama_layer_saves_what_the_estimate_counts() -> None:
    """Per token: each RMSNorm its fp32 input, the normalised tensor its weight multiplies and (saved by the
    projection after it) its output, 2(4 + 2 + 2)h; q, k, v and the attention output 2(2q + 2kv); the MLP's
    gate, SiLU, up and product 4 x 2i. What is left is SDPA's log-sum-exp and the norms' scales (24 bytes)."""
    h, i = SIZES["hidden_size"], SIZES["intermediate_size"]
    q, kv = SIZES["num_attention_heads"] * SIZES["head_dim"], SIZES["num_key_value_heads"] * SIZES["head_dim"]
    estimated = estimated_bytes_per_token_and_layer("llama")
    assert estimated == 2 * 8 * h + 2 * (2 * q + 2 * kv) + 8 * i
    assert saved_bytes_per_token_and_layer("llama") == pytest.approx(estimated, rel=0.01)


@pytest.mark.parametrize("model_type", ["qwen3", "olmo3", "gemma", "gemma3_text", "mistral", "starcoder2"])
def test_what_an_architecture_saves_beyond_llama_is_what_the_estimate_adds(model_type: str) -> None:
    """Beside Llama: Qwen3 normalises each head's queries and keys, (4 + 2)(q + kv) bytes more per token and
    layer; Gemma's and OLMo's norms scale by their weight in fp32, so each keeps an fp32 normalised tensor
    (OLMo-3's QK-norm too; its norms follow the sublayers, whose projections save the residual instead);
    Gemma 3 adds QK-norm and a norm after each sublayer, whose output only the residual add takes; StarCoder2's
    LayerNorm keeps its 16-bit input (no fp32 copy) and its MLP two tensors; Mistral saves what Llama does."""
    measured = saved_bytes_per_token_and_layer(model_type) - saved_bytes_per_token_and_layer("llama")
    estimated = estimated_bytes_per_token_and_layer(model_type) - estimated_bytes_per_token_and_layer("llama")
    h, i = SIZES["hidden_size"], SIZES["intermediate_size"]
    q, kv = SIZES["num_attention_heads"] * SIZES["head_dim"], SIZES["num_key_value_heads"] * SIZES["head_dim"]
    assert estimated == {"qwen3": 6 * (q + kv), "olmo3": 2 * 2 * h + 8 * (q + kv), "gemma": 2 * 2 * h,
                         "gemma3_text": 2 * 2 * h + 2 * 8 * h + 8 * (q + kv), "mistral": 0,
                         "starcoder2": 2 * (4 - 8) * h + (2 - 4) * 2 * i}[model_type]
    assert measured == pytest.approx(estimated, abs=0.01 * saved_bytes_per_token_and_layer("llama")), (measured, estimated)


@pytest.mark.parametrize("model_type,experts", [("mixtral", {"num_local_experts": 4}),
                                                ("qwen3_moe", {"num_experts": 4, "moe_intermediate_size": 512}),
                                                ("phimoe", {"num_local_experts": 4})])
def test_an_moe_layer_also_keeps_each_token_s_copy_for_each_expert_and_the_expert_outputs(
        model_type: str, experts: dict[str, Any]) -> None:
    """Top-2 of 4 experts: the layer gathers each token's hidden state once per expert it goes to and keeps each
    expert's output until the weighted sum, 2 x 2 x 2h bytes a token, beside the experts' own MLP tensors; the
    router's fp32 softmax and the dispatch indices are ~100 bytes. PhiMoE's norms are LayerNorms."""
    extra = tuple({"num_experts_per_tok": 2, **experts}.items())
    measured = saved_bytes_per_token_and_layer(model_type, extra)
    assert measured == pytest.approx(estimated_bytes_per_token_and_layer(model_type, extra), rel=0.01)


def _per_layer(build, autocast: bool) -> float:
    """Per token and decoder layer: what autograd saves for a model built by `build(layers)` with 2 layers, minus
    with 1. Under LoRA, `build` makes the embeddings' output require grad (as under gradient checkpointing:
    enable_input_require_grads), so the first layer is like the others; `autocast`: under bf16 autocast, as the
    trainer runs."""
    import contextlib

    totals = []
    for layers in (1, 2):
        model = build(layers)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}
        ids = torch.randint(3, SIZES["vocab_size"], (1, TOKENS))
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with cast, torch.autograd.graph.saved_tensors_hooks(_recorder(saved), lambda t: t):
            model(input_ids=ids, labels=ids).loss.backward()
        totals.append(sum(n for ptr, n in saved.items() if ptr not in params))
    return (totals[1] - totals[0]) / TOKENS


@functools.cache
def saved_bytes_with_lora(targets: tuple[str, ...], dropout: float, fp32_adapters: bool) -> float:
    """Per token and Llama layer under PEFT's LoRA (r 8), the base frozen in bf16: fp32 adapters (PEFT's
    default) under bf16 autocast, as a trainer runs them; bf16 adapters without autocast (a pure bf16 run)."""
    peft = pytest.importorskip("peft")

    def build(layers: int):
        config = transformers.AutoConfig.for_model("llama", num_hidden_layers=layers, **SIZES)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        model.enable_input_require_grads()
        lora = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout, target_modules=list(targets))
        return peft.get_peft_model(model, lora, autocast_adapter_dtype=fp32_adapters).train()

    return _per_layer(build, autocast=fp32_adapters)


def _cpu_dropout_masks(shape, targets, dropout: float, stored: int) -> float:
    """On CPU dropout's mask is a tensor of its input's dtype (the adapters' own, after PEFT's cast); CUDA's fused
    kernel keeps one byte an element, which the estimate counts."""
    from launchpad.planner.lora_targets import adapted_modules

    return sum((stored - 1) * fin for _, fin, _ in adapted_modules(shape, targets)) if dropout else 0.0


@pytest.mark.parametrize("fp32_adapters", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.05])
@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("o_proj", "down_proj"),
                                     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")])
def test_a_lora_layer_saves_what_the_estimate_counts(targets: tuple[str, ...], dropout: float, fp32_adapters: bool) -> None:
    """A frozen projection keeps nothing for its weight's grad, a frozen RMSNorm only its fp32 upcast, and the MLP's
    product only where down_proj is adapted. Each adapted module keeps its input as its 16-bit matmul reads it: a
    copy of its own where PEFT's cast to fp32 adapters (and autocast's back) makes one, else the shared input
    once; with dropout, the dropout's output and mask; and lora_A's output."""
    config = transformers.AutoConfig.for_model("llama", num_hidden_layers=1, **SIZES)
    shape = shape_from_config(config.to_dict())
    est = estimate_memory(shape, TrainSetup(adapter="lora", sequence_len=TOKENS, micro_batch_size=1,
                                            gradient_checkpointing=False, lora_r=8, lora_dropout=dropout,
                                            lora_target_modules=targets, fp32_master_weights=fp32_adapters))
    estimated = est.parts["activations"] * 2**30 / TOKENS
    masks = _cpu_dropout_masks(shape, targets, dropout, 4 if fp32_adapters else 2)
    assert saved_bytes_with_lora(targets, dropout, fp32_adapters) == pytest.approx(estimated + masks, rel=0.01)


@pytest.mark.parametrize("recipe_name", ["smoke-qlora.yaml", "smoke-lora.yaml"])
@pytest.mark.parametrize("dropout", [0.0, 0.05])
def test_launchpad_s_own_lora_and_qlora_layers_save_what_their_plan_counts(recipe_name: str, dropout: float,
                                                                          tmp_path_factory) -> None:
    """The trainer's own model (build_model: 4-bit NF4 base with PEFT's kbit preparation, or a bf16 base; TRL's
    cast of a quantised model's adapters to bf16), under bf16 autocast, against the plan's estimate
    (setup_from_recipe): the fp32 residual stream, the casts each adapted module makes, the frozen layers."""
    import json
    import shutil
    from dataclasses import replace
    from pathlib import Path

    from peft import get_peft_model

    from launchpad.planner.memory import setup_from_recipe
    from launchpad.planner.shapes import resolve_shape
    from launchpad.recipe import load_recipe
    from launchpad.train.model import Precision, build_model
    from launchpad.train.tiny import ensure_tiny_llama

    if recipe_name == "smoke-qlora.yaml":
        pytest.importorskip("bitsandbytes")
    repo = Path(__file__).resolve().parents[2]
    recipe = load_recipe(repo / "recipes" / recipe_name).model_copy(
        update={"lora_modules_to_save": None, "lora_dropout": dropout})
    tiny = ensure_tiny_llama(tmp_path_factory.mktemp("tiny"))
    folders: dict[int, Path] = {}
    for layers in (1, 2):  # the builtin tiny Llama with 1 and 2 layers
        folder = tmp_path_factory.mktemp(f"tiny{layers}")
        shutil.copytree(tiny, folder, dirs_exist_ok=True)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder)).save_pretrained(folder)
        folders[layers] = folder

    def build(layers: int):
        model, _, peft_config = build_model(recipe, str(folders[layers]), Precision(bf16=True, fp16=False),
                                            log=lambda _: None)
        model.enable_input_require_grads()
        model = get_peft_model(model, peft_config)
        inner = model.base_model.model  # one layer's worth, not the checkpointed inputs (the name from transformers 5.x)
        (getattr(inner, "activation_checkpointing_disable", None) or inner.gradient_checkpointing_disable)()
        if recipe.adapter == "qlora":  # TRL's SFTTrainer: a quantised model's trainable params in bf16
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(torch.bfloat16)
        return model.train()

    setup = replace(setup_from_recipe(recipe), sequence_len=TOKENS, micro_batch_size=1, gradient_checkpointing=False)
    shape = resolve_shape(str(folders[1]))
    estimated = estimate_memory(shape, setup).parts["activations"] * 2**30 / TOKENS
    masks = _cpu_dropout_masks(shape, setup.lora_target_modules, dropout, 4 if setup.fp32_master_weights else 2)
    assert _per_layer(build, autocast=True) == pytest.approx(estimated + masks, rel=0.01)


def test_a_frozen_moe_layer_keeps_the_expert_outputs_for_the_routing_weights() -> None:
    """Under LoRA on the attention, a frozen MoE layer keeps no expert inputs (their weights need no grad), but
    each expert's output stays for the routing weights' grad (k r h a token), beside the experts' frozen MLPs."""
    peft = pytest.importorskip("peft")
    experts = (("num_local_experts", 4), ("num_experts_per_tok", 2))

    def build(layers: int):
        config = transformers.AutoConfig.for_model("mixtral", num_hidden_layers=layers, **SIZES, **dict(experts))
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        model.enable_input_require_grads()
        lora = peft.LoraConfig(r=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
        return peft.get_peft_model(model, lora, autocast_adapter_dtype=False).train()

    config = transformers.AutoConfig.for_model("mixtral", num_hidden_layers=1, **SIZES, **dict(experts))
    est = estimate_memory(shape_from_config(config.to_dict()),
                          TrainSetup(adapter="lora", sequence_len=TOKENS, micro_batch_size=1, gradient_checkpointing=False,
                                     lora_dropout=0.0, lora_target_modules=("q_proj", "v_proj"), fp32_master_weights=False))
    assert _per_layer(build, autocast=False) == pytest.approx(est.parts["activations"] * 2**30 / TOKENS, rel=0.01)


def _step_peak_bytes(step) -> int:
    """The most bytes allocated at once while `step()` runs, from torch's memory profiler (its timeline of the
    tensors created and destroyed), the tensors that existed before not counted."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    now = peak = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if str(action).endswith("CREATE"):
            now += size
        elif str(action).endswith("DESTROY"):
            now -= size
        peak = max(peak, now)
    return peak


@functools.cache
def sft_step_peak(vocab: int, tokens: int) -> int:
    """Peak bytes of one TRL SFTTrainer training step (LoRA on q/v, bf16 autocast) of a 1-layer Llama."""
    datasets = pytest.importorskip("datasets")
    peft = pytest.importorskip("peft")
    trl = pytest.importorskip("trl")
    from launchpad.train.tiny import build_tokenizer

    with tempfile.TemporaryDirectory() as out:
        config = transformers.AutoConfig.for_model("llama", num_hidden_layers=1, **{**SIZES, "vocab_size": vocab})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        rows = datasets.Dataset.from_dict({"input_ids": [list(range(3, 3 + tokens))] * 2})
        args = trl.SFTConfig(output_dir=out, max_steps=2, per_device_train_batch_size=1,
                             bf16=True, use_cpu=True, report_to=[], save_strategy="no", max_length=tokens, packing=False,
                             disable_tqdm=True)
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=build_tokenizer(),
                                 peft_config=peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        trainer.create_optimizer_and_scheduler(num_training_steps=2)
        trainer.current_gradient_accumulation_steps = 1
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.train()
        trainer.training_step(trainer.model, batch)  # the first step allocates the optimizer's states
        return _step_peak_bytes(lambda: trainer.training_step(trainer.model, batch))


def estimated_logits_bytes(vocab: int, setup: TrainSetup) -> float:
    """The estimate's "logits" term, in bytes, for a 1-layer Llama of SIZES with `vocab` entries."""
    config = transformers.AutoConfig.for_model("llama", num_hidden_layers=1, **{**SIZES, "vocab_size": vocab})
    return estimate_memory(shape_from_config(config.to_dict()), setup).parts["logits"] * 2**30


def test_trl_s_tiled_lm_head_costs_one_tile_not_the_logits() -> None:
    """launchpad's trainer (TRL's SFTTrainer >= 1.15) scores the LM head in tiles of 4096 tokens x 32768 entries:
    the step's peak grows with the vocabulary by what the estimate's "logits" term says, up to one tile, and not
    at all past it (a vocabulary of 65536 peaks where one of 32768 does). The standard cross-entropy would keep
    14 bytes per token and entry, for the whole vocabulary."""
    pytest.importorskip("trl", minversion="1.15")

    def logits(vocab: int) -> float:
        return estimated_logits_bytes(vocab, TrainSetup(adapter="lora", sequence_len=512, micro_batch_size=1,
                                                        loss="tiled", lora_target_modules=("q_proj", "v_proj")))

    grew = sft_step_peak(32768, 512) - sft_step_peak(16384, 512)
    assert grew == pytest.approx(logits(32768) - logits(16384), rel=0.02)
    assert logits(65536) == logits(32768)
    assert sft_step_peak(65536, 512) == pytest.approx(sft_step_peak(32768, 512), rel=0.02)


def test_foreach_adamw_s_step_holds_a_copy_of_the_second_moments() -> None:
    """The estimate's "optimizer step" term (adamw_torch, torch's default multi-tensor AdamW): a full step's peak
    exceeds the fused kernel's by the square roots of every second moment, one fp32 copy of the parameters'
    size, measured with torch's memory profiler over a real step of a 2-layer Llama in fp32 on CPU."""
    config = transformers.AutoConfig.for_model("llama", num_hidden_layers=2, **SIZES)
    shape = shape_from_config(config.to_dict())

    def peak(foreach: bool) -> tuple[int, int]:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                              attn_implementation="sdpa").train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=foreach, fused=not foreach)
        ids = torch.randint(0, SIZES["vocab_size"], (1, 64))

        def step() -> None:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()  # the states exist from the first step on
        return _step_peak_bytes(step), sum(p.numel() for p in model.parameters())

    (foreach, params), (fused, _) = peak(True), peak(False)
    estimate = estimate_memory(shape, TrainSetup(adapter="full", sequence_len=64, optimizer="adamw_torch",
                                                 precision="fp32", fp32_master_weights=True))
    assert estimate.parts["optimizer step"] * 2**30 == pytest.approx(params * 4, rel=0.01)
    assert foreach - fused == pytest.approx(params * 4, rel=0.02)


@pytest.mark.parametrize("checkpointing", [True, False])
def test_each_layer_adds_to_a_step_s_peak_what_the_estimate_says(checkpointing: bool) -> None:
    """A whole step's peak (torch's memory profiler), 4 layers against 2, LoRA on q/v in bf16: with gradient
    checkpointing each layer adds only its checkpointed input (c h a token), without it all it saves. (512 tokens:
    the extra layers' LoRA grads, ~5 KB each, are then 2% of the checkpointed share.)"""
    tokens = 512
    peft = pytest.importorskip("peft")
    config = transformers.AutoConfig.for_model("llama", num_hidden_layers=1, **SIZES)
    setup = TrainSetup(adapter="lora", sequence_len=tokens, micro_batch_size=1, gradient_checkpointing=checkpointing,
                       lora_dropout=0.0, lora_target_modules=("q_proj", "v_proj"), fp32_master_weights=False)
    one = estimate_memory(shape_from_config(config.to_dict()), setup)
    per_layer = (SIZES["hidden_size"] * 2 if checkpointing else one.parts["activations"] * 2**30 / tokens)

    def peak(layers: int) -> int:
        config = transformers.AutoConfig.for_model("llama", num_hidden_layers=layers, **SIZES)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
        lora = peft.LoraConfig(r=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
        model = peft.get_peft_model(model, lora, autocast_adapter_dtype=False).train()
        ids = torch.randint(0, SIZES["vocab_size"], (1, tokens))

        def step() -> None:
            model(input_ids=ids, labels=ids).loss.backward()

        step()
        return _step_peak_bytes(step)

    assert (peak(4) - peak(2)) / (2 * tokens) == pytest.approx(per_layer, rel=0.03)


def test_a_loss_on_16_bit_logits_keeps_three_copies() -> None:
    """Qwen-1's remote code scores its logits as they come (modeling_qwen.py: a shifted copy, then
    CrossEntropyLoss, no .float()), and under DeepSpeed's fp16/bf16 engine nothing autocasts the loss: the step
    peaks at the shifted copy, the log-softmax output and its grad, 3c bytes per token and vocabulary entry, the
    model's output freed before the backward pass as the HF Trainer frees it: the estimate with logits_upcast false."""
    tokens, vocab = 1024, 8192
    head = torch.nn.Linear(SIZES["hidden_size"], vocab, bias=False).to(torch.bfloat16).requires_grad_(False)
    hidden = torch.randn(1, tokens, SIZES["hidden_size"], dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (1, tokens))

    def step() -> None:
        x = hidden.clone().requires_grad_(True)
        lm_logits = head(x)
        shift_logits = lm_logits[..., :-1, :].contiguous()
        loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, vocab), labels[..., 1:].contiguous().view(-1))
        del lm_logits, shift_logits  # the model's outputs, gone when compute_loss returns
        loss.backward()

    measured = (_step_peak_bytes(step) - tokens * SIZES["hidden_size"] * 2) / (tokens * vocab)  # less x (bf16)
    setup = TrainSetup(adapter="lora", sequence_len=tokens, micro_batch_size=1, logits_upcast=False)
    estimated = estimated_logits_bytes(vocab, setup) / (tokens * vocab)
    assert estimated == 6.0 and measured == pytest.approx(estimated, rel=0.02)


def test_compiled_chunked_cross_entropy_keeps_only_the_logits() -> None:
    """torchtune's CEWithChunkedOutputLoss with its compute_cross_entropy compiled, as its recipes run it with
    compile: true (the head applied per chunk, each chunk upcast and scored inside one compiled function):
    inductor saves the bf16 chunk for the backward pass and no fp32 copy. The step peaks at the bf16 logits
    and one chunk's gradient, c + c/8 bytes per token and vocabulary entry with torchtune's 8 chunks (4 chunks:
    c + c/4, measured alike): the estimate's "logits" term for a compiled chunked loss. (The same loss eager
    keeps each chunk's fp32 log-softmax too: 6.5 bytes.) Inductor compiles C++ on CPU: .ci/run installs g++."""
    import shutil
    import sysconfig
    from pathlib import Path

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("torch.compile (inductor) needs a C++ compiler on CPU; .ci/run installs g++")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("torch.compile (inductor) needs Python's headers on CPU; .ci/run installs python3-dev")
    tokens, vocab, chunks = 1024, 8192, 8
    head = torch.nn.Linear(SIZES["hidden_size"], vocab, bias=False).to(torch.bfloat16).requires_grad_(False)
    hidden = torch.randn(tokens, SIZES["hidden_size"], dtype=torch.bfloat16)
    targets = torch.randint(0, vocab, (tokens,))

    @torch.compile(dynamic=False)
    def compute_cross_entropy(logits, labels):  # torchtune's, word for word in effect
        return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum")

    def step() -> None:
        x = hidden.clone().requires_grad_(True)
        logits = [head(part) for part in x.chunk(chunks)]
        loss = sum(compute_cross_entropy(lg, tg) for lg, tg in zip(logits, targets.chunk(chunks), strict=True))
        del logits
        (loss / tokens).backward()

    step()  # compiles
    measured = (_step_peak_bytes(step) - tokens * SIZES["hidden_size"] * 2) / (tokens * vocab)  # less x (bf16)
    setup = TrainSetup(adapter="lora", sequence_len=tokens, micro_batch_size=1, loss="chunked", compiled=True)
    estimated = estimated_logits_bytes(vocab, setup) / (tokens * vocab)
    assert estimated == 2.25 and measured == pytest.approx(estimated, rel=0.02)

    def whole() -> None:  # the same loss on the whole logits, compiled: the logits and their grad here (4 bytes);
        x = hidden.clone().requires_grad_(True)  # published CUDA runs keep ~4 more, which the estimate counts
        (compute_cross_entropy(head(x), targets) / tokens).backward()

    whole()
    measured = (_step_peak_bytes(whole) - tokens * SIZES["hidden_size"] * 2) / (tokens * vocab)
    estimated = estimated_logits_bytes(vocab, TrainSetup(adapter="lora", sequence_len=tokens, micro_batch_size=1,
                                                         compiled=True)) / (tokens * vocab)
    assert measured == pytest.approx(4.0, rel=0.02) and estimated == 8.0


def test_eager_chunked_cross_entropy_keeps_each_chunk_s_log_softmax_beside_the_logits() -> None:
    """LitGPT's chunked_cross_entropy (the lm_head applied per chunk of 128 positions, every chunk's loss computed
    before the backward pass): the bf16 logits the training loop holds, and each chunk's bf16 log-softmax output
    saved for the backward pass, 2 + 2 bytes per token and vocabulary entry: the estimate's "logits" term for an
    eager (not compiled) chunked loss."""
    tokens, vocab, chunk = 4 * 128, 4096, 128
    head = torch.nn.Linear(SIZES["hidden_size"], vocab, bias=False).to(torch.bfloat16)
    x = torch.randn(1, tokens, SIZES["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, vocab, (1, tokens))
    saved: dict[int, int] = {}

    def keep(t):
        storage = t.untyped_storage()
        if storage.data_ptr() != head.weight.untyped_storage().data_ptr() and t.numel() >= chunk * vocab:
            saved[storage.data_ptr()] = storage.nbytes()  # a chunk's logits-sized tensor (the head not counted)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        logits = [head(part) for part in x.split(chunk, dim=1)]
        losses = [torch.nn.functional.cross_entropy(lg.reshape(-1, vocab), tg.reshape(-1), reduction="none")
                  for lg, tg in zip(logits, targets.split(chunk, dim=1), strict=True)]
        loss = torch.cat(losses).mean()
    measured = (sum(lg.untyped_storage().nbytes() for lg in logits) + sum(saved.values())) / (tokens * vocab)
    setup = TrainSetup(adapter="full", sequence_len=tokens, micro_batch_size=1, loss="chunked", compiled=False)
    estimated = estimated_logits_bytes(vocab, setup) / (tokens * vocab)
    assert measured == pytest.approx(estimated, rel=0.01) and measured == pytest.approx(4.0)
    loss.backward()
