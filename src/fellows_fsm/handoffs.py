"""The lane commands of the dispatches one router drives: started exactly once (journaled first), each in a session
of its own, polled between ticks (a waitpid and a file read, never waited for), adopted after a restart, and their
results journaled. It decides nothing: the router says when a dispatch is handed off.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fellows_fsm.clock import Clock
from fellows_fsm.config import LaneConfig
from fellows_fsm.journal import Journal
from fellows_fsm.lanes import CommandLane, CompletedHandoff, Handoff, HandoffFiles, HandoffResult, lane_environment
from fellows_fsm.scheduler import JobSpec

__all__ = ["HANDOFF_CHECK_SECONDS", "Handoffs"]

HANDOFF_CHECK_SECONDS = 0.05
"""Between polls, how often a running handoff command is looked at (a waitpid and a file read)."""


class Handoffs:
    """Every lane command of one router, by dispatch id."""

    def __init__(self, journal: Journal, clock: Clock, lanes: dict[str, CommandLane]) -> None:
        self.journal = journal
        self.clock = clock
        self.lanes = lanes
        """This router's own lanes, by name."""
        self.pending: dict[str, tuple[str, JobSpec]] = {}
        """Dispatches pinned to a command lane whose command has not been started yet."""
        self.pinned_lanes: dict[str, CommandLane] = {}
        """The lane each recovered lane-pinned dispatch was created with (when it differs from ours)."""
        self.running: dict[str, tuple[str, Handoff]] = {}
        """Commands under way (lane name, handle), by dispatch id."""
        self.on_end: Callable[[str, bool, str], None] | None = None
        """Told of each command that ended (dispatch id, exit 0?, a one-line note), in the journal transaction that
        records it: a ladder dispatch takes its handed_off or handoff_failed step there."""
        self.ended: list[str] = []
        self.failed: list[str] = []
        """Commands that ended, and failure lines, since the router last reported them."""

    def files(self, dispatch_id: str) -> HandoffFiles:
        """Where a dispatch's command writes its output and exit status."""
        return HandoffFiles(self.journal.path.parent / "handoffs", dispatch_id)

    def lane_for(self, config: LaneConfig) -> CommandLane:
        """The lane to run ``config`` with: this router's own if it is the same lane, else one built for it."""
        mine = self.lanes.get(config.name)
        if mine is not None and mine.config == config:
            return mine
        return CommandLane(config)

    def start(self, dispatch_id: str, lane_name: str, spec: JobSpec, *, lane: CommandLane | None = None) -> None:
        """Start a lane's command for a dispatch exactly once (journaled before it starts); never wait for it."""
        self.pending.pop(dispatch_id, None)
        if dispatch_id in self.running:
            return
        if lane is None:
            lane = self.pinned_lanes.pop(dispatch_id, None) or self.lanes[lane_name]
        previous = self.journal.handoff(dispatch_id)
        if previous is not None and previous.status != "started":
            return  # already done or failed: never twice
        argv = lane.command(dispatch_id, spec)
        files = self.files(dispatch_id)
        now = self.clock.now()
        handoff: Handoff | None
        if previous is None:
            self.journal.start_handoff(dispatch_id, lane_name, argv, now)
            handoff = lane.start(argv, files, now=now, env=lane_environment(dispatch_id, spec))
            if handoff.pid is not None:
                self.journal.set_handoff_pid(dispatch_id, handoff.pid)
        else:
            # A router died while the command ran: follow it if it still runs or wrote its status.
            handoff = lane.adopt(tuple(previous.argv), files, pid=previous.pid, started_at=previous.started_at)
            if handoff is None and lane.already_has(dispatch_id, spec):
                handoff = CompletedHandoff(
                    HandoffResult(argv, 0, "", "(handoff found by the lane's probe after a restart)")
                )
            if handoff is None:
                # Nothing can tell whether it ran (the router died before the command's pid was journaled,
                # and no probe is configured): run it again. Exactly-once needs an idempotent command or a
                # probe; see docs/configuration.md.
                handoff = lane.start(argv, files, now=now, env=lane_environment(dispatch_id, spec))
                if handoff.pid is not None:
                    self.journal.set_handoff_pid(dispatch_id, handoff.pid)
        self.running[dispatch_id] = (lane_name, handoff)

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
            last = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            note = f"{lane_name} command exited {result.exit_status}" + ("" if result.ok else f": {last}")
            with self.journal.batch():
                self.journal.finish_handoff(
                    dispatch_id,
                    exit_status=result.exit_status,
                    stdout=result.stdout,
                    stderr=result.stderr,
                    at=self.clock.now(),
                    ok=result.ok,
                )
                if self.on_end is not None:
                    self.on_end(dispatch_id, result.ok, note)
            del self.running[dispatch_id]
            ended.append(dispatch_id)
            self.ended.append(dispatch_id)
            if not result.ok:
                self.failed.append(f"dispatch {dispatch_id}: {note}")
        return ended
