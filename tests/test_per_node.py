"""run_per_node: every node at once, results in rank order, a failure raised only once all are done."""

from __future__ import annotations

import threading
import time

import pytest

from launchpad.models import Instance, InstanceState
from launchpad.per_node import run_per_node


def nodes(n: int) -> list[Instance]:
    return [Instance(provider="t", id=f"node-{i}", job_id="j", state=InstanceState.RUNNING) for i in range(n)]


def test_every_node_runs_at_the_same_time_and_results_come_in_rank_order() -> None:
    met = threading.Barrier(4, timeout=10)  # one after another, the first node would wait here for ever

    def work(node: Instance) -> str:
        met.wait()
        time.sleep(0.05 * (4 - int(node.id[-1])))  # rank 0 finishes last
        return node.id

    assert run_per_node(work, nodes(4)) == ["node-0", "node-1", "node-2", "node-3"]


def test_the_lowest_rank_s_error_is_raised_after_every_node_finished() -> None:
    finished: list[str] = []

    def work(node: Instance) -> None:
        if node.id in ("node-1", "node-2"):
            raise RuntimeError(f"{node.id} failed")
        time.sleep(0.2)
        finished.append(node.id)

    with pytest.raises(RuntimeError, match="node-1 failed"):
        run_per_node(work, nodes(4))
    assert sorted(finished) == ["node-0", "node-3"]  # not abandoned mid-way: no half-synced node keeps going

