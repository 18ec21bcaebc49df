"""Spot/preemption notices, so the trainer saves before the machine is taken away.

- AWS: IMDSv2 (`PUT /latest/api/token`, then `GET /latest/meta-data/spot/instance-action`: 404 until a
  notice, then `{"action": "terminate", "time": ...}`; about two minutes of warning). The endpoint is
  `AWS_EC2_METADATA_SERVICE_ENDPOINT` when set (as botocore reads it), else the link-local default.
- GCP: `GET /computeMetadata/v1/instance/preempted` with `Metadata-Flavor: Google` says TRUE once the
  VM is being preempted (about 30 s of warning). The host is `GCE_METADATA_HOST` when set.
- Azure: Scheduled Events (`GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true`);
  an event of EventType `Preempt` is a Spot eviction (at least 30 s of warning). The endpoint is
  `LAUNCHPAD_AZURE_IMDS` when set, else the link-local default.
Only the clouds the provider names in the job spec are polled: nothing is polled on `local`.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable

AWS_DEFAULT = "http://169.254.169.254"
GCP_DEFAULT = "metadata.google.internal"
AZURE_DEFAULT = "http://169.254.169.254"


def aws_notice(endpoint: str | None = None, timeout: float = 2.0) -> str | None:
    base = (endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or AWS_DEFAULT).rstrip("/")
    token_req = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                       headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
    with urllib.request.urlopen(token_req, timeout=timeout) as resp:
        token = resp.read().decode()
    req = urllib.request.Request(f"{base}/latest/meta-data/spot/instance-action",
                                 headers={"X-aws-ec2-metadata-token": token})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    try:
        doc = json.loads(body)
        return f"spot interruption notice: {doc.get('action', 'terminate')} at {doc.get('time', 'soon')}"
    except ValueError:
        return "spot interruption notice"


def gcp_notice(host: str | None = None, timeout: float = 2.0) -> str | None:
    host = host or os.environ.get("GCE_METADATA_HOST") or GCP_DEFAULT
    base = host if host.startswith("http") else f"http://{host}"
    req = urllib.request.Request(f"{base}/computeMetadata/v1/instance/preempted", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return "preemption notice (GCP)" if resp.read().decode().strip().upper() == "TRUE" else None


def azure_notice(endpoint: str | None = None, timeout: float = 2.0) -> str | None:
    base = (endpoint or os.environ.get("LAUNCHPAD_AZURE_IMDS") or AZURE_DEFAULT).rstrip("/")
    req = urllib.request.Request(f"{base}/metadata/scheduledevents?api-version=2020-07-01", headers={"Metadata": "true"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read().decode()
    try:
        events = json.loads(body).get("Events") or []
    except (ValueError, AttributeError):
        return None
    for event in events:
        if isinstance(event, dict) and event.get("EventType") == "Preempt":
            return f"spot eviction notice (Azure): not before {event.get('NotBefore') or 'soon'}"
    return None


POLLERS: dict[str, Callable[[], str | None]] = {"aws": aws_notice, "gcp": gcp_notice, "azure": azure_notice}


class PreemptionWatcher:
    """Polls the named clouds every `interval` seconds; calls `on_notice(reason)` once."""

    def __init__(self, kinds: list[str], on_notice: Callable[[str], None], *, interval: float = 2.0,
                 log: Callable[[str], None] = print):
        self.pollers = [POLLERS[k] for k in kinds if k in POLLERS]
        self.on_notice, self.interval, self.log = on_notice, interval, log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agent-preemption", daemon=True)
        self._errors_logged = 0

    def start(self) -> PreemptionWatcher:
        if self.pollers:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for poll in self.pollers:
                try:
                    reason = poll()
                except (OSError, urllib.error.URLError) as e:  # metadata hiccups are normal; say so a few times
                    if self._errors_logged < 3:
                        self._errors_logged += 1
                        self.log(f"preemption check failed ({e}); will keep trying")
                    continue
                if reason:
                    self._stop.set()
                    self.on_notice(reason)
                    return
