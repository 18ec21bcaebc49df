"""The manifests launchpad applies to a cluster: pure functions of (settings, offer shape, spec), so what
`launchpad up --dry-run` prints is exactly what `provision` creates.

Conventions (shared with ``launchpad reap --print-k8s-cronjob``, launchpad.reap_units): every object carries
``app.kubernetes.io/name`` and ``app.kubernetes.io/managed-by: launchpad``; every object of a job also
carries ``launchpad-job=<job id>`` (what `instances()`, `down --all` and the reaper select on) and
``launchpad-attempt=<hash of the attempt token>``. Label values are limited to 63 characters, so the exact
job id and token are kept in annotations too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from launchpad.models import JOB_TAG

ATTEMPT_LABEL = "launchpad-attempt"
APP_LABELS = {"app.kubernetes.io/name": "launchpad-train", "app.kubernetes.io/managed-by": "launchpad"}
ANN_JOB = "launchpad.dev/job-id"
ANN_TOKEN = "launchpad.dev/token"
ANN_OFFER = "launchpad.dev/offer"
ANN_ROOT = "launchpad.dev/root"
CONTAINER = "launchpad"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")

# The container's entrypoint, PID 1 of the pod (readable here and in `--dry-run`). It waits while
# launchpad syncs the job into the pod and starts the agent through `exec` (as over SSH on a VM), reaps
# orphans (the agent is one), and ENDS THE POD -- so the Job completes and its GPUs are freed -- when
#   * the agent's idle watchdog asks for it (its autostop command creates <root>/STOP), or
#   * no agent has run for the idle time (or, before the first agent, for the set-up time): a client that
#     died after `provision` never leaves GPUs allocated.
# SIGTERM (pod deletion, eviction, preemption by the scheduler) is the interruption notice: every job's
# trainer is asked to save now (SAVE_NOW) while the grace period lasts.
BOOTSTRAP = r"""
import os, signal, sys, time
root, idle, setup = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
jobs = os.path.join(root, "jobs")
os.makedirs(jobs, exist_ok=True)
stopping = []

def agents():
    live = []
    for d in os.listdir(jobs):
        try:
            with open(os.path.join(jobs, d, "agent.pid")) as f:
                pid = int(f.read().split()[0])
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if state not in ("Z", "X"):
            live.append(d)
    return live

def term(signum, frame):
    for d in agents():
        open(os.path.join(jobs, d, "SAVE_NOW"), "a").close()
    stopping.append(time.time())

signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGINT, term)
print(f"launchpad: waiting for the agent under {root}", flush=True)
seen, started = time.time(), False
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    if os.path.exists(os.path.join(root, "STOP")):
        print("launchpad: autostop: the job is idle; ending the pod", flush=True)
        sys.exit(0)
    live = agents()
    if live:
        seen, started = time.time(), True
    if stopping and not live:
        print("launchpad: terminated", flush=True)
        sys.exit(143)
    if not live and not stopping and time.time() - seen > (idle if started else setup):
        print("launchpad: no agent ran for %.0f s; ending the pod" % (time.time() - seen), flush=True)
        sys.exit(0)
    time.sleep(1)
"""


def label_value(text: str) -> str:
    """`text` as a label value: <= 63 characters of [A-Za-z0-9._-], alphanumeric at both ends."""
    v = _LABEL_VALUE.sub("-", text)[:63].strip("-_.")
    return v or "x"


def job_name(token: str) -> str:
    """The Job of attempt `token`: the same token, the same name (a repeated create is a 409, never a twin)."""
    return "lp-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def secret_name(name: str) -> str:
    return f"{name}-env"


def labels(job_id: str, token: str, tags: Mapping[str, str] | None = None) -> dict[str, str]:
    out = {label_value(k): label_value(v) for k, v in (tags or {}).items() if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", k)}
    out.update(APP_LABELS)
    out[JOB_TAG] = label_value(job_id)
    out[ATTEMPT_LABEL] = hashlib.sha256(token.encode()).hexdigest()[:12]
    return out


def affinity(label: str | None, values: Sequence[str]) -> dict[str, Any] | None:
    """Required node affinity on the GPU type: the pod may only land on nodes of the offer's GPU."""
    if not label or not values:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": label, "operator": "In", "values": list(values)}]}]}}}


def job_manifest(*, name: str, namespace: str, job_id: str, token: str, tags: Mapping[str, str], offer_label: str,
                 image: str, python: str, mount_path: str, gpu_resource: str | None, gpu_count: int,
                 node_label: str | None, node_values: Sequence[str], node_selector: Mapping[str, str],
                 tolerations: Sequence[Mapping[str, Any]], requests: Mapping[str, str], limits: Mapping[str, str],
                 secrets: Sequence[str], secret_env: Mapping[str, str], forwarded: Sequence[str],
                 idle_seconds: float, setup_seconds: float, grace_seconds: int, scratch: Mapping[str, Any] | None,
                 service_account: str | None, ttl_seconds: int | None, image_pull_secrets: Sequence[str] = (),
                 nodes: int = 1) -> dict:
    """The batch/v1 Job of one attempt: for `nodes` > 1 an Indexed Job, a pod per node (its completion
    index is its rank; launchpad gives every node the others' pod IPs and the rendezvous port in its job
    spec once all are running, as on VMs). Credentials only by reference: `secrets` (envFrom), `secret_env`
    (NAME -> "secret/key", secretKeyRef) and `forwarded` (the names launchpad copies from the client's
    environment into the attempt's own Secret, `secret_name(name)`)."""
    lab = labels(job_id, token, tags)
    root = f"{mount_path.rstrip('/')}/{name}"
    env: list[dict[str, Any]] = [
        {"name": "LAUNCHPAD_ROOT", "value": root},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    for var, ref in sorted(secret_env.items()):
        sec, _, key = str(ref).partition("/")
        env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": sec, "key": key or var}}})
    env_from: list[dict[str, Any]] = [{"secretRef": {"name": s}} for s in secrets]
    if forwarded:
        env_from.append({"secretRef": {"name": secret_name(name)}})
    res_limits = dict(limits)
    res_requests = dict(requests)
    if gpu_resource and gpu_count:
        res_limits[gpu_resource] = str(gpu_count)  # extended resources: the limit is the request
    container: dict[str, Any] = {
        "name": CONTAINER, "image": image,
        "command": [python, "-c", BOOTSTRAP, root, f"{idle_seconds:g}", f"{setup_seconds:g}"],
        "env": env,
        "resources": {k: v for k, v in (("requests", res_requests), ("limits", res_limits)) if v},
        "volumeMounts": [{"name": "scratch", "mountPath": mount_path}, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if env_from:
        container["envFrom"] = env_from
    if scratch and scratch.get("hostPath"):  # local NVMe on the node, a directory per job
        volume: dict[str, Any] = {"name": "scratch", "hostPath": {"path": str(scratch["hostPath"]), "type": "DirectoryOrCreate"}}
    else:
        size = (scratch or {}).get("sizeLimit")
        volume = {"name": "scratch", "emptyDir": {"sizeLimit": str(size)} if size else {}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(grace_seconds),
        "automountServiceAccountToken": False,  # the pod never talks to the API server
        "containers": [container],
        "volumes": [volume, {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    aff = affinity(node_label, node_values)
    if aff:
        pod_spec["affinity"] = aff
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    tol = [dict(t) for t in tolerations]
    if gpu_resource and gpu_count:
        tol.append({"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"})
    if tol:
        pod_spec["tolerations"] = tol
    spec: dict[str, Any] = {
        "backoffLimit": 0,  # a lost pod is not replaced here: launchpad resumes the job (maybe elsewhere)
        "completions": max(1, nodes), "parallelism": max(1, nodes),
        "template": {"metadata": {"labels": lab}, "spec": pod_spec},
    }
    if nodes > 1:  # all pods at once (parallelism), one per rank; one lost pod fails the Job (backoffLimit 0)
        spec["completionMode"] = "Indexed"
    if ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = int(ttl_seconds)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": lab,
                     "annotations": {ANN_JOB: job_id, ANN_TOKEN: token, ANN_OFFER: offer_label, ANN_ROOT: root}},
        "spec": spec,
    }


def secret_manifest(*, name: str, namespace: str, job_id: str, token: str, values: Mapping[str, str],
                    owner: Mapping[str, str] | None = None) -> dict:
    """The attempt's own Secret (the forwarded variables), owned by its Job: deleted with it."""
    meta: dict[str, Any] = {"name": secret_name(name), "namespace": namespace, "labels": labels(job_id, token)}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner["uid"],
                                    "blockOwnerDeletion": False}]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "stringData": dict(values)}


def render_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    import yaml

    class _Block(yaml.SafeDumper):
        pass

    def _str(dumper, text):  # the bootstrap script as a readable block, not one escaped line
        style = "|" if "\n" in text else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)

    _Block.add_representer(str, _str)
    return "---\n".join(yaml.dump(dict(d), Dumper=_Block, sort_keys=False) for d in docs)
