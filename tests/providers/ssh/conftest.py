"""Real OpenSSH servers on 127.0.0.1 for the ssh provider's tests.

`sshd_pair` starts two `sshd -D` (two "hosts") for the whole session: key auth only, their own host
keys and config, high ports. Each host gets its own launchpad root directory, so the two behave like
separate machines (separate claims, venvs and job directories) although both are this machine.
`sshd_nosftp` is a third host whose sshd has no SFTP subsystem (files then go over exec channels).
`ssh_home` writes hosts.yaml for the pair into the test's LAUNCHPAD_HOME.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ssh_servers import Sshd, ensure_openssh, host_entry, write_hosts


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    """An ed25519 client key made by launchpad's own key generator, authorised on both servers."""
    from launchpad.ssh.keys import generate_ed25519

    d = tmp_path_factory.mktemp("ssh-client")
    key = d / "id_ed25519"
    generate_ed25519(key, comment="launchpad-tests")
    return key


@pytest.fixture(scope="session")
def sshd_pair(tmp_path_factory, client_key):
    ensure_openssh()
    base = tmp_path_factory.mktemp("sshd")
    authorized = base / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    servers = [Sshd("host-a", base / "host-a", authorized), Sshd("host-b", base / "host-b", authorized)]
    try:
        for s in servers:
            s.start()
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="session")
def sshd_nosftp(tmp_path_factory, client_key):
    ensure_openssh()
    base = tmp_path_factory.mktemp("sshd-nosftp")
    authorized = base / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    server = Sshd("host-nosftp", base / "host-nosftp", authorized, sftp=False)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def ssh_home(launchpad_home, sshd_pair, client_key):
    """LAUNCHPAD_HOME with a hosts.yaml listing both servers."""
    write_hosts(launchpad_home, [host_entry(s, client_key) for s in sshd_pair])
    return launchpad_home


@pytest.fixture
def ssh_provider(ssh_home):
    from launchpad_ssh import SSHProvider

    provider = SSHProvider({})
    yield provider
    provider.close()
