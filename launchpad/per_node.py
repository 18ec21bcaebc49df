"""Work on every node of a multi-node job at once (`run_per_node`): each node waits on its own machine,
so doing them one after another would multiply that wait by the number of nodes, every GPU billing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .models import Instance

T = TypeVar("T")


def run_per_node(fn: Callable[[Instance], T], nodes: Sequence[Instance]) -> list[T]:
    """fn(node) for every node at once, one thread each; the results in rank order once all are done,
    else the lowest rank's error. Daemon threads: a Ctrl-C is not held up by a node's install. A single
    node (most jobs) runs in the caller's thread."""
    if len(nodes) == 1:
        return [fn(nodes[0])]
    results: list[Any] = [None] * len(nodes)
    errors: list[BaseException | None] = [None] * len(nodes)

    def work(i: int, node: Instance) -> None:
        try:
            results[i] = fn(node)
        except BaseException as e:  # noqa: BLE001 (handed to the caller's thread below)
            errors[i] = e

    threads = [threading.Thread(target=work, args=(i, node), name=f"launchpad-node-{i}", daemon=True)
               for i, node in enumerate(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for error in errors:
        if error is not None:
            raise error
    return results
