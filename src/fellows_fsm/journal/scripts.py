"""The script of each dispatch as it was at submit, kept in the state dir (``scripts/<dispatch id>/<name>``): written
before the dispatch's row is journaled, read by every rung's sbatch and by a paid lane, removed once the dispatch is
final. SLURM keeps a queued job's script as it was at sbatch; so does a walk, from rung to rung.

It never reads the user's script after ``keep``, and never writes anywhere but the state dir.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from fellows_fsm.errors import JournalError, UsageError
from fellows_fsm.journal.statefs import full_error
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["MAX_SCRIPT_BYTES", "ORPHAN_AGE_SECONDS", "SCRIPTS", "drop_script", "keep_script", "sweep_scripts"]

log = logging.getLogger(__name__)

SCRIPTS = "scripts"
"""The state dir's folder of kept scripts, one folder per live dispatch."""
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
"""sbatch's own limit on a batch script."""
ORPHAN_AGE_SECONDS = 3600.0
"""How old a kept script with no dispatch row must be before a driver start removes it: a ``submit`` keeps the copy a
moment before it journals the row, so a younger one may belong to a submit in flight."""
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def keep_script(state_dir: Path, dispatch_id: str, spec: JobSpec) -> JobSpec:
    """Copy ``spec``'s script into the state dir for dispatch ``dispatch_id`` (flushed to disk, as the journal is)
    and return the spec that reads it (``kept_script``); a script that cannot be read is not kept (its first sbatch
    says so). Raises UsageError (over sbatch's limit), JournalFull (no room) or JournalError: nothing is kept then."""
    source = Path(spec.script)
    if not source.is_absolute():
        source = Path(spec.workdir or os.getcwd()) / source
    try:
        content = source.read_bytes()
        mode = source.stat().st_mode
    except OSError as exc:
        # Nothing to keep: the first sbatch reads the script itself and refuses it (REFUSED: nothing is queued).
        log.info("script %s cannot be read (%s): none kept for dispatch %s", spec.script, exc.strerror, dispatch_id)
        return spec
    if len(content) > MAX_SCRIPT_BYTES:
        raise UsageError(f"script {spec.script} is over sbatch's 4 MB limit; make it smaller: nothing was queued")
    folder = state_dir / SCRIPTS / dispatch_id
    kept = folder / source.name
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = folder / f".{source.name}.partial"
        # The owner's read and write, and execute where the script had it (a lane command may run it as it is).
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 | (mode & 0o100))
        try:
            _write_all(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, kept)
        _fsync_dir(folder)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        if exc.errno in _FULL:
            raise full_error(state_dir) from None
        raise JournalError(
            f"cannot keep a copy of script {spec.script} in the state dir {state_dir} ({exc.strerror}): nothing was "
            "queued; check that directory"
        ) from None
    return attrs.evolve(spec, kept_script=str(kept))


def drop_script(state_dir: Path, dispatch_id: str) -> None:
    """Remove dispatch ``dispatch_id``'s kept script (it is final: nothing submits it again); none is fine."""
    folder = state_dir / SCRIPTS / dispatch_id
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove the kept script of dispatch %s (%s): %s", dispatch_id, folder, exc.strerror)


def sweep_scripts(state_dir: Path, live: Callable[[str], bool | None], *, now: float | None = None) -> list[str]:
    """Remove the kept scripts nothing will submit again; return their dispatch ids. ``live(id)`` is True for a live
    dispatch, False for a final one (its copy outlived a process killed between the final commit and the removal)
    and None for no row (a ``submit`` killed between the copy and the row): removed once older than
    ``ORPHAN_AGE_SECONDS``. Run at a driver start."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        folders = sorted((state_dir / SCRIPTS).iterdir())
    except OSError:
        return removed
    for folder in folders:
        state = live(folder.name)
        if state:
            continue
        if state is None:
            try:
                if now - folder.stat().st_mtime < ORPHAN_AGE_SECONDS:
                    continue
            except OSError:
                continue
        drop_script(state_dir, folder.name)
        removed.append(folder.name)
    return removed


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
