"""What a DeepSpeed JSON changes in the memory estimate: ZeRO stage, offloads, ZeRO-3's reuse distance, and the
communication buckets DeepSpeed allocates on the GPU beside the model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

DEEPSPEED_REUSE_DISTANCE = 1_000_000_000  # DeepSpeed's default stage3_max_reuse_distance
# DeepSpeed's own defaults (deepspeed/runtime/zero/config.py), which apply where a JSON leaves the key out (as
# Axolotl's zero1/zero2 files and Accelerate's plugin config do); "auto" is filled from the model by the HF
# Trainer and Accelerate: hidden^2 and 0.9 hidden^2
DEEPSPEED_REDUCE_BUCKET = 500_000_000
DEEPSPEED_PREFETCH_BUCKET = 50_000_000


class DeepSpeedMemory(NamedTuple):
    """What a DeepSpeed JSON changes in the memory estimate. A bucket size of None is "auto" (from the model's
    hidden size); overlap_comm None is DeepSpeed's default (on for ZeRO-3 only)."""

    stage: int
    offload_optimizer: bool
    offload_param: bool
    reuse_distance: int = DEEPSPEED_REUSE_DISTANCE
    reduce_bucket_size: int | None = None
    prefetch_bucket_size: int | None = None
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True


def _size(cfg: dict[str, Any], default: int, *keys: str) -> int | None:
    """A bucket size from the first of `keys` present: None for "auto", `default` when none is."""
    for key in keys:
        if key in cfg:
            value = cfg[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return int(value)
            if isinstance(value, str) and value != "auto":
                try:
                    return int(float(value))
                except ValueError:
                    return None
            return None
    return default


def read_deepspeed(path: str | None, base_dir: Path | None = None) -> DeepSpeedMemory:
    """ZeRO stage, offloads, ZeRO-3 reuse distance and buckets from a DeepSpeed JSON; a missing file counts as
    the stage its name says ("zero3-offload.json", with "auto" buckets) so plans work before the file exists."""
    if not path:
        return DeepSpeedMemory(0, False, False)
    from ..dsconfig import preset_path

    p = Path(path)
    if not p.is_absolute() and base_dir is not None and not p.exists():
        p = base_dir / p
    if not p.exists() and (preset := preset_path(path)) is not None:
        p = preset
    try:
        cfg = json.loads(p.read_text(encoding="utf-8")).get("zero_optimization") or {}
        stage = int(cfg.get("stage", 0))
        off_opt = (cfg.get("offload_optimizer") or {}).get("device", "none") not in ("none", None)
        off_par = (cfg.get("offload_param") or {}).get("device", "none") not in ("none", None)
        # DeepSpeed reads either spelling (Axolotl's configs use the short one)
        reuse = cfg.get("stage3_max_reuse_distance", cfg.get("max_reuse_distance"))
        reuse = int(reuse) if isinstance(reuse, (int, float)) else DEEPSPEED_REUSE_DISTANCE
        overlap = cfg.get("overlap_comm")
        return DeepSpeedMemory(
            stage, off_opt, off_par, reuse,
            reduce_bucket_size=_size(cfg, DEEPSPEED_REDUCE_BUCKET, "reduce_bucket_size"),
            prefetch_bucket_size=_size(cfg, DEEPSPEED_PREFETCH_BUCKET, "stage3_prefetch_bucket_size",
                                       "prefetch_bucket_size"),
            overlap_comm=overlap if isinstance(overlap, bool) else None,
            contiguous_gradients=cfg.get("contiguous_gradients", True) is not False)
    except (OSError, ValueError, AttributeError, TypeError):
        name = p.name.lower()
        m = re.search(r"zero_?(\d)", name)
        offload = "offload" in name
        return DeepSpeedMemory((int(m.group(1)) if m else 0), offload, offload and "3" in (m.group(1) if m else ""))
