"""The journal's SQLite file: opened (created, its schema checked and upgraded, its pages checked), written in
transactions, and read with a retry while another process sets it up.

WAL mode on a local disk; SQLite's rollback journal on a network filesystem when allowed (statefs.py); read-only
when this user cannot write it. SQLite's own errors become JournalError saying what to do (a damaged file keeps
its live jobs on the cluster). Journal (journal.py) builds its rows and queries on ``JournalFile``. One connection
serves every thread, one use at a time (a lock).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fellows_fsm.errors import JournalError
from fellows_fsm.journal.check import TABLES, check_due, check_pages, clear_check_due, mark_check_due
from fellows_fsm.journal.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from fellows_fsm.journal.statefs import FULL_BELOW_BYTES, check_room, free_bytes, full_error, refuse_network_fs

__all__ = ["JournalFile", "damaged"]

RECENT_CHECKED = 20
"""How many of the most recent dispatches opening to write reads whole (as ``status`` shows them: queries.py)."""


class JournalFile:
    """The SQLite file at ``path``: its connection, its transactions and savepoints, and its reads."""

    def __init__(self, path: Path | str, *, readonly: bool = False, allow_network_fs: bool = False) -> None:
        """Open (or create) the journal at ``path``; ``readonly`` opens an existing one to read only.

        A journal this user cannot write is refused for driving with a message that says so (not "corrupt":
        that advice would orphan its live jobs), and still opens read-only for status and history. So is one on
        a network filesystem (statefs.py), unless ``allow_network_fs``: then SQLite keeps a rollback journal,
        not WAL (which needs shared memory on one host).
        """
        self.path = Path(path)
        self._directory = self.path.parent  # what every write transaction checks for room (one Path, not one each)
        self.wal = readonly or _wal_ok(self.path, allow_network_fs=allow_network_fs)
        readonly = readonly and self.path.exists()  # a journal that does not exist yet is created, empty
        self.readonly = readonly
        # One connection for every thread of the process, used by one at a time: a second connection would read
        # every row again to open (``_check_pages``), and a lock keeps a batch's savepoints in the thread that
        # opened the batch (a thread's read waits for another's transaction to commit).
        self._batching, self._conn_lock = False, threading.RLock()
        self._identity: tuple[int, int] | None = None
        if not readonly and self.path.exists() and not _writable(self.path):
            raise JournalError(
                f"journal {self.path} is read-only for this user; its dispatches can be read (status, history) but "
                "not driven: fix the permissions of the file and its folder, or run as the user who owns it"
            )
        setup = None
        try:
            if readonly:
                self._db = _open_readonly(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Two processes opening a new journal at once (two shells' submits) would both create it; WAL mode
                # and the schema are set up under an flock of their own, one process after the other.
                setup = open(self.path.with_name(self.path.name + ".setup-lock"), "a", encoding="utf-8")  # noqa: SIM115
                fcntl.flock(setup, fcntl.LOCK_EX)
                # A URI connection, so the archive is attached read-only (reads.py): a write transaction here
                # then never takes the archive's write lock (SQLite begins a read on a read-only attached file).
                self._db = sqlite3.connect(
                    self.path.resolve().as_uri(), uri=True, isolation_level=None, timeout=10.0, check_same_thread=False
                )
            self._db.row_factory = sqlite3.Row
            # Read and check before any write (WAL mode rewrites the header): a refused file stays as it was.
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION, *MIGRATIONS) or (readonly and version == 0):
                self._db.close()
                raise JournalError(
                    f"journal {self.path} has schema version {version}, this fellows-fsm reads "
                    f"{SCHEMA_VERSION}; use the fellows-fsm that wrote it, or drive it once with this one to upgrade it"
                )
            tables = self._db.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
            if version == 0 and tables:
                self._db.close()
                raise JournalError(
                    f"journal {self.path} is an SQLite file but not a fellows-fsm journal; "
                    "point state_dir elsewhere or move the file aside"
                )
            if not readonly:
                self._db.execute(f"PRAGMA journal_mode={'WAL' if self.wal else 'DELETE'}")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA foreign_keys=ON")
                if version == 0:
                    self._db.executescript(SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION};")
                for old in range(version, SCHEMA_VERSION) if version else ():
                    self._db.executescript(f"BEGIN; {MIGRATIONS[old]} PRAGMA user_version={old + 1}; COMMIT;")
            self._db.execute("SELECT 1 FROM dispatches LIMIT 1").fetchall()
            if not readonly and version:
                # Before anything this process writes (and before any sbatch it would journal): what it reads is
                # read first, so a damaged page or row there refuses the command here, not after its job was
                # queued. The whole file is read only where damage may be (check_due, after a full disk; a driver
                # after one that did not end cleanly: store.py) or when asked (`fellows-fsm journal check`).
                self._check_on_open()
            self._identity = _identity(self.path)
        except sqlite3.DatabaseError as exc:
            self._close_refused()
            raise _damaged_or_full(self.path, exc) from None
        except OSError as exc:
            self._close_refused()
            raise JournalError(f"journal {self.path} cannot be opened: {exc}") from None
        finally:
            if setup is not None:
                setup.close()  # releases the flock

    def _check_pages(self) -> None:
        """Raise sqlite3.DatabaseError if SQLite's quick_check finds a damaged page (every page is read once), or
        if a row cannot be read as ``status`` and the driver read it (text that is not UTF-8, which quick_check
        passes): every row of every table is read here, so what status refuses no command writes to."""
        check_pages(self._db)

    def _check_on_open(self) -> None:
        """Every page when a full check is due (check.py), else what a command reads (``_check_live``)."""
        if check_due(self.path):
            self._check_pages()
            clear_check_due(self.path)
        else:
            self._check_live()

    def _check_live(self) -> None:
        """Raise sqlite3.DatabaseError if what a command, ``status`` or a driver reads of the journal cannot be read:
        the meta table, every live dispatch, and the ``RECENT_CHECKED`` most recent dispatches with every row of
        theirs (through the indexes: the finished dispatches before them are not read, so this costs what the live
        ones cost)."""
        for _ in self._db.execute("SELECT * FROM meta"):
            pass
        ids = [r[0] for r in self._db.execute("SELECT id FROM dispatches WHERE final=0 ORDER BY created_at, id")]
        recent = "SELECT id FROM dispatches ORDER BY created_at DESC, id DESC LIMIT ?"
        ids += [r[0] for r in self._db.execute(recent, (RECENT_CHECKED,))]
        for dispatch_id in dict.fromkeys(ids):
            for _ in self._db.execute("SELECT * FROM dispatches WHERE id=?", (dispatch_id,)):
                pass
            for table in TABLES[2:]:  # a dispatch's own rows
                for _ in self._db.execute(f"SELECT * FROM {table} WHERE dispatch_id=?", (dispatch_id,)):  # noqa: S608 - our own table names
                    pass

    def check_all(self) -> None:
        """Read every page and every row (``fellows-fsm journal check``); JournalError names what is damaged."""
        try:
            with self._conn_lock:
                self._check_pages()
        except sqlite3.DatabaseError as exc:
            raise _damaged_or_full(self.path, exc) from None

    def _replaced(self) -> bool:
        """True if the file at ``path`` was deleted or replaced since this connection opened it."""
        return self._identity is not None and _identity(self.path) != self._identity

    def _close_refused(self) -> None:
        """Close the connection of a journal being refused (Python 3.13 warns about one left open)."""
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes in one transaction, committed on exit (each write is still its own savepoint).

        A side effect must never run before its row is committed: a step that announces one (a tick's rung changes:
        driver/executor.py, ``Executor._run_all``) has it run after the batch, never inside it. If the commit fails,
        JournalError is raised and none of the batch is kept.
        """
        with self._conn_lock:
            if self._batching:
                yield
                return
            self._batching = True
            self._after_batch: list[Callable[[], None]] = []
            try:
                with self._transaction():
                    yield
            except BaseException:
                self._after_batch.clear()  # nothing of the batch was kept
                raise
            finally:
                self._batching = False
            done, self._after_batch = self._after_batch, []
        for action in done:  # once committed, outside the lock
            action()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once what was written is committed: now, or at the end of the batch being written."""
        if self._batching:
            self._after_batch.append(action)
        else:
            action()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._conn_lock:
            if not self._batching:
                with self._transaction():
                    yield self._db
                return
            # Inside a batch: a savepoint, so one failed write is undone alone and its transition aborted.
            self._db.execute("SAVEPOINT step")
            try:
                yield self._db
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK TO step")
                raise self._write_failed(exc) from None
            except BaseException:
                self._db.execute("ROLLBACK TO step")
                raise
            finally:
                self._db.execute("RELEASE step")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT; any error rolls back, and SQLite's own errors become JournalError."""
        with self._conn_lock:
            try:
                check_room(self._directory)  # nothing is journaled (so nothing started) on a full disk
                self._db.execute("BEGIN IMMEDIATE")
                yield
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise self._write_failed(exc) from None
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _write_failed(self, exc: sqlite3.Error) -> JournalError:
        if _full(self.path, exc):
            mark_check_due(self.path)  # a write cut short by a full disk: the next open to write reads every page
            return full_error(self.path.parent)
        return JournalError(f"journal {self.path}: write failed: {exc}")

    def _read(self, query: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        """Run one read; a damaged page is a JournalError saying what to do, never a raw sqlite3 traceback."""
        for attempt in range(50):
            try:
                with self._conn_lock:
                    return self._db.execute(query, tuple(params)).fetchall()
            except sqlite3.ProgrammingError as exc:  # a misuse of this handle (closed, say), not a damaged file
                raise JournalError(
                    f"journal {self.path} cannot be read through this handle ({exc}); the file is not damaged: "
                    "open the journal again (e.g. a new Fellows)"
                ) from None
            except sqlite3.OperationalError as exc:
                # Busy is not damage: a WAL reader can be told so at once while another process sets the file up.
                if "locked" not in str(exc) or attempt == 49:
                    raise _damaged_or_full(self.path, exc) from None
                time.sleep(0.1)
            except sqlite3.DatabaseError as exc:
                raise damaged(self.path, exc) from None
        raise AssertionError("unreachable")


def _wal_ok(path: Path, *, allow_network_fs: bool) -> bool:
    """True on a local disk; False on a network filesystem when allowed (a rollback journal instead), else raise."""
    try:
        refuse_network_fs(path.parent)
    except JournalError:
        if not allow_network_fs:
            raise
        return False
    return True


def _writable(path: Path) -> bool:
    """True if this user may write the journal and create its -wal and -shm files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection; ``immutable`` when SQLite cannot keep its -shm file beside the journal."""
    uri = path.resolve().as_uri()
    if _writable(path) or (path.with_name(path.name + "-shm").exists() and os.access(path.parent, os.R_OK)):
        return sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=10.0, check_same_thread=False)
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, timeout=10.0, check_same_thread=False)


def _full(path: Path, exc: sqlite3.Error) -> bool:
    """Did SQLite fail for want of room (SQLITE_FULL, or an I/O error with the filesystem nearly full)?"""
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc):
        return True
    free = free_bytes(path.parent)
    return (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR) and free is not None and free < FULL_BELOW_BYTES


def _damaged_or_full(path: Path, exc: sqlite3.Error) -> JournalError:
    """A full disk is not damage (the advice to move a damaged journal aside would orphan its jobs)."""
    return full_error(path.parent) if _full(path, exc) else damaged(path, exc)


def damaged(path: Path, exc: Exception) -> JournalError:
    """The one line that says the file at ``path`` is damaged, and what to do (keep it)."""
    said = " ".join(str(exc).split())  # one line, whatever a damaged row's text holds
    return JournalError(
        f"journal {path} is unreadable or damaged ({said}); its live jobs are still on the cluster (their comments "
        "are fsm-<dispatch>-r<rung>, see `squeue --me -O JobID,Comment`): keep the file, and start a new one by "
        "pointing state_dir elsewhere"
    )
