"""The container image a job runs in on a container marketplace (RunPod, Vast.ai): chosen from the
provider's own list by the recipe's CUDA need and, where the offer says, the host driver's newest CUDA.

A CUDA runtime newer than the host's driver does not start (the driver is forward-compatible only within
its major version, and not at all on consumer cards), so the pick is the newest image that the host can
run and that meets `resources.cuda`; no such image is a `NoCapacity` for that offer, not a failed job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import NoCapacity


@dataclass(frozen=True)
class Image:
    """One image a provider may run: its reference and the CUDA (runtime) version inside it."""

    ref: str
    cuda: str
    python: str = "3.11"


def cuda_tuple(version: str | float | None) -> tuple[int, ...] | None:
    """'12.4' / '12.4.1' / 12.4 -> (12, 4[, 1]); None or unreadable -> None."""
    if version is None:
        return None
    try:
        return tuple(int(p) for p in str(version).strip().split(".") if p != "")[:3] or None
    except ValueError:
        return None


def pick_image(images: Sequence[Image], *, need: str | None, host_max: str | float | None = None,
               provider: str | None = None) -> Image:
    """The newest of `images` with CUDA >= `need` (the recipe's `resources.cuda`, None = any) and
    <= `host_max` (the driver's newest CUDA on the offer's host, None = unknown: no limit).
    Raises NoCapacity naming both versions when none fits."""
    want, cap = cuda_tuple(need), cuda_tuple(host_max)
    fits = [i for i in images
            if (want is None or cuda_tuple(i.cuda)[:len(want)] >= want)  # type: ignore[index]
            and (cap is None or cuda_tuple(i.cuda)[:2] <= cap[:2])]  # type: ignore[index]
    if not fits:
        have = ", ".join(sorted({i.cuda for i in images})) or "none"
        raise NoCapacity(f"no image for CUDA {need or 'any'} on a host whose driver supports up to CUDA "
                         f"{host_max if host_max is not None else '?'} (images: CUDA {have})",
                         provider=provider, scope="offer")
    return max(fits, key=lambda i: cuda_tuple(i.cuda) or ())
