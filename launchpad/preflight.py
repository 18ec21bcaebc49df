"""The multi-node preflight: what the field guides check before a multi-node job trains.

1. **Clock skew.** Each node's clock is read over the command transport, NTP style: t0 (here), the
   node's ``date +%s.%N``, t1 (here); offset = remote - (t0 + t1) / 2, error = (t1 - t0) / 2, best of
   `CLOCK_SAMPLES` (the shortest round trip). The skew is the spread of the nodes' offsets (this
   client's own clock cancels out). Over `MAX_SKEW_S` the job fails (`PreflightFailed`): unsynchronised
   clocks are the usual cause of NCCL timeouts. The error names the nodes, the skew and the fix.
2. **An all-reduce probe.** Every node runs ``python -m launchpad.agent.probe`` at once (in the venv
   sync made); the ranks meet at the job's master address on master_port + 1 and time a few seconds of
   all-reduce (gloo on CPU, NCCL on GPUs). Its bus bandwidth (nccl-tests' definition) is compared with
   what the offer's interconnect promises (`VMProvider.fabric_promise`: ``fabric_gbps`` in
   configs/providers.yaml, or in hosts.yaml for SSH hosts). Under `MIN_BANDWIDTH_SHARE` of the promise:
   a warning (recorded with the job, shown by `launchpad status`), or `PreflightFailed` with ``strict``
   (``launchpad up --strict``). With no promise the figure is reported, not judged. A probe that cannot
   run across the nodes (they cannot reach each other) fails the job: its trainer could not either.

`VMProvider.preflight` runs it (a no-op for a single node); the lifecycle calls that between sync and
train through `preflight_step`, which records the `preflight` event. A failure raised here fails the
job before training, and the lifecycle tears everything down.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import PreflightFailed

if TYPE_CHECKING:
    from .models import Bundle, Instance
    from .vm import VMProvider

MAX_SKEW_S = 1.0
MIN_BANDWIDTH_SHARE = 0.6
CLOCK_SAMPLES = 5
PROBE_SECONDS = 2.0  # timed all-reduce per probe (plus start-up and warm-up)
PROBE_TIMEOUT_S = 90.0  # rendezvous: every node's probe must have started by then
TIME_SYNC_FIX = ("enable time synchronisation on every node: `sudo timedatectl set-ntp true` "
                 "(systemd-timesyncd) or `sudo apt-get install chrony`, then run the job again")


@dataclass(frozen=True)
class ClockOffset:
    """One node's clock against this client's: `offset_s` = node - client, within ± `error_s`."""

    node: str
    offset_s: float
    error_s: float


@dataclass(frozen=True)
class Promise:
    """What an offer's interconnect promises between nodes: Gb/s per node, and where that figure is from."""

    gbps: float
    source: str


@dataclass(frozen=True)
class Bandwidth:
    """The all-reduce probe's measurement (launchpad.agent.probe's JSON line)."""

    backend: str
    device: str
    world_size: int
    procs_per_node: int
    size_bytes: int
    iters: int
    seconds: float
    algbw_GBps: float
    busbw_GBps: float

    @property
    def busbw_gbps(self) -> float:
        """Bus bandwidth in Gb/s, the unit fabrics are sold in."""
        return self.busbw_GBps * 8

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Bandwidth:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PreflightReport:
    """What the preflight measured on a job's nodes, and what it thinks of it."""

    nodes: tuple[str, ...]
    clocks: tuple[ClockOffset, ...]
    bandwidth: Bandwidth | None = None
    promise: Promise | None = None
    warnings: tuple[str, ...] = ()

    @property
    def skew_s(self) -> float:
        offsets = [c.offset_s for c in self.clocks]
        return max(offsets) - min(offsets) if offsets else 0.0

    @property
    def skew_error_s(self) -> float:
        """Bound on the error of `skew_s`: the two largest per-node errors added."""
        errors = sorted((c.error_s for c in self.clocks), reverse=True)
        return sum(errors[:2])

    @property
    def share(self) -> float | None:
        """Measured bus bandwidth / promised bandwidth, when both are known."""
        if self.bandwidth is None or self.promise is None:
            return None
        return self.bandwidth.busbw_gbps / self.promise.gbps

    def summary(self) -> str:
        text = f"preflight on {len(self.nodes)} nodes: clock skew {self.skew_s:.3f} s (± {self.skew_error_s:.3f})"
        if self.bandwidth is not None:
            b = self.bandwidth
            text += (f"; all-reduce bus bandwidth {b.busbw_gbps:.1f} Gb/s ({b.busbw_GBps:.2f} GB/s, {b.backend}, "
                     f"{b.world_size} ranks)")
            share = self.share
            if self.promise is not None and share is not None:
                text += f", {percent(share)} of the {self.promise.gbps:g} Gb/s promised ({self.promise.source})"
            else:
                text += ", no promised bandwidth to compare with"
        return text

    def event(self) -> dict[str, Any]:
        """The `preflight` event's data (the state DB keeps it; `launchpad status` shows it)."""
        b, p = self.bandwidth, self.promise
        share = self.share
        return {
            "nodes": list(self.nodes), "skew_s": round(self.skew_s, 4), "skew_error_s": round(self.skew_error_s, 4),
            "offsets_s": {c.node: round(c.offset_s, 4) for c in self.clocks},
            "busbw_gbps": round(b.busbw_gbps, 3) if b else None, "busbw_GBps": b.busbw_GBps if b else None,
            "algbw_GBps": b.algbw_GBps if b else None, "backend": b.backend if b else None,
            "world_size": b.world_size if b else None, "size_bytes": b.size_bytes if b else None,
            "expected_gbps": p.gbps if p else None, "expected_source": p.source if p else None,
            "share": round(share, 4) if share is not None else None, "warnings": list(self.warnings),
        }


# -- the checks ----------------------------------------------------------------------------------------
def measure_offset(node: str, read_clock: Callable[[], float], samples: int = CLOCK_SAMPLES) -> ClockOffset:
    """`node`'s clock offset from this client's, NTP style, from the sample with the shortest round trip.
    `read_clock()` returns the node's time (seconds since the epoch) read over the transport."""
    best: ClockOffset | None = None
    for _ in range(max(1, samples)):
        t0 = time.time()
        remote = read_clock()
        t1 = time.time()
        sample = ClockOffset(node, remote - (t0 + t1) / 2, (t1 - t0) / 2)
        if best is None or sample.error_s < best.error_s:
            best = sample
    assert best is not None
    return best


def check_clocks(clocks: Iterable[ClockOffset], max_skew_s: float = MAX_SKEW_S) -> None:
    """PreflightFailed when the nodes' clocks differ by more than `max_skew_s`, naming the two furthest
    apart, the skew, every node's offset and the fix."""
    clocks = list(clocks)
    if len(clocks) < 2:
        return
    early = min(clocks, key=lambda c: c.offset_s)
    late = max(clocks, key=lambda c: c.offset_s)
    skew = late.offset_s - early.offset_s
    if skew <= max_skew_s:
        return
    offsets = ", ".join(f"{c.node} {c.offset_s:+.3f} s" for c in clocks)
    raise PreflightFailed(
        f"the clocks of the job's nodes differ by {skew:.2f} s (more than {max_skew_s:g} s): {late.node} is "
        f"{skew:.2f} s ahead of {early.node} (offsets from this client: {offsets}); unsynchronised clocks "
        "make NCCL time out", hint=TIME_SYNC_FIX)


def judge_bandwidth(bw: Bandwidth, promise: Promise | None, min_share: float = MIN_BANDWIDTH_SHARE) -> str | None:
    """A warning when the measured bus bandwidth is under `min_share` of the promise; None when it is not
    (or nothing was promised: then there is nothing to judge against)."""
    if promise is None or promise.gbps <= 0:
        return None
    share = bw.busbw_gbps / promise.gbps
    if share >= min_share:
        return None
    return (f"the all-reduce probe measured {bw.busbw_gbps:.1f} Gb/s bus bandwidth ({bw.backend}, {bw.world_size} ranks), "
            f"{percent(share)} of the {promise.gbps:g} Gb/s the interconnect promises ({promise.source}); under "
            f"{min_share:.0%}, multi-node training will be network-bound: check the fabric (NCCL_DEBUG=INFO shows "
            "whether NCCL uses InfiniBand/EFA or fell back to TCP sockets)")


# -- on a VMProvider's nodes ---------------------------------------------------------------------------
def run_preflight(provider: VMProvider, instance: Instance, bundle: Bundle, *, strict: bool = False) -> PreflightReport | None:
    """The preflight on `instance`'s nodes (see the module docstring); None for a single node. Raises
    PreflightFailed (carrying the report so far) for clock skew, a probe that fails, or, with `strict`,
    a bandwidth under the promise."""
    nodes = provider.nodes(instance)
    if len(nodes) < 2:
        return None
    labels = tuple(f"rank {rank} {provider.connection(node).label}" for rank, node in enumerate(nodes))

    def clock(rank: int) -> ClockOffset:
        return measure_offset(labels[rank], lambda: provider.remote_time(nodes[rank]))

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:  # one connection per node: read them side by side
        clocks = tuple(pool.map(clock, range(len(nodes))))
    report = PreflightReport(nodes=labels, clocks=clocks)
    try:
        check_clocks(clocks)
    except PreflightFailed as e:
        e.report = report
        raise
    bandwidth = _probe(provider, instance, nodes, labels, bundle, report)
    promise = provider.fabric_promise(instance)
    warning = judge_bandwidth(bandwidth, promise)
    report = PreflightReport(nodes=labels, clocks=clocks, bandwidth=bandwidth, promise=promise,
                             warnings=(warning,) if warning else ())
    if warning and strict:
        raise PreflightFailed(warning, hint="without --strict this is a warning and the job trains",
                              report=report)
    return report


def _probe(provider: VMProvider, instance: Instance, nodes: list[Instance], labels: tuple[str, ...], bundle: Bundle,
           report: PreflightReport) -> Bandwidth:
    """Run the all-reduce probe on every node at once; rank 0's measurement."""
    extras = provider.job_spec_extras(instance)
    addr = str(extras.get("master_addr") or nodes[0].address or "127.0.0.1")
    port = int(extras.get("master_port") or 29500) + 1  # the trainer's own port stays untouched
    gpus = instance.offer.gpu_count if instance.offer and instance.offer.gpu else 0
    env = json.dumps(dict(bundle.env))

    def one(rank: int):
        args = ["--node-rank", str(rank), "--nodes", str(len(nodes)), "--master-addr", addr, "--master-port", str(port),
                "--gpus", str(gpus), "--seconds", str(PROBE_SECONDS), "--timeout", str(PROBE_TIMEOUT_S)]
        return provider.run_probe(nodes[rank], args, stdin=env, timeout=PROBE_TIMEOUT_S + 120)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        results = list(pool.map(one, range(len(nodes))))
    failed = [(labels[r], res) for r, res in enumerate(results) if res.rc != 0]
    if failed:
        detail = "; ".join(f"{label}: exit {res.rc}: {_tail(res.stderr or res.stdout)}" for label, res in failed)
        raise PreflightFailed(f"the all-reduce probe across the job's nodes failed ({detail})",
                              hint=f"every node must reach {addr} on TCP ports {port - 1}-{port} and beyond "
                                   "(the trainer's rendezvous and its collectives)", report=report)
    lines = results[0].stdout.strip().splitlines()
    try:
        return Bandwidth.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError, TypeError):
        raise PreflightFailed(f"{labels[0]}: the all-reduce probe printed no result: {_tail(results[0].stdout)}",
                              report=report) from None


def percent(share: float) -> str:
    """``42%``; ``<1%`` rather than a misleading ``0%``."""
    return f"{share:.0%}" if share >= 0.005 else "<1%"


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:]) or "no output"


# -- for the lifecycle and `launchpad status` ---------------------------------------------------------
def preflight_step(provider: Any, instance: Instance, bundle: Bundle, *, strict: bool,
                   event: Callable[..., None], reporter: Any) -> None:
    """What the lifecycle runs between sync and train: `provider.preflight`, its report recorded with
    `event(**data)` (also when it fails: ``failed`` then holds the error) and told to `reporter`."""
    try:
        report = provider.preflight(instance, bundle, strict=strict)
    except PreflightFailed as e:
        event(**(e.report.event() if e.report else {}), failed=str(e))
        raise
    if report is None:
        return
    event(**report.event())
    reporter.info(report.summary())
    for warning in report.warnings:
        reporter.warn(warning)


def status_fields(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """For a `launchpad status` row: the job's newest `preflight` event (skew, bus bandwidth, promise)
    and its warnings; {} when the job never ran one."""
    last = None
    for e in events:
        if e["kind"] == "preflight":
            last = e["data"]
    if last is None:
        return {}
    keys = ("skew_s", "busbw_gbps", "expected_gbps", "share", "backend", "world_size", "failed")
    return {"preflight": {k: last.get(k) for k in keys if last.get(k) is not None},
            "warnings": list(last.get("warnings") or [])}
