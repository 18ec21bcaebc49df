"""What each kind of cross-entropy keeps per token and vocabulary entry at its peak: the memory estimate's
"logits" term (launchpad/planner/activations.py), measured with torch's own counters.

    python benchmarks/loss_memory.py              # on a CUDA GPU: torch.cuda.max_memory_allocated
    python benchmarks/loss_memory.py --allow-cpu  # on CPU: torch's memory profiler (inductor builds C++: needs g++)

A bf16 LM head over hidden states, then the loss and its backward pass, the head frozen (LoRA's case); the
peak above what existed before, less the hidden states, divided by tokens x vocabulary:
  eager           F.cross_entropy(logits.float()) (Hugging Face's loss)         estimate: c + 12
  compiled        the same loss under torch.compile, the head outside (torchtune) estimate: c + 4 + c
  chunked eager   the head per chunk of 8, each chunk's loss before the backward   estimate: c + c (LitGPT) / c + 4
  chunked compiled torchtune's CEWithChunkedOutputLoss, compute_cross_entropy compiled  estimate: c + c/8
On CPU inductor fuses the fp32 upcast away (compiled: 4.0 bytes; chunked compiled: 2.25); published GPU runs
keep ~4 bytes more for the compiled unchunked loss (launchpad/planner/activations.py): a GPU run of this
script says how much.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--allow-cpu", action="store_true", help="no GPU: torch's memory profiler on CPU, smaller sizes")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("no CUDA GPU (--allow-cpu measures on CPU)", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    tokens, vocab, hidden = (args.tokens, args.vocab, args.hidden) if cuda else (1024, 8192, 256)
    chunks = 8
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False, device=device, dtype=torch.bfloat16).requires_grad_(False)
    states = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (tokens,), device=device)

    def ce(logits, y):
        return F.cross_entropy(logits.float(), y, reduction="sum")

    compiled_ce = torch.compile(ce, dynamic=False)

    def standard(loss_fn):
        def step():
            x = states.clone().requires_grad_(True)
            (loss_fn(head(x), labels) / tokens).backward()
        return step

    def chunked(loss_fn):
        def step():
            x = states.clone().requires_grad_(True)
            logits = [head(part) for part in x.chunk(chunks)]
            loss = sum(loss_fn(lg, y) for lg, y in zip(logits, labels.chunk(chunks), strict=True))
            del logits
            (loss / tokens).backward()
        return step

    def peak_bytes(step) -> float:
        step()  # compile, warm the allocator
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - base
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
            step()
        now = peak = 0
        for _, action, _, size in prof._memory_profile().timeline:
            now += size if str(action).endswith("CREATE") else -size if str(action).endswith("DESTROY") else 0
            peak = max(peak, now)
        return peak

    rows = [("eager", standard(ce), "c + 12 = 14"), ("compiled", standard(compiled_ce), "c + 4 + c = 8"),
            ("chunked eager", chunked(ce), "c + c = 4 (LitGPT's, no upcast)"),
            ("chunked compiled", chunked(compiled_ce), f"c + c/8 = {2 + 2 / chunks:g}")]
    print(f"{torch.cuda.get_device_name(0) if cuda else 'cpu'}: torch {torch.__version__}, {tokens} tokens x "
          f"vocabulary {vocab}, bf16 head frozen; bytes per token and vocabulary entry at the peak:")
    for name, step, estimate in rows:
        measured = (peak_bytes(step) - tokens * hidden * 2) / (tokens * vocab)  # less the input's copy
        print(f"  {name:<17} {measured:6.2f}   (estimate {estimate})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
