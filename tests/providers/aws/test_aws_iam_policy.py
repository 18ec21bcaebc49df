"""The README's least-privilege IAM policy names every AWS operation the provider calls: a user who
applies it never meets an UnauthorizedOperation from launchpad's own calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_helpers import cheap_offer, stand_in_for_placement_groups

from launchpad.models import JOB_TAG, InstanceSpec, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
README = Path(__file__).resolve().parents[3] / "README.md"
# API operations whose IAM action has another name (AWS's Service Authorization Reference)
IAM_ACTION = {"s3:PutPublicAccessBlock": "s3:PutBucketPublicAccessBlock", "s3:ListObjectsV2": "s3:ListBucket",
              "s3:HeadBucket": "s3:ListBucket", "s3:HeadObject": "s3:GetObject"}


def readme_policy() -> dict:
    text = README.read_text()
    section = text[text.index("**Least-privilege IAM policy**"):]
    found = re.search(r"```json\n(.*?)```", section, re.S)
    assert found, "the README's IAM policy block is missing"
    return json.loads(found.group(1))


def test_every_operation_the_provider_calls_is_in_the_readme_policy(aws):
    called: set[str] = set()

    def record(model, **_):
        op = f"{model.service_model.signing_name}:{model.name}"
        called.add(IAM_ACTION.get(op, op))

    stand_in_for_placement_groups(aws)
    for service, region in (("ec2", "us-east-1"), ("ec2", "us-west-2"), ("s3", "us-east-1"), ("sts", "us-east-1"),
                            ("iam", "us-east-1")):
        aws.client(service, region).meta.events.register("before-call", record)
    aws.check()
    offer = cheap_offer(aws)
    inst = aws.provision(offer, InstanceSpec(job_id="iam", token="iam-1", tags={JOB_TAG: "iam"}, nodes=2))
    aws.checkpoint_uri_for(inst)
    aws.status(inst)
    aws.instances()
    aws._console_host_key(inst)
    aws.teardown(inst, TeardownMode.STOP)
    aws.provision(offer, InstanceSpec(job_id="iam", token="iam-2", tags={JOB_TAG: "iam"}, nodes=2))  # starts it
    aws.teardown(inst)
    allowed = {a for st in readme_policy()["Statement"] for a in st["Action"]}
    assert called, "nothing recorded"
    assert called - allowed == set(), "add these to the README's IAM policy"
    assert "iam:PassRole" in allowed  # RunInstances with an instance profile needs it (not a call of its own)
