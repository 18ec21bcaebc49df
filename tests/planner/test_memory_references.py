"""The memory estimate against published measurements (tests/data/memory_references.yaml).

The issue's bar is >= 90% of measured peaks within 0.8-1.25x, no family below 80%, none below 0.7x. The
estimate does not meet it yet: `test_the_issue_target` says so (a strict xfail: it fails the suite the day it
passes, so the marker goes). What is asserted is what has been reached, so it cannot slip back unnoticed.
"""

from __future__ import annotations

import pytest
from memory_refs import FLOOR, compare, load_references, model_states_gb, table

REFS = load_references()
PEAKS = [r for r in REFS if r.get("kind", "peak") == "peak" and not r.get("exclude")]
BOUNDS = [r for r in REFS if r.get("kind") in ("fits", "oom") and not r.get("exclude")]


@pytest.fixture(scope="module")
def comparisons(offline_hub):
    return [compare(r) for r in PEAKS]


@pytest.fixture(scope="module")
def offline_hub():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")  # the bundled table only: the calibration must not depend on the network
    yield
    mp.undo()


def test_every_reference_is_complete_and_sourced() -> None:
    ids = [r["id"] for r in REFS]
    assert len(ids) == len(set(ids)) and len(PEAKS) >= 95  # counted peaks (excluded ones say why)
    for r in REFS:
        assert r["source"].startswith("http") and r["excerpt"], r["id"]
        assert r["kind"] in ("peak", "fits", "oom") and float(r["measured_gb"]) > 0, r["id"]
        if not r.get("exclude"):
            assert r["sequence_len"] and r["micro_batch_size"] and r["adapter"] in ("lora", "qlora", "full"), r["id"]


def test_the_share_within_0_8_to_1_25_per_family(comparisons, capsys) -> None:
    with capsys.disabled():
        print("\n" + table(comparisons))
    within = sum(c.within for c in comparisons) / len(comparisons)
    median = sorted(c.ratio for c in comparisons)[len(comparisons) // 2]
    # reached: 86 of 96 (see below; the old estimate: 26 of 65 on its own set). It was 75 while LoRA targets spelt in
    # another architecture's names (c_attn, W_pack, LitGPT's q/v, torchtune's mlp) counted as no adapter at all:
    # the fix added their parameters and dropout copies, and moved two rows out of the band; ZeRO-3's reuse
    # distance (the last layers kept whole) brought one back. Three LitGPT full fine-tunes whose figures are below
    # the model states their settings hold are excluded (test below). Saving what each MLP activation really
    # saves (fused GELU 2 tensors, gelu_new's formula 5) brought LitGPT's phi/StableLM rows from 1.23-1.29x to 1.00-1.05x.
    # MiniCPM-V's six rows (images through a vision tower) are excluded: launchpad trains text models only.
    # Read again at the sources: LitGPT prints max_memory_allocated/1e9 (its 15 rows are 10**9 bytes: +1, its
    # LoRA rows now centre on 1.00) and swift's benchmark records max_memory_reserved (-2); foreach AdamW's
    # step copy of the second moments brought h2o's DDP row in (+1) once the rows whose optimiser steps in place
    # say so (torchtune's fused AdamW, FSDP1's FlatParameters). 74 of 96, then 71: 17 more rows were 10**9
    # bytes compared as GiB (fms-acceleration's and PEFT's byte counts, torchtune's /1e9 of 2024): their QLoRA
    # rows moved to 0.97-1.03, three PEFT MetaMathQA LoRA rows out of the band (1.27-1.29). 73: LitGPT's model
    # has its own lm_head whatever config.json ties (+1: its Llama-3.2 and Gemma LoRA rows now 0.91-0.96), and its
    # FSDP runs accumulate 4 micro-steps under no_sync, holding the whole grads (Gemma-2B 0.48 -> 0.96, +1; its
    # two FSDP runs that ran out of memory on 24 GB now do). 74: QK-norm's saved copies (OLMo-3, Qwen3, Apertus;
    # measured on CPU in tests/train/test_activation_memory.py) brought OLMo-3's QLoRA row to 0.80. 75: each RMSNorm
    # also keeps its output for the projection after it (2(4 + 2 + 2)h a Llama layer, measured the same way), which
    # brought TinyLlama's full fine-tune and torchtune's Llama-2-70B in; PEFT's MetaMathQA LoRA rows went further out.
    # 76: under LoRA a frozen projection keeps no input and a frozen norm only its fp32 upcast, while each adapted
    # module keeps its input in the adapters' dtype (measured with PEFT on CPU): PEFT's MetaMathQA rows 1.33 -> 1.15,
    # BossanBenjamin's no-checkpointing PEFT rows 0.96-0.99; LitGPT's own LoRA rows fell to 0.77-0.95 (its LoRA is
    # not PEFT's, and why it keeps more is not found: one out, and its Llama-2-7B micro-batch-4 OOM now looks like it fits).
    # 75: the adapters' matmuls read 16-bit copies under autocast, not fp32 ones (measured on the trainer's own QLoRA
    # and LoRA models, and TRL keeps a quantised model's adapters in bf16): OLMo-3's QLoRA row 0.81 -> 0.78
    # 76: torchtune's compiled chunked loss keeps the bf16 logits and one of its 8 chunks' gradient, c + c/8
    # bytes, not c + 1 (measured on CPU with inductor): its Llama-3.2-3B QLoRA row 1.34 -> 1.18, the QLoRA family
    # 79% -> 84%; its LoRA rows 1.10-1.19 -> 1.08-1.10, its compiled full fine-tunes 0.93-1.02 -> 0.89-0.99.
    # 77: a compiled unchunked loss keeps c + 4 + c bytes, not the eager 14 (CPU's inductor keeps 4; Liger's and
    # torchtune's GPU tables ~8-10), and compile's fusions take 11% of the activations, not 28% (torchtune's 9 GB
    # from compiling were mostly the loss's); Liger's two 'Torch Compile' rows say compile: true: 1.55 -> 1.10.
    # 79: Qwen-1's remote code scores 16-bit logits, and under DeepSpeed nothing autocasts them: 3c bytes, not the
    # upcast's c + 12 (measured on CPU): Qwen's README rows under DeepSpeed, 1.8B full 1.29 -> 1.05, 7B QLoRA
    # 1.30 -> 0.87, 72B QLoRA 1.12 -> 0.99; long context 62% -> 75%.
    # 80: LitGPT's own attention keeps k and v at the query width (GQA's expanded copies; under MHA v a view that
    # keeps the whole fused qkv output) and its LoRA keeps the source of its zero pad: measured with LitGPT's code
    # at both table commits (test_memory.py), its LoRA rows 0.79-0.96 -> 0.87-0.99 and its Llama-2-7B micro-batch-4
    # run that ran out of 40 GB now does (40.7 GB)
    # 81: DeepSpeed's gradient bucket (and ZeRO-3's prefetch) at the size the run's config gives, DeepSpeed's 5e8 and
    # 5e7 elements where Accelerate's plugin config leaves them out, not hidden^2: PEFT's bloomz-7b1 ZeRO-3 offload
    # row 0.70 -> 0.80 (in fp32 its bucket alone is the 1.9 GB its README logs before training); Qwen's ZeRO-2 rows
    # (2e8, double-buffered) 0.87 -> 0.90 and 0.99 -> 1.00
    # 82: Baichuan2-13B's own code builds its ALiBi bias as [heads, seq, seq] and a second one with the padding mask
    # (10 GB at 8k), and swift's benchmark ran that code with its memory-efficient SDPA whatever --use_flash_attn
    # said: its 8k LoRA row 0.67 -> 0.81 (long context 75% -> 79%)
    # 84: FSDP's working set at the backward pass's peak is what torch's docs say BACKWARD_PRE (its default) holds,
    # this layer, the next one and this layer's grads, beside the root unit and its grads; a frozen base has no grads
    # and a QLoRA layer is gathered as NF4: torchtune's two FSDP full fine-tunes 0.77 -> 0.82 and 0.80 -> 0.85, its
    # CPU-offload one 0.84 -> 0.93; PEFT's FSDP QLoRA rows 0.93 -> 0.88 and 0.73 -> 0.64 (the offload run keeps
    # ~2.6 GB more than the no-offload run's difference says, not found)
    # 86: 28 rows whose notes quote the run's gradient accumulation (Axolotl's examples 2-4, LLaMA-Factory's 16,
    # swift's ceil(16 / batch size), PEFT's 2-4) now say it in gradient_accumulation_steps, so their grads live
    # through the next micro-batch's forward pass: Axolotl's OLMo-3 QLoRA row 0.78 -> 0.81, LLaMA-Factory's GLM-4
    # LoRA row 0.797 -> 0.800, swift's Qwen-1.8B full fine-tune 0.86 -> 0.95; Axolotl's other QLoRA rows +0.03-0.06
    assert within >= 0.89, table(comparisons)
    assert 0.9 <= median <= 1.1  # errors no longer cancel out around 1.00 by luck: most rows are near it
    by_family = {c.family for c in comparisons}
    assert {"lora", "qlora", "full", "zero3", "offload", "long-context"} <= by_family


def test_no_counted_peak_is_below_the_model_states_its_settings_hold(offline_hub) -> None:
    """A peak smaller than the weights, grads and optimiser states its own settings hold cannot be right
    (LitGPT's table gives Phi-3-mini's full fine-tune, 30.6 GB of such states, 17.0 GB on a 24 GB card):
    such an entry stays in the file with an `exclude` reason and is not counted."""
    for r in PEAKS:
        c = compare(r)
        assert model_states_gb(r) <= c.measured_gb, (r["id"], model_states_gb(r), c.measured_gb)
    excluded = [r for r in REFS if r.get("exclude") and r["id"].startswith("litgpt-confighub") and r["adapter"] == "full"]
    assert len(excluded) == 3 and all(model_states_gb(r) > compare(r).measured_gb for r in excluded)


def test_the_issue_s_own_examples(offline_hub) -> None:
    """Axolotl's full fine-tune of Llama-3-8B ran on one 48 GB GPU (estimated at 65 GB before); the QLoRA paper
    trained Guanaco-65B on one 48 GB GPU (estimated at 50.5 GB before)."""
    by_id = {r["id"]: r for r in REFS}
    for rid in ("axolotl-llama3-8b-fft-single-48gb-fits", "qlora-guanaco-65b-48gb-fits"):
        c = compare(by_id[rid])
        assert c.estimate_gb <= c.measured_gb, (rid, c.estimate_gb)


def test_runs_that_ran_fit_and_runs_that_ran_out_do_not(offline_hub) -> None:
    held = []
    for r in BOUNDS:
        c = compare(r)
        held.append(c.estimate_gb <= c.measured_gb if r["kind"] == "fits" else c.estimate_gb > c.measured_gb)
    assert sum(held) / len(held) >= 0.6, held


@pytest.mark.xfail(strict=True, reason="the issue's bar is not met yet: 86 of 96 peaks are within 0.8-1.25x")
def test_the_issue_target(comparisons) -> None:
    share = sum(c.within for c in comparisons) / len(comparisons)
    families: dict[str, list[bool]] = {}
    for c in comparisons:
        families.setdefault(c.family, []).append(c.within)
    assert share >= 0.9
    assert all(sum(v) / len(v) >= 0.8 for v in families.values())
    assert min(c.ratio for c in comparisons) >= FLOOR
