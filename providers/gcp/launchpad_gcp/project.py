"""What launchpad creates once per Google Cloud project and then reuses, and what it puts on each VM.

- The SSH firewall rule ``launchpad-ssh-<hash>`` (TCP 22 from `ssh_cidr` only, to VMs with the same network
  tag) and ``launchpad-internal`` (all traffic between launchpad's VMs, for multi-node NCCL).
- The checkpoint bucket ``launchpad-<project>-<region>`` (uniform access, public access prevented).
- launchpad's own ed25519 key, as the ``ssh-keys`` metadata of each VM (no project-wide key is added).
- The startup script (runs as root at every boot) and the self-delete command of the API autostop.

Every helper is idempotent (look up first, create if missing, tolerate "already exists").
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import threading
from pathlib import Path
from typing import Any

from launchpad.errors import ProviderError

from .api import NAME, call, message, wait_op

log = logging.getLogger("launchpad.gcp")

MANAGED_LABEL = "launchpad-managed"  # shared resources (rules, bucket): never a job's
NETWORK_TAG = "launchpad"

# Runs as root at every boot (GCE's `startup-script` metadata). The guest agent creates the login user
# from `ssh-keys` at about the same time, so wait for it; lingering lets the agent run in a user scope
# that outlives SSH sessions; venv support is what the job's Python environment is built with.
STARTUP_SCRIPT = """#!/bin/bash
# launchpad: prepares this VM for launchpad's agent
user={user}
for _ in $(seq 1 60); do id "$user" >/dev/null 2>&1 && break; sleep 2; done
loginctl enable-linger "$user" || true
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv) || true
fi
"""

# The API autostop (`autostop.action: terminate`): the VM deletes itself with its own service account's
# token from the metadata server (argv: compute endpoint, project, zone, instance). Plain urllib: it runs
# with the venv's python but needs nothing installed.
SELF_DELETE = (
    "import json, os, sys, urllib.request as u; "
    "h = os.environ.get('GCE_METADATA_HOST', 'metadata.google.internal'); "
    "h = h if h.startswith('http') else 'http://' + h; "
    "r = u.Request(h + '/computeMetadata/v1/instance/service-accounts/default/token', "
    "headers={'Metadata-Flavor': 'Google'}); "
    "t = json.load(u.urlopen(r, timeout=30))['access_token']; "
    "e, p, z, n = sys.argv[1:5]; "
    "d = u.Request(f'{e}/compute/v1/projects/{p}/zones/{z}/instances/{n}', method='DELETE', "
    "headers={'Authorization': 'Bearer ' + t}); "
    "print(u.urlopen(d, timeout=60).status)"
)


def startup_script(user: str) -> str:
    return STARTUP_SCRIPT.format(user=shlex.quote(user))


class Project:
    """The shared resources of one project, looked up or created once per process."""

    def __init__(self, provider) -> None:
        self.p = provider
        self._lock = threading.RLock()
        self._cache: dict[tuple, Any] = {}

    def _memo(self, key: tuple, make):
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    # -- SSH ----------------------------------------------------------------------------------------------
    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.p.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def ssh_keys_metadata(self, user: str) -> str:
        """``user:ssh-ed25519 AAAA... launchpad``: launchpad's public key for the guest agent to install."""
        from launchpad.ssh.keys import ensure_keypair

        public = ensure_keypair(self.key_path(), comment="launchpad")  # 0600 private key, made here
        return f"{user}:{public}"

    def ssh_cidrs(self) -> list[str]:
        """Who may reach port 22 (launchpad.ssh.target.ssh_cidrs: `ssh_cidr`, else this machine's address)."""
        from launchpad.ssh.target import ssh_cidrs

        return ssh_cidrs(self.p.config.get("ssh_cidr"), "gcp")

    def network(self) -> str:
        return str(self.p.config.get("network") or "global/networks/default")

    def ssh_tag(self) -> str:
        """The network tag whose firewall rule admits SSH from `ssh_cidrs()` (made if missing)."""
        cidrs = sorted(self.ssh_cidrs())
        tag = "launchpad-ssh-" + hashlib.sha256(",".join(cidrs).encode()).hexdigest()[:10]

        def make() -> str:
            self._firewall(tag, {"sourceRanges": cidrs, "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
                                 "targetTags": [tag], "description": "launchpad: SSH from " + ", ".join(cidrs)})
            self._firewall("launchpad-internal", {"sourceTags": [NETWORK_TAG], "targetTags": [NETWORK_TAG],
                                                  "allowed": [{"IPProtocol": "all"}],
                                                  "description": "launchpad: between its own VMs (NCCL)"})
            return tag

        return self._memo(("ssh-tag", tag), make)

    def _firewall(self, name: str, rule: dict) -> None:
        firewalls = self.p.client("FirewallsClient")
        project = self.p.project()
        if call(firewalls.get, "firewalls.get", not_found=None, project=project, firewall=name) is not None:
            return
        body = {"name": name, "network": self.network(), "direction": "INGRESS", "priority": 1000, **rule}
        try:
            op = call(firewalls.insert_unary, "firewalls.insert", project=project,
                      firewall_resource=message("Firewall", body))
            wait_op(self.p.client("GlobalOperationsClient"), op, "firewalls.insert", "global", project=project)
        except ProviderError as e:
            if "alreadyExists" not in str(e) and "already exists" not in str(e):
                raise

    # -- checkpoints -----------------------------------------------------------------------------------------
    def bucket(self, region: str) -> str:
        """``launchpad-<project>-<region>``, created in `region` on first use (uniform bucket-level access,
        public access prevented)."""
        def make() -> str:
            import importlib
            import os

            from google.api_core import exceptions as gexc

            storage = importlib.import_module("google.cloud.storage")  # (untyped, unlike google.cloud.compute)

            name = f"launchpad-{self.p.project()}-{region}"[:63]
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(project=self.p.project(), credentials=AnonymousCredentials())
            else:
                client = storage.Client(project=self.p.project(), credentials=self.p.credentials())
            try:
                bucket = client.bucket(name)
                bucket.iam_configuration.uniform_bucket_level_access_enabled = True
                bucket.iam_configuration.public_access_prevention = "enforced"
                bucket.labels = {MANAGED_LABEL: "true"}
                client.create_bucket(bucket, location=region)
            except gexc.Conflict:
                client.get_bucket(name)  # ours (a 403 here: the name belongs to someone else)
            except gexc.GoogleAPICallError as e:
                raise ProviderError(f"cannot create the checkpoint bucket gs://{name}: {e.message}", provider=NAME,
                                    hint="set `checkpoint_uri: gs://BUCKET/PREFIX` under providers: gcp:") from None
            return name

        return self._memo(("bucket", region), make)
