"""What a DeepSpeed JSON changes in the memory estimate: ZeRO stage, offloads, ZeRO-3's reuse distance."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

DEEPSPEED_REUSE_DISTANCE = 1_000_000_000  # DeepSpeed's default stage3_max_reuse_distance


class DeepSpeedMemory(NamedTuple):
    """What a DeepSpeed JSON changes in the memory estimate."""

    stage: int
    offload_optimizer: bool
    offload_param: bool
    reuse_distance: int = DEEPSPEED_REUSE_DISTANCE


def read_deepspeed(path: str | None, base_dir: Path | None = None) -> DeepSpeedMemory:
    """ZeRO stage, offloads and ZeRO-3 reuse distance from a DeepSpeed JSON; a missing file counts as
    the stage its name says ("zero3-offload.json") so plans work before the file exists."""
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
        return DeepSpeedMemory(stage, off_opt, off_par, reuse)
    except (OSError, ValueError, AttributeError, TypeError):
        name = p.name.lower()
        m = re.search(r"zero_?(\d)", name)
        offload = "offload" in name
        return DeepSpeedMemory((int(m.group(1)) if m else 0), offload, offload and "3" in (m.group(1) if m else ""))
