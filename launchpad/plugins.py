"""The plugin manager: built-ins and third-party plugins load the same way, via the entry-point
group ``launchpad``. ``LAUNCHPAD_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name."""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from typing import TYPE_CHECKING

import pluggy

from . import hookspecs
from .errors import ConfigError

if TYPE_CHECKING:
    from .provider import Provider

log = logging.getLogger(__name__)

hookimpl = pluggy.HookimplMarker("launchpad")
ENTRY_POINT_GROUP = "launchpad"

# Parts of the core that register through the same hooks a plugin would use.
# The cloud stores import their SDK only when a store is opened, so they load without it.
_BUILTIN_PLUGINS = (
    "launchpad.storage.file",
    "launchpad.storage.s3",
    "launchpad.storage.gcs",
    "launchpad.storage.azure",
)


def disabled_plugins() -> set[str]:
    return {p.strip() for p in os.environ.get("LAUNCHPAD_DISABLE_PLUGINS", "").split(",") if p.strip()}


@lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    import importlib

    pm = pluggy.PluginManager("launchpad")
    pm.add_hookspecs(hookspecs)
    for name in disabled_plugins():
        pm.set_blocked(name)
    for modname in _BUILTIN_PLUGINS:
        if modname not in disabled_plugins():
            pm.register(importlib.import_module(modname), name=modname)
    try:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        # A misspelled hook implementation is a bug in the plugin: say so instead of ignoring it.
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        broken = pm.get_name(e.plugin) or getattr(e.plugin, "__name__", "?")
        raise ConfigError(
            f"plugin {broken!r} is broken: {e}", hint=f"fix it, or set LAUNCHPAD_DISABLE_PLUGINS={broken} to skip it"
        ) from None
    except ImportError as e:
        raise ConfigError(
            f"a launchpad plugin failed to import: {e}", hint="reinstall it, or skip it with LAUNCHPAD_DISABLE_PLUGINS"
        ) from None
    return pm


def reset() -> None:
    """Forget the cached manager (tests that install plugins at run time)."""
    get_plugin_manager.cache_clear()
    get_provider_classes.cache_clear()
    get_store_classes.cache_clear()


@lru_cache(maxsize=1)
def get_provider_classes() -> dict[str, type]:
    from .provider import Provider

    classes: dict[str, type] = {}

    def register(cls: type) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise ConfigError(f"plugin registered {cls!r}, which is not a launchpad.provider.Provider subclass")
        if cls.name in classes and classes[cls.name] is not cls:
            raise ConfigError(f"two plugins register a provider named {cls.name!r}")
        classes[cls.name] = cls

    get_plugin_manager().hook.launchpad_register_providers(register=register)
    return classes


@lru_cache(maxsize=1)
def get_store_classes() -> dict[str, type]:
    stores: dict[str, type] = {}

    def register(scheme: str, cls: type) -> None:
        stores[scheme] = cls

    get_plugin_manager().hook.launchpad_register_stores(register=register)
    return stores


def plugin_names() -> list[tuple[str, str]]:
    """(entry-point or module name, distribution) for every loaded plugin."""
    pm = get_plugin_manager()
    dists = {id(p): d for p, d in pm.list_plugin_distinfo()}
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(id(plugin))
        out.append((name, f"{dist.metadata['name']} {dist.version}" if dist else "launchpad (built-in)"))
    return out


def emit_job_event(job: dict, event: dict) -> None:
    try:
        get_plugin_manager().hook.launchpad_job_event(job=job, event=event)
    except Exception:  # a broken notifier must never break a job
        log.exception("a launchpad_job_event hook failed")


def configured_providers(only: str | None = None) -> tuple[dict[str, Provider], dict[str, str]]:
    """Instantiate every registered provider with its section of config.yaml and run its check().

    Returns ``(usable: dict[name, Provider], unavailable: dict[name, reason])``."""
    from .settings import load_user_config

    config = load_user_config().get("providers") or {}
    usable: dict[str, Provider] = {}
    unavailable: dict[str, str] = {}
    for name, cls in sorted(get_provider_classes().items()):
        if only and name != only:
            continue
        try:
            provider = cls(config.get(name) or {})
            reason = provider.check()
        except Exception as e:  # check() must not raise; a broken plugin still must not break the CLI
            reason = f"check failed: {e}"
        if reason:
            unavailable[name] = reason
        else:
            usable[name] = provider
    return usable, unavailable


def provider_for(name: str) -> Provider:
    """The configured provider `name` (for jobs that already ran on it), even if check() fails now."""
    from .errors import NotConfigured
    from .settings import load_user_config

    classes = get_provider_classes()
    if name not in classes:
        raise NotConfigured(f"provider {name!r} is not installed", provider=name, hint=f"pip install launchpad-{name}")
    config = load_user_config().get("providers") or {}
    return classes[name](config.get(name) or {})
