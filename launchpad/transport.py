"""`CommandRunner`: the one way `VMProvider` reaches a machine.

Everything `launchpad.vm.VMProvider` does on an instance -- sync, train, progress, logs, checkpoint,
the teardown helpers -- is a remote command or a file transfer through this protocol. A new way to
reach a machine (SSH today, ``kubectl exec`` into a pod next) is one class implementing it; VMProvider's
logic is reused unchanged. Implementations:

    launchpad.ssh.connection.SSHConnection   paramiko; SFTP for files, `ExecFiles` on hosts without SFTP
    ExecFiles (below)                        file transfer over nothing but `run` and `stream`, for any
                                             transport without a file channel (kubectl exec, an SSH
                                             server without the sftp subsystem)

Rules every implementation keeps: commands are argv lists, each element quoted on its own
(`command_line`) or passed without a shell; remote paths are absolute and travel as argv elements,
never spliced into script text; file contents and secrets travel over stdin, never in a command line.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from .errors import ProviderError, TransientError


def part_name(path: str) -> str:
    """The temporary name a file is written under before its rename to `path`: unique per process and
    thread, so two writers of the same file (nodes that share a disk, synced in parallel) never mix."""
    return f"{path}.part-{os.getpid()}-{threading.get_ident():x}"


Progress = Callable[[int, int], None]  # (bytes done, bytes total)
Stdin = bytes | str | BinaryIO | None


class ConnectionLost(TransientError):
    """The transport dropped (or could not be re-established) while a command ran. Callers reconnect
    and repeat idempotent work."""


class RemoteCommandFailed(ProviderError):
    """A remote command exited non-zero; `rc` is its exit status."""

    def __init__(self, message: str, rc: int):
        super().__init__(message)
        self.rc = rc


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class RemoteStat:
    size: int
    mtime: int  # whole seconds: what every transport can set and read back (rsync's quick check)


@runtime_checkable
class CommandRunner(Protocol):
    """A live session to one machine. Paths are absolute paths on that machine."""

    @property
    def label(self) -> str:
        """The machine as messages name it, e.g. ``host-a (root@10.0.0.5:22)``."""

    @property
    def alive(self) -> bool:
        """False once the session dropped; the owner then closes it and opens a new one."""

    def run(self, argv: Sequence[str], *, stdin: Stdin = None, timeout: float | None = 300,
            check: bool = True) -> Result:
        """Run `argv` (a list, never a string) and wait. `stdin` -- bytes, text or a binary file,
        streamed -- is sent and closed; it never appears in a command line or an error message.
        Raises ConnectionLost when the session drops, TransientError after `timeout` s, and with
        `check` RemoteCommandFailed for a non-zero exit."""

    def stream(self, argv: Sequence[str]) -> Iterator[bytes]:
        """Yield `argv`'s stdout as it arrives until it exits. RemoteCommandFailed if it exited
        non-zero, ConnectionLost when the session drops."""

    def put_file(self, local: str | os.PathLike, remote: str, *, progress: Progress | None = None,
                 mode: int = 0o600) -> int:
        """Upload `local` to `remote` with file mode `mode`, through a temporary name renamed into place
        once complete (a reader never sees half a file); the parent directory must exist. Calls
        `progress(done, total)` as bytes go out. Returns the bytes sent."""

    def get_file(self, remote: str, local: str | os.PathLike, *, progress: Progress | None = None) -> int:
        """Download `remote` to `local` (temporary name, then rename). ProviderError if `remote` does
        not exist. Returns the bytes received."""

    def put_bytes(self, data: bytes, remote: str, *, mode: int = 0o600) -> None:
        """Write small `data` to `remote` atomically with file mode `mode`."""

    def stat(self, remote: str) -> RemoteStat | None:
        """Size and mtime of `remote` (symlinks followed); None if it does not exist."""

    def set_mtime(self, remote: str, mtime: float) -> None:
        """Set `remote`'s modification time (so a later `stat` can skip an unchanged upload)."""

    def close(self) -> None:
        """Release the session; idempotent."""


def command_line(argv: Sequence[str]) -> str:
    """The shell command line for `argv`: every element quoted with `shlex.quote`. Only lists/tuples
    of str are accepted -- a pre-built string would be interpreted by the remote shell."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise TypeError("remote commands are argv lists (e.g. ['ls', '-l', path]), never strings")
    if not argv:
        raise ValueError("empty remote command")
    for a in argv:
        if not isinstance(a, str):
            raise TypeError(f"remote command arguments must be str, got {type(a).__name__}")
        if "\x00" in a:
            raise ValueError("remote command arguments cannot contain NUL characters")
    return shlex.join(argv)


# Receive stdin into a private temporary file, check it is complete (a dropped session ends `cat`
# early and successfully), then set the mode and rename it into place. Paths are $1/$2, never text.
_PUT = """umask 077
tmp=$1 dst=$2 mode=$3 size=$4
cat > "$tmp" || { rm -f "$tmp"; exit 1; }
got=$(wc -c < "$tmp")
if [ "$got" -ne "$size" ]; then rm -f "$tmp"; echo "received $got of $size bytes" >&2; exit 1; fi
chmod "$mode" "$tmp" && mv -f "$tmp" "$dst"
"""
_STAT = '[ -e "$1" ] || exit 3; exec stat -L -c "%s %Y" "$1"'
_MISSING = 3


class ExecFiles:
    """`CommandRunner`'s file methods over `run`/`stream` alone (POSIX sh, cat, wc, head, stat, touch
    on the machine). A transport mixes it in and supplies `run`, `stream` and `label`."""

    run: Callable[..., Result]
    stream: Callable[..., Iterator[bytes]]

    @property
    def label(self) -> str:  # supplied by the transport
        raise NotImplementedError

    def put_file(self, local, remote, *, progress=None, mode=0o600) -> int:
        local = Path(local)
        size = local.stat().st_size
        with open(local, "rb") as f:
            self._put(_Counting(f, size, progress), size, remote, mode, local.name)
        return size

    def put_bytes(self, data: bytes, remote: str, *, mode: int = 0o600) -> None:
        self._put(data, len(data), remote, mode, os.path.basename(remote))

    def _put(self, stdin, size: int, remote: str, mode: int, what: str) -> None:
        tmp = part_name(absolute(remote))
        res = self.run(["sh", "-c", _PUT, "sh", tmp, remote, format(mode, "o"), str(size)],
                       stdin=stdin, timeout=None, check=False)
        if res.rc != 0:
            raise ProviderError(f"{self.label}: writing {what} to {remote} failed: {_tail(res)}")

    def get_file(self, remote, local, *, progress=None) -> int:
        st = self.stat(remote)
        if st is None:
            raise ProviderError(f"{self.label}: {remote} does not exist")
        local = Path(local)
        tmp = Path(part_name(str(local)))
        done = 0
        try:
            with open(tmp, "wb") as f:  # exactly the size stat saw: a growing file (a log) is cut there
                for chunk in self.stream(["head", "-c", str(st.size), "--", remote]):
                    f.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, st.size)
            if done != st.size:
                raise ProviderError(f"{self.label}: {remote} shrank while it was read ({done} of {st.size} bytes)")
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
        return done

    def stat(self, remote: str) -> RemoteStat | None:
        res = self.run(["sh", "-c", _STAT, "sh", absolute(remote)], check=False, timeout=60)
        if res.rc == _MISSING:
            return None
        try:
            size, mtime = res.stdout.split()
            return RemoteStat(int(size), int(mtime))
        except ValueError:
            raise ProviderError(f"{self.label}: cannot stat {remote}: {_tail(res)}") from None

    def set_mtime(self, remote: str, mtime: float) -> None:
        res = self.run(["touch", "-c", "-m", "-d", f"@{int(mtime)}", "--", absolute(remote)], check=False, timeout=60)
        if res.rc != 0:
            raise ProviderError(f"{self.label}: cannot set the mtime of {remote}: {_tail(res)}")


class _Counting:
    """A binary file that reports how much of it was read (the bytes handed to the transport)."""

    def __init__(self, f: BinaryIO, total: int, progress: Progress | None):
        self.f, self.total, self.progress, self.done = f, total, progress, 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.done += len(data)
        if self.progress and (data or self.done == self.total):
            self.progress(self.done, self.total)
        return data


def absolute(remote: str) -> str:
    # an absolute path can never be read as an option (`-rf`) by the commands it is passed to
    if not isinstance(remote, str) or not remote.startswith("/") or "\x00" in remote:
        raise ValueError(f"remote paths must be absolute: {remote!r}")
    return remote


def _tail(res: Result) -> str:
    return " | ".join((res.stderr.strip() or res.stdout.strip() or f"exit {res.rc}").splitlines()[-3:])
