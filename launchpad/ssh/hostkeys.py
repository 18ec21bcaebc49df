"""Host keys: pinned up front, or trusted on first use and recorded in launchpad's own known_hosts.

Never paramiko's AutoAddPolicy. The order of trust for an endpoint:
1. a key pinned by the provider (hosts.yaml `host_key:`, or a cloud API's console output): only it;
2. launchpad's known_hosts (``<config dir>/known_hosts``, OpenSSH format, ``[host]:port`` for port != 22);
3. nothing known: trust on first use -- record the key and tell the user its fingerprint.
A key that differs from a known one is a hard error naming the host (`HostKeyChanged`).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ProviderError
from .keys import fingerprint, parse_public_key

log = logging.getLogger("launchpad.ssh")


class HostKeyChanged(ProviderError):
    """The host presented a key that differs from the pinned or recorded one: maybe reinstalled, maybe
    someone in the middle. Never retried, never skipped silently."""


def default_known_hosts() -> Path:
    from ..settings import config_dir

    return config_dir() / "known_hosts"


class KnownHosts:
    """launchpad's own known_hosts file. Safe for concurrent launchpad processes (flock on a side file)."""

    def __init__(self, path: str | os.PathLike | None = None,
                 announce: Callable[[str], None] | None = None):
        self.path = Path(path) if path else default_known_hosts()
        self.announce = announce or log.warning  # how a new fingerprint is shown to the user

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def lookup(self, name: str) -> dict:
        """{key type: PKey} recorded for `name` (``host`` or ``[host]:port``); empty when unknown."""
        from paramiko.hostkeys import HostKeys

        if not self.path.exists():
            return {}
        keys = HostKeys()
        keys.load(str(self.path))
        found = keys.lookup(name)
        return dict(found) if found else {}

    def trust_on_first_use(self, name: str, label: str, key) -> None:
        """Record `key` for `name` unless another process recorded a different one meanwhile
        (then `HostKeyChanged`). Announces the fingerprint so the user can compare it."""
        with self._locked():
            known = self.lookup(name)
            if known:
                if any(k == key for k in known.values()):
                    return
                raise _changed(label, name, key, next(iter(known.values())), self.path)
            line = f"{name} {key.get_name()} {key.get_base64()}\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(line)
        self.announce(
            f"ssh: first connection to {label}: trusting its {key.get_name()} host key "
            f"{fingerprint(key.asbytes())} (recorded in {self.path}; pin it with `host_key:` to skip this step)"
        )

    def forget(self, name: str) -> None:
        """Remove every key recorded for `name` (the user confirmed a host was reinstalled)."""
        from paramiko.hostkeys import HostKeys

        with self._locked():
            if not self.path.exists():
                return
            keys = HostKeys()
            keys.load(str(self.path))
            if name in keys:
                del keys[name]
                tmp = Path(f"{self.path}.tmp")
                keys.save(str(tmp))
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.path)


def _changed(label: str, name: str, got, expected, source) -> HostKeyChanged:
    return HostKeyChanged(
        f"ssh: host key of {label} has CHANGED: expected {expected.get_name()} {fingerprint(expected.asbytes())} "
        f"({source}), got {got.get_name()} {fingerprint(got.asbytes())}; refusing to connect",
        hint=f"if the host was reinstalled, verify the new key and remove {name} from {source}"
        if not isinstance(source, str) else "if the host was reinstalled, update `host_key:` in hosts.yaml",
    )


def install_policy(client, target, known: KnownHosts) -> None:
    """Load what is known about `target` into a paramiko SSHClient and set a policy that never
    accepts an unknown key silently. Call `translate_bad_host_key` on BadHostKeyException."""
    import paramiko

    name = target.known_hosts_name
    store = client.get_host_keys()
    if target.host_key:
        try:
            pinned = parse_public_key(target.host_key)
        except ValueError as e:
            from ..errors import ConfigError

            raise ConfigError(f"host_key of {target.name}: {e}") from None
        store.add(name, pinned.get_name(), pinned)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return
    for kind, key in known.lookup(name).items():
        store.add(name, kind, key)

    class _TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, _client, hostname, key):  # only called when nothing is known
            known.trust_on_first_use(hostname, target.label, key)

    client.set_missing_host_key_policy(_TrustOnFirstUse())


def translate_bad_host_key(target, known: KnownHosts, exc) -> HostKeyChanged:
    source = "hosts.yaml host_key" if target.host_key else known.path
    return _changed(target.label, target.known_hosts_name, exc.key, exc.expected_key, source)
