"""The progress of a multi-node job: rank 0's report, unless another node's agent has ended badly.

Rank 0 reports for the job (its trainer's global rank 0 logs the steps and uploads the checkpoints), so the
other nodes used not to be read at all. A node whose agent fails before its trainer joins the others (a full
disk on one host, its own pre-warm failing) is noticed by torch.distributed only at its timeouts: rank 0 waits
in torchrun's static rendezvous for 600 s, and an NCCL collective whose peer is gone waits up to the process
group's timeout (1800 s, transformers' `ddp_timeout`), every GPU of the job billing meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .models import JobProgress

#: How long another node's agent must have ended badly, by that node's own clock, before the job ends with
#: it while rank 0 still runs. A failure on rank 0 ends its peers' trainers too, and they report only a broken
#: connection, at once; rank 0 gets this long to report the cause itself.
PEER_END_GRACE_S = 30.0
_BAD_ENDS = ("failed", "interrupted")


@dataclass(frozen=True)
class NodeReport:
    """One node's progress, with how long ago its agent recorded its end (None: it has not ended)."""

    progress: JobProgress
    ended_s: float | None = None


def job_progress(head: JobProgress, peers: Sequence[tuple[str, NodeReport | None]],
                 grace_s: float = PEER_END_GRACE_S) -> JobProgress:
    """`head` (rank 0's report), or, while rank 0 still runs, the end of the first other node (rank 1, 2 ...;
    `peers` are (node name, report or None when it could not be read)) whose agent ended with an error or an
    interruption at least `grace_s` ago: not running, its phase, exit code and error, naming the node."""
    if not head.running:
        return head
    for name, report in peers:
        if report is None or report.ended_s is None or report.ended_s < grace_s:
            continue
        p = report.progress
        if p.running or (p.phase not in _BAD_ENDS and p.exit_code in (None, 0)):
            continue  # still running, or finished well (it may end a moment before rank 0)
        said = p.error or f"its trainer exited with code {p.exit_code}"
        return replace(head, running=False, phase=p.phase if p.phase in _BAD_ENDS else "failed",
                       exit_code=p.exit_code or 1, error=f"{said} (on {name}, while rank 0 was {head.phase})")
    return head
