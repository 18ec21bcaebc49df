# mypy: disable-error-code="import-untyped"
"""The kubernetes provider against the API double: offers from node labels (and from config), CoreWeave's
per-model resource names, scheduling failures explained as NoCapacity, quota, Secrets by reference,
idempotent creates, idle auto-stop and preemption as the Job sees them."""

from __future__ import annotations

import json
import time

import pytest
from kube_double import KubeDouble
from kube_helpers import COREWEAVE_NODES, offer_of, settings, spec_for, wait_for, write_kubeconfig

from launchpad.errors import NoCapacity, ProviderError, QuotaExceeded
from launchpad.models import JOB_TAG, InstanceState


def provider_with(kube_config, **changes):
    from launchpad_kubernetes import KubernetesProvider

    return KubernetesProvider({**kube_config, **changes})


def test_check_describes_the_context_and_offers_come_from_node_labels(k8s):
    assert k8s.check() is None
    assert k8s.describe().startswith("context gpu-cluster (namespace ml, Kubernetes v1.30.0-double)")
    offers = {o.instance_type: o for o in k8s.offers()}
    assert sorted(offers) == [f"NVIDIA-A100-SXM4-80GBx{n}" for n in (1, 2, 4, 8)] + ["Tesla-T4x1"]
    a100 = offers["NVIDIA-A100-SXM4-80GBx4"]
    assert (a100.gpu, a100.gpu_memory_gb, a100.gpu_count, a100.region) == ("A100", 80.0, 4, "gpu-cluster")
    assert a100.price_per_hour == pytest.approx(4 * 1.6) and a100.vcpus == 48
    assert offers["Tesla-T4x1"].gpu_memory_gb == 15


def test_unreachable_or_unauthorised_cluster_is_one_line(tmp_path, kube, kube_config):
    bad = write_kubeconfig(tmp_path / "bad", [{**kube.kubeconfig_entry("c"),
                                               "user": {"name": "c-user", "user": {"token": "wrong"}}}], "c")
    reason = provider_with(kube_config, kubeconfig=str(bad)).check()
    assert reason and "\n" not in reason and "Unauthorized" in reason
    missing = provider_with(kube_config, context="nope").check()
    assert missing and "no context nope" in missing


def test_coreweave_per_model_resource_names_and_several_contexts(tmp_path, kube, kube_config):
    cw = KubeDouble(tmp_path / "cw", nodes=COREWEAVE_NODES).start()
    try:
        kc = write_kubeconfig(tmp_path / "kc2", [kube.kubeconfig_entry("gpu-cluster", "ml"),
                                                 cw.kubeconfig_entry("coreweave", "tenant-a")], "gpu-cluster")
        p = provider_with(kube_config, kubeconfig=str(kc), contexts=["gpu-cluster", "coreweave"],
                          clusters={"coreweave": {"prices": {"A100": 2.21, "H100": 4.76}}})
        assert p.check() is None
        cw_offers = [o for o in p.offers() if o.region == "coreweave"]
        assert {(o.gpu, o.gpu_memory_gb) for o in cw_offers} == {("A100", 80.0), ("H100", 80.0)}
        offer = offer_of(p, "A100", 2, region="coreweave")
        assert offer.instance_type == "A100_NVLINK_80GBx2" and offer.price_per_hour == pytest.approx(4.42)
        inst = p.provision(offer, spec_for("cw-job"))
        job = cw.jobs()[0]
        pod_spec = job["spec"]["template"]["spec"]
        assert pod_spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu-a100-80gb": "2"}
        term = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"] == [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["A100_NVLINK_80GB"]}]
        assert cw.pods()[0]["spec"]["nodeName"] == "cw-a100-1" and kube.jobs() == []
        assert {i.id: i.data["context"] for i in p.instances()} == {inst.id: "coreweave"}
        p.teardown(inst)
        assert cw.jobs() == [] and p.status(inst) is InstanceState.TERMINATED
    finally:
        cw.stop()


def test_a_cluster_that_hides_its_gpus_is_described_in_config(k8s, kube_config):
    p = provider_with(kube_config, gpus=[{"gpu": "H100", "count": 8, "resource": "nvidia.com/gpu",
                                          "node_selector": {"pool": "h100"}, "price_per_gpu_hour": 3.0}])
    offers = p.offers()
    assert [(o.gpu, o.gpu_count, o.gpu_memory_gb) for o in offers] == [("H100", n, 80.0) for n in (1, 2, 4, 8)]
    assert offers[0].price_per_hour == 3.0
    docs = p.manifests(offers[0], spec_for("hidden"))
    assert docs[-1]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "h100"}


def test_a_pod_that_cannot_schedule_is_no_capacity_with_the_reason(k8s, kube):
    big = offer_of(k8s, "A100", 8)
    first = k8s.provision(big, spec_for("holder"))
    t0 = time.monotonic()
    with pytest.raises(NoCapacity) as e:
        k8s.provision(big, spec_for("second"))
    assert time.monotonic() - t0 < 10  # schedule_timeout 3 s: explained, not waited on
    msg = str(e.value)
    assert "\n" not in msg and "0/3 nodes are available" in msg and "Insufficient nvidia.com/gpu" in msg
    assert "didn't match Pod's node affinity" in msg
    assert [j["metadata"]["name"] for j in kube.jobs()] == [first.id]  # the unschedulable Job was deleted
    kube.add_node("tainted", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, allocatable={"nvidia.com/gpu": "8"},
                  taints=[{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}])
    with pytest.raises(NoCapacity, match=r"untolerated taint \{dedicated: team-a\}"):
        k8s.provision(offer_of(k8s, "H100", 1), spec_for("tainted"))


def test_a_gpu_quota_refusal_is_quota_exceeded(tmp_path, kube_config):
    from kube_helpers import GFD_NODES
    from launchpad_kubernetes import KubernetesProvider

    q = KubeDouble(tmp_path / "q", nodes=GFD_NODES, gpu_quota={"nvidia.com/gpu": 1}).start()
    try:
        kc = write_kubeconfig(tmp_path / "kq", [q.kubeconfig_entry("quota", "ml")], "quota")
        p = KubernetesProvider(settings(tmp_path, kc))
        with pytest.raises(QuotaExceeded, match="exceeded quota") as e:
            p.provision(offer_of(p, "A100", 2), spec_for("over"))
        assert e.value.scope == "region" and q.jobs() == []
    finally:
        q.stop()


def test_create_is_idempotent_a_duplicate_is_a_409_reconciled_by_name(k8s, kube):
    from kubernetes.client.exceptions import ApiException

    offer, spec = offer_of(k8s, "T4"), spec_for("idem")
    job_doc = k8s.manifests(offer, spec)[-1]
    c = k8s.cluster("gpu-cluster")
    c.batch().create_namespaced_job("ml", job_doc)  # as if an earlier try of this attempt got as far as this
    with pytest.raises(ApiException) as e:
        c.batch().create_namespaced_job("ml", job_doc)
    assert e.value.status == 409
    inst = k8s.provision(offer, spec)
    again = k8s.provision(offer, spec)
    assert inst.id == again.id == job_doc["metadata"]["name"] and len(kube.jobs()) == 1
    assert all(o["metadata"]["labels"][JOB_TAG] == "idem" for o in kube.jobs() + kube.pods())
    k8s.teardown(inst)


def test_credentials_travel_by_secret_reference_only(k8s, kube, kube_config, monkeypatch):
    c = k8s.cluster("gpu-cluster")
    c.core().create_namespaced_secret("ml", {"metadata": {"name": "hf"}, "stringData": {"HF_TOKEN": "hf-value-1"}})
    c.core().create_namespaced_secret("ml", {"metadata": {"name": "wandb"}, "stringData": {"key": "wandb-value-2"}})
    monkeypatch.setenv("LP_FORWARDED", "forwarded-value-3")
    p = provider_with(kube_config, secrets=["hf"], secret_env={"WANDB_API_KEY": "wandb/key"}, forward_env=["LP_FORWARDED"])
    inst = p.provision(offer_of(p, "T4"), spec_for("secrets"))
    out = p.connection(inst).run(["sh", "-c", 'echo "$HF_TOKEN $WANDB_API_KEY $LP_FORWARDED"']).stdout.split()
    assert out == ["hf-value-1", "wandb-value-2", "forwarded-value-3"]
    job = json.dumps(kube.jobs()[0])
    for value in ("hf-value-1", "wandb-value-2", "forwarded-value-3"):
        assert value not in job
    container = kube.jobs()[0]["spec"]["template"]["spec"]["containers"][0]
    assert {"secretRef": {"name": f"{inst.id}-env"}} in container["envFrom"]
    owned = kube.get("Secret", "ml", f"{inst.id}-env")
    assert owned["metadata"]["ownerReferences"][0]["uid"] == kube.jobs()[0]["metadata"]["uid"]
    assert owned["metadata"]["labels"][JOB_TAG] == "secrets"
    p.teardown(inst)
    assert kube.get("Secret", "ml", f"{inst.id}-env") is None and kube.get("Secret", "ml", "hf") is not None


def test_a_missing_secret_is_explained_not_waited_on(kube_config):
    p = provider_with(kube_config, secrets=["nope"])
    inst = p.provision(offer_of(p, "T4"), spec_for("nosecret"))
    with pytest.raises(ProviderError, match='CreateContainerConfigError: secret "nope" not found'):
        p.progress(inst)
    p.teardown(inst)


def test_idle_autostop_ends_the_job_and_frees_the_gpus(k8s, kube):
    inst = k8s.provision(offer_of(k8s, "A100", 8), spec_for("idle"))
    command = k8s.job_spec_extras(inst)["autostop"]["command"]  # what the agent's idle watchdog runs
    k8s.connection(inst).run(command)
    wait_for(lambda: k8s.status(inst) is InstanceState.TERMINATED)
    assert kube.pods()[0]["status"]["phase"] == "Succeeded"
    assert kube.jobs()[0]["status"]["conditions"][0]["type"] == "Complete"
    k8s.provision(offer_of(k8s, "A100", 8), spec_for("next"))  # the 8 GPUs are free again


def test_a_pod_nobody_synced_ends_by_itself(kube_config, kube):
    p = provider_with(kube_config, setup_timeout=1)
    inst = p.provision(offer_of(p, "T4"), spec_for("abandoned"))
    wait_for(lambda: p.status(inst) is InstanceState.TERMINATED)
    assert "no agent ran" in p.cluster("gpu-cluster").core().read_namespaced_pod_log(kube.pods()[0]["metadata"]["name"], "ml")


def test_deleting_the_pod_is_a_preemption(k8s, kube):
    inst = k8s.provision(offer_of(k8s, "T4"), spec_for("preempt"))
    assert k8s.status(inst) is InstanceState.RUNNING
    k8s.cluster("gpu-cluster").core().delete_namespaced_pod(kube.pods()[0]["metadata"]["name"], "ml")
    wait_for(lambda: k8s.status(inst) is InstanceState.PREEMPTED)  # at once: its pod is terminating
    wait_for(lambda: kube.jobs()[0]["status"].get("conditions"))
    assert kube.jobs()[0]["status"]["conditions"][0]["type"] == "Failed" and kube.pods() == []  # not replaced
    assert k8s.status(inst) is InstanceState.PREEMPTED
    with pytest.raises(ProviderError):
        k8s.progress(inst)
    k8s.teardown(inst)
    assert k8s.status(inst) is InstanceState.TERMINATED
