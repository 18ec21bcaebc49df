"""Run ON an Azure VM by launchpad's idle watchdog (as ``python -c <this file> ENDPOINT VM_ID stop|terminate``):
a guest shutdown leaves an Azure VM allocated and billing, so the VM deallocates (stop) or deletes
(terminate) itself through Azure Resource Manager, with a token of its own system-assigned managed identity
from the Instance Metadata Service. Standard library only: it needs nothing installed.

The identity may do this because launchpad granted it Virtual Machine Contributor on this VM alone. A delete
takes the OS disk and the NIC with it (their deleteOption); the public IP and the NSG are outside that grant
and are left to `launchpad down` / `launchpad reap`, which find them by tag.
LAUNCHPAD_AZURE_IMDS overrides the metadata endpoint (tests).
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

API = "2024-07-01"
RESOURCE = "https://management.azure.com/"


def token() -> str:
    imds = os.environ.get("LAUNCHPAD_AZURE_IMDS", "http://169.254.169.254").rstrip("/")
    query = urllib.parse.urlencode({"api-version": "2018-02-01", "resource": RESOURCE})
    req = urllib.request.Request(f"{imds}/metadata/identity/oauth2/token?{query}", headers={"Metadata": "true"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read().decode())["access_token"]


def arm(method: str, url: str, bearer: str) -> int:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                 headers={"Authorization": f"Bearer {bearer}", "Content-Length": "0"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        print(f"azure self-stop: {method} {url.split('?')[0]}: HTTP {e.code} {detail}", file=sys.stderr)
        return e.code


def main(argv: list) -> int:
    endpoint, vm_id, action = argv[1].rstrip("/"), argv[2], argv[3]
    if action == "stop":
        method, url = "POST", f"{endpoint}{vm_id}/deallocate?api-version={API}"
    else:
        method, url = "DELETE", f"{endpoint}{vm_id}?api-version={API}"
    for attempt in range(4):  # throttling, 5xx and an unreachable IMDS are worth a few tries
        try:
            status = arm(method, url, token())
        except (OSError, ValueError, KeyError) as e:
            print(f"azure self-stop: no token from the metadata service: {e}", file=sys.stderr)
            status = 0
        if status in (200, 202, 204):
            print(f"azure self-stop: {action} accepted ({status})")
            return 0
        if status and status != 429 and status < 500:
            return 1
        time.sleep(2 * (attempt + 1))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
