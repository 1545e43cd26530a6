"""A handoff, as the driver follows it on any lane a dispatch is handed to: under way (``Handoff``: asked without
blocking whether it ended), how it ended (``HandoffResult``), and the files it keeps beside the journal while it runs
(``HandoffFiles``). These are the seam's values (lanes/base.py: ``HandoffLane``); a kind runs its handoff as it
must (the command kind as a process, lanes/command/process.py; the gcp-batch kind as a create call).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import attrs

__all__ = [
    "MARK_BYTES",
    "CompletedHandoff",
    "Handoff",
    "HandoffFiles",
    "HandoffResult",
    "LogsWay",
    "Started",
    "unknown_note",
]

MARK_BYTES = 32
"""The size of the status file the router writes before the wrapper starts ("new", padded), rewritten in place."""


@attrs.frozen
class LogsWay:
    """How a lane shows a paid job's logs (``fellows-fsm logs``): an argv to run with its environment (a command
    lane's ``logs`` template, filled), or one line saying where they are (``where``) when the lane cannot show them."""

    argv: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = None
    where: str = ""
    timeout_seconds: float = 600.0


@attrs.frozen
class HandoffResult:
    """What one run of a lane's command did."""

    argv: tuple[str, ...]
    exit_status: int | None
    """None when the wrapper was lost (killed from outside) before it could write how the command ended."""
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_status == 0

    @property
    def lost(self) -> bool:
        """True when nobody can tell how the command ended (its wrapper died without writing the status)."""
        return self.exit_status is None


@attrs.frozen
class Started:
    """What a previous driver journaled of a handoff it started, for the lane to adopt it after a restart."""

    command: tuple[str, ...]
    """What the handoff was, as the lane's ``command`` said then (a command lane: its argv)."""
    pid: int | None
    """Its process, if it ran as one and the pid was journaled."""
    at: float
    """When it started."""


@attrs.frozen
class HandoffFiles:
    """Where one dispatch's handoff keeps its output and exit status (next to the journal)."""

    directory: Path
    dispatch_id: str

    @property
    def stdout(self) -> Path:
        """The command's standard output."""
        return self.directory / f"{self.dispatch_id}.out"

    @property
    def stderr(self) -> Path:
        """The command's standard error."""
        return self.directory / f"{self.dispatch_id}.err"

    @property
    def status(self) -> Path:
        """The command's exit status, written by the wrapper when it ends."""
        return self.directory / f"{self.dispatch_id}.status"

    @property
    def job(self) -> Path:
        """The job's values (JSON, by placeholder name) as the handoff got them in its environment, kept so its
        paid job can be followed and cancelled with them after a restart (lanes/command/lane.py)."""
        return self.directory / f"{self.dispatch_id}.job.json"

    @property
    def mark(self) -> Path:
        """The status file before the command ends: "new" (written here), "run" (once the wrapper started)."""
        return self.directory / f"{self.dispatch_id}.status.tmp"

    def prepare(self) -> None:
        """Make every file the handoff will write, before anything is journaled or started: on a full disk this
        fails (OSError) while nothing has run, and once it succeeded the wrapper needs no new block to record."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.status.unlink(missing_ok=True)
        for path in (self.stdout, self.stderr):
            path.write_bytes(b"")
        self.mark.write_bytes(b"new".ljust(MARK_BYTES))

    def remove(self, *, keep_output: bool = False, keep_job: bool = False) -> None:
        """Remove the handoff's files once nothing needs them (its end is journaled, output included): all but its
        output when ``keep_output`` (a lost command, whose output no one read to its end), all but its job's values
        when ``keep_job`` (a paid job still followed or being deleted). Best effort: a file left is only a file."""
        kept = {self.stdout, self.stderr} if keep_output else set()
        kept |= {self.job} if keep_job else set()
        for path in (self.stdout, self.stderr, self.status, self.mark, self.job):
            if path not in kept:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)

    def started(self) -> bool | None:
        """Did the wrapper start (True: it may have run the command), or surely not (False: still "new")? None
        when there is no trace either way (no file)."""
        if self.status.exists():
            return True
        try:
            mark = self.mark.read_bytes()
        except OSError:
            return None
        return not mark.startswith(b"new")

    def marked_pid(self) -> int | None:
        """The wrapper's pid (its process group) as it marked it on starting, if it did."""
        try:
            words = self.mark.read_bytes().split()
        except OSError:
            return None
        return int(words[1]) if len(words) > 1 and words[0] == b"run" and words[1].isdigit() else None

    def read_status(self) -> int | None:
        """The exit status the wrapper wrote, or None if it has not (yet)."""
        try:
            return int(self.status.read_text().strip())
        except (OSError, ValueError):
            return None

    def read(self, path: Path) -> str:
        """One output file's text ('' if missing), with undecodable bytes replaced."""
        try:
            return path.read_bytes().decode(errors="replace")
        except OSError:
            return ""


class Handoff(Protocol):
    """A handoff command under way; the router asks it, without blocking, whether it has ended."""

    @property
    def pid(self) -> int | None:
        """The process (group) id of the running command, if it runs as a process."""
        ...

    def result(self, now: float) -> HandoffResult | None:
        """The result once the command ended (or timed out and was killed); None while it runs."""
        ...


@attrs.frozen
class CompletedHandoff:
    """A handoff that ended as soon as it began (an in-process lane, or one found done by its probe)."""

    done: HandoffResult
    pid: int | None = None

    def result(self, now: float) -> HandoffResult | None:
        """The result, at once."""
        return self.done


def unknown_note(lane_name: str, dispatch_id: str, output: Path) -> str:
    """What a user reads of a handoff whose fate nobody can know, and what to check."""
    return (
        f"{lane_name} command's wrapper was killed before it could record how the command ended, and the lane has "
        f"no probe: check {lane_name} for a job of dispatch {dispatch_id} (its output: {output}); it is never "
        "run again"
    )
