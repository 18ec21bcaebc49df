"""FlashAttention's variable-length kernel without the flash-attn package: PyTorch ships it
(`torch.nn.attention.varlen.varlen_attn`, CUDA, compute capability >= 8.0, 16-bit inputs). flash-attn has
no binary wheel on PyPI and its source build needs the CUDA toolkit and an hour: the install step users
fail at most. Registered with transformers as the attention implementation `launchpad_varlen`, it runs
where FlashAttention-2 would, with the same call transformers makes of FlashAttention-2:

  - padded batches (an attention mask): the real tokens only, each row one sequence;
  - padding-free batches (TRL's packing: every sequence of the batch in one row, `cu_seq_lens_q` from the
    collator, or position ids that restart at 0 at each sequence): each sequence apart, so no sample sees
    another and no compute goes to padding;
  - full rows otherwise.

Chosen for `flash_attention: true` where flash-attn is not installed (launchpad.train.model.choose_attention).
Its CUDA kernel cannot run on CPU; the tests run the same code with `reference_varlen_attn` in its place
and compare with SDPA, and benchmarks/varlen_check.py compares the kernel with both on a GPU.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

NAME = "launchpad_varlen"


def torch_varlen_kernel() -> Any:
    """PyTorch's varlen FlashAttention function, or None where this torch has none (< 2.10) or has it for the
    forward pass only (its first version: the autograd registration, `_backward`, came after)."""
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return None
    return varlen.varlen_attn if hasattr(varlen, "_backward") else None


def reference_varlen_attn(query: Any, key: Any, value: Any, cu_seq_q: Any, cu_seq_k: Any, max_q: int, max_k: int, *,
                          scale: float | None = None, window_size: tuple[int, int] = (-1, -1),
                          enable_gqa: bool = False) -> Any:
    """What `varlen_attn` computes, spelt out with SDPA one sequence at a time, in fp32 (slow; any device):
    tokens (total, heads, dim) in and out, sequence i at cu_seq_q[i]:cu_seq_q[i+1], query i attending to
    keys i - left .. i + right of its own sequence (-1: unbounded). The tests run launchpad's side against it
    on CPU, where PyTorch's kernel does not run; benchmarks/varlen_check.py compares the kernel with it on a GPU."""
    import torch

    left, right = window_size
    bounds = cu_seq_q.tolist()
    outs = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        q, k, v = (x[start:end].transpose(0, 1).float() for x in (query, key, value))
        i = torch.arange(end - start, device=query.device)
        allowed = torch.ones(end - start, end - start, dtype=torch.bool, device=query.device)
        if right >= 0:
            allowed &= i[None, :] <= i[:, None] + right
        if left >= 0:
            allowed &= i[None, :] >= i[:, None] - left
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale,
                                                               enable_gqa=enable_gqa)
        outs.append(out.transpose(0, 1).to(query.dtype))
    return torch.cat(outs)


def unavailable_reason(half_precision: bool) -> str | None:
    """Why this machine cannot run it (None: it can)."""
    import torch

    if torch_varlen_kernel() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen with a backward pass"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        return f"FlashAttention needs compute capability >= 8.0, this GPU has {major}.{minor}"
    if not half_precision:
        return "FlashAttention needs 16-bit weights"
    return None


def model_unsupported(config: Any) -> str | None:
    """Why a model with this (transformers) config cannot run under it, before its weights load (None: it can):
    the attention features of some families that the varlen kernel does not have."""
    if getattr(config, "attn_logit_softcapping", None):
        return f"{config.model_type} soft-caps its attention logits"
    if getattr(config, "model_type", None) == "gpt_oss":
        return "gpt_oss has attention sinks"
    if getattr(config, "attention_dropout", 0.0):
        return f"{config.model_type} has attention dropout {config.attention_dropout}"
    return None


def _sequences(query: Any, attention_mask: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, int]:
    """(indices of the tokens that attend, cumulative sequence lengths over them, longest sequence) for a
    (batch, seq) layout flattened to batch*seq tokens; indices None when every token attends."""
    import torch

    batch, seq = query.shape[0], query.shape[2]
    device = query.device
    if attention_mask is not None:  # (batch, seq), 1 = a real token: drop the padding, one sequence per row
        mask = attention_mask.bool()
        lengths = mask.sum(dim=-1, dtype=torch.int32)
        indices = mask.flatten().nonzero().flatten()
        cu = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        return indices, cu, int(lengths.max())
    given = kwargs.get("cu_seq_lens_q")
    if given is not None and kwargs.get("max_length_q") is not None:  # padding-free: the collator counted them
        return None, given.to(device=device, dtype=torch.int32), int(kwargs["max_length_q"])
    positions = kwargs.get("position_ids")
    if positions is not None and positions.shape[-1] == seq:
        # a sequence starts wherever the position ids restart (packed rows), and at every row's start
        starts = (positions.reshape(-1, seq) == positions.min()).expand(batch, seq).clone()  # (1, seq): shared
        starts[:, 0] = True
        first = starts.flatten().nonzero().flatten().to(torch.int32)
        cu = torch.cat([first, torch.tensor([batch * seq], dtype=torch.int32, device=device)])
        return None, cu, int(cu.diff().max())
    cu = torch.arange(0, (batch + 1) * seq, seq, dtype=torch.int32, device=device)
    return None, cu, seq


def _compute_dtype(query: Any, module: Any) -> Any:
    """The 16-bit dtype to run in: PEFT's k-bit preparation keeps norms in fp32, so q, k and v can arrive in fp32."""
    import torch

    if query.dtype in (torch.float16, torch.bfloat16):
        return query.dtype
    if torch.is_autocast_enabled(query.device.type):
        return torch.get_autocast_dtype(query.device.type)
    configured = getattr(getattr(module, "config", None), "dtype", None)
    return configured if configured in (torch.float16, torch.bfloat16) else torch.bfloat16


class _Any:
    def __contains__(self, name: object) -> bool:
        return True


_ANY = _Any()


@functools.lru_cache(maxsize=8)
def _keywords(kernel: Any) -> frozenset[str] | _Any:
    """The keyword names `kernel` takes, read once per kernel (call_kernel runs in every layer of every step);
    a kernel taking **kwargs takes any."""
    params = inspect.signature(kernel).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return _ANY
    return frozenset(params)


def call_kernel(kernel: Any, q: Any, k: Any, v: Any, cu: Any, longest: int, scale: float | None,
                window: tuple[int, int]) -> Any:
    """Call `kernel` with what its signature has. `varlen_attn` grew its keywords over releases: torch 2.10
    takes only `is_causal`; later ones `scale` and `window_size` (the same one-sided window as FlashAttention),
    then `enable_gqa`. Without `scale`, q is pre-scaled (exact: softmax((c q) k / sqrt(d)) with c = scale *
    sqrt(d)); without `enable_gqa`, each kv head is repeated for its query heads; a sliding window needs
    `window_size`."""
    def takes(name: str) -> bool:
        return name in _keywords(kernel)

    kwargs: dict[str, Any] = {}
    if scale is not None:
        if takes("scale"):
            kwargs["scale"] = scale
        else:
            q = q * (scale * q.shape[-1] ** 0.5)
    if q.shape[1] != k.shape[1]:
        if takes("enable_gqa"):
            kwargs["enable_gqa"] = True
        else:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if takes("window_size"):
        kwargs["window_size"] = window
    elif window[0] >= 0 or window[1] > 0:
        raise NotImplementedError(f"{NAME}: this torch's varlen_attn has no sliding window; use sdpa")
    else:
        kwargs["is_causal"] = window[1] == 0
    return kernel(q, k, v, cu, cu, longest, longest, **kwargs)


def varlen_attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                             dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                             softcap: float | None = None, is_causal: bool | None = None, kernel: Any = None,
                             **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function contract: query (batch, heads, seq, dim), key and value (batch,
    kv heads, seq, dim); returns (batch, seq, heads, dim) and no attention weights. `kernel` replaces
    PyTorch's (the tests' reference kernel on CPU)."""
    if softcap:
        raise NotImplementedError(f"{NAME}: attention logit soft-capping (Gemma 2) is not supported; use sdpa")
    if dropout and module.training:
        raise NotImplementedError(f"{NAME}: attention dropout is not supported; use sdpa")
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError(f"{NAME}: attention sinks (gpt-oss) are not supported; use sdpa")
    kernel = kernel or torch_varlen_kernel()
    batch, heads, seq, dim = query.shape
    dtype = _compute_dtype(query, module)
    indices, cu, longest = _sequences(query, attention_mask, kwargs)

    def tokens(x: Any) -> Any:  # (batch, h, seq, dim) -> (tokens, h, dim), padding dropped
        flat = x.transpose(1, 2).reshape(batch * seq, x.shape[1], x.shape[3]).to(dtype)
        return flat if indices is None else flat.index_select(0, indices)

    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    window = (sliding_window - 1, 0 if causal else sliding_window - 1) if sliding_window else (-1, 0 if causal else -1)
    out = call_kernel(kernel, tokens(query), tokens(key), tokens(value), cu, longest, scaling, window)
    if indices is not None:  # padding back in, as zeros (the loss never reads those positions)
        full = out.new_zeros(batch * seq, heads, dim)
        full.index_copy_(0, indices, out)
        out = full
    return out.reshape(batch, seq, heads, dim), None


def register() -> None:
    """Make `NAME` a valid `attn_implementation` for transformers: the attention function, and the mask
    FlashAttention-2 gets (the 2D padding mask, or none)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(NAME, varlen_attention_forward)
    AttentionMaskInterface.register(NAME, flash_attention_mask)
