"""What launchpad creates once per AWS account/region and then reuses: the SSH key pair (launchpad's own
ed25519 public key, imported; no private key ever comes from AWS), the `launchpad` security group (SSH
from the caller's address only, plus all traffic between its own members for multi-node jobs), the
Deep Learning AMI lookup, subnets per zone, the checkpoint bucket and the instance profile.

Every helper is idempotent (look up first, create if missing, tolerate "already exists"), so two
`launchpad up` racing in one region end up sharing one of each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

from launchpad.errors import NoCapacity, ProviderError

from .api import NAME, call

log = logging.getLogger("launchpad.aws")

SECURITY_GROUP = "launchpad"
MANAGED_TAG = "launchpad-managed"  # shared resources (group, key pair, role, bucket): never a job's
#: the AWS Deep Learning AMI with PyTorch (Ubuntu 22.04), newest first; `ami_name` in config overrides
DEFAULT_AMI_NAME = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu 22.04) *"
DEFAULT_AMI_OWNER = "amazon"
INSTANCE_ROLE = "launchpad-instance"
_TRUST = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def instance_policy(bucket_glob: str = "launchpad-*") -> dict[str, Any]:
    """What launchpad's instances may do: read/write checkpoints in launchpad's buckets, and stop or
    terminate themselves (only instances tagged launchpad-job) for the API autostop."""
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": f"arn:aws:s3:::{bucket_glob}"},
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
         "Resource": f"arn:aws:s3:::{bucket_glob}/*"},
        {"Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:TerminateInstances"], "Resource": "*",
         "Condition": {"Null": {"ec2:ResourceTag/launchpad-job": "false"}}},
    ]}


class Account:
    """The per-region shared resources of one AWS account, looked up or created once per process."""

    def __init__(self, provider) -> None:
        self.p = provider
        self._lock = threading.RLock()  # makers call each other (the group needs the VPC)
        self._cache: dict[tuple, Any] = {}

    def _memo(self, key: tuple, make):
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    # -- identity ------------------------------------------------------------------------------------
    def account_id(self) -> str:
        return self._memo(("account",), lambda: call(self.p.client("sts").get_caller_identity,
                                                     "GetCallerIdentity")["Account"])

    def ssh_cidrs(self) -> list[str]:
        """Who may reach port 22 (launchpad.ssh.target.ssh_cidrs: `ssh_cidr`, else this machine's address)."""
        from launchpad.ssh.target import ssh_cidrs

        return ssh_cidrs(self.p.config.get("ssh_cidr"), "aws")

    # -- key pair ------------------------------------------------------------------------------------
    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.p.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def key_pair(self, region: str) -> str:
        """The name of launchpad's key pair in `region` (imported from launchpad's public key once)."""
        from launchpad.ssh.keys import ensure_keypair

        def make() -> str:
            public = ensure_keypair(self.key_path(), comment="launchpad")  # 0600 private key, made here
            name = "launchpad-" + hashlib.sha256(public.split()[1].encode()).hexdigest()[:12]
            ec2 = self.p.client("ec2", region)
            try:
                call(ec2.describe_key_pairs, "DescribeKeyPairs", region, KeyNames=[name])
                return name
            except ProviderError as e:
                if "InvalidKeyPair.NotFound" not in str(e):
                    raise
            try:
                call(ec2.import_key_pair, "ImportKeyPair", region, KeyName=name, PublicKeyMaterial=public.encode(),
                     TagSpecifications=[{"ResourceType": "key-pair", "Tags": [{"Key": MANAGED_TAG, "Value": "true"}]}])
            except ProviderError as e:
                if "InvalidKeyPair.Duplicate" not in str(e):
                    raise
            return name

        return self._memo(("key", region), make)

    # -- network -------------------------------------------------------------------------------------
    def vpc(self, region: str) -> str:
        def make() -> str:
            if self.p.config.get("vpc_id"):
                return str(self.p.config["vpc_id"])
            vpcs = call(self.p.client("ec2", region).describe_vpcs, "DescribeVpcs", region,
                        Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
            if not vpcs:
                raise NoCapacity(f"{region} has no default VPC (set providers.aws.vpc_id)", provider=NAME,
                                 scope="region")
            return vpcs[0]["VpcId"]

        return self._memo(("vpc", region), make)

    def zones(self, region: str) -> dict[str, str]:
        """Zone id and zone name -> zone name (the catalog names zones by id, e.g. use1-az1)."""
        def make() -> dict[str, str]:
            out: dict[str, str] = {}
            for z in call(self.p.client("ec2", region).describe_availability_zones, "DescribeAvailabilityZones",
                          region)["AvailabilityZones"]:
                out[z["ZoneName"]] = z["ZoneName"]
                if z.get("ZoneId"):
                    out[z["ZoneId"]] = z["ZoneName"]
            return out

        return self._memo(("zones", region), make)

    def subnet(self, region: str, zone: str | None) -> str | None:
        """A subnet of launchpad's VPC in `zone` (default-for-az first), None = let EC2 choose."""
        if not zone:
            return None
        name = self.zones(region).get(zone)
        if name is None:
            raise NoCapacity(f"zone {zone} does not exist in {region} for this account", provider=NAME, scope="zone")

        def make() -> str:
            subnets = call(self.p.client("ec2", region).describe_subnets, "DescribeSubnets", region,
                           Filters=[{"Name": "vpc-id", "Values": [self.vpc(region)]},
                                    {"Name": "availability-zone", "Values": [name]}])["Subnets"]
            if not subnets:
                raise NoCapacity(f"no subnet of {self.vpc(region)} in {name}", provider=NAME, scope="zone")
            subnets.sort(key=lambda s: (not s.get("DefaultForAz"), s["SubnetId"]))
            return subnets[0]["SubnetId"]

        return self._memo(("subnet", region, name), make)

    def security_group(self, region: str) -> str:
        """The `launchpad` group of the VPC: SSH from `ssh_cidrs()` only, all traffic among its members."""
        def make() -> str:
            ec2, vpc = self.p.client("ec2", region), self.vpc(region)
            found = call(ec2.describe_security_groups, "DescribeSecurityGroups", region,
                         Filters=[{"Name": "group-name", "Values": [SECURITY_GROUP]},
                                  {"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
            if found:
                group = found[0]
            else:
                try:
                    gid = call(ec2.create_security_group, "CreateSecurityGroup", region, GroupName=SECURITY_GROUP,
                               VpcId=vpc, Description="launchpad: SSH from the launching machine; nodes of a job",
                               TagSpecifications=[{"ResourceType": "security-group",
                                                   "Tags": [{"Key": MANAGED_TAG, "Value": "true"}]}])["GroupId"]
                except ProviderError as e:
                    if "InvalidGroup.Duplicate" not in str(e):
                        raise
                    return make()
                group = {"GroupId": gid, "IpPermissions": []}
            gid = group["GroupId"]
            have_cidrs = {r["CidrIp"] for p in group.get("IpPermissions", []) if p.get("FromPort") == 22
                          for r in p.get("IpRanges", [])}
            have_self = any(g.get("GroupId") == gid for p in group.get("IpPermissions", []) if p.get("IpProtocol") == "-1"
                            for g in p.get("UserIdGroupPairs", []))
            rules = [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": c}]}
                     for c in self.ssh_cidrs() if c not in have_cidrs]
            if not have_self:  # NCCL/EFA between the nodes of a job
                rules.append({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid}]})
            for rule in rules:
                try:
                    call(ec2.authorize_security_group_ingress, "AuthorizeSecurityGroupIngress", region,
                         GroupId=gid, IpPermissions=[rule])
                except ProviderError as e:
                    if "InvalidPermission.Duplicate" not in str(e):
                        raise
            return gid

        return self._memo(("sg", region), make)

    # -- image ---------------------------------------------------------------------------------------
    def image(self, region: str) -> dict[str, str]:
        """{"id", "name", "root"}: `ami` from config (an id, or a region -> id mapping), else the newest
        image named like `ami_name` (default: the Deep Learning AMI with PyTorch) owned by `ami_owner`."""
        def make() -> dict[str, str]:
            ec2 = self.p.client("ec2", region)
            ami = self.p.config.get("ami")
            if isinstance(ami, dict):
                ami = ami.get(region)
            if ami:
                images = call(ec2.describe_images, "DescribeImages", region, ImageIds=[str(ami)])["Images"]
            else:
                pattern = self.p.config.get("ami_name") or DEFAULT_AMI_NAME
                owner = self.p.config.get("ami_owner") or DEFAULT_AMI_OWNER
                filters = [{"Name": "name", "Values": [pattern]}, {"Name": "state", "Values": ["available"]}]
                images = call(ec2.describe_images, "DescribeImages", region, Owners=[str(owner)],
                              Filters=filters)["Images"]
                images.sort(key=lambda i: i.get("CreationDate") or "", reverse=True)
            if not images:
                what = f"image {ami}" if ami else f"no image named like {self.p.config.get('ami_name') or DEFAULT_AMI_NAME!r}"
                raise NoCapacity(f"{what} in {region}", provider=NAME, scope="region")
            img = images[0]
            root = img.get("RootDeviceName") or "/dev/sda1"
            snapshot = next((b.get("Ebs", {}).get("VolumeSize") for b in img.get("BlockDeviceMappings") or []
                             if b.get("DeviceName") == root), None)
            return {"id": img["ImageId"], "name": img.get("Name") or "", "root": root, "root_gb": int(snapshot or 0)}

        return self._memo(("image", region), make)

    def placement_group(self, region: str, job_id: str) -> str:
        """The job's cluster placement group (nodes on one low-latency network spine)."""
        name = f"launchpad-{job_id}"[:255]
        try:
            call(self.p.client("ec2", region).create_placement_group, "CreatePlacementGroup", region,
                 GroupName=name, Strategy="cluster",
                 TagSpecifications=[{"ResourceType": "placement-group",
                                     "Tags": [{"Key": "launchpad-job", "Value": job_id}]}])
        except ProviderError as e:
            if "InvalidPlacementGroup.Duplicate" not in str(e):
                raise
        return name

    def delete_placement_group(self, region: str, job_id: str) -> None:
        try:
            call(self.p.client("ec2", region).delete_placement_group, "DeletePlacementGroup", region,
                 GroupName=f"launchpad-{job_id}"[:255])
        except ProviderError as e:
            if "InvalidPlacementGroup.Unknown" not in str(e) and "NotFound" not in str(e):
                raise

    # -- storage and identity for the instances ---------------------------------------------------------
    def bucket(self, region: str) -> str:
        """`launchpad-<account>-<region>`, created private (public access blocked) on first use."""
        def make() -> str:
            name = f"launchpad-{self.account_id()}-{region}"
            s3 = self.p.client("s3", region)
            kwargs: dict[str, Any] = {"Bucket": name}
            if region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            try:
                call(s3.create_bucket, "CreateBucket", region, **kwargs)
            except ProviderError as e:
                if "BucketAlreadyOwnedByYou" not in str(e):
                    raise
            try:
                call(s3.put_public_access_block, "PutPublicAccessBlock", region, Bucket=name,
                     PublicAccessBlockConfiguration={k: True for k in (
                         "BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")})
            except ProviderError as e:
                log.info("aws: could not block public access on %s: %s", name, e)
            return name

        return self._memo(("bucket", region), make)

    def instance_profile(self) -> str | None:
        """The instance profile the instances run with: `instance_profile` from config (a name; false =
        none), else launchpad's own `launchpad-instance` (S3 for checkpoints, stop/terminate itself)."""
        configured = self.p.config.get("instance_profile")
        if configured is False or configured == "none":
            return None
        if configured:
            return str(configured)

        def make() -> str:
            iam = self.p.client("iam", None)
            try:
                call(iam.get_instance_profile, "GetInstanceProfile", InstanceProfileName=INSTANCE_ROLE)
                return INSTANCE_ROLE
            except ProviderError as e:
                if "NoSuchEntity" not in str(e):
                    raise
            for op, fn, kwargs in (
                ("CreateRole", iam.create_role, {"RoleName": INSTANCE_ROLE, "AssumeRolePolicyDocument": json.dumps(_TRUST),
                                                  "Description": "launchpad instances: checkpoints in S3, self-stop",
                                                  "Tags": [{"Key": MANAGED_TAG, "Value": "true"}]}),
                ("PutRolePolicy", iam.put_role_policy, {"RoleName": INSTANCE_ROLE, "PolicyName": "launchpad",
                                                         "PolicyDocument": json.dumps(instance_policy())}),
                ("CreateInstanceProfile", iam.create_instance_profile, {"InstanceProfileName": INSTANCE_ROLE}),
                ("AddRoleToInstanceProfile", iam.add_role_to_instance_profile,
                 {"InstanceProfileName": INSTANCE_ROLE, "RoleName": INSTANCE_ROLE}),
            ):
                try:
                    call(fn, op, **kwargs)
                except ProviderError as e:
                    if not any(c in str(e) for c in ("EntityAlreadyExists", "LimitExceeded")):
                        raise
            return INSTANCE_ROLE

        return self._memo(("profile",), make)
