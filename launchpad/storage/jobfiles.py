"""What the object store knows of a job besides its checkpoints, so any machine with the store's
credentials (and no local state) can resume it, and a reaper anywhere can tell what its instances do.

    <checkpoint.uri>/<job-id>/job.json        the job as the client recorded it: typed spec, recipe text,
                                              options, the offer it ran on (written by the client)
    <checkpoint.uri>/<job-id>/state.json      the job's last lifecycle state as the client saw it
                                              (SUCCEEDED, FAILED, INTERRUPTED, torn down by `down` ...)
    <checkpoint.uri>/<job-id>/heartbeat.json  the agent's heartbeat: phase, step, whether a trainer runs,
                                              since when it is idle (written by the agent on the instance)

Each is one small JSON object written whole (a PUT replaces it atomically on every store), so a reader
sees the old or the new document, never half of one. Readers get None for a missing or unreadable file:
these are hints for resuming and reaping, never the only record of anything (checkpoints are).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import StorageError
from . import Store

JOB_FILE = "job.json"
STATE_FILE = "state.json"
HEARTBEAT_FILE = "heartbeat.json"


def split_job_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/ckpts/JOB`` -> (``s3://bucket/ckpts``, ``JOB``): the store root and the job id."""
    trimmed = uri.rstrip("/")
    root, _, job_id = trimmed.rpartition("/")
    if not job_id or not root or root.endswith(":/") or "://" not in trimmed:
        raise ValueError(f"{uri!r} does not name a job folder (expected <checkpoint.uri>/<job-id>)")
    return root, job_id


def _write(store: Store, job_id: str, name: str, doc: dict[str, Any]) -> None:
    store.put_bytes(f"{job_id}/{name}", json.dumps(doc, indent=1, sort_keys=True, default=str).encode())


def _read(store: Store, job_id: str, name: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(store.get_bytes(f"{job_id}/{name}"))
    except (StorageError, ValueError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def write_job(store: Store, job_id: str, doc: dict[str, Any]) -> None:
    """The job record (see the module docstring); `doc` holds at least ``spec`` (JobSpec.to_json())."""
    _write(store, job_id, JOB_FILE, {**doc, "job_id": job_id, "written_at": time.time()})


def read_job(store: Store, job_id: str) -> dict[str, Any] | None:
    return _read(store, job_id, JOB_FILE)


def write_state(store: Store, job_id: str, state: str, **data: Any) -> None:
    _write(store, job_id, STATE_FILE, {**data, "job_id": job_id, "state": state, "ts": time.time()})


def read_state(store: Store, job_id: str) -> dict[str, Any] | None:
    return _read(store, job_id, STATE_FILE)


def write_heartbeat(store: Store, job_id: str, doc: dict[str, Any]) -> None:
    _write(store, job_id, HEARTBEAT_FILE, {**doc, "job_id": job_id, "ts": time.time()})


def read_heartbeat(store: Store, job_id: str) -> dict[str, Any] | None:
    return _read(store, job_id, HEARTBEAT_FILE)
