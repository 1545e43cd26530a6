"""The driver's wake-up: a FIFO beside the journal through which a command says "look at the inbox now".

It carries nothing (the inbox rows stay the record): a submit's first sbatch and a cancel's scancel happen at once
instead of at the next poll. A lost wake-up (no driver yet, the FIFO deleted or unwritable) costs at most one poll
interval, because the poll stays the safety net. A wake-up never makes the driver call squeue (``Router.nudge``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import stat
import threading
import time
from pathlib import Path

__all__ = ["WakeChannel", "wake", "wake_path", "wake_problem"]

log = logging.getLogger(__name__)

SLICE_SECONDS = 0.2
"""A sleep waits on the FIFO in slices this long, so a stop asked from another thread is seen within one."""


def wake_path(journal_path: Path) -> Path:
    """The wake-up FIFO of a journal: beside it in the state dir."""
    return journal_path.with_name(journal_path.name + ".wake")


def wake(journal_path: Path) -> bool:
    """Tell the driver of ``journal_path`` to look at its inbox now; False if nobody was told (no driver listens,
    or the FIFO is gone or unwritable, or something else is at its path: the driver's next poll reads the inbox
    anyway). Never blocks, and writes into nothing but a FIFO (a regular file put in its place is left as it is)."""
    try:
        fd = os.open(wake_path(journal_path), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no driver has it open; ENOENT: deleted; EACCES: unwritable; EISDIR: a directory; ...
        return False
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False  # no driver reads a regular file (or a device): nobody is told
        os.write(fd, b"\0")
    except BlockingIOError:
        return True  # the FIFO is full of wake-ups the driver has not read yet: it is woken already
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def wake_problem(journal_path: Path) -> str | None:
    """Why a command cannot wake this journal's driver (None when it can): for ``driver status``."""
    path = wake_path(journal_path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"the wake-up FIFO {path} is missing"
    except OSError as exc:
        return f"the wake-up FIFO {path} cannot be read ({exc.strerror})"
    if not stat.S_ISFIFO(mode):
        return f"{path} is not a FIFO"
    if not os.access(path, os.W_OK):
        return f"the wake-up FIFO {path} is not writable"
    return None


class WakeChannel:
    """The driver's end of the FIFO: made (if missing) and opened by ``open()``; ``sleep`` waits on it."""

    def __init__(self, journal_path: Path, stop: threading.Event) -> None:
        self.path = wake_path(journal_path)
        self.stop = stop
        self._fd: int | None = None
        self._woken = False

    def open(self) -> None:
        """Make the FIFO (owner only) and open it read-write, non-blocking (read-write so it never reads as
        closed between writers). A FIFO that cannot be made or opened is logged: the poll drives alone."""
        try:
            with contextlib.suppress(FileExistsError):
                os.mkfifo(self.path, 0o600)
            if not stat.S_ISFIFO(os.stat(self.path).st_mode):
                raise OSError(errno.EEXIST, "not a FIFO")
            self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        except OSError as exc:
            log.warning("no wake-up channel (%s: %s): the inbox is read at each poll only", self.path, exc)
            self._fd = None

    def close(self) -> None:
        """Stop listening (the FIFO stays: the next driver opens it again)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def sleep(self, seconds: float) -> None:
        """Wait up to ``seconds``: less if a command wakes the driver, or ``stop`` is set."""
        end = time.monotonic() + seconds
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            if self._fd is None:
                self.stop.wait(left)
                continue
            ready, _, _ = select.select([self._fd], [], [], min(left, SLICE_SECONDS))
            if ready and self._drain():
                return

    def _drain(self) -> bool:
        assert self._fd is not None
        got = False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._fd, 4096):
                got = True
        self._woken = self._woken or got
        return got

    def woken(self) -> bool:
        """True once per batch of wake-ups (a burst of submits is answered together)."""
        if self._fd is not None:
            self._drain()
        woken, self._woken = self._woken, False
        return woken
