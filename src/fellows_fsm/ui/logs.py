"""``fellows-fsm logs ID [--err] [-f]``: print the job's output file wherever it ran (slurm/logs.py says where it is
and reads it: here, or over its lane's ssh master), ``-f`` until the dispatch is final; a dispatch handed to a paid
lane shows what its lane offers (a command lane's ``logs`` template run, or one line saying where they are).

Exit codes: 0 printed, 2 no such dispatch, 30 no job yet (``NoJob``), 31 the file is missing or unreadable
(``LogMissing``, naming path and host), 32 the lane keeps the logs elsewhere (the line says where)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

import attrs
import click

from fellows_fsm.config.file import Config
from fellows_fsm.core.ladder import split_job_id
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.driver.inbox import lane_from_json
from fellows_fsm.errors import ConfigError, FellowsError, LaneError, LogMissing, NoJob, SchedulerError
from fellows_fsm.journal.queries import spec_of
from fellows_fsm.journal.schema import DispatchRow, HandoffRow
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import ShowsLogs
from fellows_fsm.lanes.registry import handoff_lane
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.slurm.logs import CHUNK_BYTES, OutputFiles, OutputPatterns, locate, read_chunk
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.ui import app
from fellows_fsm.ui.app import INTERRUPTED, config_of, config_option, find_row, main, open_journal

__all__ = ["ELSEWHERE", "FOLLOW_SECONDS", "logs", "show_logs"]

ELSEWHERE = 32
"""``logs``'s exit code when the lane keeps the job's logs elsewhere: its one line says where."""
FOLLOW_SECONDS = 1.0
"""How often ``logs -f`` reads the file again (and the journal, to see the dispatch end)."""


@attrs.define
class _Reader:
    """One job's file, read from the byte after the last one printed."""

    job_id: str
    runner: CommandRunner
    files: OutputFiles
    path: str
    offset: int = 0
    seen: bool = False

    def print_new(self, out: BinaryIO) -> None:
        """Print what was written since the last read (every chunk up to the end)."""
        while True:
            chunk = read_chunk(self.runner, self.path, self.offset)
            if chunk is None:
                return
            self.seen = True
            if chunk:
                out.write(chunk)
                out.flush()
                self.offset += len(chunk)
            if len(chunk) < CHUNK_BYTES:
                return

    def missing(self, row: DispatchRow) -> LogMissing:
        """The error of a file that is not there, naming it, its host and who said it is there."""
        yet = "" if row.final else " yet (the job has not started?)"
        return LogMissing(
            f"the {'error' if self.path == self.files.stderr and self.path != self.files.stdout else 'output'} file "
            f"{self.path} of SLURM job {self.job_id} (dispatch {row.id}; where {self.files.source} says) does not "
            f"exist {self.runner.transport.where}{yet}"
        )


def _slurm_settings(config: Config, lane: str) -> SlurmSettings:
    if lane == LADDER_LANE:
        return config.fellows
    for settings in config.other_slurm_lanes:
        if settings.name == lane:
            return settings
    raise ConfigError(f"SLURM lane {lane!r} of this job is not configured here; add its [lanes.{lane}] table back")


def _reader(config: Config, row: DispatchRow, *, stderr: bool) -> _Reader:
    """Where the dispatch's current job writes, asked of its cluster through the lane's own port."""
    assert row.job_id is not None
    lane, raw = split_job_id(row.job_id)
    settings = _slurm_settings(config, lane)
    port = app.make_scheduler(config) if lane == LADDER_LANE else app.make_lane_scheduler(config, settings)
    if not isinstance(port, SlurmScheduler):
        raise SchedulerError(f"logs reads a job's file through the real SLURM port, not {type(port).__name__}")
    spec = spec_of(row)
    remote = port.runner.transport.remote
    patterns = OutputPatterns.of(row.settings.get("output"), spec.extra_args)
    files = locate(
        port.runner,
        raw,
        patterns,
        name=spec.name,
        user=lambda: port.user,
        workdir=settings.remote_workdir if remote else spec.workdir,
    )
    return _Reader(row.job_id, port.runner, files, files.stderr if stderr else files.stdout)


def show_logs(
    config: Config,
    journal: Journal,
    dispatch_id: str,
    *,
    stderr: bool = False,
    follow: bool = False,
    out: BinaryIO,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the dispatch's job's file to ``out`` (``-f``: what it writes next too, until the dispatch is final);
    the exit code. Raises NoJob or LogMissing (one line each) when there is nothing to print."""
    reader: _Reader | None = None
    while True:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        handoff = journal.handoff(dispatch_id)
        if handoff is not None:
            return _lane_logs(config, row, handoff, follow=follow, out=out)
        if row.job_id is None:
            if not follow or row.final:
                how = f"ended {row.label} without one" if row.final else f"is {row.label}"
                raise NoJob(f"dispatch {row.id} has no SLURM job whose output there is: it {how}")
        else:
            if reader is None or reader.job_id != row.job_id:
                if reader is not None:
                    click.echo(f"fellows-fsm: note: dispatch {row.id} is now SLURM job {row.job_id}", err=True)
                reader = _reader(config, row, stderr=stderr)
            reader.print_new(out)  # the row was read first: once it is final, this read has the file's end
            if not follow or row.final:
                if not reader.seen:
                    raise reader.missing(row)
                return 0
        sleep(FOLLOW_SECONDS)


def _lane_logs(config: Config, row: DispatchRow, handoff: HandoffRow, *, follow: bool, out: BinaryIO) -> int:
    """What the paid lane shows: its ``logs`` argv run (its output copied as it comes), or where they are."""
    # The lane as configured now (a logs template added since is used), else as journaled with the dispatch.
    settings = config.lane_named(handoff.lane)
    journaled = row.settings.get("fallback")
    if settings is None and isinstance(journaled, dict) and journaled.get("name") == handoff.lane:
        settings = lane_from_json(journaled)
    if settings is None:
        raise ConfigError(f"lane {handoff.lane!r} of dispatch {row.id} is not configured here; add its table back")
    lane = handoff_lane(settings, state_dir=config.state_dir)
    if not isinstance(lane, ShowsLogs):
        click.echo(f"lane {handoff.lane} cannot show logs: look for job fsm-{row.id} with its own tools")
        return ELSEWHERE
    way = lane.logs(row.id, spec_of(row))
    if way.argv is None:
        click.echo(way.where)
        return ELSEWHERE
    try:
        process = subprocess.Popen(  # an argv of the lane's config, never a shell
            way.argv,
            env=None if way.env is None else dict(way.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,  # one group to end: a timeout or Ctrl-C ends what it started too
        )
    except OSError as exc:
        raise LaneError(f"[lanes.{handoff.lane}] logs {way.argv[0]!r} cannot run here: {exc.strerror}") from None
    assert process.stdout is not None
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    timer = None if follow else threading.Timer(way.timeout_seconds, kill)  # a silent hang is bounded too
    with process:
        if timer is not None:
            timer.start()
        try:
            while chunk := os.read(process.stdout.fileno(), 65536):
                out.write(chunk)
                out.flush()
            status = process.wait()
        except BaseException:  # Ctrl-C, or a closed stdout: its group goes with this command
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        finally:
            if timer is not None:
                timer.cancel()
    if killed.is_set():
        raise LaneError(f"[lanes.{handoff.lane}] logs ran past its {way.timeout_seconds:g} s (timeout_seconds): killed")
    if status != 0:
        raise LaneError(f"[lanes.{handoff.lane}] logs of dispatch {row.id} exited {status}")
    return 0


@main.command(short_help="Print a job's output file, wherever it ran.")
@click.argument("dispatch_id")  # an id or a unique prefix of one
@click.option("--err", "stderr", is_flag=True, help="The job's error file (its --error; else its output file).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing what the job writes until the dispatch ends.")
@config_option
@click.pass_context
def logs(ctx: click.Context, dispatch_id: str, stderr: bool, follow: bool) -> None:
    """Print the output file of DISPATCH_ID's job (its --output, or SLURM's slurm-<jobid>.out in its working
    directory; --err: its --error) wherever it ran: read here on a local cluster, over the lane's ssh master on a
    remote one. With -f, print what it writes next until the dispatch ends. A dispatch handed to a paid lane: the
    lane's logs command, or one line saying where its logs are (exit 32). Exit 30: no job yet; 31: the file is not
    there."""
    config = config_of(ctx)
    with open_journal(config, readonly=True) as journal:
        row = find_row(journal, dispatch_id)
        if follow:
            try:  # a dispatch followed to its end needs its driver
                app.say_started(app.start_driver(config, journal), config)
            except FellowsError as exc:
                click.echo(f"fellows-fsm: warning: {exc}", err=True)
        try:
            code = show_logs(config, journal, row.id, stderr=stderr, follow=follow, out=sys.stdout.buffer)
        except KeyboardInterrupt:
            ctx.exit(INTERRUPTED)  # only the printing stops: the job goes on
    ctx.exit(code)
