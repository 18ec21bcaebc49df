# mypy: disable-error-code="import-untyped"
# (the kubernetes client ships no type information)
"""The `kubernetes` provider: any GPU cluster your kubeconfig reaches (CoreWeave's per-model GPU resource
names included); one batch/v1 Job per attempt.

**How the agent gets into the pod.** The Job's container runs a small bootstrap as PID 1
(launchpad_kubernetes.manifests.BOOTSTRAP, readable in ``launchpad up --dry-run``). `VMProvider` then does
on the pod exactly what it does on a VM, through an exec-based `CommandRunner` (launchpad_kubernetes.execrunner)
instead of SSH: it syncs the wheel, the job spec and the recipe into the pod's scratch volume, prepares
the venv, and `train` starts the agent through exec (the recipe's resolved env over the exec's stdin,
never in a manifest). This is the simpler of the two correct designs: the bootstrap need not know how to
start an agent, and progress/logs/checkpoint/salvage are VMProvider's unchanged. The bootstrap only keeps
the pod alive while an agent runs there and ends it otherwise, which is what makes
**idle auto-stop = the Job ends**: the agent's idle watchdog runs ``touch <root>/STOP`` (its autostop
command), the bootstrap exits 0, the pod Succeeds, the Job completes and the scheduler frees the GPUs;
a pod whose client never synced (or whose agent died) ends by itself after the set-up / idle time.

**Preemption**: a deleted or evicted pod (drain, autoscaler, the Eviction API) gets SIGTERM; the bootstrap
asks the trainer to save now (SAVE_NOW) while the grace period lasts. The Job has ``backoffLimit: 0``, so a
lost pod is not replaced behind launchpad's back: `status` says PREEMPTED and the lifecycle resumes from the newest checkpoint.

**Multi-node** (``nodes > 1``): one Indexed Job, a pod per node, its completion index its rank
(launchpad_kubernetes.pods). `nodes()` is a node per index; each gets its own agent through exec, and its
job spec names every rank's pod IP and the rendezvous port (`job_spec_extras`), as a VM's does. All pods
must be bound before the attempt counts as provisioned: a partial gang is NoCapacity.

**Waiting** for pods to be bound or to start is a watch on the attempt's pods (woken by the change, with
``poll_seconds`` as the watch's timeout), not a sleep.

**Scheduling is explained, not waited on**: `provision` waits at most ``schedule_timeout`` s for the pod
to be bound to a node; FailedScheduling events (insufficient ``nvidia.com/gpu-...``, taints, affinity)
and quota refusals (FailedCreate) become one-line `NoCapacity`/`QuotaExceeded` errors, and the Job is
deleted, so failover moves on.

Idempotence: attempt `token` -> Job ``lp-<hash(token)>``; a repeated create is a 409, reconciled by
name and label. Every object carries ``launchpad-job=<job id>``; `instances()` lists Jobs by that label,
so `down --all` and the reaper work without the state DB. Teardown deletes with
``propagationPolicy: Foreground`` (pods and the attempt's Secret go with the Job).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

from launchpad.errors import ConfigError, LaunchpadError, NoCapacity, NotYetTerminated, ProviderError, QuotaExceeded
from launchpad.models import JOB_TAG, Capability, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from .cluster import NAME, Cluster, Shape, contexts
from .manifests import (
    ANN_JOB,
    ANN_OFFER,
    ANN_ROOT,
    ANN_TOKEN,
    ATTEMPT_LABEL,
    CONTAINER,
    job_manifest,
    job_name,
    labels,
    render_yaml,
    secret_manifest,
    secret_name,
)
from .pods import attempt_state, job_state, live, pod_index, wait_for_change, waiting_reason

log = logging.getLogger("launchpad.kubernetes")

DEFAULT_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"  # has python3; launchpad brings the rest
DEFAULT_MOUNT = "/launchpad"
_COUNTS = (1, 2, 4, 8, 16)
_FAILING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
            "CreateContainerError", "CrashLoopBackOff")
__all__ = ["KubernetesProvider", "job_name"]


@hookimpl
def launchpad_register_providers(register):
    register(KubernetesProvider)


class KubernetesProvider(VMProvider):
    name = NAME
    # Not in `unsupported`: STOP. A Job cannot be paused, so stop == the Job ends (its GPUs are freed, its
    # scratch volume goes; nothing bills), and `resume` continues from the store's newest checkpoint. (Listing
    # it would also reject every offer for a resumed job: its recipe, read back from the job spec, always
    # "sets" autostop.action.)
    unsupported = {
        Capability.SPOT: "launchpad does not tell a cluster's preemptible nodes apart (a lost pod is resumed all the same)",
    }

    def __init__(self, config=None):
        super().__init__(config)
        self.config.setdefault("systemd", False)  # a container has no systemd: the agent starts in a new session
        self._clusters: dict[str, Cluster] | None = None

    # -- clusters --------------------------------------------------------------------------------------
    def clusters(self) -> dict[str, Cluster]:
        """The contexts named by config (`contexts:` or `context:`), else the kubeconfig's current one."""
        if self._clusters is None:
            found, current = contexts(self.config.get("kubeconfig"))
            by_name = {c["name"]: c for c in found}
            wanted = self.config.get("contexts") or ([self.config["context"]] if self.config.get("context") else None)
            if not wanted:
                if not current:
                    raise ConfigError("the kubeconfig has no current context",
                                      hint="set `context:` under providers: kubernetes: in config.yaml")
                wanted = [current["name"]]
            missing = [w for w in wanted if w not in by_name]
            if missing:
                raise ConfigError(f"kubeconfig has no context {', '.join(missing)} (it has: {', '.join(sorted(by_name))})")
            per = self.config.get("clusters") or {}
            base = {k: v for k, v in self.config.items() if k not in ("clusters", "contexts", "context")}
            self._clusters = {w: Cluster(w, {**base, **(per.get(w) or {})},
                                         (by_name[w].get("context") or {}).get("namespace")) for w in wanted}
        return self._clusters

    def cluster(self, context: str | None) -> Cluster:
        clusters = self.clusters()
        if context not in clusters:
            raise ProviderError(f"context {context!r} is not configured (configured: {', '.join(clusters)})", provider=NAME)
        return clusters[context]

    def _cluster_of(self, instance: Instance) -> Cluster:
        return self.cluster(instance.data.get("context") or (instance.offer.region if instance.offer else None))

    # -- discovery -------------------------------------------------------------------------------------------
    def check(self) -> str | None:
        paths = str(self.config.get("kubeconfig") or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"))
        if not any(os.path.isfile(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p):
            # before importing the client (~1 s): `check` runs for every installed provider
            return f"no kubeconfig at {paths} (set KUBECONFIG, or `kubeconfig:` under providers: kubernetes:)"
        try:
            import kubernetes  # noqa: F401
        except ImportError:
            return "the kubernetes client is not installed (pip install launchpad-kubernetes)"
        try:
            problems = []
            for c in self.clusters().values():
                try:
                    self._probe(c)
                except LaunchpadError as e:
                    problems.append(str(e).splitlines()[0])
            if len(problems) == len(self.clusters()):
                return "; ".join(problems)
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"Kubernetes is not reachable: {e}".splitlines()[0]
        return None

    def _probe(self, c: Cluster) -> str:
        from kubernetes import client

        version = c.call("version", client.VersionApi(c.client()).get_code)
        c.call(f"list jobs in namespace {c.namespace}", c.batch().list_namespaced_job, c.namespace, limit=1)
        return str(version.git_version)

    def describe(self) -> str | None:
        parts = []
        for c in self.clusters().values():
            try:
                parts.append(f"context {c.context} (namespace {c.namespace}, Kubernetes {self._probe(c)})")
            except LaunchpadError as e:
                parts.append(f"context {c.context}: not reachable ({e})")
        priced = any(c.settings.get("prices") or any("price_per_gpu_hour" in (g or {}) for g in c.settings.get("gpus") or [])
                     for c in self.clusters().values())
        return "; ".join(parts) + ("" if priced else "; prices 0 (set `prices:` per GPU-hour to rank by cost)")

    def offers(self) -> list[Offer]:
        out = []
        for c in self.clusters().values():
            for shape in c.shapes():
                counts = sorted({n for n in _COUNTS if n <= shape.count} | {shape.count})
                for n in counts:
                    share = n / shape.count
                    out.append(Offer(provider=NAME, instance_type=f"{shape.product}x{n}", region=c.context,
                                     gpu=shape.gpu, gpu_count=n, gpu_memory_gb=shape.memory_gb,
                                     vcpus=round(shape.vcpus * share, 1), memory_gb=round(shape.host_memory_gb * share, 1),
                                     price_per_hour=round(shape.price_per_gpu * n, 4),
                                     nvme_gb=float(c.settings.get("nvme_gb") or 0) if self._scratch(c).get("hostPath") else 0.0))
        return out

    def _shape(self, c: Cluster, offer: Offer) -> Shape:
        for shape in c.shapes():
            if offer.instance_type.startswith(f"{shape.product}x") and offer.gpu_count <= shape.count:
                return shape
        raise NoCapacity(f"{c.context}: no node offers {offer.instance_type} any more", provider=NAME)

    # -- manifests -------------------------------------------------------------------------------------------
    @staticmethod
    def _scratch(c: Cluster) -> dict[str, Any]:
        return dict(c.settings.get("scratch") or {})

    def _forwarded(self, c: Cluster) -> list[str]:
        return [str(n) for n in c.settings.get("forward_env") or []]

    def manifests(self, offer: Offer, spec: InstanceSpec, *, values: dict[str, str] | None = None) -> list[dict]:
        """[Secret (if `forward_env`), Job] of this attempt; secret values are shown as placeholders unless
        `values` are given (they are only at `provision`)."""
        c = self.cluster(offer.region)
        shape = self._shape(c, offer)
        name = job_name(spec.token)
        forwarded = self._forwarded(c)
        idle = 60.0 * float(spec.autostop_idle_minutes if spec.autostop_idle_minutes is not None else 30)
        job = job_manifest(
            name=name, namespace=c.namespace, job_id=spec.job_id, token=spec.token, tags=spec.tags,
            offer_label=offer.instance_type, image=str(c.settings.get("image") or DEFAULT_IMAGE),
            python=str(c.settings.get("python") or "python3"), mount_path=str(c.settings.get("mount_path") or DEFAULT_MOUNT),
            gpu_resource=shape.resource, gpu_count=offer.gpu_count, node_label=shape.label,
            node_values=[shape.product] if shape.label else [],
            node_selector={**(c.settings.get("node_selector") or {}), **shape.node_selector},
            tolerations=list(c.settings.get("tolerations") or []),
            requests={str(k): str(v) for k, v in (c.settings.get("requests") or {}).items()},
            limits={str(k): str(v) for k, v in (c.settings.get("limits") or {}).items()},
            secrets=[str(s) for s in c.settings.get("secrets") or []],
            secret_env={str(k): str(v) for k, v in (c.settings.get("secret_env") or {}).items()},
            forwarded=forwarded, idle_seconds=float(c.settings.get("idle_seconds") or idle),
            setup_seconds=float(c.settings.get("setup_timeout") or 1800),
            grace_seconds=int(c.settings.get("grace_seconds") or 60), scratch=self._scratch(c),
            service_account=c.settings.get("service_account"),
            ttl_seconds=int(c.settings.get("ttl_after_finished", 86400)),
            image_pull_secrets=[str(s) for s in c.settings.get("image_pull_secrets") or []], nodes=spec.nodes)
        docs = [job]
        if forwarded:
            shown = values if values is not None else {n: f"(the value of ${n} on the client at launch)" for n in forwarded}
            docs.insert(0, secret_manifest(name=name, namespace=c.namespace, job_id=spec.job_id, token=spec.token,
                                           values=shown))
        return docs

    def render(self, offer: Offer, spec: InstanceSpec) -> str | None:
        return render_yaml(self.manifests(offer, spec))

    # -- provisioning --------------------------------------------------------------------------------------
    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        c = self.cluster(offer.region)
        forwarded = self._forwarded(c)
        missing = [n for n in forwarded if n not in os.environ]
        if missing:
            raise ConfigError(f"forward_env: {', '.join(missing)} not set in this environment (export them first)")
        docs = self.manifests(offer, spec, values={n: os.environ[n] for n in forwarded})
        job_doc = docs[-1]
        name = job_doc["metadata"]["name"]
        batch, core = c.batch(), c.core()
        self._warn_leaks(c, spec)
        job = c.call(f"read job {name}", batch.read_namespaced_job, name, c.namespace, not_found=None)
        if job is None:
            try:
                job = c.call(f"create job {name}", batch.create_namespaced_job, c.namespace, job_doc)
            except ProviderError as e:
                if "already exists" not in str(e):
                    raise
                job = c.call(f"read job {name}", batch.read_namespaced_job, name, c.namespace)
        annotations = job.metadata.annotations or {}
        if annotations.get(ANN_TOKEN) != spec.token:
            raise ProviderError(f"{c.context}: job {name} exists and is not launchpad's attempt {spec.token}", provider=NAME)
        if forwarded:
            secret = docs[0]
            secret["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                                      "uid": job.metadata.uid, "blockOwnerDeletion": False}]
            try:
                c.call("create secret", core.create_namespaced_secret, c.namespace, secret)
            except ProviderError as e:
                if "already exists" not in str(e):
                    raise
        state = self._await_scheduled(c, name, spec.token, spec.nodes)
        data = {"context": c.context, "namespace": c.namespace, "name": name, "token": spec.token,
                "root": annotations.get(ANN_ROOT), "python": c.settings.get("python") or "python3"}
        if spec.nodes > 1:
            data["node_count"] = spec.nodes
        return Instance(provider=NAME, id=name, job_id=spec.job_id, state=state, offer=offer, created_at=time.time(),
                        data=data)

    def _warn_leaks(self, c: Cluster, spec: InstanceSpec) -> None:
        found = c.call("list jobs", c.batch().list_namespaced_job, c.namespace,
                       label_selector=f"{JOB_TAG}={labels(spec.job_id, spec.token)[JOB_TAG]}")
        others = [j.metadata.name for j in found.items if (j.metadata.annotations or {}).get(ANN_TOKEN) != spec.token
                  and not j.metadata.deletion_timestamp
                  and job_state(j) in (InstanceState.PENDING, InstanceState.RUNNING)]
        if others:
            log.warning("kubernetes: job %s has other live Jobs in %s/%s: %s (`launchpad down %s` removes them)",
                        spec.job_id, c.context, c.namespace, ", ".join(others), spec.job_id)

    def _pods(self, c: Cluster, token_hash: str) -> list:
        return self._pod_list(c, token_hash)[0]

    def _pod_list(self, c: Cluster, token_hash: str) -> tuple[list, str | None]:
        """The attempt's pods and the list's resourceVersion (to watch for what changes after it)."""
        found = c.call("list pods", c.core().list_namespaced_pod, c.namespace, label_selector=f"{ATTEMPT_LABEL}={token_hash}")
        return list(found.items), getattr(found.metadata, "resource_version", None)

    def _wait(self, c: Cluster, token_hash: str, rv: str | None) -> None:
        wait_for_change(c, f"{ATTEMPT_LABEL}={token_hash}", rv, float(c.settings.get("poll_seconds") or 1))

    def _await_scheduled(self, c: Cluster, name: str, token: str, count: int = 1) -> InstanceState:
        """Wait (at most `schedule_timeout` s) until each of the Job's `count` pods is bound to a node (a
        multi-node job runs only when all are: a partial gang is not capacity). What keeps one from being
        scheduled -- the scheduler's FailedScheduling message, or a quota refusal of the pod -- becomes a
        one-line NoCapacity (and the Job is deleted, freeing what the bound pods hold)."""
        timeout = float(c.settings.get("schedule_timeout") or 120)
        deadline = time.monotonic() + timeout
        token_hash = labels("x", token)[ATTEMPT_LABEL]
        why = None
        while True:
            pods, rv = self._pod_list(c, token_hash)
            bound = [p for p in pods if p.spec.node_name or p.status.phase in ("Running", "Succeeded", "Failed")]
            if bound and len(bound) >= count:
                return InstanceState.RUNNING if all(p.status.phase == "Running" for p in bound) else InstanceState.PENDING
            for pod in pods:
                if pod not in bound:
                    why = self._event(c, "Pod", pod.metadata.name, "FailedScheduling") or why
            failed_create = self._event(c, "Job", name, "FailedCreate")
            if failed_create and "exceeded quota" in failed_create:
                self._delete(c, name)
                raise QuotaExceeded(f"{c.context}/{c.namespace}: {failed_create}", provider=NAME, scope="region")
            if time.monotonic() > deadline:
                self._delete(c, name)
                reason = why or failed_create or "no pod was created"
                which = "the pod was" if count == 1 else f"{count - len(bound)} of the {count} pods were"
                raise NoCapacity(f"{c.context}: {which} not scheduled within {timeout:.0f} s: {reason}", provider=NAME)
            self._wait(c, token_hash, rv)

    def _event(self, c: Cluster, kind: str, name: str, reason: str) -> str | None:
        found = c.call("list events", c.core().list_namespaced_event, c.namespace,
                       field_selector=f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}")
        items = list(found.items)  # oldest first, as the API lists them
        return " ".join(str(items[-1].message or reason).split()) if items else None

    # -- teardown / status / instances ---------------------------------------------------------------------
    def _delete(self, c: Cluster, name: str) -> None:
        from kubernetes import client

        body = client.V1DeleteOptions(propagation_policy="Foreground")
        c.call(f"delete job {name}", c.batch().delete_namespaced_job, name, c.namespace, body=body, not_found=None)
        c.call(f"delete secret {secret_name(name)}", c.core().delete_namespaced_secret, secret_name(name), c.namespace,
               not_found=None)

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        """Delete the Job (a Job cannot be paused: STOP ends it the same way). Waits up to `teardown_wait`
        s for it and its pod to be gone, then says NotYetTerminated (the caller polls)."""
        c = self._cluster_of(instance)
        name = str(instance.data.get("name") or instance.id)
        self.drop_connection(instance)
        self._delete(c, name)
        deadline = time.monotonic() + float(c.settings.get("teardown_wait") or 90)
        while c.call(f"read job {name}", c.batch().read_namespaced_job, name, c.namespace, not_found=None) is not None:
            if time.monotonic() > deadline:
                raise NotYetTerminated(f"{name}: deletion accepted, its pod is still terminating", provider=NAME)
            time.sleep(0.5)

    def status(self, instance: Instance) -> InstanceState:
        c = self._cluster_of(instance)
        name = str(instance.data.get("name") or instance.id)
        job = c.call(f"read job {name}", c.batch().read_namespaced_job, name, c.namespace, not_found=None)
        if job is None:
            return InstanceState.TERMINATED
        return attempt_state(job, self._pods(c, job.metadata.labels.get(ATTEMPT_LABEL, "")),
                             int(instance.data.get("node_count") or 1))

    def instances(self) -> list[Instance]:
        out = []
        for c in self.clusters().values():
            found = c.call("list jobs", c.batch().list_namespaced_job, c.namespace, label_selector=JOB_TAG)
            for job in sorted(found.items, key=lambda j: j.metadata.name):
                ann = job.metadata.annotations or {}
                job_id = ann.get(ANN_JOB) or job.metadata.labels.get(JOB_TAG)
                created = job.metadata.creation_timestamp
                out.append(Instance(
                    provider=NAME, id=job.metadata.name, job_id=job_id, state=job_state(job),
                    offer=Offer(NAME, ann.get(ANN_OFFER, "unknown"), c.context),
                    created_at=created.timestamp() if hasattr(created, "timestamp") else None,
                    data={"context": c.context, "namespace": c.namespace, "name": job.metadata.name,
                          "token": ann.get(ANN_TOKEN), "root": ann.get(ANN_ROOT),
                          "python": c.settings.get("python") or "python3",
                          **({"node_count": job.spec.completions} if (job.spec.completions or 1) > 1 else {})}))
        return out

    # -- reaching the pod ------------------------------------------------------------------------------------
    def transport(self, instance: Instance):
        """An exec session into the node's pod (rank = completion index) once it runs (waits while it is
        pending, up to `boot_timeout`)."""
        from .execrunner import KubeExec

        c = self._cluster_of(instance)
        name = str(instance.data.get("name") or instance.id)
        token_hash = labels("x", str(instance.data.get("token") or ""))[ATTEMPT_LABEL]
        deadline = time.monotonic() + float(c.settings.get("boot_timeout") or 600)
        rank = int(instance.data.get("node_rank") or 0)
        since: float | None = None
        while True:
            found, rv = self._pod_list(c, token_hash)
            pod = next((p for p in live(found) if pod_index(p) == rank), None)
            if pod is not None and pod.status.phase == "Running":
                return KubeExec(c.core(), c.namespace, pod.metadata.name, CONTAINER,
                                label=f"{c.context}/{c.namespace}/{pod.metadata.name}")
            if pod is not None and pod.status.phase in ("Succeeded", "Failed"):
                raise ProviderError(f"{name}: its pod {pod.metadata.name} has ended ({pod.status.phase}): "
                                    f"{self._log_tail(c, pod.metadata.name)}", provider=NAME)
            waiting = waiting_reason(pod) if pod is not None else None
            failing = waiting is not None and waiting[0] in _FAILING
            since = (since or time.monotonic()) if failing else None
            # the kubelet retries (an image pull that flaked; the attempt's own Secret, made just after its
            # Job): a reason that persists for `start_grace` s is the answer, not a wait until boot_timeout
            if failing and waiting and time.monotonic() - (since or 0) > float(c.settings.get("start_grace") or 30):
                raise ProviderError(f"{name}: its pod cannot start: {waiting[0]}: {waiting[1]}", provider=NAME)
            if pod is None:
                job = c.call(f"read job {name}", c.batch().read_namespaced_job, name, c.namespace, not_found=None)
                if job is None:
                    raise ProviderError(f"{name} is gone (deleted)", provider=NAME)
                if job_state(job) is not InstanceState.RUNNING:
                    raise ProviderError(f"{name} has ended and its pod is gone", provider=NAME)
            if time.monotonic() > deadline:
                raise ProviderError(f"{name}: its pod did not start in time"
                                    f"{': ' + ' '.join(waiting) if waiting else ''}", provider=NAME)
            self._wait(c, token_hash, rv)

    def _log_tail(self, c: Cluster, pod: str) -> str:
        try:
            text = c.call("read log", c.core().read_namespaced_pod_log, pod, c.namespace, container=CONTAINER,
                          tail_lines=3)
        except LaunchpadError:
            return "(no log)"
        return " | ".join(str(text).strip().splitlines()[-3:]) or "(no log)"

    # -- the job in the pod ----------------------------------------------------------------------------------
    def remote_root(self, instance: Instance) -> str:
        root = instance.data.get("root")
        if not root:
            raise ProviderError(f"{instance.id}: its root in the pod is not known", provider=NAME)
        return str(root)

    def nodes(self, instance: Instance) -> list[Instance]:
        """Rank 0 (`instance`), then a node per further completion index of the Indexed Job."""
        count = int(instance.data.get("node_count") or 1)
        return [instance] + [Instance(provider=NAME, id=f"{instance.id}-{rank}", job_id=instance.job_id, state=instance.state,
                                      offer=instance.offer, created_at=instance.created_at,
                                      data={**instance.data, "node_rank": rank}) for rank in range(1, count)]

    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        root = self.remote_root(instance)
        c = self._cluster_of(instance)
        scratch = self._scratch(c)
        # the idle watchdog ends the pod (so the Job completes and its GPUs are freed): see BOOTSTRAP
        extras: dict[str, Any] = {"autostop": {"command": ["touch", f"{root}/STOP"], "action": "terminate"},
                                  "mount_nvme": False, "expect_nvme": bool(scratch.get("hostPath")), "preemption": []}
        count = int(instance.data.get("node_count") or 1)
        if count > 1:
            ips = self._pod_ips(c, instance, count)
            port = 29500 + int(hashlib.sha256(str(instance.job_id).encode()).hexdigest(), 16) % 1000
            extras.update(nodes=[{"rank": r, "address": ips[r]} for r in range(count)],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=ips[0], master_port=port)
        return extras

    def _pod_ips(self, c: Cluster, instance: Instance, count: int) -> list[str]:
        """Every rank's pod IP (the rendezvous addresses: pod IPs are routable between pods), once each
        pod runs; at most `boot_timeout` s."""
        token_hash = labels("x", str(instance.data.get("token") or ""))[ATTEMPT_LABEL]
        deadline = time.monotonic() + float(c.settings.get("boot_timeout") or 600)
        while True:
            found, rv = self._pod_list(c, token_hash)
            ips = {pod_index(p): p.status.pod_ip for p in live(found) if p.status.phase == "Running" and p.status.pod_ip}
            if len(ips) >= count:
                return [str(ips[r]) for r in range(count)]
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id}: {count - len(ips)} of its {count} pods are not running", provider=NAME)
            self._wait(c, token_hash, rv)

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        return self.default_checkpoint_uri()

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None

