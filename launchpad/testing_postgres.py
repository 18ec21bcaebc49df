"""A throwaway PostgreSQL server for tests and benchmarks (``LAUNCHPAD_STATE_URL=postgresql://...``).

Debian's server binaries (package ``postgresql``: /usr/lib/postgresql/<version>/bin, not on PATH) run
``initdb`` into a temporary folder and ``pg_ctl start`` on 127.0.0.1 and a free port. As root they run
as the ``postgres`` user (the server refuses to run as root). Durability is off (fsync): the data is
thrown away anyway, and tests go faster.

    with PostgresServer() as pg:
        url = pg.create_database()      # a fresh, empty database per test
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: the role whose members must give a password (scram-sha-256): the "wrong password" tests use it;
#: everybody else is trusted on 127.0.0.1
PASSWORD_GROUP = "password_users"


def postgres_bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: $LAUNCHPAD_PG_BIN, Debian's newest /usr/lib/postgresql/*/bin, or PATH."""
    if env := os.environ.get("LAUNCHPAD_PG_BIN"):
        return Path(env) if (Path(env) / "initdb").exists() else None

    def version(path: str) -> tuple[int, ...]:
        v = Path(path).parent.parent.name
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    return Path(which).parent if which else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self, bin_dir: Path | None = None):
        found = bin_dir or postgres_bin_dir()
        if found is None:
            raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
                               "apt-get install postgresql (Debian), or set LAUNCHPAD_PG_BIN")
        self.bin = found
        self.root: Path | None = None
        self.port = 0
        self._names = itertools.count(1)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # the server refuses to run as root: run its tools as the `postgres` user
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *args], capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> PostgresServer:
        self.root = Path(tempfile.mkdtemp(prefix="lp-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        hba = data / "pg_hba.conf"
        hba.write_text(f"host all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        for attempt in range(3):  # the free port may be taken between the check and the start
            self.port = _free_port()
            opts = (f"-k {self.root} -h 127.0.0.1 -p {self.port} -c fsync=off -c synchronous_commit=off"
                    " -c full_page_writes=off -c max_connections=200")
            proc = self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.root / "log"),
                             "-w", "-t", "60", "start", check=False)
            if proc.returncode == 0:
                break
            if attempt == 2:
                log = (self.root / "log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"pg_ctl start failed: {proc.stderr.strip()}\n{log}")
        with self.admin() as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN")
        return self

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.url(), autocommit=True)

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL."""
        name = name or f"lp_{os.getpid()}_{next(self._names)}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def add_password_user(self, user: str, password: str) -> None:
        """A role that must log in with `password` (see PASSWORD_GROUP)."""
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {} IN ROLE {}").format(
                sql.Identifier(user), sql.Literal(password), sql.Identifier(PASSWORD_GROUP)))

    def stop(self) -> None:
        if self.root is None:
            return
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(predicate: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
