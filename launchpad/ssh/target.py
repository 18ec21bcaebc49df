"""Where to connect and as whom: `SSHTarget`, with ~/.ssh/config aliases and ProxyJump resolved.

Explicit settings win over ~/.ssh/config, which wins over defaults (port 22, the local user name,
launchpad's own key) -- as with `ssh -p PORT -l USER -i KEY alias`.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..errors import ConfigError

_JUMP = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:\s]+)(?::(?P<port>\d{1,5}))?$")


@dataclass(frozen=True)
class SSHTarget:
    """One SSH endpoint. `name` is what messages call it (the hosts.yaml name, or an instance id)."""

    name: str
    host: str  # address or DNS name actually dialled (after ~/.ssh/config HostName)
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    key_path: str | None = None  # private key file; None = ssh-agent only
    host_key: str | None = None  # pinned "<type> <base64>": only this key is accepted (no trust-on-first-use)
    jumps: tuple[SSHTarget, ...] = ()  # ProxyJump hops, outermost first
    connect_timeout: float = 60.0  # total seconds of retries while the machine boots
    allow_agent: bool = True

    @property
    def label(self) -> str:
        """``name (user@host:port)`` for messages."""
        return f"{self.name} ({self.user}@{self.host}:{self.port})"

    @property
    def known_hosts_name(self) -> str:
        """How OpenSSH names this endpoint in known_hosts: ``host`` on 22, ``[host]:port`` otherwise."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def _ssh_config(path: str | os.PathLike | None):
    import paramiko

    cfg_path = Path(path).expanduser() if path else Path("~/.ssh/config").expanduser()
    if not cfg_path.is_file():
        return None
    try:
        return paramiko.SSHConfig.from_path(str(cfg_path))
    except Exception as e:  # a broken ~/.ssh/config must name itself, not crash the provider
        raise ConfigError(f"{cfg_path}: cannot parse it: {e}") from None


def resolve_target(
    name: str,
    address: str,
    *,
    port: int | None = None,
    user: str | None = None,
    key_path: str | None = None,
    host_key: str | None = None,
    proxy_jump: str | None = None,
    ssh_config: str | os.PathLike | None = None,
    default_key: str | None = None,
    connect_timeout: float = 60.0,
) -> SSHTarget:
    """An `SSHTarget` for `address`, which may be an alias in `ssh_config` (default ~/.ssh/config).
    `default_key` is used when neither the caller nor the ssh config names an IdentityFile."""
    cfg = _ssh_config(ssh_config)
    looked = cfg.lookup(address) if cfg is not None else {}
    host = looked.get("hostname", address)
    identity = (looked.get("identityfile") or [None])[0]
    key = key_path or identity or default_key
    jump_spec = proxy_jump if proxy_jump is not None else looked.get("proxyjump")
    jumps: tuple[SSHTarget, ...] = ()
    if jump_spec and jump_spec.lower() != "none":
        jumps = tuple(_jump(hop.strip(), cfg, key, connect_timeout, name) for hop in jump_spec.split(","))
    return SSHTarget(
        name=name,
        host=host,
        port=int(port or looked.get("port") or 22),
        user=user or looked.get("user") or getpass.getuser(),
        key_path=str(Path(key).expanduser()) if key else None,
        host_key=host_key,
        jumps=jumps,
        connect_timeout=connect_timeout,
    )


def _jump(spec: str, cfg, fallback_key: str | None, timeout: float, via: str) -> SSHTarget:
    m = _JUMP.match(spec)
    if not m:
        raise ConfigError(f"ProxyJump for {via}: cannot read hop {spec!r} (use [user@]host[:port], comma-separated)")
    alias = m.group("host").strip("[]")
    looked = cfg.lookup(alias) if cfg is not None else {}
    identity = (looked.get("identityfile") or [None])[0]
    key = identity or fallback_key
    return SSHTarget(
        name=f"jump {alias}",
        host=looked.get("hostname", alias),
        port=int(m.group("port") or looked.get("port") or 22),
        user=m.group("user") or looked.get("user") or getpass.getuser(),
        key_path=str(Path(key).expanduser()) if key else None,
        connect_timeout=timeout,
    )


def with_timeout(target: SSHTarget, seconds: float) -> SSHTarget:
    return replace(target, connect_timeout=seconds)


MY_IP_URL = "https://checkip.amazonaws.com"  # what the AWS console's "My IP" asks; answers one bare address


@lru_cache(maxsize=8)
def _public_address(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode().strip()


def ssh_cidrs(configured, provider: str, *, url: str = MY_IP_URL) -> list[str]:
    """Who may reach a cloud machine's port 22: the provider's `ssh_cidr` setting (a CIDR or a list), else
    this machine's public address as a /32 (asked once per process). ConfigError naming the setting when
    the address cannot be found."""
    if configured:
        return [configured] if isinstance(configured, str) else [str(c) for c in configured]
    try:
        return [f"{_public_address(url)}/32"]
    except Exception as e:
        raise ConfigError(f"cannot find this machine's public address for the SSH rule ({e})",
                          hint=f"set providers.{provider}.ssh_cidr in config.yaml, e.g. 203.0.113.7/32") from None
