"""Every launchpad hook. Hooks only *register* things; the abstract classes they register do the work.

A plugin is a module (or object) with functions named like these specs, decorated with
`launchpad.hookimpl`, published under the entry-point group ``launchpad``:

    [project.entry-points.launchpad]
    myprov = "launchpad_myprov"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .models import Offer
    from .planner.types import Need
    from .provider import Provider
    from .storage import Store

hookspec = pluggy.HookspecMarker("launchpad")

#: what a hook gets to register with
RegisterProvider = Callable[["type[Provider]"], None]
RegisterStore = Callable[[str, "type[Store]"], None]
#: one extra planner term: (name, value in 0..1, weight)
ScoreTerm = tuple[str, float, float]


@hookspec
def launchpad_register_providers(register: RegisterProvider) -> None:
    """Register provider classes: call ``register(ProviderClass)`` once per class.

    The class must subclass `launchpad.provider.Provider` and set a unique ``name``. Do no I/O here:
    it runs at every CLI start. Registering two classes with the same name is an error.
    """


@hookspec
def launchpad_register_stores(register: RegisterStore) -> None:
    """Register object stores: call ``register(scheme, StoreClass)``, e.g. ``register("s3", S3Store)``.

    ``StoreClass`` subclasses `launchpad.storage.Store`; the scheme is the URI scheme it serves
    (without "://"). Import the store's SDK inside the class, never at registration time.
    """


@hookspec
def launchpad_score_offer(offer: Offer, need: Need) -> list[ScoreTerm] | None:
    """Return extra planner terms for one offer as a list of `(name, value_0_to_1, weight)` tuples, or None.

    Called once per feasible offer: keep it fast and free of I/O.
    """


@hookspec
def launchpad_job_event(job: dict[str, Any], event: dict[str, Any]) -> None:
    """Observe a job event (notifications, metrics export). ``job`` is a dict of the job row,
    ``event`` a dict with ``kind``, ``ts`` and ``data``. Return value ignored; exceptions are logged
    and swallowed so a broken notifier never breaks a job.
    """
