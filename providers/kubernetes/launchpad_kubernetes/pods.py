# mypy: disable-error-code="import-untyped"
# (the kubernetes client ships no type information)
"""What a Job and its pods say about an attempt, and waiting for them to change (a watch, not a sleep).

A multi-node attempt is one Indexed Job: pod ``i`` carries the completion index ``i`` (label and
annotation ``batch.kubernetes.io/job-completion-index``), which is the node's rank.
"""

from __future__ import annotations

import logging
import time

from launchpad.models import InstanceState

from .cluster import Cluster

log = logging.getLogger("launchpad.kubernetes")

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def pod_index(pod) -> int:
    """The pod's completion index (0 for a non-indexed Job's only pod)."""
    meta = pod.metadata
    value = (meta.labels or {}).get(INDEX_KEY) or (meta.annotations or {}).get(INDEX_KEY) or "0"
    try:
        return int(value)
    except ValueError:
        return 0


def live(pods) -> list:
    """The pods not being deleted, by completion index."""
    return sorted((p for p in pods if not p.metadata.deletion_timestamp), key=pod_index)


def job_state(job) -> InstanceState:
    """What a Job's own status says: ended (Complete: the GPUs are free), lost (Failed), or running."""
    if job.metadata.deletion_timestamp:
        return InstanceState.RUNNING  # its pods may still be terminating: teardown polls
    for cond in job.status.conditions or [] if job.status else []:
        if cond.status == "True" and cond.type == "Complete":
            return InstanceState.TERMINATED
        if cond.status == "True" and cond.type == "Failed":
            return InstanceState.PREEMPTED
    return InstanceState.RUNNING


def attempt_state(job, pods, count: int) -> InstanceState:
    """The attempt's state from its Job and its `count` pods. A pod deleted or evicted by anyone but
    launchpad (a drain, the autoscaler, a preempting scheduler) is a lost node: PREEMPTED, since the
    job cannot go on with fewer nodes, and ``backoffLimit: 0`` means it is not replaced."""
    state = job_state(job)
    if state is not InstanceState.RUNNING:
        return state
    if not pods:
        return InstanceState.PREEMPTED if (job.status.failed or 0) else InstanceState.PENDING
    up = live(pods)
    if len(up) < count:  # provision waited for all of them: one is gone (deleted, evicted) or going
        return InstanceState.PREEMPTED
    phases = [p.status.phase for p in up]
    if any(ph not in ("Running", "Pending", "Succeeded") for ph in phases):
        return InstanceState.PREEMPTED
    if all(ph == "Succeeded" for ph in phases):
        return InstanceState.TERMINATED
    return InstanceState.PENDING if "Pending" in phases else InstanceState.RUNNING


def waiting_reason(pod) -> tuple[str, str] | None:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        w = cs.state.waiting if cs.state else None
        if w is not None and w.reason:
            return str(w.reason), " ".join(str(w.message or "").split())
    return None


def wait_for_change(c: Cluster, selector: str, resource_version: str | None, seconds: float) -> None:
    """Return when a pod matching `selector` changes after `resource_version`, or after `seconds`: a
    scheduled or started pod is seen at once, not at the next poll. A cluster that refuses the watch
    (RBAC without `watch`, a proxy that buffers) costs a plain sleep instead."""
    from kubernetes import watch

    start = time.monotonic()
    w = watch.Watch()
    try:
        for _ in w.stream(c.core().list_namespaced_pod, c.namespace, label_selector=selector,
                          resource_version=resource_version or None, timeout_seconds=max(1, round(seconds)),
                          _request_timeout=max(1.0, seconds) + 10):
            return
    except Exception as e:  # any failure of the watch is the same to the caller: it looks again
        log.debug("kubernetes: watch of %s failed (%s); sleeping instead", selector, e)
        time.sleep(max(0.0, seconds - (time.monotonic() - start)))
    finally:
        w.stop()
