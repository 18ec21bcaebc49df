"""What a Vast.ai instance record (``GET /instances/``) says, read the same way everywhere, and what launchpad
gives an instance: its label, its SSH host key with the onstart script that installs it, the self-stop command.

Host keys: Vast publishes none (no console output, no guest attributes), and a container's sshd makes its own
at boot. So launchpad makes an ed25519 host key per instance, hands its private half to the container in the
instance's env (``LAUNCHPAD_SSH_HOST_KEY``; the onstart script below installs it and reloads sshd) and pins the
public half (``LAUNCHPAD_SSH_HOST_KEY_PUB``, read back from the instance's env, so a machine that lost its local
state pins it too). The private half travels to Vast and the host over TLS; both run the container anyway.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from launchpad.errors import ProviderError
from launchpad.models import InstanceState

from .api import NAME

LABEL_PREFIX = "launchpad"
_LABEL = re.compile(r"^launchpad job=(\S+) cluster=(\S+) node=(\d+)$")
HOST_KEY_ENV = "LAUNCHPAD_SSH_HOST_KEY"  # the private half, base64 of the OpenSSH PEM: for the instance only
HOST_KEY_PUB_ENV = "LAUNCHPAD_SSH_HOST_KEY_PUB"  # the public half: what launchpad pins

# Runs after Vast's entrypoint (runtype ssh) set up sshd; Vast limits onstart to 4048 characters.
ONSTART = f"""#!/bin/sh
# launchpad: install the SSH host key launchpad pinned for this instance, then have sshd reread its keys
if [ -n "${{{HOST_KEY_ENV}:-}}" ]; then
  umask 077 && mkdir -p /etc/ssh &&
  printf %s "${HOST_KEY_ENV}" | base64 -d > /etc/ssh/.launchpad_host_key &&
  mv -f /etc/ssh/.launchpad_host_key /etc/ssh/ssh_host_ed25519_key &&
  printf '%s\\n' "${HOST_KEY_PUB_ENV}" > /etc/ssh/ssh_host_ed25519_key.pub &&
  chmod 644 /etc/ssh/ssh_host_ed25519_key.pub &&
  {{ pkill -HUP -o -x sshd || true; }}
fi
"""

# The idle watchdog's stop (or terminate) through the API, with the per-instance key Vast gives a container
# (CONTAINER_API_KEY: it may manage only that instance); argv: url, instance id, action. Without that key it
# fails, saying so, and `launchpad reap` stops the machine from outside with the account's key.
SELF_STOP = r"""
import json, os, sys, urllib.request
url, iid, action = sys.argv[1:4]
key = os.environ.get("CONTAINER_API_KEY")
if not key:
    try:
        env = open("/proc/1/environ", "rb").read().split(b"\0")
        key = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"CONTAINER_API_KEY=")), None)
    except OSError:
        key = None
if not key:
    sys.exit("no CONTAINER_API_KEY in this container: `launchpad reap` stops the instance from outside")
stop = action != "terminate"
req = urllib.request.Request(url.rstrip("/") + "/api/v0/instances/" + iid + "/", method="PUT" if stop else "DELETE",
                             data=json.dumps({"state": "stopped"}).encode() if stop else None,
                             headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=60).read()
"""


def label(job_id: str, token: str, rank: int = 0) -> str:
    """``launchpad job=<job> cluster=<token> node=<rank>``: how an instance is found with no local state."""
    if not re.fullmatch(r"\S+", job_id) or not re.fullmatch(r"\S+", token):
        raise ProviderError(f"job id {job_id!r} / token {token!r} cannot be part of a Vast label (no spaces)",
                            provider=NAME)
    return f"{LABEL_PREFIX} job={job_id} cluster={token} node={rank}"


def parse_label(text: Any) -> tuple[str, str, int] | None:
    """(job id, token, rank) of a launchpad label; None for anybody else's instance."""
    m = _LABEL.match(str(text or "").strip())
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


def env_of(inst: Mapping[str, Any]) -> dict[str, str]:
    """The instance's env: ``extra_env`` as the API lists it (name/value pairs), or a mapping."""
    raw = inst.get("extra_env") or {}
    if isinstance(raw, Mapping):
        return {str(k): str(v) for k, v in raw.items()}
    return {str(p[0]): str(p[1]) for p in raw if isinstance(p, (list, tuple)) and len(p) == 2}


def state_of(inst: Mapping[str, Any] | None) -> InstanceState:
    """The launchpad state of an instance record (None = not listed any more: gone)."""
    if not inst or inst.get("cur_state") == "unloaded":  # unloaded: released by a destroy
        return InstanceState.TERMINATED
    actual, intended = inst.get("actual_status"), inst.get("intended_status") or "running"
    if actual == "running":
        return InstanceState.RUNNING
    if actual in ("stopped", "exited"):
        if intended == "running":
            # wanted running, not run by the host: an interruptible instance lost its bid's priority (outbid;
            # it stays paused, its disk billing, until it wins again); an on-demand one may be waiting for its
            # GPUs to be free again after a start, or its host stopped it: nobody can tell which from here
            return InstanceState.PREEMPTED if inst.get("is_bid") else InstanceState.UNKNOWN
        return InstanceState.STOPPED
    if actual == "frozen":
        return InstanceState.STOPPED
    if actual in ("offline", "unknown"):
        return InstanceState.UNKNOWN  # the host stopped reporting: it may still bill
    return InstanceState.PENDING  # null (provisioning), created, loading (pulling the image), rebooting


def ssh_address(inst: Mapping[str, Any], *, direct: bool) -> tuple[str, int] | None:
    """Where its sshd answers: Vast's SSH proxy (``ssh_host:ssh_port``), or with `direct` the host's own
    address and the port mapped to the container's 22 (``public_ipaddr`` + ``ports["22/tcp"]``)."""
    if direct:
        mapped = (inst.get("ports") or {}).get("22/tcp") or []
        if inst.get("public_ipaddr") and mapped and mapped[0].get("HostPort"):
            return str(inst["public_ipaddr"]).strip(), int(mapped[0]["HostPort"])
        return None
    if inst.get("ssh_host") and inst.get("ssh_port"):
        return str(inst["ssh_host"]), int(inst["ssh_port"])
    return None


def new_host_key() -> tuple[str, str]:
    """A fresh ed25519 host key: (its private half as base64 of the OpenSSH PEM, its public line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return base64.b64encode(private).decode(), public.decode()
