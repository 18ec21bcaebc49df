"""The upload bars of `up` (launchpad.cli._run.RichReporter.transfer): one bar per file and node, fed from
one thread per node during a multi-node sync, closed once every upload is done."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from launchpad.cli import _run


def test_parallel_node_uploads_get_their_own_bars_and_the_bars_close(monkeypatch) -> None:
    out = io.StringIO()
    screen = Console(file=out, force_terminal=True, width=120)
    monkeypatch.setattr(_run, "console", lambda: screen)
    reporter = _run.RichReporter()
    go = threading.Barrier(4)
    seen: list[tuple[str, float]] = []

    def upload(node: int) -> None:
        go.wait()
        what = f"launchpad.whl (node-{node})"
        for done in range(0, 1_000_001, 20_000):
            reporter.transfer(what, done, 1_000_000)
            bars = reporter._upload
            if bars is not None:  # read under the reporter's own lock by rich: only what it drew
                seen.extend((t.description, t.completed) for t in list(bars.tasks))

    threads = [threading.Thread(target=upload, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reporter._upload is None  # every upload finished: the bars are gone
    assert {d for d, _ in seen} == {f"launchpad.whl (node-{n})" for n in range(4)}
    assert all(0 <= c <= 1_000_000 for _, c in seen)
