"""Reaching an instance: the ssh config maps it to the loopback sshd, the host key printed on the console is
pinned (a different key is refused), TOFU per instance when the console has none; `launchpad check`."""

from __future__ import annotations

import json

import pytest
from aws_helpers import cheap_offer, inject_console_output

from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _console(host_key: str) -> str:
    return ("[   12.3] cloud-init[1]: Cloud-init v. 24.1 running 'modules:final'\n"
            "-----BEGIN SSH HOST KEY KEYS-----\n"
            "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= root@ip-172-31-0-5\n"
            f"{host_key} root@ip-172-31-0-5\n"
            "-----END SSH HOST KEY KEYS-----\n")


def test_the_console_host_key_is_pinned(aws, instance_sshd):
    inject_console_output(aws, _console(instance_sshd.host_key_line()))
    inst = aws.provision(cheap_offer(aws), InstanceSpec(job_id="hk", token="hk-1", tags={JOB_TAG: "hk"}))
    target = aws.ssh_target(inst)
    assert target.host_key == instance_sshd.host_key_line()  # ed25519 preferred over ecdsa
    assert target.host == "127.0.0.1" and target.port == instance_sshd.port  # via the ssh config's Host *
    assert aws.connection(inst).run(["true"]).rc == 0
    aws.teardown(inst)


def test_a_host_key_other_than_the_console_one_is_refused(aws):
    from launchpad.ssh.hostkeys import HostKeyChanged

    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGh3k2Kx2vK3nBqZ1bYv7pYh4f5x0m0xk1b1c1d1e1f1"
    inject_console_output(aws, _console(other))
    inst = aws.provision(cheap_offer(aws), InstanceSpec(job_id="hk2", token="hk2-1", tags={JOB_TAG: "hk2"}))
    with pytest.raises(HostKeyChanged):
        aws.connection(inst)
    aws.teardown(inst)


def test_without_a_console_key_trust_on_first_use_per_instance(aws):
    inst = aws.provision(cheap_offer(aws), InstanceSpec(job_id="tofu", token="tofu-1", tags={JOB_TAG: "tofu"}))
    assert aws.ssh_target(inst).host_key is None  # moto's console has no host key block
    assert aws.connection(inst).run(["true"]).rc == 0
    assert aws._known_hosts_path(inst.id).read_text().strip()  # remembered for this instance only
    aws.teardown(inst)
    assert not aws._known_hosts_path(inst.id).exists()


def test_launchpad_check_shows_aws_usable(run_cli, aws_config):
    rows = {r["provider"]: r for r in json.loads(run_cli("check", "--json", check=True).stdout)["providers"]}
    assert rows["aws"]["usable"] and rows["aws"]["detail"].startswith("2 regions enabled")
