"""Provisioning on moto's EC2: reconcile by tag, tags everywhere, the shared resources, spot, autostop."""

from __future__ import annotations

import pytest
from aws_helpers import cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-a", token="job-a-1", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def _live(ec2, job):
    live = ["pending", "running", "stopping", "stopped"]
    res = ec2.describe_instances(Filters=[{"Name": f"tag:{JOB_TAG}", "Values": [job]},
                                          {"Name": "instance-state-name", "Values": live}])
    return [i for r in res["Reservations"] for i in r["Instances"]]


def test_check_names_regions(aws):
    assert aws.check() is None
    assert aws.regions() == ["us-east-1", "us-west-2"]
    assert aws.describe().startswith("2 regions enabled: us-east-1, us-west-2")


def test_check_without_credentials_names_the_fix(aws_config, monkeypatch):
    from launchpad_aws import AWSProvider

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # not on EC2: no instance role to ask
    reason = AWSProvider(aws_config).check()
    assert reason and "no AWS credentials" in reason and "aws configure" in reason and "\n" not in reason


def test_offers_are_the_catalog_in_enabled_regions_with_live_facts(aws):
    offers = aws.offers()
    assert offers and {o.region for o in offers} <= {"us-east-1", "us-west-2"}
    g5 = [o for o in offers if o.instance_type == "g5.xlarge" and o.region == "us-east-1"]
    assert g5 and all(o.nvme_gb == 250 for o in g5)  # DescribeInstanceTypes: 250 GB instance store
    assert all(o.spot_price_per_hour == pytest.approx(0.00001) for o in g5)  # moto's spot price history
    p4d = [o for o in offers if o.instance_type == "p4d.24xlarge"]
    assert p4d and all("efa" in (o.interconnect or "") for o in p4d)


def test_provision_tags_everything_and_creates_shared_resources_once(aws, ec2, aws_config):
    offer = cheap_offer(aws)
    inst = aws.provision(offer, _spec(disk_gb=300))
    [desc] = _live(ec2, "job-a")
    tags = {t["Key"]: t["Value"] for t in desc["Tags"]}
    assert tags[JOB_TAG] == "job-a" and tags["launchpad-cluster"] == "job-a-1" and tags["launchpad-node"] == "0"
    vols = ec2.describe_volumes(Filters=[{"Name": f"tag:{JOB_TAG}", "Values": ["job-a"]}])["Volumes"]
    enis = ec2.describe_network_interfaces(Filters=[{"Name": f"tag:{JOB_TAG}", "Values": ["job-a"]}])["NetworkInterfaces"]
    assert [v["Size"] for v in vols] == [300]  # root volume sized from the plan
    assert len(enis) == 1
    # launchpad's own public key, imported; SSH only from the configured address
    pub = open(aws_config["key"] + ".pub").read().split()[1]
    [kp] = ec2.describe_key_pairs(KeyNames=[desc["KeyName"]])["KeyPairs"]
    assert kp["KeyName"].startswith("launchpad-") and pub
    [sg] = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["launchpad"]}])["SecurityGroups"]
    ssh_rules = [p for p in sg["IpPermissions"] if p.get("FromPort") == 22]
    assert [r["CidrIp"] for p in ssh_rules for r in p["IpRanges"]] == ["127.0.0.1/32"]
    assert desc["ImageId"] == aws.account.image("us-east-1")["id"]
    assert "Deep Learning" in aws.account.image("us-east-1")["name"]
    attr = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "stop"  # autostop.action: stop (default)
    assert desc["Placement"]["AvailabilityZone"] == aws.account.zones("us-east-1")[offer.zone]
    # a second job reuses the group and the key pair
    inst2 = aws.provision(offer, _spec("job-b", "job-b-1"))
    assert len(ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["launchpad"]}])["SecurityGroups"]) == 1
    assert len([k for k in ec2.describe_key_pairs()["KeyPairs"] if k["KeyName"].startswith("launchpad-")]) == 1
    for i in (inst, inst2):
        aws.teardown(i)


def test_provision_twice_with_one_token_is_one_instance(aws, ec2):
    offer = cheap_offer(aws)
    first = aws.provision(offer, _spec())
    again = aws.provision(offer, _spec())
    assert again.id == first.id and len(_live(ec2, "job-a")) == 1
    # a new attempt of the same job (its token lost with the state DB) still finds it by tag
    other = aws.provision(offer, _spec(token="job-a-2"))
    assert other.id == first.id and len(_live(ec2, "job-a")) == 1
    aws.teardown(first)


def test_a_stopped_instance_of_the_job_is_started_not_duplicated(aws, ec2):
    offer = cheap_offer(aws)
    inst = aws.provision(offer, _spec())
    aws.teardown(inst, TeardownMode.STOP)
    assert aws.status(inst) is InstanceState.STOPPED
    assert inst.id in {i.id for i in aws.instances()}  # a stopped instance still bills its volume
    again = aws.provision(offer, _spec(token="job-a-2"))
    assert again.id == inst.id and aws.status(again) is InstanceState.RUNNING and len(_live(ec2, "job-a")) == 1
    aws.teardown(inst)


def test_spot_and_terminate_behaviour(aws, ec2):
    offer = cheap_offer(aws, spot=True)
    inst = aws.provision(offer, _spec(autostop_action=TeardownMode.STOP))
    [desc] = _live(ec2, "job-a")
    assert desc.get("InstanceLifecycle") == "spot" and inst.data["spot"]
    attr = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"  # a one-time spot instance cannot stop
    extras = aws.job_spec_extras(inst)
    assert extras["preemption"] == ["aws"] and extras["autostop"]["action"] == "terminate"
    aws.teardown(inst, TeardownMode.STOP)  # cannot stop a spot instance: terminated instead
    assert aws.status(inst) is InstanceState.TERMINATED


def test_spot_interruption_reads_as_preempted(aws):
    from aws_helpers import interrupt_spot

    inst = aws.provision(cheap_offer(aws, spot=True), _spec())
    interrupt_spot(inst.id)
    assert aws.status(inst) is InstanceState.PREEMPTED
    aws.teardown(inst)  # already gone: silent


def test_teardown_twice_and_instances_across_regions(aws, ec2):
    a = aws.provision(cheap_offer(aws), _spec())
    b = aws.provision(cheap_offer(aws, region="us-west-2"), _spec("job-b", "job-b-1"))
    found = {i.id: i for i in aws.instances()}
    assert set(found) == {a.id, b.id}
    assert found[b.id].data["region"] == "us-west-2" and found[b.id].job_id == "job-b"
    for inst in (a, b):
        aws.teardown(inst)
        aws.teardown(inst)
        assert aws.status(inst) is InstanceState.TERMINATED
    assert aws.instances() == []


def test_autostop_halts_the_os_with_the_matching_shutdown_behaviour(aws, ec2, aws_config):
    inst = aws.provision(cheap_offer(aws), _spec(autostop_action=TeardownMode.TERMINATE))
    attr = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    extras = aws.job_spec_extras(inst)
    assert extras["autostop"] == {"command": aws_config["shutdown_command"], "action": "terminate"}
    from launchpad_aws import AWSProvider

    api = AWSProvider({**aws_config, "autostop_via": "api"})
    command = api.job_spec_extras(inst)["autostop"]["command"]
    assert command[-3:] == ["us-east-1", inst.id, "terminate"] and "boto3" in command[2]
    aws.teardown(inst)


def test_multi_node_gets_a_placement_group_efa_and_nccl_env(aws, ec2):
    from dataclasses import replace

    from aws_helpers import stand_in_for_placement_groups

    groups = stand_in_for_placement_groups(aws)
    p4d = next(o for o in aws.offers() if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"
               and o.zone in aws.account.zones("us-east-1"))
    inst = aws.provision(p4d, _spec(nodes=2))
    descs = _live(ec2, "job-a")
    assert len(descs) == 2
    # moto drops Placement.GroupName and InterfaceType from what it echoes: the request is checked instead
    launch = aws._launch_args(p4d, _spec(nodes=2))
    assert launch["Placement"]["GroupName"] == "launchpad-job-a"
    assert groups[0]["operation"] == "CreatePlacementGroup" and groups[0]["Strategy"] == "cluster"
    assert groups[0]["TagSpecification.1.Tag.1.Key"] == JOB_TAG and groups[0]["TagSpecification.1.Tag.1.Value"] == "job-a"
    assert launch["NetworkInterfaces"][0]["InterfaceType"] == "efa"
    nodes = aws.nodes(inst)
    assert [n.data.get("node_rank", 0) for n in nodes] == [0, 1]
    extras = aws.job_spec_extras(nodes[1])
    assert extras["node_rank"] == 1 and extras["master_addr"] == inst.data["nodes"][0]["private"]
    assert extras["env"]["FI_PROVIDER"] == "efa"
    assert aws.provision(p4d, _spec(nodes=2)).id == inst.id and len(_live(ec2, "job-a")) == 2
    aws.teardown(inst)
    assert _live(ec2, "job-a") == []
    assert groups[-1] == {"operation": "DeletePlacementGroup", "GroupName": "launchpad-job-a"}
    assert replace(inst).data["efa"]
