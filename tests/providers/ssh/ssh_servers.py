"""Real OpenSSH servers on 127.0.0.1 (see conftest.py): start, restart with a new host key, drop connections."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
REPO = Path(__file__).resolve().parents[3]


def ensure_openssh() -> None:
    if os.path.exists(SSHD):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "openssh-server", "rsync"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    if not os.path.exists(SSHD):
        pytest.fail("OpenSSH's sshd is needed for the ssh provider tests: apt-get install -y openssh-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    """One sshd listening on 127.0.0.1:port, with its own host key."""

    name: str
    dir: Path
    authorized_keys: Path
    port: int = field(default_factory=free_port)
    sftp: bool = True  # False: no `Subsystem sftp` line, like some minimal or hardened hosts
    proc: subprocess.Popen | None = None

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def root(self) -> Path:
        """The launchpad root on this "host"."""
        return self.dir / "launchpad-root"

    def host_key_line(self) -> str:
        return " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])

    def new_host_key(self) -> None:
        for p in (self.host_key, Path(f"{self.host_key}.pub")):
            p.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        if not self.host_key.exists():
            self.new_host_key()
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}", "PidFile none",
            f"AuthorizedKeysFile {self.authorized_keys}", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no",
            "AllowTcpForwarding yes", "MaxStartups 64", "MaxSessions 64", "LogLevel ERROR",
            *(["Subsystem sftp internal-sftp"] if self.sftp else []), "",
        ]))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        log = open(self.dir / "sshd.log", "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not start: {(self.dir / 'sshd.log').read_text()[-500:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

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
