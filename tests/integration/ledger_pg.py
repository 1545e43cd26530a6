"""The real local PostgreSQL for the shared ledger's tests: brought up once per session by scripts/dev-postgres, a
fresh database per test (the role ``fellows`` may create them), dropped after it.

Outside CI an unavailable server skips these tests; with CI=true it fails them (never a silent skip). The password
reaches libpq through PGPASSFILE (set for the session, so background drivers inherit it), never an argv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
DEV_POSTGRES = REPO / "scripts" / "dev-postgres"


def _unavailable(why: str) -> None:
    """Skip outside CI; in CI a server that cannot come up is a failure."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the local PostgreSQL is required in CI: {why}", pytrace=False)
    pytest.skip(f"no local PostgreSQL: {why}")


@attrs.frozen
class Postgres:
    """The running server: the role's URL (no password in it), the password (for password_env tests)."""

    url: str
    password: str

    def url_of(self, database: str) -> str:
        """The URL of another database on the same server."""
        return self.url.rsplit("/", 1)[0] + "/" + database

    def connect(self, url: str | None = None) -> Any:
        """A psycopg connection (autocommit) as the role, for a test's own look at the rows."""
        import psycopg  # noqa: PLC0415

        return psycopg.connect(url or self.url, autocommit=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The dev PostgreSQL, up for the session; stopped at the end unless FELLOWS_PG_KEEP=1."""
    try:
        import psycopg  # noqa: F401, PLC0415
    except ImportError:
        _unavailable("psycopg is not installed: pip install -e '.[ledger]'")
    if os.geteuid() != 0:
        _unavailable("scripts/dev-postgres needs root")
    try:
        up = subprocess.run([str(DEV_POSTGRES), "start"], capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        _unavailable("scripts/dev-postgres start did not finish within 600 s")
    if up.returncode != 0:
        _unavailable(f"scripts/dev-postgres start exited {up.returncode}: {up.stderr.strip()[-2000:]}")
    env = subprocess.run([str(DEV_POSTGRES), "env"], capture_output=True, text=True, timeout=30, check=True).stdout
    values = dict(line.removeprefix("export ").split("=", 1) for line in env.splitlines() if line.startswith("export "))
    patch = pytest.MonkeyPatch()
    patch.setenv("PGPASSFILE", values["PGPASSFILE"])
    patch.delenv("PGPASSWORD", raising=False)
    password = Path(values["FELLOWS_PG_PASSWORD_FILE"]).read_text(encoding="utf-8").strip()
    try:
        yield Postgres(values["FELLOWS_PG_URL"], password)
    finally:
        patch.undo()
        if os.environ.get("FELLOWS_PG_KEEP") != "1":
            subprocess.run([str(DEV_POSTGRES), "stop"], capture_output=True, timeout=120, check=False)


@pytest.fixture
def ledger_url(postgres: Postgres) -> Iterator[str]:
    """A fresh, empty database for one test (the ledger's migrations run at its first connection)."""
    name = f"ledger_{uuid.uuid4().hex[:12]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres.url_of(name)
    finally:
        with postgres.connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def frozen_server(postgres: Postgres) -> Iterator[list[int]]:
    """The test's own PostgreSQL server frozen (SIGSTOP: its sockets stay open, nothing is answered) inside the
    block, thawed (SIGCONT) after it whatever happens; yields its process ids (the postmaster, the parent of a
    backend of ours, then its children: this server only, never another one on the machine)."""
    with postgres.connect() as conn:  # its parent read while it lives (a closed connection's backend exits)
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        postmaster = _ppid(backend)
    assert postmaster > 1, f"no postmaster above backend {backend}"
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(int(p.name)) == postmaster]
    pids = [postmaster, *children]
    held = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            held.append(pid)
        yield pids
    finally:
        for pid in held:
            with suppress(ProcessLookupError):  # a backend that was exiting, reaped once its postmaster ran again
                os.kill(pid, signal.SIGCONT)


def stopped(pid: int) -> bool:
    """Is process ``pid`` stopped (SIGSTOP)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _ppid(pid: int) -> int:
    """The parent of process ``pid`` (-1: gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])
