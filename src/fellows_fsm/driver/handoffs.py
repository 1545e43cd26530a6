"""The lane commands of the dispatches one router drives: started exactly once (journaled first), each in a session
of its own, polled between ticks (a waitpid and a file read, never waited for), adopted after a restart, and their
results journaled. It decides nothing: the router says when a dispatch is handed off, and every step of a command
(its start, a re-run, its end) is a row of the table the router fires on the dispatch (``on_step``), journaled with
the command's argv or end; it writes no state itself.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

import attrs

from fellows_fsm.clock import Clock
from fellows_fsm.core.effects import Command, CommandEnd
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.paid import PaidMark
from fellows_fsm.core.vocab import LADDER_LANE, HandoffStatus, PaidStatus, Trigger
from fellows_fsm.errors import JournalError
from fellows_fsm.journal.statefs import full_error
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import HandoffLane, LaneSettings, PaidLane
from fellows_fsm.lanes.handoff import Handoff, HandoffFiles, HandoffResult, Started, unknown_note
from fellows_fsm.lanes.registry import handoff_lane
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["HANDOFF_CHECK_SECONDS", "Handoffs"]

log = logging.getLogger(__name__)

HANDOFF_CHECK_SECONDS = 0.05
"""Between polls, how often a running handoff command is looked at (a waitpid and a file read)."""


class Handoffs:
    """Every lane command of one router, by dispatch id."""

    def __init__(
        self,
        journal: Journal,
        clock: Clock,
        lanes: dict[str, HandoffLane],
        on_step: Callable[[str, str | CommandEnd, str, Command, PaidMark | None], None],
    ) -> None:
        self.journal = journal
        self.clock = clock
        self.lanes = lanes
        """This router's own lanes, by name."""
        self.pending: dict[str, tuple[str, JobSpec]] = {}
        """Dispatches pinned to a command lane whose command has not been started yet."""
        self.pinned_lanes: dict[str, HandoffLane] = {}
        """The lane each recovered lane-pinned dispatch was created with (when it differs from ours)."""
        self.running: dict[str, tuple[str, Handoff]] = {}
        """Commands under way (lane name, handle), by dispatch id."""
        self.on_step = on_step
        """Told of each step of a command (dispatch id, its trigger: hand_off, re_run, or how it ended, a CommandEnd
        its dispatch's table picks the row for; a one-line note, the command's argv or end): the router fires that
        row on the dispatch, which journals it with the command (and what its paid run is: its lane, GPUs, limit,
        price), before the command is started (again)."""
        self.context: dict[str, tuple[HandoffLane, JobSpec]] = {}
        """The lane and job of each command under way (to probe, or start again, one that was lost)."""
        self.ended: list[str] = []
        self.failed: list[str] = []
        """Commands that ended, and failure lines, since the router last reported them."""

    def files(self, dispatch_id: str) -> HandoffFiles:
        """Where a dispatch's command writes its output and exit status."""
        return HandoffFiles(self.journal.path.parent / "handoffs", dispatch_id)

    def lane_dispatch(self, dispatch_id: str) -> LaneDispatch:
        """A dispatch pinned straight to a command lane, where its journaled steps leave it (the model its lane
        command's rows are fired on)."""
        row = self.journal.dispatch(dispatch_id)
        if row is None or row.lane == LADDER_LANE:  # a ladder dispatch hands off from the router's own Dispatch
            raise JournalError(f"dispatch {dispatch_id!r} is not pinned to a command lane in {self.journal.path}")
        return LaneDispatch.restore(row.id, row.lane, state=row.state, history=self.journal.steps(row.id))

    def _step(
        self, dispatch_id: str, trigger: str | CommandEnd, note: str, command: Command, paid: PaidMark | None = None
    ) -> None:
        self.on_step(dispatch_id, trigger, note, command, paid)

    @staticmethod
    def paid_mark(lane: HandoffLane, lane_name: str, spec: JobSpec) -> PaidMark:
        """What a handoff's paid run is, journaled as it starts: its lane, GPUs, time limit and the lane's price."""
        price = lane.price_per_gpu_hour if isinstance(lane, PaidLane) else None
        return PaidMark(PaidStatus.STARTING, lane_name, spec.gpus, spec.time_limit_seconds, price)

    def lane_for(self, config: LaneSettings) -> HandoffLane:
        """The lane to run ``config`` with: this router's own if it is the same lane, else one its kind builds."""
        mine = self.lanes.get(config.name)
        if mine is not None and mine.settings == config:
            return mine
        return handoff_lane(config, state_dir=self.journal.path.parent)

    def start(self, dispatch_id: str, lane_name: str, spec: JobSpec, *, lane: HandoffLane | None = None) -> None:
        """Start a lane's command for a dispatch exactly once (journaled before it starts); never wait for it.

        After a restart a command already started is followed (running, its status written, or lost: then its
        probe decides, else its fate is unknown), never started again; only one that surely never started is.
        """
        self.pending.pop(dispatch_id, None)
        if dispatch_id in self.running:
            return
        if lane is None:
            lane = self.pinned_lanes.pop(dispatch_id, None) or self.lanes[lane_name]
        previous = self.journal.handoff(dispatch_id)
        if previous is not None and previous.status != HandoffStatus.STARTED:
            return  # already done, failed or unknown: never twice
        argv = lane.command(dispatch_id, spec)
        files = self.files(dispatch_id)
        self.context[dispatch_id] = (lane, spec)
        handoff: Handoff | None = None
        if previous is None:
            self._prepare(files)  # every file it writes, before it is journaled: a full disk stops it here
            self._step(
                dispatch_id,
                Trigger.HAND_OFF,
                f"lane {lane_name}",
                Command(HandoffStatus.STARTED, lane_name, argv),
                self.paid_mark(lane, lane_name, spec),
            )
        else:
            # A router died while the command ran: follow it (running, ended, or lost).
            was = Started(tuple(previous.argv), previous.pid, previous.started_at)
            handoff = lane.adopt(dispatch_id, spec, files, was)
        if handoff is None:  # journaled as started, and surely not started yet (its mark still says so)
            handoff = self._spawn(dispatch_id, lane, spec)
        self.running[dispatch_id] = (lane_name, handoff)

    def _prepare(self, files: HandoffFiles) -> None:
        try:
            files.prepare()
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise full_error(files.directory) from None
            raise JournalError(
                f"cannot make the handoff's files in {files.directory}: {exc.strerror}; nothing was started (free "
                "space there, then run the command again)"
            ) from None

    def _spawn(self, dispatch_id: str, lane: HandoffLane, spec: JobSpec) -> Handoff:
        handoff = lane.start(dispatch_id, spec, self.files(dispatch_id), now=self.clock.now())
        if handoff.pid is not None:
            self.journal.set_handoff_pid(dispatch_id, handoff.pid)
        return handoff

    def _rerun(self, dispatch_id: str, lane_name: str) -> Handoff:
        """The lane's probe says a lost command made no job: start it again (the re_run step, journaled first)."""
        lane, spec = self.context[dispatch_id]
        argv = lane.command(dispatch_id, spec)
        self._prepare(self.files(dispatch_id))
        note = f"{lane_name}'s probe finds no job of its lost command: run again"
        started = Command(HandoffStatus.STARTED, lane_name, argv)
        self._step(dispatch_id, Trigger.RE_RUN, note, started, self.paid_mark(lane, lane_name, spec))
        return self._spawn(dispatch_id, lane, spec)

    def _settle_lost(self, dispatch_id: str, lane_name: str, result: HandoffResult) -> HandoffResult | None:
        """A lost command's fate from the lane's probe: found (exit 0), not found (None: it was started again),
        or still unknown (no probe)."""
        lane, spec = self.context[dispatch_id]
        found = lane.already_has(dispatch_id, spec)
        if found is None:
            return result
        if found:
            return attrs.evolve(result, exit_status=0, stderr=f"{result.stderr}\n(found by the lane's probe)")
        log.warning(
            "dispatch %s: %s's probe finds no job of its lost command: running it again", dispatch_id, lane_name
        )
        self.running[dispatch_id] = (lane_name, self._rerun(dispatch_id, lane_name))
        return None

    def wait(self, *, sleep: Callable[[float], None] = time.sleep) -> None:
        """Block until every running handoff command has ended and is recorded (each is bounded by its timeout)."""
        while self.running:
            self.reap()
            if self.running:
                sleep(HANDOFF_CHECK_SECONDS)

    def reap(self) -> list[str]:
        """Record every handoff command that has ended (or timed out: its group is killed); no SLURM call."""
        now = self.clock.now()
        ended = []
        for dispatch_id, (lane_name, handoff) in list(self.running.items()):
            result = handoff.result(now)
            if result is None:
                continue
            if result.lost:
                settled = self._settle_lost(dispatch_id, lane_name, result)
                if settled is None:
                    continue
                result = settled
            status = (
                HandoffStatus.UNKNOWN if result.lost else (HandoffStatus.DONE if result.ok else HandoffStatus.FAILED)
            )
            note = self._note(dispatch_id, lane_name, result)
            end = Command(status, exit_status=result.exit_status, stdout=result.stdout, stderr=result.stderr)
            lane = self.context[dispatch_id][0]
            followed = isinstance(lane, PaidLane) and lane.follows  # (its table's rows: paid, paid_unknown)
            if status is HandoffStatus.UNKNOWN and followed:  # its status may tell: asked each poll (PAID_UNKNOWN)
                note = (
                    f"{lane_name} command's wrapper was killed before it could record how the command ended, and the "
                    f"lane has no probe: never run again; {lane_name}'s status is asked each poll until it tells "
                    "(counted at its worst case till then; cancel deletes it)"
                )
            self._step(dispatch_id, CommandEnd(status, followed), note, end)  # its end and its step, together
            followed = followed and status is not HandoffStatus.FAILED  # (the lane has, or may have, its job)
            self.files(dispatch_id).remove(keep_output=result.lost, keep_job=followed)  # (its end is journaled)
            del self.running[dispatch_id]
            self.context.pop(dispatch_id, None)
            ended.append(dispatch_id)
            self.ended.append(dispatch_id)
            if not result.ok:
                self.failed.append(f"dispatch {dispatch_id}: {note}")
        return ended

    def _note(self, dispatch_id: str, lane_name: str, result: HandoffResult) -> str:
        """The one line the handoff's step carries: how it ended, or, when unknown, what to check."""
        if result.lost:
            return unknown_note(lane_name, dispatch_id, self.files(dispatch_id).stdout)
        last = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return f"{lane_name} command exited {result.exit_status}" + ("" if result.ok else f": {last}")
