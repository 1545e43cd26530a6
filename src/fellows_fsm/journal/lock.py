"""The driver lock: one router drives a journal at a time, by an flock on ``<journal>.lock``.

The kernel releases the flock when its holder dies, however it dies. The lock file holds the owner's record
(``DriverOwner``: pid, host, since, kind, log, last tick), which outlives the owner: the next driver reads from it
when the journal was last watched, and ``status`` names the driver from it. ``lock_held`` probes the lock without
keeping it. Journal (journal.py) takes these methods from ``DriverLock``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import attrs

from fellows_fsm.errors import JournalBusy
from fellows_fsm.journal.statefs import check_room

__all__ = ["DriverLock", "DriverOwner", "lock_held"]


RECORD_BYTES = 1024
"""The owner record's length in the lock file (padded with spaces): one write of it replaces the last."""


class DriverLock:
    """The driver lock of the journal at ``path`` (a mixin of Journal): take it, beat it, probe it, release it."""

    path: Path
    _lock_file: Any = None
    """The open driver lock file while this Journal holds the lock."""
    _owner: DriverOwner | None = None
    last_watched: float | None = None
    """When the journal's previous driver last ticked (read from the lock file as the lock is taken)."""
    ended_uncleanly: bool = False
    """The previous driver did not release the lock itself (killed, or its machine went down): read from the lock
    file as the lock is taken; store.py then reads every page before this driver writes."""

    @property
    def lock_path(self) -> Path:
        """The file whose flock marks the one router that drives this journal."""
        return self.path.with_name(self.path.name + ".lock")

    def acquire_driver(self, *, kind: str = "in-process", log: str | None = None, at: float | None = None) -> None:
        """Become the one router driving this journal, or raise JournalBusy naming the holder.

        The lock file then holds the owner's record (pid, host, since, kind, log, last tick: ``DriverOwner``),
        which outlives the owner: the next driver reads from it when the journal was last watched.
        """
        if self._lock_file is not None:
            return
        check_room(self.lock_path.parent)  # a driver that could journal nothing takes no lock (and ticks nothing)
        handle = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = DriverOwner.parse(handle.read())
            handle.close()
            holder = owner.describe() if owner is not None else "an unknown process"
            raise JournalBusy(
                holder,
                f"journal {self.path} is driven by another router ({holder}); stop it, or read with "
                "`fellows-fsm status`",
            ) from None
        handle.seek(0)
        previous = DriverOwner.parse(handle.read())
        self.last_watched = previous.last_tick if previous is not None else None
        self.ended_uncleanly = previous is not None and previous.ended is None
        self._lock_file = handle
        self._owner = DriverOwner(
            pid=os.getpid(),
            host=socket.gethostname(),
            since=time.time() if at is None else at,
            kind=kind,
            log=log,
            last_tick=self.last_watched,
        )
        self._write_owner()

    def beat(self, at: float) -> None:
        """Note in the owner record that the driver ticked at ``at`` (what the next driver counts as watched)."""
        if self._lock_file is not None and self._owner is not None:
            self._owner = attrs.evolve(self._owner, last_tick=at)
            self._write_owner()

    def _write_owner(self) -> None:
        handle, owner = self._lock_file, self._owner
        assert handle is not None
        assert owner is not None
        try:
            # Overwritten in place at one length, never truncated first: a reader (driver status, a starter waiting
            # for the record) never sees it empty or half written, though each tick rewrites it. Through a second
            # descriptor: the lock's own is in append mode, where every write lands at the end.
            data = owner.dump().ljust(RECORD_BYTES).encode()
            fd = os.open(self.lock_path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except OSError:
            pass  # the record is for people and the next driver; a full disk must not stop the walk

    @property
    def driving(self) -> bool:
        """True while this Journal holds the driver lock."""
        return self._lock_file is not None

    def owner(self) -> DriverOwner | None:
        """The driver lock's owner record as the lock file has it (of a live driver, or of the last one)."""
        try:
            return DriverOwner.parse(self.lock_path.read_text(encoding="utf-8"))
        except OSError:
            return None

    def driver_alive(self) -> bool:
        """Does some process hold the driver lock now (this one included)? A probe: it never keeps the lock."""
        if self._lock_file is not None:
            return True
        return lock_held(self.lock_path)

    def release_driver(self) -> None:
        """Stop driving the journal (the lock is also released when the process dies)."""
        if self._lock_file is not None:
            if self._owner is not None:  # ended cleanly: the next driver need not read every page
                self._owner = attrs.evolve(self._owner, ended=time.time())
                self._write_owner()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
            self._owner = None


def lock_held(lock_path: Path) -> bool:
    """Does a process hold the driver lock at ``lock_path``? Probed with a non-blocking flock, released at once."""
    try:
        handle = open(lock_path, encoding="utf-8")  # noqa: SIM115 - closed below; read-only works on a read-only mount
    except OSError:
        return False  # no lock file: nobody ever drove this journal
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        handle.close()  # closing releases a lock the probe took
    return False


@attrs.frozen
class DriverOwner:
    """What the driver lock file says of the process that holds (or last held) the lock."""

    pid: int
    host: str
    since: float
    kind: str = "in-process"
    """``background`` (the driver process started on demand) or ``in-process`` (a program driving itself)."""
    log: str | None = None
    last_tick: float | None = None
    """When it last ticked: time after this, until the next driver ticks, was watched by no one."""
    ended: float | None = None
    """When it let the lock go itself (None while it holds it, or if it died holding it)."""

    def dump(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def parse(cls, text: str) -> DriverOwner | None:
        """The record from a lock file's text (None if empty or unreadable; the old "pid N on host" form too)."""
        text = text.strip()
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                pid=int(data["pid"]),
                host=str(data["host"]),
                since=float(data["since"]),
                kind=str(data.get("kind", "in-process")),
                log=data.get("log"),
                last_tick=None if data.get("last_tick") is None else float(data["last_tick"]),
                ended=None if data.get("ended") is None else float(data["ended"]),
            )
        except (ValueError, KeyError, TypeError):
            words = text.split()
            if len(words) == 4 and words[0] == "pid" and words[1].isdigit():
                return cls(pid=int(words[1]), host=words[3], since=0.0)
            return None

    def describe(self) -> str:
        """``pid 42 on node1`` (what people and older messages read)."""
        return f"pid {self.pid} on {self.host}"
