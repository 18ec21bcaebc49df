"""launchpad: fine-tune LLMs on whichever GPU provider fits the job.

The provider kit is importable from here (``from launchpad import hookimpl, VMProvider, Offer, ...``);
see CONTRIBUTING.md, "Add a provider". Importing this package stays cheap on purpose: no cloud SDK, no
torch, and the names below load on first use (PEP 562), so `launchpad --help` starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it: the public provider kit
_KIT = {
    "hookimpl": "launchpad.plugins",
    "Provider": "launchpad.provider",
    "VMProvider": "launchpad.vm",
    "JobSpec": "launchpad.jobspec",
    "Bundle": "launchpad.models",
    "Capability": "launchpad.models",
    "CheckpointRef": "launchpad.models",
    "Instance": "launchpad.models",
    "InstanceSpec": "launchpad.models",
    "InstanceState": "launchpad.models",
    "JobProgress": "launchpad.models",
    "JOB_TAG": "launchpad.models",
    "Offer": "launchpad.models",
    "TeardownMode": "launchpad.models",
    "TrainHandle": "launchpad.models",
    "LaunchpadError": "launchpad.errors",
    "AuthError": "launchpad.errors",
    "NoCapacity": "launchpad.errors",
    "NotYetTerminated": "launchpad.errors",
    "ProviderError": "launchpad.errors",
    "TransientError": "launchpad.errors",
}

__all__ = ["__version__", *_KIT]

if TYPE_CHECKING:
    from .errors import AuthError, LaunchpadError, NoCapacity, NotYetTerminated, ProviderError, TransientError
    from .jobspec import JobSpec
    from .models import (
        JOB_TAG,
        Bundle,
        Capability,
        CheckpointRef,
        Instance,
        InstanceSpec,
        InstanceState,
        JobProgress,
        Offer,
        TeardownMode,
        TrainHandle,
    )
    from .plugins import hookimpl
    from .provider import Provider
    from .vm import VMProvider


def __getattr__(name: str) -> Any:
    module = _KIT.get(name)
    if module is None:
        raise AttributeError(f"module 'launchpad' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
