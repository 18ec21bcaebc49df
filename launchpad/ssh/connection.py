"""`SSHConnection`: one authenticated SSH session (through ProxyJump hops when configured).

- connect: bounded retries with tenacity while a machine boots (refused, timed out, no banner yet),
  then one clear message; authentication failures and changed host keys are never retried;
- keepalives every 15 s, so NAT boxes keep the session and a dead peer is noticed;
- `run(argv)` / `stream(argv)`: remote commands ONLY from argv lists, joined with `shlex.join`, so the
  remote login shell (which must be POSIX: sh, bash, dash, zsh) sees each element as one word; secrets
  go over stdin, never argv;
- files (`launchpad.transport.CommandRunner`'s put/get/stat/set_mtime) over SFTP, or over exec channels
  (`ExecFiles`) when the host has no SFTP subsystem; uploads go to a temporary name renamed into place.
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import AuthError, LaunchpadError, ProviderError, TransientError
from ..transport import (
    ConnectionLost,
    ExecFiles,
    Progress,
    RemoteCommandFailed,
    RemoteStat,
    Result,
    Stdin,
    absolute,
    command_line,
    part_name,
)
from .hostkeys import HostKeyChanged, KnownHosts, install_policy, translate_bad_host_key
from .target import SSHTarget

log = logging.getLogger("launchpad.ssh")

KEEPALIVE_S = 15
ATTEMPT_TIMEOUT_S = 10.0


class SSHConnection(ExecFiles):
    """The SSH `CommandRunner`. Use `SSHConnection.open(target)`; `alive` says whether it can still be
    used; `close()` it."""

    def __init__(self, target: SSHTarget, known_hosts: KnownHosts | None = None):
        self.target = target
        self.known_hosts = known_hosts or KnownHosts()
        self._clients: list = []  # jump hosts first, the target last
        self._sftp = None
        self._no_sftp = False  # the host refused the SFTP subsystem: files go over exec channels
        self._lock = threading.Lock()

    @classmethod
    def open(cls, target: SSHTarget, known_hosts: KnownHosts | None = None) -> SSHConnection:
        conn = cls(target, known_hosts)
        conn.connect()
        return conn

    # -- connecting ------------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect, retrying transient failures for up to `target.connect_timeout` seconds."""
        import paramiko
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_delay,
            wait_exponential,
        )

        self.close()
        start = time.monotonic()
        total = max(0.5, self.target.connect_timeout)
        retrying = Retrying(
            stop=stop_after_delay(total),
            wait=wait_exponential(multiplier=0.25, min=0.25, max=4),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    left = total - (time.monotonic() - start)
                    self._connect_chain(max(1.0, min(ATTEMPT_TIMEOUT_S, left)))
        except paramiko.BadHostKeyException as e:
            self.close()
            raise translate_bad_host_key(self._failed_hop or self.target, self.known_hosts, e) from None
        except paramiko.AuthenticationException as e:
            self.close()
            hop = self._failed_hop or self.target
            key = hop.key_path or "ssh-agent keys"
            raise AuthError(
                f"ssh: authentication failed for {hop.label} with {key}: {_reason(e)}",
                provider=None,
                hint=f"add the public key ({key}.pub) to ~{hop.user}/.ssh/authorized_keys on the host"
                if hop.key_path else "set `key:` in hosts.yaml",
            ) from None
        except LaunchpadError:  # a bad key file, a changed host key: nothing a retry would fix
            self.close()
            raise
        except Exception as e:  # retries exhausted on a transient error
            self.close()
            hop = self._failed_hop or self.target
            raise ProviderError(
                f"ssh: cannot reach {hop.label} within {total:.0f} s: {_reason(e)}",
                hint="is the machine up and sshd listening there? check address and port",
            ) from None

    _failed_hop: SSHTarget | None = None

    def _connect_chain(self, timeout: float) -> None:
        import paramiko

        from .keys import load_private_key

        self.close()
        sock = None
        for hop in (*self.target.jumps, self.target):
            self._failed_hop = hop
            if self._clients:  # tunnel through the previous hop
                transport = self._clients[-1].get_transport()
                sock = transport.open_channel("direct-tcpip", (hop.host, hop.port), ("127.0.0.1", 0), timeout=timeout)
            client = paramiko.SSHClient()
            install_policy(client, hop, self.known_hosts)
            pkey = load_private_key(hop.key_path) if hop.key_path else None
            self._clients.append(client)
            client.connect(
                hop.host, hop.port, username=hop.user, pkey=pkey, allow_agent=hop.allow_agent,
                look_for_keys=False, timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                channel_timeout=timeout, sock=sock,
            )
            client.get_transport().set_keepalive(KEEPALIVE_S)
        self._failed_hop = None

    @property
    def label(self) -> str:
        return self.target.label

    @property
    def alive(self) -> bool:
        if not self._clients:
            return False
        transport = self._clients[-1].get_transport()
        return transport is not None and transport.is_active()

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        for client in reversed(self._clients):
            try:
                client.close()
            except Exception:
                pass
        self._clients = []

    def __enter__(self) -> SSHConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- commands --------------------------------------------------------------------------------------
    def _session(self):
        if not self.alive:
            raise ConnectionLost(f"ssh: connection to {self.target.label} is closed")
        try:
            return self._clients[-1].get_transport().open_session(timeout=ATTEMPT_TIMEOUT_S)
        except Exception as e:
            raise ConnectionLost(f"ssh: connection to {self.target.label} failed: {_reason(e)}") from None

    def run(self, argv: Sequence[str], *, stdin: Stdin = None, timeout: float | None = 300,
            check: bool = True) -> Result:
        """Run `argv` on the host and wait for it (see `CommandRunner.run`). `timeout` bounds each wait
        for the host (None: no bound, for long uploads)."""
        cmd = command_line(argv)
        chan = self._session()
        out: list = []
        err: list = []
        try:
            chan.settimeout(timeout)
            chan.exec_command(cmd)
            # both outputs are read while stdin is still being sent: a chatty command cannot stall it
            readers = [threading.Thread(target=_drain, args=(chan.makefile("rb"), out), daemon=True),
                       threading.Thread(target=_drain, args=(chan.makefile_stderr("rb"), err), daemon=True)]
            for r in readers:
                r.start()
            _send(chan, stdin)
            chan.shutdown_write()
            readers[0].join()
            readers[1].join(timeout)
            for got in (out, err):
                if not got:
                    raise TimeoutError
                if isinstance(got[0], BaseException):
                    raise got[0]
            rc = chan.recv_exit_status()
        except TimeoutError:
            raise TransientError(f"ssh: `{argv[0]}` on {self.target.label} did not finish within {timeout:.0f} s") from None
        except (EOFError, OSError) as e:
            raise ConnectionLost(f"ssh: connection to {self.target.label} dropped: {_reason(e)}") from None
        finally:
            chan.close()
        stdout, stderr = out[0], err[0]
        if rc == -1 and not self.alive:
            raise ConnectionLost(f"ssh: connection to {self.target.label} dropped while `{argv[0]}` ran")
        result = Result(rc, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))
        if check and rc != 0:
            tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
            raise RemoteCommandFailed(f"ssh: `{_short(argv)}` on {self.target.label} exited {rc}: {' | '.join(tail)}", rc)
        return result

    def stream(self, argv: Sequence[str], *, idle_check_s: float = 30) -> Iterator[bytes]:
        """Yield `argv`'s stdout as it arrives. Ends when the command ends (ProviderError if it failed);
        raises ConnectionLost when the connection drops."""
        cmd = command_line(argv)
        chan = self._session()
        err: list[bytes] = []
        try:
            chan.exec_command(cmd)
            chan.shutdown_write()
            threading.Thread(target=lambda: err.append(_read_all(chan.makefile_stderr("rb"))), daemon=True).start()
            chan.settimeout(idle_check_s)
            while True:
                try:
                    data = chan.recv(65536)
                except TimeoutError:
                    if not self.alive:
                        raise ConnectionLost(f"ssh: connection to {self.target.label} dropped") from None
                    continue
                except (EOFError, OSError) as e:
                    raise ConnectionLost(f"ssh: connection to {self.target.label} dropped: {_reason(e)}") from None
                if not data:
                    break
                yield data
            rc = chan.recv_exit_status()
        finally:
            chan.close()
        if rc == -1 or not self.alive:
            if not self.alive:
                raise ConnectionLost(f"ssh: connection to {self.target.label} dropped while `{argv[0]}` ran")
        if rc != 0:
            tail = (err[0] if err else b"").decode("utf-8", "replace").strip().splitlines()[-3:]
            raise RemoteCommandFailed(f"ssh: `{_short(argv)}` on {self.target.label} exited {rc}: {' | '.join(tail)}", rc)

    # -- files: SFTP, or exec channels (ExecFiles) where the host has no SFTP subsystem -------------------
    def _sftp_client(self):
        """The SFTP session, or None on a host without the SFTP subsystem (then files go over exec)."""
        if not self.alive:
            raise ConnectionLost(f"ssh: connection to {self.target.label} is closed")
        if self._sftp is None and not self._no_sftp:
            try:
                self._sftp = self._clients[-1].open_sftp()
            except Exception as e:  # paramiko: "Channel closed." when sshd has no `Subsystem sftp`
                if not self.alive:
                    raise ConnectionLost(f"ssh: connection to {self.target.label} dropped: {_reason(e)}") from None
                log.info("ssh: %s has no SFTP subsystem (%s); transferring files over exec channels",
                         self.target.label, _reason(e))
                self._no_sftp = True
        return self._sftp

    def _sftp_call(self, what: str, fn):
        try:
            return fn()
        except (EOFError, OSError) as e:
            if not self.alive:
                raise ConnectionLost(f"ssh: connection to {self.target.label} dropped during {what}") from None
            raise ProviderError(f"ssh: {what} on {self.target.label} failed: {_reason(e)}") from None

    def put_file(self, local: str | os.PathLike, remote: str, *, progress: Progress | None = None,
                 mode: int = 0o600) -> int:
        absolute(remote)
        sftp = self._sftp_client()
        if sftp is None:
            return ExecFiles.put_file(self, local, remote, progress=progress, mode=mode)
        local = Path(local)
        size = local.stat().st_size
        tmp = part_name(remote)

        def put():
            with open(local, "rb") as f:
                sftp.putfo(f, tmp, size, callback=progress, confirm=True)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, remote)

        self._sftp_call(f"uploading {local.name} to {remote}", put)
        return size

    def put_bytes(self, data: bytes, remote: str, *, mode: int = 0o600) -> None:
        absolute(remote)
        sftp = self._sftp_client()
        if sftp is None:
            return ExecFiles.put_bytes(self, data, remote, mode=mode)
        tmp = part_name(remote)

        def put():
            with sftp.open(tmp, "wb") as f:
                sftp.chmod(tmp, mode)  # before the data: never readable by others, even for a moment
                f.write(data)
            sftp.posix_rename(tmp, remote)

        self._sftp_call(f"writing {posixpath.basename(remote)}", put)

    def get_file(self, remote: str, local: str | os.PathLike, *, progress: Progress | None = None) -> int:
        absolute(remote)
        sftp = self._sftp_client()
        if sftp is None:
            return ExecFiles.get_file(self, remote, local, progress=progress)
        local = Path(local)
        tmp = Path(part_name(str(local)))
        try:
            if self.stat(remote) is None:
                raise ProviderError(f"{self.label}: {remote} does not exist")
            self._sftp_call(f"downloading {remote}", lambda: sftp.get(remote, str(tmp), callback=progress))
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
        return local.stat().st_size

    def stat(self, remote: str) -> RemoteStat | None:
        absolute(remote)
        sftp = self._sftp_client()
        if sftp is None:
            return ExecFiles.stat(self, remote)

        def get():
            try:
                return sftp.stat(remote)
            except FileNotFoundError:
                return None

        st = self._sftp_call(f"stat {remote}", get)
        if st is None:
            return None
        return RemoteStat(int(st.st_size or 0), int(st.st_mtime or 0))

    def set_mtime(self, remote: str, mtime: float) -> None:
        absolute(remote)
        sftp = self._sftp_client()
        if sftp is None:
            return ExecFiles.set_mtime(self, remote, mtime)
        self._sftp_call(f"setting the mtime of {remote}", lambda: sftp.utime(remote, (int(mtime), int(mtime))))


def _drain(f, into: list) -> None:
    try:
        into.append(_read_all(f))
    except BaseException as e:
        into.append(e)


def _send(chan, stdin: Stdin) -> None:
    if stdin is None:
        return
    if isinstance(stdin, (str, bytes)):
        chunks: Iterator[bytes] = iter([stdin.encode() if isinstance(stdin, str) else stdin])
    else:
        chunks = iter(lambda: stdin.read(1 << 18), b"")
    for chunk in chunks:
        try:
            chan.sendall(chunk)
        except OSError:
            if chan.exit_status_ready():
                return  # the command ended without reading all of it: its exit status says why
            raise


def _read_all(f) -> bytes:
    chunks: list[bytes] = []
    while True:
        data = f.read(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _retryable(e: BaseException) -> bool:
    import paramiko

    if isinstance(e, (paramiko.BadHostKeyException, paramiko.AuthenticationException, HostKeyChanged, AuthError)):
        return False
    if isinstance(e, LaunchpadError):
        return False
    return isinstance(e, (OSError, EOFError, paramiko.SSHException))


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _short(argv: Sequence[str]) -> str:
    """First words of a command for messages (not the whole thing: arguments may be long)."""
    shown = " ".join(argv[:3])
    return shown if len(shown) <= 80 else shown[:77] + "..."
