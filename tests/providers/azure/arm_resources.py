"""The per-type rules of the ARM double (arm_double.py): what a PUT of each resource type validates and
returns, what ARM deletes with a VM, what blocks a delete, the VM actions (deallocate, start, powerOff,
simulateEviction), and the VM's IMDS token endpoint. Written from the public REST API reference."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TENANT = "00000000-0000-4000-8000-0000000000bb"
RESERVED_USERS = {"root", "admin", "administrator", "user", "guest", "test", "sys", "support"}


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message



class ResourceRules:
    """Mixed into ArmDouble, which provides the state (resources, lock) and `_accept`/`_take_operation_failure`."""

    resources: dict[str, dict]
    _ips: int
    _current: Any  # the request being answered: `.actions` lists the RBAC actions it needs

    def _link(self, kind: str) -> None:
        """A request that references a resource of `kind` also needs its join action (linked access check)."""
        self._current.actions.append(f"{kind}/join/action")

    def _accept(self, apply, *, location: str, namespace: str, error: dict | None = None) -> tuple[dict, Any]:
        raise NotImplementedError

    def _take_operation_failure(self) -> dict | None:
        raise NotImplementedError

    # -- resources ---------------------------------------------------------------------------------------
    def _view(self, r: dict, query: dict) -> dict:
        out = public(r)
        if r["type"] == "Microsoft.Compute/virtualMachines" and query.get("$expand", "").lower() == "instanceview":
            out["properties"]["instanceView"] = instance_view(r)
        return out

    def _resource(self, method, rid, kind, name, rg, body, query):
        found = self.resources.get(rid.lower())
        ns = kind.split("/")[0]
        if method == "GET":
            if found is None:
                raise ArmError(404, "ResourceNotFound", f"The Resource '{kind}/{name}' under resource group "
                               f"'{rg['name']}' was not found.")
            return 200, {}, self._view(found, query)
        if method == "DELETE":
            if found is None:
                return 204, {}, None
            self._check_delete(found)
            found["properties"]["provisioningState"] = "Deleting"
            headers, _ = self._accept(lambda err, r=found: self._delete(r), location=found["location"], namespace=ns)
            return 202, headers, None
        if method == "PATCH":
            if found is None:
                raise ArmError(404, "ResourceNotFound", f"{kind}/{name} not found")
            if "tags" in (body or {}):
                found["tags"] = dict(body["tags"] or {})
            headers, _ = self._accept(None, location=found["location"], namespace=ns)
            return 200, headers, public(found)
        if method != "PUT":
            raise ArmError(405, "MethodNotAllowed", method)
        body = body or {}
        if not body.get("location"):
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        make = {"Microsoft.Network/networkSecurityGroups": self._put_nsg, "Microsoft.Network/publicIPAddresses": self._put_ip,
                "Microsoft.Network/networkInterfaces": self._put_nic, "Microsoft.Network/virtualNetworks": self._put_vnet,
                "Microsoft.Compute/virtualMachines": self._put_vm}.get(kind)
        if make is None:
            raise ArmError(405, "MethodNotAllowed", f"PUT {kind} is not implemented by this double")
        new = {"id": rid, "name": name, "type": kind, "location": body["location"], "tags": dict(body.get("tags") or {}),
               "_rg": rg["name"].lower()}
        if found and found["properties"].get("provisioningState") == "Deleting":
            raise ArmError(409, "OperationNotAllowed", f"{name} is being deleted")
        resource, apply = make(new, found, body)
        failure = self._take_operation_failure()
        resource["properties"]["provisioningState"] = "Updating" if found else "Creating"
        self.resources[rid.lower()] = resource

        def finish(err, r=resource):
            r["properties"]["provisioningState"] = "Failed" if err else "Succeeded"
            if apply is not None:
                apply(err)

        headers, _ = self._accept(finish, location=body["location"], namespace=ns, error=failure)
        return (200 if found else 201), headers, public(resource)

    def _ref(self, ref: dict | None, kind: str, what: str) -> dict:
        rid = (ref or {}).get("id") or ""
        r = self.resources.get(rid.lower())
        if r is None or r["type"] != kind:
            raise ArmError(400, "InvalidResourceReference", f"Resource {rid} referenced by {what} was not found.")
        self._link(kind)
        return r

    def _put_nsg(self, new, found, body):
        rules = []
        for rule in (body.get("properties") or {}).get("securityRules") or []:
            p = rule.get("properties") or {}
            for key in ("protocol", "access", "direction", "priority"):
                if key not in p:
                    raise ArmError(400, "InvalidRequestFormat", f"securityRules {rule.get('name')}: {key} is required")
            rules.append({"name": rule["name"], "id": f"{new['id']}/securityRules/{rule['name']}", "properties": dict(p)})
        new["properties"] = {"securityRules": rules, "resourceGuid": str(uuid.uuid4()),
                             "networkInterfaces": (found or {}).get("properties", {}).get("networkInterfaces", [])}
        return new, None

    def _put_ip(self, new, found, body):
        p = body.get("properties") or {}
        sku = (body.get("sku") or {}).get("name", "Basic")
        if sku == "Standard" and p.get("publicIPAllocationMethod", "Dynamic") != "Static":
            raise ArmError(400, "StandardSkuPublicIPAddressesMustBeStatic", "Standard sku public IP addresses must be Static")
        if found:
            address = found["properties"].get("ipAddress")
        else:
            self._ips += 1
            address = f"203.0.113.{self._ips % 250 + 1}"  # TEST-NET-3: never routed, never contacted
        new["sku"] = {"name": sku}
        new["properties"] = {"publicIPAllocationMethod": p.get("publicIPAllocationMethod", "Dynamic"),
                             "publicIPAddressVersion": p.get("publicIPAddressVersion", "IPv4"), "ipAddress": address,
                             "ipConfiguration": (found or {}).get("properties", {}).get("ipConfiguration")}
        return new, None

    def _put_vnet(self, new, found, body):
        p = body.get("properties") or {}
        if not ((p.get("addressSpace") or {}).get("addressPrefixes")):
            raise ArmError(400, "InvalidRequestFormat", "addressSpace.addressPrefixes is required")
        subnets = [{"name": s["name"], "id": f"{new['id']}/subnets/{s['name']}",
                    "properties": {"addressPrefix": (s.get("properties") or {}).get("addressPrefix"),
                                   "provisioningState": "Succeeded"}} for s in p.get("subnets") or []]
        new["properties"] = {"addressSpace": p["addressSpace"], "subnets": subnets}
        return new, None

    def _put_nic(self, new, found, body):
        p = body.get("properties") or {}
        configs = []
        for i, c in enumerate(p.get("ipConfigurations") or []):
            cp = c.get("properties") or {}
            subnet_id = (cp.get("subnet") or {}).get("id") or ""
            vnet_id, _, subnet = subnet_id.rpartition("/subnets/")
            vnet = self.resources.get(vnet_id.lower())
            if vnet is None or not any(s["name"] == subnet for s in vnet["properties"]["subnets"]):
                raise ArmError(400, "InvalidResourceReference", f"Subnet {subnet_id} referenced by {new['id']} was not found.")
            self._link("Microsoft.Network/virtualNetworks/subnets")
            config = {"name": c["name"], "id": f"{new['id']}/ipConfigurations/{c['name']}",
                      "properties": {"subnet": {"id": subnet_id}, "privateIPAllocationMethod": "Dynamic", "primary": i == 0,
                                     "privateIPAddress": (found and found["properties"]["ipConfigurations"][i]["properties"]
                                                          .get("privateIPAddress")) or f"10.0.0.{len(self.resources) % 250 + 4}"}}
            if cp.get("publicIPAddress"):
                ip = self._ref(cp["publicIPAddress"], "Microsoft.Network/publicIPAddresses", new["id"])
                holder = (ip["properties"].get("ipConfiguration") or {}).get("id", "")
                if holder and not holder.lower().startswith(new["id"].lower()):
                    raise ArmError(400, "PublicIPAddressInUse", f"{ip['id']} is in use by {holder}")
                ip["properties"]["ipConfiguration"] = {"id": config["id"]}
                config["properties"]["publicIPAddress"] = {"id": ip["id"]}
            configs.append(config)
        if not configs:
            raise ArmError(400, "NetworkInterfaceMustHaveIpConfiguration", "at least one ipConfiguration is required")
        new["properties"] = {"ipConfigurations": configs,
                             "enableAcceleratedNetworking": bool(p.get("enableAcceleratedNetworking")),
                             "virtualMachine": (found or {}).get("properties", {}).get("virtualMachine")}
        if p.get("networkSecurityGroup"):
            nsg = self._ref(p["networkSecurityGroup"], "Microsoft.Network/networkSecurityGroups", new["id"])
            new["properties"]["networkSecurityGroup"] = {"id": nsg["id"]}
            if not any(n["id"].lower() == new["id"].lower() for n in nsg["properties"]["networkInterfaces"]):
                nsg["properties"]["networkInterfaces"].append({"id": new["id"]})
        return new, None

    def _put_vm(self, new, found, body):
        p = body.get("properties") or {}
        size = (p.get("hardwareProfile") or {}).get("vmSize")
        if not size:
            raise ArmError(400, "InvalidParameter", "Required parameter 'hardwareProfile.vmSize' is missing (null).")
        storage = p.get("storageProfile") or {}
        image = storage.get("imageReference") or {}
        if not (image.get("id") or all(image.get(k) for k in ("publisher", "offer", "sku", "version"))):
            raise ArmError(400, "InvalidParameter", "storageProfile.imageReference needs an id or publisher, offer, sku "
                           "and version")
        os_profile = p.get("osProfile") or {}
        user = os_profile.get("adminUsername") or ""
        if not user or user.lower() in RESERVED_USERS:
            raise ArmError(400, "InvalidParameter", f"The Admin Username specified is not allowed: {user!r}")
        linux = os_profile.get("linuxConfiguration") or {}
        keys = (linux.get("ssh") or {}).get("publicKeys") or []
        if linux.get("disablePasswordAuthentication") and not keys:
            raise ArmError(400, "InvalidParameter", "Authentication using either SSH or by user name and password must be "
                           "enabled in Linux profile.")
        if not linux.get("disablePasswordAuthentication") and not os_profile.get("adminPassword"):
            raise ArmError(400, "InvalidParameter", "Required parameter 'adminPassword' is missing (null).")
        for key in keys:
            if not str(key.get("keyData", "")).startswith(("ssh-rsa ", "ssh-ed25519 ")):
                raise ArmError(400, "InvalidParameter", "The value of parameter linuxConfiguration.ssh.publicKeys.keyData is "
                               "invalid.")
        priority = p.get("priority") or "Regular"
        if priority == "Spot" and p.get("evictionPolicy") not in ("Deallocate", "Delete"):
            raise ArmError(400, "InvalidParameter", "evictionPolicy must be Deallocate or Delete for a Spot VM")
        if priority != "Spot" and (p.get("evictionPolicy") or p.get("billingProfile")):
            raise ArmError(400, "InvalidParameter", "evictionPolicy and billingProfile are only for Spot VMs")
        nics = (p.get("networkProfile") or {}).get("networkInterfaces") or []
        if not nics:
            raise ArmError(400, "InvalidParameter", "networkProfile.networkInterfaces is required")
        nic_resources = []
        for ref in nics:
            nic = self._ref(ref, "Microsoft.Network/networkInterfaces", new["id"])
            holder = (nic["properties"].get("virtualMachine") or {}).get("id")
            if holder and holder.lower() != new["id"].lower():
                raise ArmError(400, "NicInUse", f"Network interface {nic['id']} is used by existing VM {holder}.")
            if nic["location"] != new["location"]:
                raise ArmError(400, "InvalidResourceReference", f"{nic['id']} is in {nic['location']}, not {new['location']}")
            nic_resources.append(nic)
        os_disk = dict(storage.get("osDisk") or {})
        disk_name = os_disk.get("name") or f"{new['name']}_OsDisk_1_{uuid.uuid4().hex[:12]}"
        disk_id = new["id"].split("/providers/")[0] + f"/providers/Microsoft.Compute/disks/{disk_name}"
        os_disk.update(name=disk_name, osType="Linux", managedDisk={**(os_disk.get("managedDisk") or {}), "id": disk_id},
                       diskSizeGB=int(os_disk.get("diskSizeGB") or 30), deleteOption=os_disk.get("deleteOption", "Detach"))
        identity = None
        if (body.get("identity") or {}).get("type") == "SystemAssigned":
            identity = (found or {}).get("identity") or {"type": "SystemAssigned", "principalId": str(uuid.uuid4()),
                                                        "tenantId": TENANT}
        props = {k: v for k, v in p.items() if k not in ("instanceView", "provisioningState")}
        props.update(vmId=(found or {}).get("properties", {}).get("vmId") or str(uuid.uuid4()),
                     timeCreated=(found or {}).get("properties", {}).get("timeCreated") or now(),
                     storageProfile={"imageReference": {**image, "exactVersion": "24.1.0"} if not image.get("id") else image,
                                     "osDisk": os_disk, "dataDisks": []},
                     osProfile={k: v for k, v in os_profile.items() if k != "adminPassword"},
                     priority=priority)
        if identity:
            new["identity"] = identity
        new["properties"] = props
        new["_power"] = (found or {}).get("_power") or "starting"
        for nic in nic_resources:  # attached at once: a failed VM still holds its NIC, as on Azure
            nic["properties"]["virtualMachine"] = {"id": new["id"]}

        def apply(err):
            if err:
                new["_power"] = "deallocated" if found is None else new["_power"]
                return
            new["_power"] = "running"
            if disk_id.lower() not in self.resources:  # the implicit OS disk: created untagged (ARM copies no tags)
                self.resources[disk_id.lower()] = {
                    "id": disk_id, "name": disk_name, "type": "Microsoft.Compute/disks", "location": new["location"],
                    "tags": {}, "_rg": new["_rg"], "managedBy": new["id"],
                    "sku": {"name": (os_disk.get("managedDisk") or {}).get("storageAccountType", "Premium_LRS")},
                    "properties": {"diskSizeGB": os_disk["diskSizeGB"], "diskState": "Attached", "osType": "Linux",
                                   "provisioningState": "Succeeded"}}

        return new, apply

    def _check_delete(self, r: dict) -> None:
        p = r["properties"]
        if r["type"] == "Microsoft.Network/networkInterfaces" and p.get("virtualMachine"):
            raise ArmError(400, "NicInUse", f"Network Interface {r['id']} is used by existing resource "
                           f"{p['virtualMachine']['id']}. In order to delete the network interface, it must be dissociated "
                           "from the resource.")
        if r["type"] == "Microsoft.Network/publicIPAddresses" and p.get("ipConfiguration"):
            raise ArmError(400, "PublicIPAddressCannotBeDeleted", f"Public IP address {r['id']} can not be deleted since it "
                           f"is still allocated to resource {p['ipConfiguration']['id']}.")
        if r["type"] == "Microsoft.Network/networkSecurityGroups" and p.get("networkInterfaces"):
            raise ArmError(400, "InUseNetworkSecurityGroupCannotBeDeleted", f"Network security group {r['id']} cannot be "
                           "deleted because it is in use by " + ", ".join(n["id"] for n in p["networkInterfaces"]))
        if r["type"] == "Microsoft.Compute/disks" and r.get("managedBy"):
            raise ArmError(409, "OperationNotAllowed", f"Disk {r['name']} is attached to VM {r['managedBy']}.")

    def _delete(self, r: dict, *, cascade: bool = True, only_disks: bool = False) -> None:
        """Remove `r` (and what ARM removes with it); releases what it held."""
        self.resources.pop(r["id"].lower(), None)
        p = r["properties"]
        if r["type"] == "Microsoft.Compute/virtualMachines":
            disk = self.resources.get(p["storageProfile"]["osDisk"]["managedDisk"]["id"].lower())
            if disk is not None:
                disk["managedBy"] = None
                disk["properties"]["diskState"] = "Unattached"
                if p["storageProfile"]["osDisk"].get("deleteOption") == "Delete" or only_disks:
                    self.resources.pop(disk["id"].lower(), None)
            for ref in p["networkProfile"]["networkInterfaces"]:
                nic = self.resources.get(ref["id"].lower())
                if nic is None:
                    continue
                nic["properties"]["virtualMachine"] = None
                if cascade and not only_disks and (ref.get("properties") or {}).get("deleteOption") == "Delete":
                    self._delete(nic)
        elif r["type"] == "Microsoft.Network/networkInterfaces":
            for c in p["ipConfigurations"]:
                ip = self.resources.get(((c["properties"].get("publicIPAddress") or {}).get("id") or "").lower())
                if ip is not None:
                    ip["properties"]["ipConfiguration"] = None
            nsg = self.resources.get(((p.get("networkSecurityGroup") or {}).get("id") or "").lower())
            if nsg is not None:
                nsg["properties"]["networkInterfaces"] = [n for n in nsg["properties"]["networkInterfaces"]
                                                          if n["id"].lower() != r["id"].lower()]

    def _action(self, method, rid, action, query):
        if action.lower() == "instanceview" and method == "GET":
            vm = self.resources.get(rid.lower())
            if vm is None:
                raise ArmError(404, "ResourceNotFound", f"{rid} not found")
            return 200, {}, instance_view(vm)
        vm = self.resources.get(rid.lower())
        if method != "POST":
            raise ArmError(405, "MethodNotAllowed", f"{method} {action}")
        if vm is None or vm["type"] != "Microsoft.Compute/virtualMachines":
            raise ArmError(404, "ResourceNotFound", f"The Resource '{rid}' was not found.")
        name = action.lower()
        if name == "simulateeviction":
            if vm["properties"].get("priority") != "Spot":
                raise ArmError(409, "OperationNotAllowed", "Simulate eviction is only for Spot VMs.")
            self._accept(lambda err: self._evict(vm), location=vm["location"], namespace="Microsoft.Compute")
            return 204, {}, None
        moves = {"deallocate": ("deallocating", "deallocated"), "start": ("starting", "running"),
                 "poweroff": ("stopping", "stopped")}
        if name not in moves:
            raise ArmError(400, "InvalidAction", f"action {action} is not implemented by this double")
        failure = self._take_operation_failure()
        during, after = moves[name]
        vm["_power"] = during

        def apply(err):
            if vm["id"].lower() in self.resources:
                vm["_power"] = after if not err else vm["_power"]

        headers, _ = self._accept(apply, location=vm["location"], namespace="Microsoft.Compute", error=failure)
        return 202, headers, None

    def _evict(self, vm: dict) -> None:
        if vm["id"].lower() not in self.resources:
            return
        if vm["properties"].get("evictionPolicy") == "Delete":
            self._delete(vm, only_disks=True)  # "deleted together with their underlying disks"
        else:
            vm["_power"] = "deallocated"



KINDS = {k.lower(): k for k in (
    "Microsoft.Compute/virtualMachines", "Microsoft.Compute/disks", "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses", "Microsoft.Network/networkSecurityGroups", "Microsoft.Network/virtualNetworks")}


def instance_view(vm: dict) -> dict:
    state = vm["properties"].get("provisioningState", "Succeeded")
    return {"computerName": (vm["properties"].get("osProfile") or {}).get("computerName"),
            "statuses": [{"code": f"ProvisioningState/{state.lower()}", "level": "Info", "displayStatus": state},
                         {"code": f"PowerState/{vm['_power']}", "level": "Info",
                          "displayStatus": f"VM {vm['_power']}"}]}


def public(r: dict) -> dict:
    return json.loads(json.dumps({k: v for k, v in r.items() if not k.startswith("_") and k != "managedBy"}
                                 | ({"managedBy": r["managedBy"]} if r.get("managedBy") else {})))


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())


class ImdsIdentity:
    """The VM's Instance Metadata Service token endpoint (``GET /metadata/identity/oauth2/token`` with
    ``Metadata: true``), issuing `token`: the launching user's (`arm.admin_token`) for the client, or a
    VM identity's (`arm.token_for(principal)`) for the VM's own autostop script."""

    def __init__(self, token: str):
        self.token = token
        self.requests: list[str] = []
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                imds.requests.append(self.path)
                if parts.path != "/metadata/identity/oauth2/token":
                    return self._send(404, {"error": "not_found"})
                if self.headers.get("Metadata") != "true":
                    return self._send(400, {"error": "invalid_request", "error_description": "Required metadata header not "
                                            "specified"})
                if not query.get("resource") or not query.get("api-version"):
                    return self._send(400, {"error": "invalid_request", "error_description": "resource and api-version"})
                expires = int(time.time()) + 3599
                return self._send(200, {"access_token": imds.token, "refresh_token": "", "expires_in": "3599",
                                        "expires_on": str(expires), "not_before": str(expires - 3599),
                                        "resource": query["resource"], "token_type": "Bearer"})

            def _send(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> ImdsIdentity:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
