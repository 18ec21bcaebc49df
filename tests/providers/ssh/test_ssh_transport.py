"""`SSHConnection` as a `CommandRunner` against real sshd, with SFTP and on a host without the SFTP
subsystem (exec channels): put/get with progress, stat, mtime, modes, streamed stdin, hostile names."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import stat
from pathlib import Path

import pytest

from launchpad.errors import ProviderError
from launchpad.ssh.connection import SSHConnection
from launchpad.ssh.hostkeys import KnownHosts
from launchpad.ssh.target import SSHTarget
from launchpad.transport import CommandRunner

HOSTILE = "dir $(touch lp-pwned) `touch lp-pwned` 'q' \"d\"; x \\ * ~ $HOME"


@pytest.fixture(params=["sftp", "exec"])
def conn(request, sshd_pair, sshd_nosftp, client_key, tmp_path, caplog):
    server = sshd_pair[0] if request.param == "sftp" else sshd_nosftp
    target = SSHTarget(name=server.name, host="127.0.0.1", port=server.port, user="root",
                       key_path=str(client_key), connect_timeout=10, allow_agent=False)
    caplog.set_level(logging.INFO, logger="launchpad.ssh")
    with SSHConnection.open(target, KnownHosts(tmp_path / "known_hosts", announce=lambda _: None)) as c:
        yield c
    fell_back = any("has no SFTP subsystem" in r.getMessage() for r in caplog.get_records("call"))
    assert fell_back == (request.param == "exec")


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_round_trip_with_progress_modes_and_mtimes(conn, tmp_path):
    assert isinstance(conn, CommandRunner)
    d = tmp_path / HOSTILE
    d.mkdir()
    src = tmp_path / "blob.bin"
    src.write_bytes(os.urandom(3 << 20))
    remote = str(d / "-rf *.bin")
    sent: list[tuple[int, int]] = []
    assert conn.put_file(src, remote, progress=lambda done, total: sent.append((done, total))) == 3 << 20
    assert Path(remote).read_bytes() == src.read_bytes() and mode(remote) == 0o600
    assert sent[-1] == (3 << 20, 3 << 20) and len(sent) > 1
    assert conn.stat(remote).size == 3 << 20 and conn.stat(remote + ".missing") is None

    conn.set_mtime(remote, 1_600_000_000)
    assert conn.stat(remote).mtime == 1_600_000_000 == int(os.stat(remote).st_mtime)

    back, got = tmp_path / "back.bin", []
    assert conn.get_file(remote, back, progress=lambda done, total: got.append((done, total))) == 3 << 20
    assert back.read_bytes() == src.read_bytes() and got[-1] == (3 << 20, 3 << 20)
    with pytest.raises(ProviderError, match="does not exist"):
        conn.get_file(remote + ".missing", tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()

    conn.put_bytes(b'{"a": 1}', str(d / "job.json"))
    assert (d / "job.json").read_bytes() == b'{"a": 1}' and mode(d / "job.json") == 0o600
    conn.put_file(src, str(d / "shared.whl"), mode=0o644)
    assert mode(d / "shared.whl") == 0o644
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert conn.put_file(empty, str(d / "empty")) == 0 and (d / "empty").read_bytes() == b""

    assert not list(d.glob("*.part-*")) and not list(tmp_path.glob("*.part-*"))
    assert not (Path.home() / "lp-pwned").exists(), "a path was interpreted by a shell"
    with pytest.raises(ValueError, match="absolute"):
        conn.stat("relative/path")


def test_an_upload_into_a_missing_directory_fails_with_one_line(conn, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"x")
    with pytest.raises(ProviderError) as err:
        conn.put_file(src, str(tmp_path / "no such dir" / "f"))
    assert "f" in str(err.value) and "\n" not in str(err.value)


def test_streamed_stdin_reaches_the_command_whole(conn, tmp_path):
    data = os.urandom(5 << 20)
    res = conn.run(["sha256sum"], stdin=io.BytesIO(data))
    conn.stat(str(tmp_path))  # a file operation, so the fixture sees which way files go
    assert res.stdout.split()[0] == hashlib.sha256(data).hexdigest()
