"""The command lane kind (``kind = "command"``, the default): where a dispatch goes when the free ladder cannot
start it (GCP), or when pinned.

A lane renders its configured argv template for one dispatch and starts it once, never through a shell,
in a process group of its own: the router polls it between ticks (a slow command never blocks the poll
loop) and a timeout kills the whole group, so no grandchild finishes a handoff reported as failed. A tiny
wrapper writes the command's exit status to a file, so a router restarted while the command runs adopts
it instead of running it twice. It knows nothing of the lifecycle machine; the router decides when.

This module is the kind (its table, its lane: ``COMMAND``, the registry's entry): it fills the templates and gives
the command its environment; running it as a process (the wrapper, its group, the timeout, adoption) is
lanes/command/process.py. A lane with a ``status`` template is a paid lane followed to its end (``look``, ``delete``):
the contract of its answer, and the runs side by side, are lanes/command/follow.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import ConfigError, PaidLaneError
from fellows_fsm.lanes.command.config import LANE_ENVIRONMENT, PLACEHOLDERS, CommandSettings
from fellows_fsm.lanes.command.follow import last_line, look_all, read_status
from fellows_fsm.lanes.command.process import adopt_handoff, kill_group, spawn_handoff
from fellows_fsm.lanes.handoff import Handoff, HandoffFiles, HandoffResult, LogsWay, Started
from fellows_fsm.scheduler.port import JobSpec

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "COMMAND",
    "HANDOFFS",
    "CommandKind",
    "CommandLane",
    "environment_of",
    "kept_values",
    "run_once",
    "safe_placeholders",
]


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
        "script": spec.script_file,  # as it was at submit (the kept copy)
        "gpus": str(spec.gpus),
        "time_limit_seconds": "" if limit is None else str(limit),
        "time_limit_minutes": "" if limit is None else str(max(1, -(-limit // 60))),
        "workdir": os.path.dirname(os.path.abspath(spec.script)),
    }


def placeholders(dispatch_id: str, spec: JobSpec) -> Mapping[str, str]:
    """The values a lane's argv template may use: only those fellows-fsm makes from a safe alphabet (checked
    here again, so a journal row edited by hand cannot smuggle code into an argument)."""
    return safe_placeholders(job_values(dispatch_id, spec))


def safe_placeholders(values: Mapping[str, str]) -> dict[str, str]:
    """The placeholders among ``values`` (those it has), each checked against its safe alphabet."""
    safe = {}
    for name in sorted(PLACEHOLDERS & values.keys()):
        if not _SAFE_ALPHABET[name].fullmatch(values[name]):
            raise ConfigError(f"{name}={values[name]!r} is not made of digits; refusing to put it in a lane's argv")
        safe[name] = values[name]
    return safe


def lane_environment(dispatch_id: str, spec: JobSpec) -> dict[str, str]:
    """The environment of a lane command: this process's, plus ``FSM_JOB_NAME``, ``FSM_SCRIPT``, ... (one
    variable per value; a variable's text is never run as code unless the lane's own command says so)."""
    return environment_of(job_values(dispatch_id, spec))


def environment_of(values: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus one ``FSM_*`` variable per job value in ``values``."""
    env = dict(os.environ)
    for name, value in values.items():
        env[LANE_ENVIRONMENT[name]] = value
    return env


HANDOFFS = "handoffs"
"""The folder of the state dir where each dispatch's handoff files live (driver/handoffs.py makes them there)."""


def kept_values(files: HandoffFiles) -> dict[str, str] | None:
    """The job values the handoff's start kept (``HandoffFiles.job``), or None if there are none to trust."""
    try:
        data = json.loads(files.job.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("dispatch_id") != files.dispatch_id:
        return None
    return {k: v for k, v in data.items() if k in LANE_ENVIRONMENT and isinstance(v, str)}


class CommandLane:
    """A lane that hands a job over by running one command (``gcloud batch jobs submit``, ``sky launch``)."""

    kind = CommandSettings.kind
    walks_ladder = False

    def __init__(self, config: CommandSettings, *, state_dir: Path | None = None) -> None:
        self.config = config
        self.state_dir = state_dir
        """Where the handoffs' files are (their kept job values let ``look`` and ``delete`` fill a template
        without the job, after a restart too); None: only the job given, or the dispatch id alone."""
        self._behind: list[str] = []
        """The dispatches the last look had no time left to ask: asked first by the next."""

    @property
    def settings(self) -> CommandSettings:
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

    def render(self, template: tuple[str, ...], dispatch_id: str, spec: JobSpec | None) -> tuple[str, ...]:
        """Fill ``template``'s placeholders for one dispatch; each item stays one argv item. With no job, the values
        its handoff kept are used, else only ``{dispatch_id}`` can be filled (ConfigError naming the placeholder)."""
        return self._fill(template, dispatch_id, self.values(dispatch_id, spec))

    def values(self, dispatch_id: str, spec: JobSpec | None) -> Mapping[str, str]:
        """The job values of one dispatch: from its job when given, else those its handoff's start kept (in the
        state dir), else the dispatch id alone."""
        if spec is not None:
            return job_values(dispatch_id, spec)
        if self.state_dir is not None and _SAFE_ALPHABET["dispatch_id"].fullmatch(dispatch_id):  # a file name
            kept = kept_values(HandoffFiles(self.state_dir / HANDOFFS, dispatch_id))
            if kept is not None:
                return kept
        return {"dispatch_id": dispatch_id}

    def _fill(self, template: tuple[str, ...], dispatch_id: str, values: Mapping[str, str]) -> tuple[str, ...]:
        safe = safe_placeholders(values)
        if "dispatch_id" not in safe:
            raise ConfigError(f"dispatch_id={dispatch_id!r} is missing; refusing to fill a lane's argv")
        try:
            return tuple(item.format_map(safe) for item in template)
        except KeyError as exc:
            raise ConfigError(
                f"[lanes.{self.name}] template {list(template)!r} uses {{{exc.args[0]}}}, which needs the "
                f"dispatch's job, and none is known for dispatch {dispatch_id}"
            ) from None
        except ValueError as exc:
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

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Start the handoff command (``command``) in a session of its own and return at once, with the job's
        values as ``FSM_*`` variables in its environment (``lane_environment``). The job's values are kept beside
        its files first (best effort), so its paid job can be followed and cancelled with them."""
        env = lane_environment(dispatch_id, spec)
        values = {name: env[variable] for name, variable in LANE_ENVIRONMENT.items() if variable in env}
        with contextlib.suppress(OSError):
            files.job.write_text(json.dumps(values, sort_keys=True), encoding="utf-8")
        argv = self.command(dispatch_id, spec)
        return spawn_handoff(argv, files, now=now, timeout_seconds=self.config.timeout_seconds, env=env)

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """The handoff a previous router started (``was.command``: its argv), if it can still be followed (running, or
        its status written).

        None when nothing can tell whether it ran: no pid was journaled and no status was written.
        """
        timeout = self.config.timeout_seconds
        return adopt_handoff(was.command, files, pid=was.pid, started_at=was.at, timeout_seconds=timeout)

    # ------------------------------------------------------------------------------- the paid job, followed
    @property
    def follows(self) -> bool:
        """True iff the lane has a ``status`` template (without one, handed off is final, as before)."""
        return self.config.status is not None

    @property
    def price_per_gpu_hour(self) -> float | None:
        """What one GPU-hour costs on this lane (None: not configured)."""
        return self.config.price_per_gpu_hour

    @property
    def queue_timeout_seconds(self) -> float | None:
        """How long a paid job may sit queued before it is cancelled (None: no bound)."""
        return self.config.queue_timeout_seconds

    @property
    def stops_at_limit(self) -> bool:
        """False: nothing says the lane's own system ends a job at its time limit (the driver deletes it)."""
        return False

    def look(
        self, dispatch_ids: Sequence[str], *, specs: Mapping[str, JobSpec] | None = None
    ) -> Mapping[str, PaidLook]:
        """Where each dispatch's paid job stands: the ``status`` command run once per dispatch (rendered for it,
        the job's values in its environment when ``specs`` gives its job), a few side by side, the whole look
        bounded by ``status_timeout_seconds`` (a hung one is killed with its process group: could not tell).
        Every id is answered. PaidLaneError if the lane has no status."""
        template = self.config.status
        if template is None:
            raise PaidLaneError(
                f"[lanes.{self.name}] has no status command; its paid jobs cannot be followed (add status = [...])"
            )
        jobs = specs or {}

        def one(dispatch_id: str, seconds: float) -> PaidLook:
            values = self.values(dispatch_id, jobs.get(dispatch_id))
            try:
                argv = self._fill(template, dispatch_id, values)
            except ConfigError as exc:
                return PaidLook(PaidStatus.UNKNOWN, f"could not tell: status not run: {exc}")
            env = environment_of(values)
            return read_status(run_once(argv, seconds, env=env, named=self.config.status_timeout_seconds))

        answers, self._behind = look_all(
            dispatch_ids, one, timeout=self.config.status_timeout_seconds, first=self._behind
        )
        return answers

    def logs(self, dispatch_id: str, spec: JobSpec | None) -> LogsWay:
        """The lane's ``logs`` template filled for the dispatch (the job's values in its environment), or, for a lane
        without one, where to look (the lane's own tools, by the job's name)."""
        template = self.config.logs
        if template is None:
            return LogsWay(
                where=f"[lanes.{self.name}] has no logs command: look for job fsm-{dispatch_id} with the lane's own "
                "tools, or add logs = [...] to the lane"
            )
        values = self.values(dispatch_id, spec)
        return LogsWay(
            self._fill(template, dispatch_id, values),
            environment_of(values),
            timeout_seconds=self.config.timeout_seconds,
        )

    def delete(self, dispatch_id: str, *, spec: JobSpec | None = None) -> None:
        """Cancel the dispatch's paid job: the ``cancel`` command run once (bounded by ``timeout_seconds``); exit 0
        means cancelled or already gone. PaidLaneError (one line: its last stderr line) otherwise, or if the lane
        has no cancel."""
        template = self.config.cancel
        if template is None:
            raise PaidLaneError(
                f"[lanes.{self.name}] has no cancel command; cancel dispatch {dispatch_id}'s paid job on the lane "
                "yourself, or add cancel = [...] to the lane"
            )
        values = self.values(dispatch_id, spec)
        try:
            argv = self._fill(template, dispatch_id, values)
        except ConfigError as exc:
            raise PaidLaneError(f"[lanes.{self.name}] cancel of dispatch {dispatch_id} not run: {exc}") from None
        done = run_once(argv, self.config.timeout_seconds, env=environment_of(values))
        if not done.ok:
            said = last_line(done.stderr) or last_line(done.stdout) or "no output"
            raise PaidLaneError(
                f"[lanes.{self.name}] cancel of dispatch {dispatch_id} exited {done.exit_status}: {said}"
            )


def run_once(
    argv: tuple[str, ...], timeout: float, *, env: Mapping[str, str] | None = None, named: float | None = None
) -> HandoffResult:
    """Run a short command (a lane's probe, status or cancel) to its end in its own group, never through a shell;
    on timeout kill the group (124; its note names ``named``, the configured timeout, when ``timeout`` is what is
    left of it). Its output goes to files, not pipes: a descendant that left the group and keeps them open cannot
    hold this up past the timeout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            # A session of its own: no terminal signals (Ctrl-C in the router's shell), and one group to kill.
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                env=None if env is None else dict(env),
            )
        except OSError as exc:
            return HandoffResult(argv, 127, "", f"{argv[0]}: {exc.strerror}")
        try:
            code: int | None = process.wait(timeout=timeout)
            note = ""
        except subprocess.TimeoutExpired:
            kill_group(process.pid, signal.SIGKILL)
            process.wait()
            limit = timeout if named is None else named
            code, note = 124, f"timed out after {limit:g} s; its process group was killed"
        texts = []
        for file in (out, err):
            file.seek(0)
            texts.append(file.read().decode(errors="replace"))
    stderr = f"{texts[1].rstrip()}\n{note}".lstrip("\n") if note else texts[1]
    return HandoffResult(argv, code, texts[0], stderr)


class CommandKind:
    """The command kind, as the registry knows it: ``[lanes.<name>]`` with ``command``, ``probe``, ``manual_only``,
    ``timeout_seconds``, and to follow its paid job ``status``, ``cancel``, ``price_per_gpu_hour``,
    ``queue_timeout_seconds`` and ``status_timeout_seconds``; ``logs`` for ``fellows-fsm logs``."""

    name = CommandSettings.kind

    def parse(self, name: str, table: Mapping[str, Any]) -> CommandSettings:
        """The lane's settings from its table."""
        return CommandSettings.from_table(name, table)

    def table(self, settings: CommandSettings) -> dict[str, Any]:
        """Every key of the table, as the journal keeps it with each dispatch (an unset optional key None)."""
        return {
            "command": list(settings.command),
            "probe": None if settings.probe is None else list(settings.probe),
            "manual_only": settings.manual_only,
            "timeout_seconds": settings.timeout_seconds,
            "status": None if settings.status is None else list(settings.status),
            "cancel": None if settings.cancel is None else list(settings.cancel),
            "price_per_gpu_hour": settings.price_per_gpu_hour,
            "queue_timeout_seconds": settings.queue_timeout_seconds,
            "status_timeout_seconds": settings.status_timeout_seconds,
            **({} if settings.logs is None else {"logs": list(settings.logs)}),  # only when set: older rows unchanged
        }

    def build(self, settings: CommandSettings, *, state_dir: Path) -> CommandLane:
        """The lane that runs the command (its handoffs' files under ``state_dir``)."""
        return CommandLane(settings, state_dir=state_dir)


COMMAND = CommandKind()
"""The command kind's entry in lanes/registry.py."""
