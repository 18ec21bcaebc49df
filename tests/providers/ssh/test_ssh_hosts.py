"""hosts.yaml: validation with one-line errors naming the file, the host and the field; GPU specs; offers."""

from __future__ import annotations

import pytest
from launchpad_ssh import SSHProvider
from launchpad_ssh.hosts import load_hosts, parse_gpus

from launchpad.errors import ConfigError


def _write(home, text: str):
    path = home / "hosts.yaml"
    path.write_text(text)
    return path


def test_a_five_line_hosts_file_is_an_offer(launchpad_home):
    _write(launchpad_home, "hosts:\n  - name: lambda1\n    address: 203.0.113.7\n    user: ubuntu\n    gpus: H100:80GB:1\n")
    p = SSHProvider({})
    assert p.check() is None
    [offer] = p.offers()
    assert (offer.provider, offer.instance_type, offer.gpu, offer.gpu_count, offer.gpu_memory_gb) == \
        ("ssh", "lambda1", "H100", 1, 80.0)
    assert p.default_checkpoint_uri() is None  # file:// would be a path on the remote host


def test_mapping_form_gpu_fields_and_defaults(launchpad_home):
    path = _write(launchpad_home, """
checkpoint_uri: s3://bucket/ckpt
hosts:
  box:
    address: box.example
    gpus: {name: rtx-4090, count: 2, memory_gb: 24}
    price_per_hour: 0.7
    labels: {rack: r1}
    stop_command: [sudo, shutdown, -h, now]
""")
    hf = load_hosts(path)
    [h] = hf.hosts
    assert h.name == "box" and h.gpu_info.name == "RTX4090" and h.gpu_info.count == 2 and h.gpu_info.memory_gb == 24
    assert SSHProvider({}).default_checkpoint_uri() == "s3://bucket/ckpt"


@pytest.mark.parametrize("body, expected", [
    ("hosts:\n  - name: a\n    address: x\n    prot: 22\n", "hosts[0] (a).prot: unknown key"),
    ("hosts:\n  - name: a\n    address: x\n    port: 70000\n", "hosts[0] (a).port: Input should be less than or equal to 65535"),
    ("hosts:\n  - name: a\n", "hosts[0] (a).address: required"),
    ("hosts:\n  - name: Bad_Name\n    address: x\n", "hosts[0] (Bad_Name).name: String should match pattern"),
    ("hosts:\n  - name: a\n    address: x\n    gpus: A100,H100:8\n", "hosts[0] (a).gpus: 'A100,H100:8': name exactly one GPU"),
    ("hosts:\n  - name: a\n    address: x\n    gpus: A100:8\n", "memory per GPU of A100 is not known"),
    ("hosts:\n  - name: a\n    address: x\n    host_key: ssh-ed25519 notbase64!\n",
     "hosts[0] (a).host_key: the key part is not valid base64"),
    ("hosts:\n  - name: a\n    address: x\n    checkpoint_uri: /tmp/x\n", "hosts[0] (a).checkpoint_uri: must be a store URI"),
    ("hosts:\n  - name: a\n    address: x\n  - name: a\n    address: y\n", "two hosts are named 'a'"),
    ("hosts:\n  - name: a\n    address: 'x y'\n", "hosts[0] (a).address: must be non-empty, without spaces"),
    ("hosts: [\n", "invalid YAML"),
    ("hosts:\n  - name: a\n    address: x\n    name: b\n", "duplicate key"),
])
def test_problems_are_one_line_naming_file_and_field(launchpad_home, body, expected):
    path = _write(launchpad_home, body)
    with pytest.raises(ConfigError) as err:
        load_hosts(path)
    lines = str(err.value).splitlines()
    assert any(expected in line for line in lines), lines
    assert all(line.startswith(str(path)) for line in lines)
    reason = SSHProvider({}).check()  # check() reports it instead of raising
    assert reason and "\n" not in reason and str(path) in reason


def test_no_hosts_file_says_what_to_write(launchpad_home):
    reason = SSHProvider({}).check()
    assert reason and "hosts.yaml" in reason and "no hosts" in reason
    assert load_hosts(launchpad_home / "hosts.yaml").hosts == []


def test_gpu_specs():
    assert parse_gpus("A100:80GB:8").count == 8
    assert parse_gpus("a10").memory_gb == 24  # one size in every catalog: looked up
    assert parse_gpus(None).name is None and parse_gpus(0).count == 0
    with pytest.raises(ValueError):
        parse_gpus("A100:80GB:2..8")


def test_cli_and_host_side_modules_do_not_import_paramiko():
    import subprocess
    import sys

    code = ("import sys, launchpad.cli, launchpad.vm, launchpad.wheel, launchpad.ssh.remote, launchpad_ssh; "
            "assert 'paramiko' not in sys.modules, 'paramiko imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
