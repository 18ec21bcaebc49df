"""The multi-node preflight's hooks on `launchpad.vm.VMProvider` (a mixin, so that vm.py stays about
sync/train/logs): `preflight` runs `launchpad.preflight.run_preflight`, `fabric_promise` says what the
interconnect promises, `remote_time` reads a node's clock. `VMProvider.run_probe` starts the probe."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import ProviderError
from .models import Bundle, Instance

if TYPE_CHECKING:
    from .preflight import PreflightReport, Promise
    from .transport import CommandRunner


class MultiNodePreflight:
    """Mixed into `VMProvider`, which provides what is declared here."""

    if TYPE_CHECKING:
        name: ClassVar[str]

        def _call(self, instance: Instance, fn: Callable[[CommandRunner], Any]) -> Any: ...
        def venv_python(self, instance: Instance) -> str: ...

    def preflight(self, instance: Instance, bundle: Bundle, *, strict: bool = False) -> PreflightReport | None:
        """Before a multi-node job trains (after `sync`, before `train`): every node's clock against this
        client's (a skew over 1 s raises PreflightFailed, naming the nodes and the fix), then a few-seconds
        all-reduce across all nodes whose bus bandwidth is compared with `fabric_promise` (under 60 %: a
        warning in the report; PreflightFailed with `strict`). None for a single-node job (nothing runs).
        Leaves nothing running on the nodes, whatever the outcome."""
        from .preflight import run_preflight

        return run_preflight(self, instance, bundle, strict=strict)  # type: ignore[arg-type]  # a VMProvider

    def fabric_promise(self, instance: Instance) -> Promise | None:
        """The inter-node bandwidth the instance's offer promises (Gb/s per node, with its source), or None
        when unknown. Default: ``fabric_gbps`` in configs/providers.yaml for the offer's instance type."""
        from .planner.catalog import facts_for
        from .preflight import Promise

        if instance.offer is None:
            return None
        facts = facts_for(self.name, instance.offer.instance_type)
        if not facts.fabric_gbps:
            return None
        source = facts.source("fabric_gbps") or "no source given"
        return Promise(float(facts.fabric_gbps), f"configs/providers.yaml, {self.name} "
                                                 f"{instance.offer.instance_type}: {source}")

    def remote_time(self, instance: Instance) -> float:
        """The instance's clock (seconds since the epoch), read over the transport: GNU ``date +%s.%N``,
        else (busybox prints no nanoseconds) the venv's python."""
        def read(argv: list[str]) -> str:
            return self._call(instance, lambda c: c.run(argv, timeout=30, check=False)).stdout.strip()

        out = ""
        for argv in (["date", "+%s.%N"], [self.venv_python(instance), "-c", "import time; print(repr(time.time()))"]):
            out = read(argv)
            try:
                return float(out)
            except ValueError:
                continue
        raise ProviderError(f"{instance.id}: cannot read its clock ({out[:80]!r})", provider=self.name)
