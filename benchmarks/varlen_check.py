"""PyTorch's own FlashAttention varlen kernel behind `launchpad_varlen` (launchpad/train/varlen_attention.py),
on a GPU: the same results as SDPA and as the reference, and what it buys on packed short samples.

    python benchmarks/varlen_check.py                 # on a CUDA GPU (compute capability >= 8.0)
    python benchmarks/varlen_check.py --allow-cpu     # the script's flow on CPU, the reference in the kernel's place

Checks (exit 1 if one fails):
  1. the kernel's contract: `varlen_attn` against `reference_varlen_attn` on random ragged sequences (GQA,
     causal, a sliding window);
  2. a random Llama in bf16 under launchpad_varlen against the same under SDPA: a padded batch (left and right
     padding), TRL's padding-free packing (one row, the collator's cu_seq_lens) and launchpad's row-packed
     layout (position ids that restart): logits at the real tokens, the loss and the gradients.
Measured (ratios against padded SDPA in the same run): non-padding tokens/s of forward + backward over the
same short samples (16-512 tokens), padded in batches of 8 under SDPA (the baseline), packed into rows of
--row-len tokens under SDPA (a block-diagonal mask per row), and the same rows in one padding-free row under
launchpad_varlen.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def kernel_contract(kernel, device) -> float:
    """Largest |kernel - reference| over ragged sequences with GQA, causal and a sliding window."""
    import inspect

    import torch

    from launchpad.train.varlen_attention import call_kernel, reference_varlen_attn

    torch.manual_seed(0)
    cu = torch.tensor([0, 37, 38, 200, 457], dtype=torch.int32, device=device)
    q = torch.randn(457, 8, 64, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(457, 2, 64, device=device, dtype=torch.bfloat16) for _ in range(2))
    longest = int(cu.diff().max())
    print(f"varlen_attn{inspect.signature(kernel)}")  # its keywords vary by release (call_kernel adapts)
    windows = [(-1, 0)] + ([(31, 0)] if "window_size" in inspect.signature(kernel).parameters else [])
    worst = 0.0
    for window in windows:  # causal, then a sliding window where this torch's kernel has one
        for scale in (None, 0.05):
            got = call_kernel(kernel, q, k, v, cu, longest, scale, window)
            want = reference_varlen_attn(q, k, v, cu, cu, longest, longest, scale=scale, window_size=window,
                                         enable_gqa=True)
            worst = max(worst, (got.float() - want.float()).abs().max().item())
    return worst


def models(config, device, kernel):
    import torch
    from transformers import AttentionInterface, LlamaForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    from launchpad.train.varlen_attention import NAME, varlen_attention_forward

    AttentionInterface.register(NAME, functools.partial(varlen_attention_forward, kernel=kernel))
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    torch.manual_seed(0)
    sdpa = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    sdpa.config._attn_implementation = "sdpa"
    varlen = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    varlen.load_state_dict(sdpa.state_dict())
    varlen.config._attn_implementation = NAME
    return sdpa, varlen


def model_checks(sdpa, varlen, device) -> dict[str, float]:
    """Largest logit difference (relative to the largest logit) per layout, and the gradients' cosine."""
    import torch

    vocab = sdpa.config.vocab_size
    out: dict[str, float] = {}
    ids = torch.randint(3, vocab, (3, 64), device=device)
    mask = torch.ones_like(ids)
    mask[0, 40:] = 0
    mask[1, :25] = 0
    with torch.no_grad():
        want, got = sdpa(input_ids=ids, attention_mask=mask).logits, varlen(input_ids=ids, attention_mask=mask).logits
        real = mask.bool()
        out["padded"] = ((got - want)[real].abs().max() / want[real].abs().max()).item()
        a, b = torch.randint(3, vocab, (1, 50), device=device), torch.randint(3, vocab, (1, 30), device=device)
        row = torch.cat([a, b], 1)
        positions = torch.cat([torch.arange(50), torch.arange(30)]).unsqueeze(0).to(device)
        cu = torch.tensor([0, 50, 80], dtype=torch.int32, device=device)
        alone = torch.cat([sdpa(input_ids=a).logits, sdpa(input_ids=b).logits], 1)
        free = varlen(input_ids=row, position_ids=positions, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=50,
                      max_length_k=50).logits
        out["padding-free"] = ((free - alone).abs().max() / alone.abs().max()).item()
    labels = row.clone()
    labels[positions == 0] = -100
    grads, losses = [], []
    for model in (sdpa, varlen):
        model.zero_grad()
        loss = model(input_ids=row, position_ids=positions, labels=labels).loss
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None]))
    out["loss"] = abs(losses[0] - losses[1]) / abs(losses[0])
    out["grad cosine"] = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0).item()
    return out


def layouts(lengths: list[int], row_len: int) -> tuple[list[list[int]], list[list[list[int]]]]:
    """(padded batches of 8 sample lengths, rows of packed sample lengths, first fit in order)."""
    padded = [lengths[i:i + 8] for i in range(0, len(lengths), 8)]
    rows: list[list[int]] = []
    for n in lengths:
        for r in rows:
            if sum(r) + n <= row_len:
                r.append(n)
                break
        else:
            rows.append([n])
    return padded, [rows[i:i + 8] for i in range(0, len(rows), 8)]


def timing(sdpa, varlen, device, lengths: list[int], row_len: int, repeats: int) -> dict[str, float]:
    """Non-padding tokens/s of forward + backward, per layout (median of `repeats` passes over all samples)."""
    import torch

    vocab = sdpa.config.vocab_size
    padded, packed = layouts(lengths, row_len)
    real = sum(lengths)

    def step(model, ids, **kw):
        model(input_ids=ids, labels=ids, **kw).loss.backward()

    def pass_padded():
        for group in padded:
            ids = torch.randint(3, vocab, (len(group), max(group)), device=device)
            mask = (torch.arange(max(group), device=device)[None] < torch.tensor(group, device=device)[:, None]).long()
            step(sdpa, ids, attention_mask=mask)

    def positions_of(row):
        return torch.cat([torch.arange(n) for n in row] + [torch.zeros(row_len - sum(row), dtype=torch.long)])

    def pass_rows():
        for group in packed:
            ids = torch.randint(3, vocab, (len(group), row_len), device=device)
            pos = torch.stack([positions_of(r) for r in group]).to(device)
            step(sdpa, ids, position_ids=pos)

    def pass_free():
        for group in packed:
            flat = [n for r in group for n in r]
            ids = torch.randint(3, vocab, (1, sum(flat)), device=device)
            cu = torch.tensor([0, *torch.tensor(flat).cumsum(0).tolist()], dtype=torch.int32, device=device)
            pos = torch.cat([torch.arange(n) for n in flat])[None].to(device)
            step(varlen, ids, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(flat),
                 max_length_k=max(flat))

    def timed(fn) -> float:
        fn()  # warm-up: kernels chosen, allocator filled
        times = []
        for _ in range(repeats):
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return real / statistics.median(times)

    base = timed(pass_padded)
    return {"padded sdpa": base, "row-packed sdpa": timed(pass_rows), "padding-free launchpad_varlen": timed(pass_free)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--row-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--allow-cpu", action="store_true", help="no GPU: the reference kernel, a tiny model (the flow only)")
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig

    from launchpad.train.varlen_attention import reference_varlen_attn, torch_varlen_kernel, unavailable_reason

    why = unavailable_reason(True)
    if why and not args.allow_cpu:
        print(f"cannot run PyTorch's FlashAttention varlen kernel here: {why}", file=sys.stderr)
        return 2
    device = "cpu" if why else "cuda"
    kernel = reference_varlen_attn if why else torch_varlen_kernel()
    print(f"{torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}: torch {torch.__version__}, kernel "
          f"{'reference (CPU rehearsal)' if why else 'torch.nn.attention.varlen.varlen_attn'}")
    failed = []
    worst = kernel_contract(kernel, device)
    print(f"kernel vs reference, largest difference: {worst:.3g} (bf16; want < 0.02)")
    failed += ["kernel"] if worst >= 0.02 else []

    small = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096)
    sdpa, varlen = models(small, device, kernel)
    checks = model_checks(sdpa, varlen, device)
    print("launchpad_varlen vs sdpa: " + ", ".join(f"{k} {v:.3g}" for k, v in checks.items())
          + " (relative differences want < 0.02, the cosine > 0.999)")
    failed += [k for k in ("padded", "padding-free", "loss") if checks[k] >= 0.02]
    failed += ["grad cosine"] if checks["grad cosine"] <= 0.999 else []

    rng = random.Random(0)
    if device == "cuda":  # a ~0.4B stack: attention and the linear layers at a realistic width
        shape = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=6,
                            num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096)
        samples, row_len = args.samples, args.row_len
    else:
        shape, samples, row_len = small, 24, 256
    lengths = [rng.randint(16, min(512, row_len)) for _ in range(samples)]
    sdpa, varlen = models(shape, device, kernel)
    rates = timing(sdpa, varlen, device, lengths, row_len, args.repeats)
    base = rates["padded sdpa"]
    padded_tokens = sum(max(g) * len(g) for g in layouts(lengths, row_len)[0])
    print(f"{samples} samples of 16-{min(512, row_len)} tokens ({sum(lengths) / padded_tokens:.0%} of padded batches "
          f"of 8 are real tokens), non-padding tokens/s of forward + backward, ratio to padded SDPA in this run:")
    for name, rate in rates.items():
        print(f"  {name:<30} {rate:>12,.0f} tok/s  {rate / base:.2f}x")
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
