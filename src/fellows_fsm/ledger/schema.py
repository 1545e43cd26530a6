"""The ledger's schema: the SQL migrations shipped beside this module (migrations/NNNN_name.sql), applied in order,
each in one transaction with its ``schema_version`` row, by the first fellows-fsm that connects.

Two machines starting at once cannot both apply a migration: each takes a transaction-level advisory lock first.
A ledger whose schema is newer than the newest migration here is refused (``LedgerRefused``: upgrade fellows-fsm on
this machine); it is never written to.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

import attrs

from fellows_fsm.errors import LedgerRefused

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "Migration", "applied_version", "migrate", "newest"]

_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")
_LOCK = 4_242_042
"""The advisory lock key migrations serialize on (any number; this one is the issue's)."""


@attrs.frozen
class Migration:
    """One migration file: its version (the file's number) and its SQL."""

    version: int
    name: str
    sql: str


def _load() -> tuple[Migration, ...]:
    found = []
    for item in resources.files("fellows_fsm.ledger").joinpath("migrations").iterdir():
        match = _FILE.fullmatch(item.name)
        if match:
            found.append(Migration(int(match.group(1)), item.name, item.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):  # a packaging mistake, never a user's
        raise RuntimeError(f"ledger migrations are not numbered 1..N: {[m.name for m in found]}")
    return tuple(found)


MIGRATIONS = _load()


def newest() -> int:
    """The newest schema version this fellows-fsm knows."""
    return MIGRATIONS[-1].version


def applied_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The ledger's schema version (0: an empty database)."""
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(version[0]) if version is not None else 0  # type: ignore[call-overload]


def migrate(conn: psycopg.Connection[tuple[object, ...]], shown: str) -> int:
    """Bring the ledger to ``newest()``: each missing migration in its own transaction, with its version row;
    return the version. ``LedgerRefused`` (nothing written) for a schema newer than this version knows."""
    version = applied_version(conn)
    if version == newest():
        return version
    if version > newest():
        raise LedgerRefused(
            f"[ledger] {shown} has schema version {version}, newer than this fellows-fsm knows ({newest()}); "
            "upgrade fellows-fsm on this machine (nothing was queued)"
        )
    for migration in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            now = applied_version(conn)
            if now > newest():
                raise LedgerRefused(
                    f"[ledger] {shown} has schema version {now}, newer than this fellows-fsm knows ({newest()}); "
                    "upgrade fellows-fsm on this machine (nothing was queued)"
                )
            if migration.version <= now:
                continue  # another machine applied it while this one waited for the lock
            conn.execute(migration.sql.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (migration.version,))
    return newest()
