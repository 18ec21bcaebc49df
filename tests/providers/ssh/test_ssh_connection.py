"""launchpad.ssh against real sshd: argv-only commands, host-key pinning and TOFU, auth errors,
bounded connect retries, ProxyJump through a ~/.ssh/config alias, dropped connections
(file transfer: test_ssh_transport.py)."""

from __future__ import annotations

import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ssh_servers import Sshd

from launchpad.errors import AuthError, ProviderError
from launchpad.ssh.connection import ConnectionLost, SSHConnection, command_line
from launchpad.ssh.hostkeys import HostKeyChanged, KnownHosts
from launchpad.ssh.keys import fingerprint, generate_ed25519, parse_public_key
from launchpad.ssh.target import SSHTarget, resolve_target
from launchpad.testing_ssh import free_port


def target(server: Sshd, key: Path, **kw) -> SSHTarget:
    return SSHTarget(name=server.name, host="127.0.0.1", port=server.port, user="root", key_path=str(key),
                     connect_timeout=kw.pop("connect_timeout", 10), allow_agent=False, **kw)


@pytest.fixture
def known(tmp_path):
    shown: list[str] = []
    kh = KnownHosts(tmp_path / "known_hosts", announce=shown.append)
    kh.shown = shown
    return kh


@pytest.fixture
def lone_sshd(tmp_path, client_key):
    """A server of its own, for tests that restart it with another host key."""
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    server = Sshd("lone", tmp_path / "lone", authorized)
    server.start()
    yield server
    server.stop()


def test_remote_commands_are_argv_lists_only():
    with pytest.raises(TypeError):
        command_line("rm -rf /tmp/x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        command_line(["echo", 3])  # type: ignore[list-item]
    assert command_line(["echo", "a b", "$(x)"]) == "echo 'a b' '$(x)'"


def test_shell_metacharacters_arrive_as_data(sshd_pair, client_key, known, tmp_path):
    marker = tmp_path / "pwned"
    weird = (f"$(touch {marker}1) `touch {marker}2`; touch {marker}3 && echo 'q' \"d\" | cat > {marker}4 "
             "\\ * ~ $HOME !x %s \n second line\t'")
    with SSHConnection.open(target(sshd_pair[0], client_key), known) as conn:
        assert conn.run(["printf", "%s", weird]).stdout == weird
        assert conn.run(["cat"], stdin=weird.encode()).stdout == weird  # stdin: data, not a command line
    assert not list(tmp_path.glob("pwned*"))


def test_first_use_records_the_key_and_shows_its_fingerprint(sshd_pair, client_key, known):
    server = sshd_pair[0]
    with SSHConnection.open(target(server, client_key), known) as conn:
        assert conn.run(["echo", "ok"]).stdout == "ok\n"
    line = known.path.read_text().strip()
    assert line.startswith(f"[127.0.0.1]:{server.port} ssh-ed25519 ")
    assert stat.S_IMODE(known.path.stat().st_mode) == 0o600
    expected = subprocess.run(["ssh-keygen", "-lf", f"{server.host_key}.pub"], capture_output=True, text=True,
                              check=True).stdout.split()[1]
    assert len(known.shown) == 1 and expected in known.shown[0] and server.name in known.shown[0]
    with SSHConnection.open(target(server, client_key), known):  # known now: nothing new is announced
        pass
    assert len(known.shown) == 1


def test_a_changed_host_key_is_refused(lone_sshd, client_key, known):
    with SSHConnection.open(target(lone_sshd, client_key), known):
        pass
    before = known.path.read_text()
    lone_sshd.new_host_key()
    lone_sshd.restart()
    t0 = time.monotonic()
    with pytest.raises(HostKeyChanged) as err:
        SSHConnection.open(target(lone_sshd, client_key), known)
    assert time.monotonic() - t0 < 5, "a changed key must not be retried"
    message = str(err.value)
    assert "lone" in message and f"127.0.0.1:{lone_sshd.port}" in message and "CHANGED" in message
    assert "\n" not in message
    assert known.path.read_text() == before  # the new key was not recorded


def test_a_pinned_host_key_is_the_only_one_accepted(sshd_pair, client_key, known, tmp_path):
    server = sshd_pair[1]
    with SSHConnection.open(target(server, client_key, host_key=server.host_key_line()), known) as conn:
        assert conn.run(["true"]).rc == 0
    assert not known.path.exists(), "a pinned key is not trust-on-first-use"
    other = tmp_path / "other"
    generate_ed25519(other)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    with pytest.raises(HostKeyChanged, match="host-b.*hosts.yaml"):
        SSHConnection.open(target(server, client_key, host_key=wrong), known)


def test_a_wrong_client_key_is_a_one_line_auth_error(sshd_pair, known, tmp_path):
    stranger = tmp_path / "stranger"
    generate_ed25519(stranger)
    t0 = time.monotonic()
    with pytest.raises(AuthError) as err:
        SSHConnection.open(target(sshd_pair[0], stranger), known)
    assert time.monotonic() - t0 < 5, "authentication failures are not retried"
    text = str(err.value)
    assert "\n" not in text and "authentication failed" in text and "host-a" in text and str(stranger) in text
    assert "PRIVATE" not in text


def test_unreachable_host_gives_up_after_the_timeout_with_a_clear_message(client_key, known):
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=rf"cannot reach nowhere \(root@127.0.0.1:{port}\) within 2 s"):
        SSHConnection.open(SSHTarget("nowhere", "127.0.0.1", port, "root", str(client_key), connect_timeout=2), known)
    assert 1.5 < time.monotonic() - t0 < 8


def test_proxyjump_through_an_ssh_config_alias(sshd_pair, client_key, known, tmp_path):
    final, jump = sshd_pair
    config = tmp_path / "ssh_config"
    config.write_text(f"Host final-alias\n  HostName 127.0.0.1\n  Port {final.port}\n  User root\n"
                      f"  IdentityFile {client_key}\n  ProxyJump root@127.0.0.1:{jump.port}\n")
    t = resolve_target("via-jump", "final-alias", ssh_config=config, connect_timeout=10)
    assert (t.host, t.port, t.user, t.key_path) == ("127.0.0.1", final.port, "root", str(client_key))
    assert [(j.host, j.port) for j in t.jumps] == [("127.0.0.1", jump.port)]
    with SSHConnection.open(t, known) as conn:
        assert conn.run(["echo", "through"]).stdout == "through\n"
    recorded = known.path.read_text()
    assert f"[127.0.0.1]:{jump.port} " in recorded and f"[127.0.0.1]:{final.port} " in recorded


def test_generated_keys_are_ed25519_and_private(tmp_path):
    key = tmp_path / "k" / "id_ed25519"
    line = generate_ed25519(key, comment="me")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert line.startswith("ssh-ed25519 ") and line.endswith(" me")
    pub = parse_public_key(line)
    assert fingerprint(pub.asbytes()).startswith("SHA256:")
    with pytest.raises(FileExistsError):
        generate_ed25519(key)


def test_a_dropped_connection_is_reported(lone_sshd, client_key, known):
    conn = SSHConnection.open(target(lone_sshd, client_key), known)
    got: list[bytes] = []
    errors: list[BaseException] = []

    def follow():
        try:
            for chunk in conn.stream(["sh", "-c", "while :; do echo tick; sleep 0.1; done"]):
                got.append(chunk)
        except BaseException as e:
            errors.append(e)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got and lone_sshd.drop_connections() >= 1
    reader.join(10)
    assert not reader.is_alive() and len(errors) == 1 and isinstance(errors[0], ConnectionLost)
    assert not conn.alive
    conn.connect()  # the same object reconnects
    assert conn.run(["echo", "back"]).stdout == "back\n"
    conn.close()
