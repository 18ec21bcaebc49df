# mypy: disable-error-code="import-untyped"
"""Multi-node on Kubernetes (one Indexed Job, a pod per rank, rendezvous on pod IPs), a partial gang that is
not capacity, eviction as preemption, and waiting by watch -- the real client against the API double."""

from __future__ import annotations

import threading
import time

import pytest
from kube_helpers import offer_of, spec_for, wait_for

from launchpad.errors import NoCapacity
from launchpad.models import InstanceState

kv = pytest.importorskip("kubernetes_validate")


def test_two_nodes_are_one_indexed_job_with_a_pod_per_rank(k8s, kube):
    offer = offer_of(k8s, "A100", 4)  # the one 8-GPU node holds both pods
    docs = k8s.manifests(offer, spec_for("two", nodes=2))
    job = docs[-1]
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("Indexed", 2, 2)
    for version in ("1.29.0", kv.latest_version()):
        kv.validate(job, version, strict=True)

    inst = k8s.provision(offer, spec_for("two", nodes=2))
    assert k8s.status(inst) is InstanceState.RUNNING
    nodes = k8s.nodes(inst)
    assert [n.data.get("node_rank", 0) for n in nodes] == [0, 1] and nodes[0] is inst
    assert len({n.id for n in nodes}) == 2  # each node its own work directory on its pod
    for rank, node in enumerate(nodes):  # exec reaches the pod of that completion index
        out = k8s.connection(node).run(["sh", "-c", 'echo "$JOB_COMPLETION_INDEX $POD_NAME"']).stdout.split()
        assert out[0] == str(rank) and out[1] in {p["metadata"]["name"] for p in kube.pods()}
    extras = k8s.job_spec_extras(nodes[1])
    assert extras["node_rank"] == 1 and [n["rank"] for n in extras["nodes"]] == [0, 1]
    assert extras["master_addr"] == "127.0.0.1" and extras["master_port"] == k8s.job_spec_extras(inst)["master_port"]
    listed = next(i for i in k8s.instances() if i.id == inst.id)
    assert listed.data["node_count"] == 2  # found again without the state DB: down --all ends both pods

    # a drain evicts rank 1: the job cannot go on with one node -> PREEMPTED; the Job fails, rank 0 is ended
    evicted = next(p for p in kube.pods() if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1")
    k8s.cluster("gpu-cluster").core().create_namespaced_pod_eviction(
        evicted["metadata"]["name"], "ml", {"apiVersion": "policy/v1", "kind": "Eviction",
                                            "metadata": {"name": evicted["metadata"]["name"], "namespace": "ml"}})
    assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    wait_for(lambda: k8s.status(inst) is InstanceState.PREEMPTED)
    wait_for(lambda: kube.pods() == [])  # not replaced, and the other rank does not linger on its GPUs
    k8s.teardown(inst)
    assert k8s.status(inst) is InstanceState.TERMINATED and kube.jobs() == []


def test_a_partial_gang_is_no_capacity_and_frees_what_it_held(kube_config, kube):
    from launchpad_kubernetes import KubernetesProvider

    p = KubernetesProvider({**kube_config, "schedule_timeout": 2})
    with pytest.raises(NoCapacity) as e:  # one node has 8 A100s: the second 8-GPU pod fits nowhere
        p.provision(offer_of(p, "A100", 8), spec_for("gang", nodes=2))
    assert "1 of the 2 pods were not scheduled" in str(e.value) and "Insufficient nvidia.com/gpu" in str(e.value)
    wait_for(lambda: kube.jobs() == [] and kube.pods() == [])  # the bound pod's GPUs are not held by a dead attempt
    p.close()


def test_waiting_for_a_pod_is_a_watch_not_a_poll(k8s, kube):
    from launchpad_kubernetes.manifests import ATTEMPT_LABEL, labels
    from launchpad_kubernetes.pods import wait_for_change

    c = k8s.cluster("gpu-cluster")
    selector = f"{ATTEMPT_LABEL}={labels('x', 'watched-t1')[ATTEMPT_LABEL]}"
    rv = c.core().list_namespaced_pod("ml", label_selector=selector).metadata.resource_version
    threading.Timer(0.5, lambda: k8s.provision(offer_of(k8s, "T4"), spec_for("watched"))).start()
    start = time.monotonic()
    wait_for_change(c, selector, rv, 20)
    assert 0.4 < time.monotonic() - start < 10  # woken by the pod's ADDED event, not by the 20 s timeout
    wait_for(lambda: kube.jobs())
