"""What launchpad makes once per Azure subscription/region and then reuses: the resource group
``launchpad-<region>`` and its virtual network ``launchpad-vnet`` (both tagged ``launchpad-managed``),
plus the things read once: launchpad's own SSH key, who may reach port 22, the image.

Every helper is idempotent (ARM's PUT is create-or-update; a lookup comes first where a PUT would
change a shared resource in use), so two `launchpad up` racing in one region share one of each.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from launchpad.errors import ConfigError, ProviderError

from .api import NAME, call, client_kwargs, credential

log = logging.getLogger("launchpad.azure")

MANAGED_TAG = "launchpad-managed"  # shared resources (resource group, network): never a job's
VNET, SUBNET = "launchpad-vnet", "default"
#: the Data Science VM for Linux (Ubuntu 22.04, Gen2: NVIDIA driver, CUDA, PyTorch); `image` in config overrides
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-2204:2204-gen2:latest"
#: built-in role "Virtual Machine Contributor" (the VM may deallocate/delete itself: its autostop)
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
#: built-in role "Storage Blob Data Contributor" (at `storage_scope`: the agent writes checkpoints with the VM's identity)
BLOB_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
ROLE_API = "2022-04-01"


def rg_name(region: str) -> str:
    return f"launchpad-{region}"


class Account:
    """Clients and the per-region shared resources of one subscription, made once per process."""

    def __init__(self, provider) -> None:
        self.p = provider
        self._lock = threading.RLock()
        self._cache: dict[tuple, Any] = {}

    def _memo(self, key: tuple, make):
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    # -- clients -------------------------------------------------------------------------------------
    def subscription(self) -> str:
        import os

        sub = self.p.config.get("subscription_id") or os.environ.get("AZURE_SUBSCRIPTION_ID")
        if not sub:
            raise ConfigError("no Azure subscription id", hint="set AZURE_SUBSCRIPTION_ID or providers.azure.subscription_id "
                              "in config.yaml (`az account show --query id -o tsv` prints it)")
        return str(sub)

    def endpoint(self) -> str:
        from .api import ARM

        return str(self.p.config.get("endpoint") or ARM).rstrip("/")

    def credential(self):
        return self._memo(("credential",), credential)

    def _client(self, kind: str):
        def make():
            import importlib

            module, cls = {"compute": ("azure.mgmt.compute", "ComputeManagementClient"),
                           "network": ("azure.mgmt.network", "NetworkManagementClient"),
                           "resources": ("azure.mgmt.resource.resources", "ResourceManagementClient")}[kind]
            client_class: Any = getattr(importlib.import_module(module), cls)
            cred = self.credential()
            return client_class(cred, self.subscription(),
                                **client_kwargs(cred, self.endpoint(), self.p.config.get("poll_interval")))

        return self._memo(("client", kind), make)

    @property
    def compute(self):
        return self._client("compute")

    @property
    def network(self):
        return self._client("network")

    @property
    def resources(self):
        return self._client("resources")

    def close(self) -> None:
        for key, value in list(self._cache.items()):
            if key[0] in ("client", "credential") and hasattr(value, "close"):
                value.close()
        self._cache.clear()

    # -- the region's shared resources ---------------------------------------------------------------
    def resource_group(self, region: str) -> str:
        def make() -> str:
            name = rg_name(region)
            found = call(lambda: self.resources.resource_groups.get(name), "GetResourceGroup", region, missing_ok=True)
            if found is None:
                call(lambda: self.resources.resource_groups.create_or_update(
                    name, {"location": region, "tags": {MANAGED_TAG: "true"}}), "CreateResourceGroup", region)
            return name

        return self._memo(("rg", region), make)

    def subnet(self, region: str) -> str:
        """The id of the subnet of ``launchpad-vnet`` (10.0.0.0/16; nodes of a job talk freely inside it,
        as Azure's default NSG rule AllowVnetInBound allows)."""
        def make() -> str:
            rg = self.resource_group(region)
            net = self.network.virtual_networks
            found = call(lambda: net.get(rg, VNET), "GetVirtualNetwork", region, missing_ok=True)
            if found is None:
                body = {"location": region, "tags": {MANAGED_TAG: "true"}, "properties": {
                    "addressSpace": {"addressPrefixes": ["10.0.0.0/16"]},
                    "subnets": [{"name": SUBNET, "properties": {"addressPrefix": "10.0.0.0/20"}}]}}
                found = call(lambda: net.begin_create_or_update(rg, VNET, body).result(), "CreateVirtualNetwork", region)
            subnet = next((s for s in found.as_dict()["properties"].get("subnets") or [] if s["name"] == SUBNET), None)
            if subnet is None:
                raise ProviderError(f"{VNET} in {rg} has no subnet {SUBNET!r}", provider=NAME,
                                    hint=f"add it, or delete {VNET} so launchpad makes it again")
            return str(subnet["id"])

        return self._memo(("subnet", region), make)

    # -- identity, key, image ----------------------------------------------------------------------------
    def ssh_cidrs(self) -> list[str]:
        """Who may reach port 22 (launchpad.ssh.target.ssh_cidrs: `ssh_cidr`, else this machine's address)."""
        from launchpad.ssh.target import ssh_cidrs

        return ssh_cidrs(self.p.config.get("ssh_cidr"), "azure")

    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.p.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def public_key(self) -> str:
        """launchpad's own public key line (the pair is made here, 0600, if missing)."""
        from launchpad.ssh.keys import ensure_keypair

        return self._memo(("key",), lambda: " ".join(ensure_keypair(self.key_path(), comment="launchpad").split()[:2]))

    def image_reference(self) -> dict[str, str]:
        """`image` from config: a URN (publisher:offer:sku:version) or a resource id (managed image,
        gallery image version); default the Data Science VM."""
        image = str(self.p.config.get("image") or DEFAULT_IMAGE)
        if image.startswith("/"):
            return {"id": image}
        parts = image.split(":")
        if len(parts) != 4 or not all(parts):
            raise ConfigError(f"providers.azure.image: {image!r} is neither publisher:offer:sku:version nor a resource id",
                              hint=f"e.g. {DEFAULT_IMAGE}")
        return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))

    # -- what a VM's own identity may do ----------------------------------------------------------------
    def grants(self, vm_id: str) -> list[tuple[str, str, str]]:
        """(scope, role id, what for) of the VM's role assignments: Virtual Machine Contributor on the VM
        itself (its autostop deallocates or deletes it), and Storage Blob Data Contributor at `storage_scope`
        (config: a storage account's or container's resource id) so that its agent can write checkpoints."""
        out = [(vm_id, VM_CONTRIBUTOR, "stop itself")]
        if self.p.config.get("storage_scope"):
            out.append((str(self.p.config["storage_scope"]), BLOB_CONTRIBUTOR, "write checkpoints"))
        return out

    def _assignment_url(self, vm_id: str, scope: str, role: str) -> str:
        name = uuid.uuid5(uuid.NAMESPACE_URL, f"{vm_id.lower()}/{scope.lower()}/{role}")  # the same grant, the same name
        return f"{self.endpoint()}{scope}/providers/Microsoft.Authorization/roleAssignments/{name}?api-version={ROLE_API}"

    def grant(self, vm_id: str, principal: str, region: str) -> bool:
        """Make the VM's role assignments (`grants`). False, logged in one line each, where ARM refuses: then
        `launchpad reap` stops the idle VM instead (and the checkpoints need another credential)."""
        from azure.core.rest import HttpRequest

        ok = True
        for scope, role, what in self.grants(vm_id):
            body = {"properties": {"principalId": principal, "principalType": "ServicePrincipal", "roleDefinitionId":
                                   f"/subscriptions/{self.subscription()}/providers/Microsoft.Authorization/roleDefinitions/"
                                   f"{role}"}}
            url = self._assignment_url(vm_id, scope, role)
            for attempt in range(6):
                res = call(partial(self._send, HttpRequest("PUT", url, json=body)), "CreateRoleAssignment", region)
                text = res.text() if res.status_code >= 400 else ""
                if res.status_code < 300 or "RoleAssignmentExists" in text:
                    break
                if "PrincipalNotFound" in text and attempt < 5:  # a new identity takes seconds to reach the directory
                    time.sleep(1 + 2 * attempt)
                    continue
                log.warning("azure: %s may not %s (role assignment refused: HTTP %s %s)%s", vm_id.rsplit("/", 1)[-1], what,
                            res.status_code, _code(text),
                            "; `launchpad reap` stops it when idle instead" if role == VM_CONTRIBUTOR else "")
                ok = False
                break
        return ok

    def revoke(self, vm_id: str, region: str) -> None:
        """Delete the VM's role assignments (ARM keeps them after the VM and its identity are gone)."""
        from azure.core.rest import HttpRequest

        for scope, role, _ in self.grants(vm_id):
            url = self._assignment_url(vm_id, scope, role)
            res = call(partial(self._send, HttpRequest("DELETE", url)), "DeleteRoleAssignment", region)
            if res.status_code >= 400 and res.status_code != 404:
                log.info("azure: a role assignment of %s was not deleted (HTTP %s %s)", vm_id.rsplit("/", 1)[-1],
                         res.status_code, _code(res.text()))

    def _send(self, request):
        """A raw ARM request through the compute client's pipeline (its credential and policies); 429 and
        5xx raise TransientError so that `call` retries them, other statuses are the caller's to read."""
        from launchpad.errors import TransientError

        res = self.compute.send_request(request)
        if res.status_code == 429 or res.status_code >= 500:
            raise TransientError(f"{request.method} role assignment: HTTP {res.status_code}", provider=NAME)
        return res


def _code(text: str) -> str:
    import json

    try:
        return str(json.loads(text)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""
