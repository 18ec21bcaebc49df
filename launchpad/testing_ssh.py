"""A real OpenSSH server on 127.0.0.1 for provider tests (the `launchpad_sshd` fixture of launchpad.testing).

A provider built on `VMProvider` reaches its machines over SSH; its conformance and end-to-end tests
point it at this server instead of a cloud VM. Key auth only, its own host key (pin it), the current
user, a throwaway client key made by launchpad's own generator. Needs Debian's `openssh-server`.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def skewed_clock_env(offset_s: float) -> dict[str, str]:
    """The session environment (`LoopbackSshd(env=...)`) of a host whose clock is `offset_s` seconds off:
    libfaketime preloaded into every process of the session (`date`, python, the agent), monotonic clocks
    left alone. Needs Debian's `faketime` package; RuntimeError naming it when libfaketime is missing."""
    import glob

    libs = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if not libs:
        raise RuntimeError("libfaketime is needed to skew a test host's clock: apt-get install -y faketime")
    return {"LD_PRELOAD": libs[0], "FAKETIME": f"{offset_s:+g}s", "DONT_FAKE_MONOTONIC": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LoopbackSshd:
    """One `sshd -D` on 127.0.0.1:`port`; `config()` gives the settings a VM provider needs to reach it.
    With `authorized_keys` unset, it makes its own client key (`client_key`) and authorises it."""

    dir: Path
    name: str = "sshd"
    authorized_keys: Path | None = None
    port: int = field(default_factory=free_port)
    sftp: bool = True  # False: no `Subsystem sftp` line, like some minimal or hardened hosts
    #: the sessions' environment (OpenSSH's server-side `SetEnv`): what a cloud image would provide (the
    #: object store's endpoint and credentials an instance role gives a real VM), or libfaketime's
    #: LD_PRELOAD + FAKETIME for a host whose clock is off
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def host_key_file(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.dir / "client" / "id_ed25519"

    def host_key_line(self) -> str:
        """The pinned host key line, ``ssh-ed25519 AAAA...``."""
        return " ".join(Path(f"{self.host_key_file}.pub").read_text().split()[:2])

    def new_host_key(self) -> None:
        for p in (self.host_key_file, Path(f"{self.host_key_file}.pub")):
            p.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key_file)], check=True)

    def config(self) -> dict:
        return {"address": "127.0.0.1", "port": self.port, "user": getpass.getuser(), "key": str(self.client_key),
                "host_key": self.host_key_line(), "python": sys.executable, "root": str(self.dir / "root")}

    def start(self) -> LoopbackSshd:
        if not os.path.exists(SSHD):
            raise RuntimeError("OpenSSH's sshd is needed: apt-get install -y openssh-server")
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.host_key_file.exists():
            self.new_host_key()
        authorized = self.authorized_keys or self._own_client_key()
        lines = [f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key_file}", "PidFile none",
                 f"AuthorizedKeysFile {authorized}", "PubkeyAuthentication yes", "PasswordAuthentication no",
                 "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "StrictModes no",
                 "UsePAM no", "AllowTcpForwarding yes", "MaxStartups 64", "MaxSessions 64", "LogLevel ERROR"]
        if self.sftp:
            lines.append("Subsystem sftp internal-sftp")
        if self.env:
            if any(c in f"{k}{v}" for k, v in self.env.items() for c in '"\\\n'):
                raise ValueError("env names and values cannot contain quotes, backslashes or newlines")
            lines.append("SetEnv " + " ".join(f'"{k}={v}"' for k, v in self.env.items()))
        (self.dir / "sshd_config").write_text("\n".join(lines) + "\n")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd refuses to start without it
        with open(self.dir / "sshd.log", "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")], stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd {self.name} did not start: {(self.dir / 'sshd.log').read_text()[-500:]}")

    def _own_client_key(self) -> Path:
        from .ssh.keys import generate_ed25519

        if not self.client_key.exists():
            self.client_key.parent.mkdir(mode=0o700, exist_ok=True)
            generate_ed25519(self.client_key, comment="launchpad-tests")
        authorized = self.dir / "authorized_keys"
        authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        return authorized

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
