"""Helpers of the aws provider's tests: settings that map every EC2 instance to the loopback sshd, offers
moto can launch, and the two things moto cannot do that the tests need (named as such)."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from launchpad.testing_ssh import LoopbackSshd

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# moto's own AMI list has the 2017 Deep Learning AMIs: the real name lookup runs against them
TEST_AMI_NAME = "Deep Learning AMI Ubuntu Linux*"


def aws_settings(tmp_path, sshd: LoopbackSshd) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {getpass.getuser()}\n")
    return {
        "regions": ["us-east-1", "us-west-2"], "ssh_cidr": "127.0.0.1/32", "ami_name": TEST_AMI_NAME,
        "key": str(sshd.client_key), "ssh_config": str(ssh_config), "python": sys.executable,
        "root": str(tmp_path / "instance-root"), "connect_timeout": 20, "boot_timeout": 30,
        # never halt the test machine: the idle watchdog's command only leaves a mark
        "shutdown_command": ["touch", str(tmp_path / "shutdown-requested")],
    }


def cheap_offer(provider, *, spot: bool = False, region: str = "us-east-1"):
    """The cheapest single-GPU offer in `region` whose zone moto knows (the catalog names zones by id)."""
    from dataclasses import replace

    zones = provider.account.zones(region)
    offers = [o for o in provider.offers() if o.region == region and o.gpu_count == 1 and o.zone in zones]
    offer = min(offers, key=lambda o: o.price_per_hour)
    return replace(offer, spot=spot)


def interrupt_spot(instance_id: str, region: str = "us-east-1") -> None:
    """What AWS does when it reclaims a spot instance, done to moto's in-process backend (moto has no
    interruptions of its own): the instance goes to terminated with the spot reason."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    inst = ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)
    inst._state.name, inst._state.code = "terminated", 48
    inst.state_reason = StateReason("Server.SpotInstanceTermination: Spot instance termination",
                                    "Server.SpotInstanceTermination")



class _Http:
    def __init__(self, status: int):
        self.status_code, self.content, self.text = status, b"", ""
        self.headers: dict[str, Any] = {}


def inject_error(provider, operation: str, code: str, message: str = "", *, status: int = 400, times: int = 1,
                 region: str = "us-east-1") -> list[int]:
    """INJECTION (a failure moto cannot produce): the next `times` calls of `operation` (e.g.
    "RunInstances") answer with EC2 error `code`, through botocore's `before-call` event, i.e. exactly where
    a real reply would enter boto3. Returns a list that counts the calls seen."""
    seen: list[int] = []

    def handler(**_):
        seen.append(1)
        if len(seen) > times:
            return None
        body = {"Error": {"Code": code, "Message": message or code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return _Http(status), body

    provider.client("ec2", region).meta.events.register(f"before-call.ec2.{operation}", handler)
    return seen


def stand_in_for_placement_groups(provider, region: str = "us-east-1") -> list[dict]:
    """STAND-IN for an API moto 5.2 does not implement (CreatePlacementGroup / DeletePlacementGroup answer
    HTTP 500): records each request and answers as EC2 documents it. Returns the recorded requests."""
    calls: list[dict] = []

    def handler(model, params, **_):
        body = {k: v for k, v in (params.get("body") or {}).items() if k not in ("Action", "Version")}
        calls.append({"operation": model.name, **body})  # the wire form: TagSpecification.1.Tag.1.Key, ...
        group = {"GroupName": body.get("GroupName"), "Strategy": body.get("Strategy"), "State": "available"}
        return _Http(200), ({"PlacementGroup": group} if model.name == "CreatePlacementGroup" else {}) | {
            "ResponseMetadata": {"HTTPStatusCode": 200}}

    for op in ("CreatePlacementGroup", "DeletePlacementGroup"):
        provider.client("ec2", region).meta.events.register(f"before-call.ec2.{op}", handler)
    return calls
