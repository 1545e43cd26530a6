"""The command lane kind (``kind = "command"``, the default): where a dispatch goes when the free ladder cannot
start it (GCP), or when pinned.

A lane renders its configured argv template for one dispatch and starts it once, never through a shell,
in a process group of its own: the router polls it between ticks (a slow command never blocks the poll
loop) and a timeout kills the whole group, so no grandchild finishes a handoff reported as failed. A tiny
wrapper writes the command's exit status to a file, so a router restarted while the command runs adopts
it instead of running it twice. It knows nothing of the lifecycle machine; the router decides when.

This module is the kind (its table, its lane: ``COMMAND``, the registry's entry): it fills the templates and gives
the command its environment; running it as a process (the wrapper, its group, the timeout, adoption) is
lanes/process.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from fellows_fsm.config.lanes import LANE_ENVIRONMENT, PLACEHOLDERS, LaneConfig
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.process import (
    HandoffFiles,
    HandoffResult,
    adopt_handoff,
    kill_group,
    spawn_handoff,
)
from fellows_fsm.scheduler.port import JobSpec

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["COMMAND", "CommandKind", "CommandLane", "CompletedHandoff", "Handoff", "run_once"]


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


_SAFE_ALPHABET = {
    "dispatch_id": re.compile(r"[0-9a-f]+"),
    "gpus": re.compile(r"[0-9]+"),
    "time_limit_seconds": re.compile(r"[0-9]*"),
    "time_limit_minutes": re.compile(r"[0-9]*"),
}


def job_values(dispatch_id: str, spec: JobSpec) -> Mapping[str, str]:
    """Every value a lane command gets for one dispatch, by placeholder name."""
    limit = spec.time_limit_seconds
    return {
        "dispatch_id": dispatch_id,
        "job_name": spec.name,
        "script": spec.script,
        "gpus": str(spec.gpus),
        "time_limit_seconds": "" if limit is None else str(limit),
        "time_limit_minutes": "" if limit is None else str(max(1, -(-limit // 60))),
        "workdir": os.path.dirname(os.path.abspath(spec.script)),
    }


def placeholders(dispatch_id: str, spec: JobSpec) -> Mapping[str, str]:
    """The values a lane's argv template may use: only those fellows-fsm makes from a safe alphabet (checked
    here again, so a journal row edited by hand cannot smuggle code into an argument)."""
    values = job_values(dispatch_id, spec)
    safe = {}
    for name in PLACEHOLDERS:
        if not _SAFE_ALPHABET[name].fullmatch(values[name]):
            raise ConfigError(f"{name}={values[name]!r} is not made of digits; refusing to put it in a lane's argv")
        safe[name] = values[name]
    return safe


def lane_environment(dispatch_id: str, spec: JobSpec) -> dict[str, str]:
    """The environment of a lane command: this process's, plus ``FSM_JOB_NAME``, ``FSM_SCRIPT``, ... (one
    variable per value; a variable's text is never run as code unless the lane's own command says so)."""
    env = dict(os.environ)
    for name, value in job_values(dispatch_id, spec).items():
        env[LANE_ENVIRONMENT[name]] = value
    return env


class CommandLane:
    """A lane that hands a job over by running one command (``gcloud batch jobs submit``, ``sky launch``)."""

    kind = LaneConfig.kind
    walks_ladder = False

    def __init__(self, config: LaneConfig) -> None:
        self.config = config

    @property
    def settings(self) -> LaneConfig:
        """What the lane was built from."""
        return self.config

    @property
    def name(self) -> str:
        """The lane's name."""
        return self.config.name

    @property
    def manual_only(self) -> bool:
        """True if this lane is only used when pinned."""
        return self.config.manual_only

    def render(self, template: tuple[str, ...], dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """Fill ``template``'s placeholders for one dispatch; each item stays one argv item."""
        values = placeholders(dispatch_id, spec)
        try:
            return tuple(item.format_map(values) for item in template)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"[lanes.{self.name}] template {list(template)!r} cannot be filled: {exc}") from None

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """The handoff argv for one dispatch."""
        return self.render(self.config.command, dispatch_id, spec)

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """Run the probe, if configured: True if the lane already has this dispatch, None if unknowable."""
        if self.config.probe is None:
            return None
        argv = self.render(self.config.probe, dispatch_id, spec)
        return run_once(argv, self.config.timeout_seconds, env=lane_environment(dispatch_id, spec)).ok

    def start(
        self, argv: tuple[str, ...], files: HandoffFiles, *, now: float, env: Mapping[str, str] | None = None
    ) -> Handoff:
        """Start the handoff command in a session of its own and return at once; ``env`` is its environment
        (``lane_environment``: the job's values as ``FSM_*`` variables), else this process's."""
        return spawn_handoff(argv, files, now=now, timeout_seconds=self.config.timeout_seconds, env=env)

    def adopt(
        self, argv: tuple[str, ...], files: HandoffFiles, *, pid: int | None, started_at: float
    ) -> Handoff | None:
        """The handoff a previous router started, if it can still be followed (running, or its status written).

        None when nothing can tell whether it ran: no pid was journaled and no status was written.
        """
        return adopt_handoff(argv, files, pid=pid, started_at=started_at, timeout_seconds=self.config.timeout_seconds)


def run_once(argv: tuple[str, ...], timeout: float, *, env: Mapping[str, str] | None = None) -> HandoffResult:
    """Run a short command (a lane's probe) to its end in its own group; on timeout kill the group (124)."""
    try:
        # A session of its own: no terminal signals (Ctrl-C in the router's shell), and one group to kill.
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    except OSError as exc:
        return HandoffResult(argv, 127, "", f"{argv[0]}: {exc.strerror}")
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return HandoffResult(argv, 124, out.decode(errors="replace"), f"timed out after {timeout:g} s")
    return HandoffResult(argv, process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


class CommandKind:
    """The command kind, as the registry knows it: ``[lanes.<name>]`` with ``command``, ``probe``, ``manual_only``
    and ``timeout_seconds``."""

    name = LaneConfig.kind

    def parse(self, name: str, table: Mapping[str, Any]) -> LaneConfig:
        """The lane's settings from its table."""
        return LaneConfig.from_table(name, table)

    def table(self, settings: LaneConfig) -> dict[str, Any]:
        """Every key of the table, as the journal keeps it with each dispatch (``probe`` None when unset)."""
        return {
            "command": list(settings.command),
            "probe": None if settings.probe is None else list(settings.probe),
            "manual_only": settings.manual_only,
            "timeout_seconds": settings.timeout_seconds,
        }

    def build(self, settings: LaneConfig, *, state_dir: Path) -> CommandLane:
        """The lane that runs the command."""
        return CommandLane(settings)


COMMAND = CommandKind()
"""The command kind's entry in lanes/registry.py."""
