"""Real OpenSSH servers on 127.0.0.1 (see conftest.py): start, restart with a new host key, drop connections."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launchpad.testing_ssh import SSHD, LoopbackSshd

REPO = Path(__file__).resolve().parents[3]


def ensure_openssh() -> None:
    if os.path.exists(SSHD):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "openssh-server", "rsync"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    if not os.path.exists(SSHD):
        pytest.fail("OpenSSH's sshd is needed for the ssh provider tests: apt-get install -y openssh-server")


class Sshd(LoopbackSshd):
    """launchpad.testing_ssh's loopback sshd, as a named "host" with a launchpad root, whose connections
    the tests can kill."""

    def __init__(self, name: str, dir: Path, authorized_keys: Path, *, sftp: bool = True):
        super().__init__(dir=dir, name=name, authorized_keys=authorized_keys, sftp=sftp)

    @property
    def host_key(self) -> Path:
        return self.host_key_file

    @property
    def root(self) -> Path:
        """The launchpad root on this "host"."""
        return self.dir / "launchpad-root"

    def start(self) -> Sshd:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        super().start()
        return self

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes this listener forked (its sshd descendants)."""
        if self.proc is None:
            return []
        children: dict[int, list[int]] = {}
        comm: dict[int, str] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(d.name))
            comm[int(d.name)] = name
        out, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                if comm.get(child, "").startswith("sshd"):
                    out.append(child)
                    todo.append(child)
        return out

    def drop_connections(self) -> int:
        """SIGKILL every connection's sshd process: each client sees its connection die at once."""
        pids = self.connection_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)



def host_entry(server: Sshd, key: Path, **extra) -> dict:
    return {"name": server.name, "address": "127.0.0.1", "port": server.port, "user": "root", "key": str(key),
            "python": sys.executable, "root": str(server.root), "connect_timeout": 10, **extra}


def write_hosts(home: Path, entries: list[dict], **top) -> Path:
    path = home / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": entries, **top}, sort_keys=False))
    return path


def assert_private(tree: Path) -> list[Path]:
    """Every directory under `tree` (itself included) is 0700 and every file 0600: nothing in a job's
    tree is readable by other users of the host. Returns the files checked."""
    import stat as st

    assert st.S_IMODE(tree.stat().st_mode) == 0o700, f"{tree} is {oct(tree.stat().st_mode)}"
    files = []
    for p in tree.rglob("*"):
        if p.is_symlink():
            continue
        m = st.S_IMODE(p.stat().st_mode)
        if p.is_dir():
            assert m == 0o700, f"{p} is a {oct(m)} directory"
        elif p.is_file():
            assert m & 0o077 == 0, f"{p} is {oct(m)}: readable by others"
            files.append(p)
    return files
