"""How a run is going, at a glance: the loss curve (a sparkline from rich's own text), eval loss, speed,
ETA, cost so far against the projection and the plan, and the newest checkpoint complete in the store.

The figures come from the status row (launchpad.jobstatus: the live instance's status.json) and, for
`status JOB`, from the job's store: its newest complete checkpoint (the age of its manifest) and, when the
run is no longer live, the loss history the trainer saved in it (trainer_state.json), so a finished run
still shows its curve from any machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ..failover import duration
from ._views import _age

_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int) -> str:
    """`values` as one line of block characters, at most `width` wide (bucket means when longer)."""
    vals = [float(v) for v in values]
    if not vals or width < 1:
        return ""
    if len(vals) > width:
        size = len(vals) / width
        vals = [sum(chunk) / len(chunk) for i in range(width)
                if (chunk := vals[int(i * size):max(int(i * size) + 1, int((i + 1) * size))])]
    lo, hi = min(vals), max(vals)
    span = hi - lo
    return "".join(_BLOCKS[int((v - lo) / span * (len(_BLOCKS) - 1)) if span else 0] for v in vals)


def from_store(row: dict[str, Any], checkpoint_uri: str | None) -> dict[str, Any]:
    """The newest complete checkpoint in the job's store (step, uri, age) and, when the row has no live
    curve, the losses the trainer logged up to it. {} when the store cannot be read from here."""
    if not checkpoint_uri:
        return {}
    try:
        from ..storage import open_store
        from ..storage.checkpoints import checkpoint_key, latest_checkpoint

        store = open_store(checkpoint_uri)
        ref = latest_checkpoint(store, row["id"])
        if ref is None:
            return {"store_checkpoint": None}
        out: dict[str, Any] = {"store_checkpoint": {"step": ref.step, "uri": ref.uri, "created_at": ref.created_at}}
        if not row.get("losses"):
            state = json.loads(store.get_bytes(f"{checkpoint_key(row['id'], ref.step)}/trainer_state.json"))
            history = state.get("log_history") or []
            out["losses"] = [[int(h["step"]), float(h["loss"])] for h in history if "loss" in h and "step" in h]
            out["eval_losses"] = [[int(h["step"]), float(h["eval_loss"])] for h in history if "eval_loss" in h and "step" in h]
        return out
    except Exception:  # a view: a store this machine cannot open (credentials, SDK) leaves those rows out
        return {}


def progress_rows(row: dict[str, Any], width: int) -> list[tuple[str, str]]:
    """(label, text) rows for `status JOB`: curve, eval loss, speed, ETA, cost, checkpoint."""
    out: list[tuple[str, str]] = []
    losses = [pair[1] for pair in row.get("losses") or []]
    spark_width = max(10, width - 54)  # the label column, the borders and the "6.93 → 0.404 (100 logged)" after it
    if losses:
        out.append(("loss curve", f"[cyan]{sparkline(losses, spark_width)}[/] {losses[0]:.3g} → {losses[-1]:.3g} "
                                  f"({len(losses)} logged)"))
    evals = [pair[1] for pair in row.get("eval_losses") or []]
    if evals:
        curve = f"[magenta]{sparkline(evals, spark_width)}[/] " if len(evals) > 1 else ""
        out.append(("eval loss", f"{curve}{evals[-1]:.4g} ({len(evals)} evaluations)"))
    speed = []
    if row.get("tokens_per_s"):
        speed.append(f"{row['tokens_per_s']:,.0f} tokens/s")
    if row.get("step_seconds"):
        speed.append(f"{row['step_seconds']:.2f} s/step")
    if speed:
        out.append(("speed", ", ".join(speed)))
    if row.get("eta_s") is not None:
        done_at = time.strftime("%H:%M", time.localtime(time.time() + row["eta_s"]))
        out.append(("ETA", f"{duration(row['eta_s'])} (about {done_at}) to step {row.get('total_steps')}"))
    spent = (row.get("cost_usd") or 0) + (row.get("disk_usd") or 0)
    disk = row.get("disk_usd") or 0
    cost = [f"${spent:.2f} so far" + (f" (instance ${row.get('cost_usd') or 0:.2f}, disk ${disk:.2f})" if disk else "")]
    if row.get("projected_usd") is not None:
        cost.append(f"${row['projected_usd']:.2f} projected")
    if row.get("estimate_usd") is not None:
        cost.append(f"${row['estimate_usd']:.2f} planned")
    out.append(("cost", ", ".join(cost)))
    if "store_checkpoint" in row:
        ck = row["store_checkpoint"]
        out.append(("in the store", f"checkpoint-{ck['step']}, complete, written {_age(ck.get('created_at'))}".rstrip(", ")
                    if ck else "no complete checkpoint yet"))
    return out
