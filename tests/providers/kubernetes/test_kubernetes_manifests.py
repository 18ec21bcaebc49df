"""Every manifest launchpad makes for a cluster validates offline (kubernetes-validate) for Kubernetes
1.29 and the newest version it ships: the Job and the attempt's Secret, `launchpad up --dry-run`'s output,
and `launchpad reap --print-k8s-cronjob` (which shares the labels' conventions)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from launchpad.models import JOB_TAG, InstanceSpec

kv = pytest.importorskip("kubernetes_validate")
VERSIONS = ["1.29.0", kv.latest_version()]


def validate(doc: dict) -> None:
    for version in VERSIONS:
        kv.validate(doc, version, strict=True)


def test_job_and_secret_validate_and_name_secrets_only_by_reference(k8s, kube_config, monkeypatch):
    from launchpad_kubernetes import KubernetesProvider

    monkeypatch.setenv("LP_TOKEN", "never-in-a-manifest")
    p = KubernetesProvider({**kube_config, "secrets": ["hf"], "secret_env": {"WANDB_API_KEY": "wandb/key"},
                            "forward_env": ["LP_TOKEN"], "scratch": {"hostPath": "/mnt/nvme0"},
                            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                            "requests": {"cpu": "8", "memory": "64Gi"}, "service_account": "launchpad-train"})
    offer = next(o for o in p.offers() if o.gpu == "A100" and o.gpu_count == 4)
    docs = p.manifests(offer, InstanceSpec(job_id="manifest-job", token="manifest-job-1", tags={JOB_TAG: "manifest-job"}))
    assert [d["kind"] for d in docs] == ["Secret", "Job"]
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["labels"][JOB_TAG] == "manifest-job"
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "launchpad"
    job = docs[1]
    assert job["spec"]["template"]["metadata"]["labels"][JOB_TAG] == "manifest-job"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert job["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == "/mnt/nvme0"
    assert "never-in-a-manifest" not in json.dumps(docs)  # a placeholder: the value exists only at provision


def test_up_dry_run_prints_manifests_that_validate(kube_config, kube, launchpad_home, monkeypatch):
    from launchpad.cli import cli

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # the aws provider's check would ask the IMDS

    res = CliRunner().invoke(cli, ["up", "recipes/smoke-lora.yaml", "--provider", "kubernetes", "--dry-run"])
    assert res.exit_code == 0, res.output
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert [d["kind"] for d in docs] == ["Job"]
    for doc in docs:
        validate(doc)
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert "launchpad: waiting for the agent" in container["command"][2]  # the bootstrap, readable
    assert kube.jobs() == [] and not [r for r in kube.requests if r[0] in ("POST", "DELETE")]  # nothing created
    as_json = CliRunner().invoke(cli, ["up", "recipes/smoke-lora.yaml", "--provider", "kubernetes", "--dry-run", "--json"])
    assert json.loads(as_json.stdout)["render"].startswith("apiVersion: batch/v1")


def test_reap_cronjob_validates_and_shares_the_label_conventions(k8s, kube_config):
    from launchpad_kubernetes.manifests import APP_LABELS

    from launchpad.reap_units import k8s_cronjob

    cron = k8s_cronjob([], 600, image="launchpad:latest")
    validate(cron)
    job = k8s.manifests(k8s.offers()[0], InstanceSpec(job_id="j", token="j-1"))[-1]
    assert "app.kubernetes.io/name" in cron["metadata"]["labels"] and set(APP_LABELS) <= set(job["metadata"]["labels"])
    assert JOB_TAG not in cron["metadata"]["labels"]  # the reaper is not a job's resource: it never reaps itself


def test_the_readme_role_validates_and_covers_what_the_provider_calls():
    from pathlib import Path

    text = Path(__file__).resolve().parents[3].joinpath("README.md").read_text()
    section = text.split("## Kubernetes (CoreWeave and any GPU cluster)", 1)[1].split("\n## ", 1)[0]
    block = section.split("**Least privilege**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    role = yaml.safe_load(block)
    validate(role)
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    needed = {("batch", "jobs", "create"), ("batch", "jobs", "delete"), ("batch", "jobs", "list"), ("", "pods", "list"),
              ("", "pods", "watch"),
              ("", "pods/exec", "create"), ("", "pods/exec", "get"), ("", "events", "list"), ("", "secrets", "create")}
    assert needed <= granted
