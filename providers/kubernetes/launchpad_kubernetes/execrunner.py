# mypy: disable-error-code="import-untyped"
# (the kubernetes client ships no type information)
"""`KubeExec`: `launchpad.transport.CommandRunner` over the pod ``exec`` API (what ``kubectl exec`` uses).

Each command is one exec call: the kubernetes client's websocket (``v5.channel.k8s.io``, else ``v4``),
channel 0 stdin, 1 stdout, 2 stderr, 3 the exit status. Files go through `ExecFiles` (cat/head/stat over
the same calls), so `VMProvider` syncs, starts the agent, reads progress and tails logs unchanged.

The v4 protocol cannot close stdin, so a command that is given stdin reads exactly that many bytes
(``head -c N | command``): the same on v4 and v5, and a truncated upload is caught by `ExecFiles`' size
check. The argv travels as the API's ``command`` list: no shell unless the argv itself names one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from launchpad.errors import ProviderError, TransientError
from launchpad.transport import ConnectionLost, ExecFiles, RemoteCommandFailed, Result, Stdin

log = logging.getLogger("launchpad.kubernetes")
_CHUNK = 256 * 1024
_FEED = 'head -c "$0" | "$@"'  # $0: the byte count; "$@": the command itself


class KubeExec(ExecFiles):
    def __init__(self, core: Any, namespace: str, pod: str, container: str, *, label: str | None = None):
        self.core, self.namespace, self.pod, self.container = core, namespace, pod, container
        self._label = label or f"{namespace}/{pod}"
        self._alive = True

    @property
    def label(self) -> str:
        return self._label

    @property
    def alive(self) -> bool:
        return self._alive

    def close(self) -> None:
        self._alive = False

    # -- one exec call -------------------------------------------------------------------------------
    def _open(self, argv: Sequence[str], stdin: bool):
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        try:
            return stream(self.core.connect_get_namespaced_pod_exec, self.pod, self.namespace, command=list(argv),
                          container=self.container, stdin=stdin, stdout=True, stderr=True, tty=False,
                          _preload_content=False, binary=True)
        except ApiException as e:
            reason = str(e.reason or e).splitlines()[0]
            if e.status in (401, 403) or " 401 " in reason or " 403 " in reason:
                raise ProviderError(f"{self.label}: exec refused: {reason}", provider="kubernetes",
                                    hint="the context's user needs `create` on pods/exec in this namespace") from None
            raise ConnectionLost(f"{self.label}: exec failed: {reason}", provider="kubernetes") from None
        except Exception as e:  # the handshake failed (the client's own error path can fail on an empty body)
            raise ConnectionLost(f"{self.label}: exec failed: {e}".splitlines()[0], provider="kubernetes") from None

    @staticmethod
    def _feed(argv: Sequence[str], stdin: Stdin) -> tuple[list[str], Any, int]:
        if stdin is None:
            return list(argv), None, 0
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if not isinstance(stdin, bytes) and not hasattr(stdin, "total"):
            stdin = stdin.read()  # a file of unknown size: its bytes
        size = len(stdin) if isinstance(stdin, bytes) else int(stdin.total)  # type: ignore[attr-defined]
        return ["sh", "-c", _FEED, str(size), *argv], stdin, size

    @staticmethod
    def _send(ws, data) -> None:
        if isinstance(data, bytes):
            for i in range(0, len(data), _CHUNK):
                ws.write_stdin(data[i:i + _CHUNK])
        else:
            while chunk := data.read(_CHUNK):
                ws.write_stdin(chunk)
        ws.close_channel(0)  # v5 only (a no-op on v4, where `head -c` ends the input)

    def _frames(self, argv: Sequence[str], stdin: Stdin, timeout: float | None) -> Iterator[tuple[int, bytes]]:
        """(channel, data) as they arrive; (3, status) last."""
        full, data, _ = self._feed(argv, stdin)
        ws = self._open(full, data is not None)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            if data is not None:
                self._send(ws, data)
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TransientError(f"{self.label}: `{argv[0]}` did not finish within {timeout:.0f} s",
                                         provider="kubernetes")
                open_ = ws.is_open()
                if open_:
                    ws.update(timeout=1)
                for ch in (1, 2):
                    chunk = ws.read_channel(ch)
                    if chunk:
                        yield ch, chunk
                if not open_:
                    break
            yield 3, ws.read_channel(3) or b""
        except (OSError, ConnectionError) as e:
            raise ConnectionLost(f"{self.label}: the exec session dropped: {e}", provider="kubernetes") from None
        except Exception as e:
            if type(e).__module__.startswith("websocket"):
                raise ConnectionLost(f"{self.label}: the exec session dropped: {e}", provider="kubernetes") from None
            raise
        finally:
            try:
                ws.close()
            except Exception:  # already gone
                pass

    @staticmethod
    def _rc(status: bytes) -> int:
        if not status:
            raise ConnectionLost("the exec session ended without an exit status", provider="kubernetes")
        doc = json.loads(status)
        if doc.get("status") == "Success":
            return 0
        for cause in (doc.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause["message"])
        raise ProviderError(f"exec: {doc.get('message') or doc}", provider="kubernetes")

    def run(self, argv: Sequence[str], *, stdin: Stdin = None, timeout: float | None = 300,
            check: bool = True) -> Result:
        if isinstance(argv, (str, bytes)) or not argv:
            raise TypeError("remote commands are argv lists (e.g. ['ls', '-l', path]), never strings")
        out, err, rc = bytearray(), bytearray(), 0
        for ch, chunk in self._frames(argv, stdin, timeout):
            if ch == 1:
                out += chunk
            elif ch == 2:
                err += chunk
            else:
                rc = self._rc(chunk)
        res = Result(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        if check and rc != 0:
            tail = " | ".join((res.stderr.strip() or res.stdout.strip() or f"exit {rc}").splitlines()[-3:])
            raise RemoteCommandFailed(f"{self.label}: `{argv[0]}` failed ({rc}): {tail}", rc)
        return res

    def stream(self, argv: Sequence[str]) -> Iterator[bytes]:
        err = bytearray()
        for ch, chunk in self._frames(argv, None, None):
            if ch == 1:
                yield bytes(chunk)
            elif ch == 2:
                err += chunk
            else:
                rc = self._rc(chunk)
                if rc != 0:
                    tail = " | ".join(err.decode("utf-8", "replace").strip().splitlines()[-3:]) or f"exit {rc}"
                    raise RemoteCommandFailed(f"{self.label}: `{argv[0]}` failed ({rc}): {tail}", rc)
