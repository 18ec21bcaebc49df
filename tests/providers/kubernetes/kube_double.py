"""A loopback double of the Kubernetes API paths the `kubernetes` client calls for launchpad, with a
scheduler and a kubelet that run pods as local processes.

The real client (REST and the exec websocket) talks to it over 127.0.0.1 (the HTTP side is kube_api.py).
State is in memory.
- REST: /version; nodes (list); Jobs, Pods, Secrets, Events (create/get/list with label and field
  selectors/delete); 409 AlreadyExists on a duplicate name; 401 without the kubeconfig's bearer token.
- Job controller: a Job gets one Pod, an Indexed Job one per completion index (the template's labels plus
  ``job-name`` and the index, owned by the Job); a GPU
  quota refusal is a FailedCreate event on the Job instead (as the API's admission answers it). Pod
  outcomes become the Job's Complete/Failed condition (``backoffLimit: 0``: no replacement pod).
- Scheduler: extended resources against nodes' allocatable (minus what bound pods use), nodeSelector,
  required node affinity (In/NotIn/Exists), NoSchedule taints against tolerations. A pod that fits nowhere
  stays Pending with PodScheduled=False and a FailedScheduling event whose message has the real one's form
  ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu-a100-80gb, ...").
- Kubelet: the container's command runs as a local process: env from the manifest (values, fieldRefs,
  secretKeyRef and envFrom resolved from the stored Secrets; a missing Secret keeps the pod in
  CreateContainerConfigError until it exists), a per-pod working directory (HOME, cwd), emptyDir/hostPath
  mount paths created as directories (no mount namespace: the pods of one Job share them). Phase follows
  the process. Deleting the pod (or its Job) sends it
  SIGTERM, then SIGKILL after the grace period, to every process of the pod (found by a marker variable
  in their environment), as a container runtime does.
- exec: the websocket upgrade, the ``v5.channel.k8s.io`` (preferred) / ``v4.channel.k8s.io`` channel
  protocol (stdin 0, stdout 1, stderr 2, status 3, v5 close 255), the command run as a local process in
  the pod's environment. Logs: the container's output.
- watch (chunked event lines, see `_Handler._watch`); Indexed Jobs (a pod per completion index);
  the eviction subresource (a graceful delete with the DisruptionTarget condition).
Not here: RBAC, admission beyond the quota check, more than one container per pod.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

MARK = "KUBE_DOUBLE_POD"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _matches(labels: dict, selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def _fields_match(obj: dict, selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        k, _, v = term.partition("=")
        if str(_field(obj, k) or "") != v:
            return False
    return True


def pod_processes(uid: str) -> list[int]:
    """Live processes whose environment carries the pod's marker."""
    needle = f"{MARK}={uid}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


class KubeDouble:
    def __init__(self, workdir: Path, *, nodes: list[dict] | None = None, token: str = "double-token",
                 image_env: dict[str, str] | None = None, gpu_quota: dict[str, int] | None = None,
                 max_grace: float = 5.0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.image_env = dict(image_env or {})
        self.gpu_quota = dict(gpu_quota or {})
        self.max_grace = max_grace
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name)
        self.requests: list[tuple[str, str, Any]] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self._rv = 0
        for n in nodes or []:
            self.add_node(**n)
        self.server: ThreadingHTTPServer | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> KubeDouble:
        from kube_api import _Handler  # the HTTP side (REST, watch, exec websocket): kube_api.py

        double = self

        class Handler(_Handler):
            kube = double

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        with self.lock:
            pods = [o for (k, _, _), o in self.objects.items() if k == "Pod"]
        for pod in pods:
            self._kill(pod["metadata"]["uid"], grace=0)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig_entry(self, context: str, namespace: str = "default") -> dict:
        return {"cluster": {"name": context, "cluster": {"server": self.url}},
                "user": {"name": f"{context}-user", "user": {"token": self.token}},
                "context": {"name": context, "context": {"cluster": context, "user": f"{context}-user",
                                                         "namespace": namespace}}}

    # -- state helpers ------------------------------------------------------------------------------
    def _meta(self, obj: dict, kind: str, namespace: str | None) -> dict:
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion=str(self._rv))
        if namespace:
            meta["namespace"] = namespace
        obj.setdefault("kind", kind)
        return obj

    def add_node(self, name: str, labels: dict | None = None, allocatable: dict | None = None,
                 taints: list | None = None, unschedulable: bool = False) -> None:
        alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", **(allocatable or {})}
        node = {"apiVersion": "v1", "metadata": {"name": name, "labels": dict(labels or {})},
                "spec": {"taints": list(taints or []), "unschedulable": unschedulable},
                "status": {"allocatable": alloc, "capacity": dict(alloc)}}
        with self.lock:
            self.objects[("Node", "", name)] = self._meta(node, "Node", None)

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            return self.objects.get((kind, namespace, name))

    def list_objects(self, kind: str, namespace: str | None = None) -> list[dict]:
        with self.lock:
            return [o for (k, ns, _), o in sorted(self.objects.items()) if k == kind and (namespace is None or ns == namespace)]

    def jobs(self) -> list[dict]:
        return self.list_objects("Job")

    def pods(self) -> list[dict]:
        return self.list_objects("Pod")

    def event(self, kind: str, namespace: str, name: str, reason: str, message: str, type_: str = "Warning") -> None:
        with self.lock:
            meta = {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace}
            ev: dict[str, Any] = {"apiVersion": "v1", "metadata": meta,
                  "involvedObject": {"kind": kind, "name": name, "namespace": namespace}, "reason": reason,
                  "message": message, "type": type_, "count": 1, "firstTimestamp": _now(), "lastTimestamp": _now(),
                  "source": {"component": "default-scheduler" if reason == "FailedScheduling" else "job-controller"}}
            self.objects[("Event", namespace, ev["metadata"]["name"])] = self._meta(ev, "Event", namespace)

    # -- REST ---------------------------------------------------------------------------------------
    def create(self, kind: str, namespace: str, body: dict) -> tuple[int, dict]:
        name = (body.get("metadata") or {}).get("name")
        if not name:
            return 422, _status(422, "Invalid", f"{kind}: metadata.name is required")
        with self.lock:
            if (kind, namespace, name) in self.objects:
                plural = {"Job": "jobs.batch", "Secret": "secrets", "Pod": "pods"}.get(kind, kind.lower())
                return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
            obj = self._meta(json.loads(json.dumps(body)), kind, namespace)
            if kind == "Secret":
                data = dict(obj.get("data") or {})
                for k, v in (obj.pop("stringData", None) or {}).items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
                obj["data"] = data
            if kind == "Job":
                obj["status"] = {}
            self.objects[(kind, namespace, name)] = obj
        if kind == "Job":
            self._job_controller(obj)
        return 201, obj

    def delete(self, kind: str, namespace: str, name: str, body: dict | None) -> tuple[int, dict]:
        with self.lock:
            obj = self.objects.get((kind, namespace, name))
            if obj is None:
                plural = {"Job": "jobs.batch", "Secret": "secrets", "Pod": "pods"}.get(kind, kind.lower())
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            obj["metadata"].setdefault("deletionTimestamp", _now())
        if kind == "Pod":
            threading.Thread(target=self._delete_pod, args=(obj,), daemon=True).start()
        elif kind == "Job":
            policy = (body or {}).get("propagationPolicy") or "Background"
            threading.Thread(target=self._delete_job, args=(obj, policy), daemon=True).start()
        else:
            with self.lock:
                self.objects.pop((kind, namespace, name), None)
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": {"name": name, "kind": kind.lower() + "s", "uid": obj["metadata"]["uid"]}}

    def _dependents(self, uid: str) -> list[dict]:
        with self.lock:
            return [o for o in self.objects.values()
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _delete_job(self, job: dict, policy: str) -> None:
        meta = job["metadata"]
        key = ("Job", meta["namespace"], meta["name"])
        if policy == "Foreground":
            meta["finalizers"] = ["foregroundDeletion"]
        else:
            with self.lock:
                self.objects.pop(key, None)
        if policy != "Orphan":
            threads = []
            for dep in self._dependents(meta["uid"]):
                if dep["kind"] == "Pod":
                    dep["metadata"].setdefault("deletionTimestamp", _now())
                    t = threading.Thread(target=self._delete_pod, args=(dep, False), daemon=True)
                    t.start()
                    threads.append(t)
                else:
                    with self.lock:
                        self.objects.pop((dep["kind"], dep["metadata"]["namespace"], dep["metadata"]["name"]), None)
            for t in threads:
                t.join()
        with self.lock:
            self.objects.pop(key, None)

    def _delete_pod(self, pod: dict, count_failure: bool = True) -> None:
        meta = pod["metadata"]
        grace = min(float(pod["spec"].get("terminationGracePeriodSeconds", 30)), self.max_grace)
        self._kill(meta["uid"], grace=grace)
        with self.lock:
            self.objects.pop(("Pod", meta["namespace"], meta["name"]), None)
            if count_failure and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                self._job_outcome(pod, succeeded=False)

    def _kill(self, uid: str, grace: float) -> None:
        proc = self.procs.get(uid)
        if proc is not None and proc.poll() is None and grace > 0:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        for pid in pod_processes(uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    # -- job controller / scheduler / kubelet -------------------------------------------------------
    def _job_controller(self, job: dict) -> None:
        """A pod per completion index (``completionMode: Indexed``: the index label, annotation, env and
        hostname the real controller sets), else one pod; each pod is refused by the GPU quota or scheduled."""
        meta, template = job["metadata"], job["spec"]["template"]
        ns = meta["namespace"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        with self.lock:
            job["status"] = {"active": 0, "startTime": _now()}
        for index in range(int(job["spec"].get("completions") or 1) if indexed else 1):
            pod_name = f"{meta['name']}-{index}-{uuid.uuid4().hex[:5]}" if indexed else f"{meta['name']}-{uuid.uuid4().hex[:5]}"
            limits: dict[str, Any] = {}
            for c in template["spec"]["containers"]:
                limits.update((c.get("resources") or {}).get("limits") or {})
            refused = False
            for resource, limit in self.gpu_quota.items():
                used = sum(int(_limits(p).get(resource, 0)) for p in self.pods()
                           if p["metadata"]["namespace"] == ns and p["status"].get("phase") in ("Pending", "Running"))
                want = int(limits.get(resource, 0))
                if want and used + want > limit:
                    self.event("Job", ns, meta["name"], "FailedCreate",
                               f'Error creating: pods "{pod_name}" is forbidden: exceeded quota: gpu-quota, requested: '
                               f"requests.{resource}={want}, used: requests.{resource}={used}, "
                               f"limited: requests.{resource}={limit}")
                    refused = True
            if refused:
                return
            pod_labels = {**(template.get("metadata") or {}).get("labels", {}), "job-name": meta["name"],
                          "batch.kubernetes.io/job-name": meta["name"], "controller-uid": meta["uid"]}
            spec = json.loads(json.dumps(template["spec"]))
            annotations = {}
            if indexed:
                pod_labels[INDEX_KEY] = str(index)
                annotations[INDEX_KEY] = str(index)
                spec["hostname"] = f"{meta['name']}-{index}"
                for c in spec["containers"]:
                    c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            pod = {"apiVersion": "v1",
                   "metadata": {"name": pod_name, "labels": pod_labels, "annotations": annotations, "ownerReferences": [
                       {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}]},
                   "spec": spec, "status": {"phase": "Pending"}}
            with self.lock:
                self.objects[("Pod", ns, pod_name)] = self._meta(pod, "Pod", ns)
                job["status"]["active"] += 1
            self._schedule(pod)

    def _schedule(self, pod: dict) -> None:
        spec, ns = pod["spec"], pod["metadata"]["namespace"]
        want = {k: int(v) for k, v in _limits(pod).items() if "/" in k}
        nodes = self.list_objects("Node")
        reasons: dict[str, int] = {}
        chosen = None
        for node in nodes:
            why = self._unfit(node, spec, want)
            if why is None:
                chosen = node
                break
            reasons[why] = reasons.get(why, 0) + 1
        if chosen is None:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            message = (f"0/{len(nodes)} nodes are available: {detail}. preemption: 0/{len(nodes)} nodes are available: "
                       f"{len(nodes)} Preemption is not helpful for scheduling.")
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": message}]
            self.event("Pod", ns, pod["metadata"]["name"], "FailedScheduling", message)
            return
        spec["nodeName"] = chosen["metadata"]["name"]
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        self.event("Pod", ns, pod["metadata"]["name"], "Scheduled",
                   f"Successfully assigned {ns}/{pod['metadata']['name']} to {spec['nodeName']}", "Normal")
        threading.Thread(target=self._kubelet, args=(pod,), daemon=True).start()

    def _unfit(self, node: dict, spec: dict, want: dict[str, int]) -> str | None:
        labels = node["metadata"]["labels"]
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        tolerations = spec.get("tolerations") or []
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if terms and not any(all(_expr(labels, e) for e in t.get("matchExpressions") or []) for t in terms):
            return "node(s) didn't match Pod's node affinity/selector"
        alloc = node["status"]["allocatable"]
        for resource, n in sorted(want.items()):
            used = sum(int(_limits(p).get(resource, 0)) for p in self.pods()
                       if p["spec"].get("nodeName") == node["metadata"]["name"]
                       and p["status"].get("phase") in ("Pending", "Running"))
            if used + n > int(alloc.get(resource, 0)):
                return f"Insufficient {resource}"
        return None

    def pod_dir(self, pod: dict) -> Path:
        return self.workdir / "pods" / pod["metadata"]["name"]

    def pod_env(self, pod: dict) -> dict[str, str] | str:
        """The container's environment, or the reason it cannot be made (a missing Secret)."""
        ns = pod["metadata"]["namespace"]
        c = pod["spec"]["containers"][0]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.pod_dir(pod)), "LANG": "C.UTF-8",
               "HOSTNAME": pod["metadata"]["name"], **self.image_env, MARK: pod["metadata"]["uid"]}
        for src in c.get("envFrom") or []:
            ref = src.get("secretRef")
            if ref:
                secret = self.get("Secret", ns, ref["name"])
                if secret is None:
                    if ref.get("optional"):
                        continue
                    return f'secret "{ref["name"]}" not found'
                env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
                continue
            vf = e.get("valueFrom") or {}
            if "fieldRef" in vf:
                env[e["name"]] = str(_field(pod, vf["fieldRef"]["fieldPath"]) or "")
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                secret = self.get("Secret", ns, ref["name"])
                if secret is None or ref["key"] not in (secret.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    return f'secret "{ref["name"]}" not found' if secret is None else \
                        f'couldn\'t find key {ref["key"]} in Secret {ns}/{ref["name"]}'
                env[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _kubelet(self, pod: dict) -> None:
        meta, c = pod["metadata"], pod["spec"]["containers"][0]
        while True:
            if meta.get("deletionTimestamp"):
                return
            env = self.pod_env(pod)
            if isinstance(env, dict):
                break
            pod["status"]["containerStatuses"] = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False,
                                                   "restartCount": 0, "state": {"waiting": {
                                                       "reason": "CreateContainerConfigError", "message": env}}}]
            time.sleep(0.2)
        home = self.pod_dir(pod)
        home.mkdir(parents=True, exist_ok=True)
        mounts = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            vol = mounts.get(m["name"]) or {}
            if m["mountPath"] == "/dev/shm":
                continue
            if "emptyDir" in vol or "hostPath" in vol:
                Path(m["mountPath"]).mkdir(parents=True, exist_ok=True)
        log = open(home / "container.log", "ab")
        with self.lock:
            if meta.get("deletionTimestamp"):
                log.close()
                return
            proc = subprocess.Popen([*c.get("command", []), *c.get("args", [])], cwd=home, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs[meta["uid"]] = proc
            pod["status"].update(phase="Running", podIP="127.0.0.1", startTime=_now(), containerStatuses=[
                {"name": c["name"], "image": c["image"], "imageID": "", "ready": True, "restartCount": 0,
                 "state": {"running": {"startedAt": _now()}}}])
        rc = proc.wait()
        log.close()
        for pid in pod_processes(meta["uid"]):  # the container ends with its PID 1
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with self.lock:
            pod["status"].update(phase="Succeeded" if rc == 0 else "Failed", containerStatuses=[
                {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": rc if rc >= 0 else 128 - rc, "finishedAt": _now(),
                                          "reason": "Completed" if rc == 0 else "Error"}}}])
            self._job_outcome(pod, succeeded=rc == 0)

    def _job_outcome(self, pod: dict, *, succeeded: bool) -> None:
        """Complete once every pod (every index) succeeded; Failed at the first failure (``backoffLimit: 0``),
        and then the Job's other pods are terminated, as the real controller does."""
        owner = next((r for r in pod["metadata"].get("ownerReferences") or [] if r["kind"] == "Job"), None)
        job = self.get("Job", pod["metadata"]["namespace"], owner["name"]) if owner else None
        if job is None or job["status"].get("conditions"):
            return
        status = job["status"]
        status["active"] = max(0, int(status.get("active") or 1) - 1)
        if succeeded:
            status["succeeded"] = int(status.get("succeeded") or 0) + 1
            if status["succeeded"] >= int(job["spec"].get("completions") or 1):
                status.update(completionTime=_now(),
                              conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": _now()}])
            return
        status.update(failed=int(status.get("failed") or 0) + 1, conditions=[
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": _now(),
             "message": "Job has reached the specified backoff limit"}])
        for other in self._dependents(job["metadata"]["uid"]):
            if other["kind"] == "Pod" and other is not pod and not other["metadata"].get("deletionTimestamp") \
                    and other["status"].get("phase") in ("Pending", "Running"):
                other["metadata"]["deletionTimestamp"] = _now()
                threading.Thread(target=self._delete_pod, args=(other, False), daemon=True).start()

    def evict(self, pod: dict) -> tuple[int, dict]:
        """The eviction subresource (a node drain, the cluster autoscaler): a graceful delete of the pod,
        marked with the DisruptionTarget condition the API server adds."""
        with self.lock:
            if pod["metadata"].get("deletionTimestamp"):
                return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            pod["status"].setdefault("conditions", []).append(
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "message": "Eviction API: evicting", "lastTransitionTime": _now()})
        meta = pod["metadata"]
        self.delete("Pod", meta["namespace"], meta["name"], None)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    # -- exec ---------------------------------------------------------------------------------------
    def exec_process(self, pod: dict, command: list[str], stdin: bool) -> subprocess.Popen:
        env = self.pod_env(pod)
        assert isinstance(env, dict)
        return subprocess.Popen(command, cwd=self.pod_dir(pod), env=env, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _limits(pod: dict) -> dict:
    out: dict = {}
    for c in pod["spec"]["containers"]:
        out.update((c.get("resources") or {}).get("limits") or {})
    return out


def _tolerates(t: dict, taint: dict) -> bool:
    if t.get("effect") and t["effect"] != taint.get("effect"):
        return False
    if t.get("operator") == "Exists":
        return not t.get("key") or t["key"] == taint["key"]
    return t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", "")


def _expr(labels: dict, e: dict) -> bool:
    op, key, values = e["operator"], e["key"], e.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False
