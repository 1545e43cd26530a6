"""Command lanes: where a dispatch goes when the free ladder cannot start it (GCP), or when pinned.

A lane renders its configured argv template for one dispatch and starts it once, never through a shell,
in a process group of its own: the router polls it between ticks (a slow command never blocks the poll
loop) and a timeout kills the whole group, so no grandchild finishes a handoff reported as failed. A tiny
wrapper writes the command's exit status to a file, so a router restarted while the command runs adopts
it instead of running it twice. It knows nothing of the lifecycle machine; the router decides when.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import attrs

from fellows_fsm.config_lanes import LANE_ENVIRONMENT, PLACEHOLDERS, LaneConfig
from fellows_fsm.errors import ConfigError
from fellows_fsm.scheduler import JobSpec

__all__ = [
    "CommandLane",
    "CompletedHandoff",
    "Handoff",
    "HandoffFiles",
    "HandoffResult",
    "Lane",
    "ProcessHandoff",
]

KILL_GRACE_SECONDS = 5.0
"""After a timeout the group gets SIGTERM, then SIGKILL this much later if anything of it is left."""
CLEANUP_GRACE_SECONDS = 2.0
"""After a command failed, the wrapper's SIGTERM to what it left gets this long before SIGKILL (shorter than
``KILL_GRACE_SECONDS``, so a wrapper cleaning up after a timeout is done before the router's SIGKILL)."""

# The wrapper runs the command as its child (same process group), as a child subreaper (an orphaned descendant,
# even one that left the group with setsid, becomes its child again). When the command FAILS (a non-zero exit,
# killed by a signal, or SIGTERM from the router's timeout), it ends every process of its group and every
# descendant (SIGTERM, then SIGKILL after a grace) BEFORE it writes the exit status, so nothing of a failed
# handoff can go on to create the paid job afterwards, even when no router is alive to look. A command that
# succeeds may leave a daemon of its own (``gcloud ... --async``, ``sky launch -d``): it is left alone, since
# exit 0 means the lane took the job. Killed by the router's timeout, it writes no status (the router records
# 124). Killed with SIGKILL from outside, it cannot clean up: the router then kills the group it journaled.
_WRAPPER = """\
import ctypes, os, signal, subprocess, sys, time
status, grace, me = sys.argv[1], float(sys.argv[2]), os.getpid()
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except (OSError, AttributeError):
    pass
class Stop(Exception):
    pass
def stop(signum, frame):
    raise Stop
signal.signal(signal.SIGTERM, stop)
def left():
    group, children = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in (b"Z", b"X"):
            continue
        if int(fields[2]) == me:
            group.add(int(entry))
        children.setdefault(int(fields[1]), []).append(int(entry))
    todo = [me, *group]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in group:
                group.add(child)
                todo.append(child)
    return group
def clean():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end, sent = time.monotonic() + grace, set()
    while True:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        pids = left()
        if not pids:
            return
        late = time.monotonic() >= end
        for pid in pids:
            if late or pid not in sent:
                try:
                    os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                except OSError:
                    pass
                sent.add(pid)
        time.sleep(0.02)
stopped = False
try:
    code = subprocess.call(sys.argv[3:], stdin=subprocess.DEVNULL)
except Stop:
    stopped, code = True, 143
except OSError as exc:
    sys.stderr.write(f"{sys.argv[3]}: {exc.strerror}\\n")
    code = 127
if code != 0:
    clean()
if stopped:
    sys.exit(code)
with open(status + ".tmp", "w") as f:
    f.write(str(code))
os.replace(status + ".tmp", status)
"""


class Lane(Protocol):
    """What the router needs to know of any lane."""

    @property
    def name(self) -> str:
        """The lane's name, as used by ``--pin`` and ``[router] order``."""
        ...

    @property
    def manual_only(self) -> bool:
        """True if the lane runs only when a dispatch is pinned to it."""
        ...


@attrs.frozen
class HandoffResult:
    """What one run of a lane's command did."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_status == 0


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


def _group_alive(pid: int, files: HandoffFiles) -> bool:
    """True while the process group ``pid`` exists and its leader is still our wrapper (not a reused pid)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # the leader is gone but the group lives on: the command's children still run
    return str(files.status).encode() in cmdline


def _group_members(pgid: int) -> bool:
    """True while any process (not a zombie) is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@attrs.define(eq=False)
class ProcessHandoff:
    """A lane command running in its own session, started by this process or adopted after a restart."""

    argv: tuple[str, ...]
    files: HandoffFiles
    started_at: float
    timeout_seconds: float
    pid: int | None
    own: bool = False
    """True when this process started the command (its child, reaped here); False for an adopted one."""
    terminated_at: float | None = None
    lost_at: float | None = None
    """When the wrapper was found gone without a status (what is left of its group then gets SIGTERM)."""
    reaped: bool = False

    def _leader_running(self) -> bool:
        if self.pid is None:
            return False
        if not self.own:
            return _group_alive(self.pid, self.files)
        if not self.reaped:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done = self.pid
            self.reaped = done == self.pid
        return not self.reaped

    def result(self, now: float) -> HandoffResult | None:
        """The result once the wrapper wrote the exit status; at the timeout, SIGTERM to the whole group, then
        SIGKILL to whatever of it is left (at once when the wrapper died, else after a grace), and report 124."""
        alive = self._leader_running()  # first: a status written just after this look is seen next time
        status = self.files.read_status()
        if status is not None:
            if self.own and not self.reaped and self.pid is not None:
                # The wrapper writes the status as its last act (after a failure, once its processes are gone):
                # reap it now, so a result never comes while any process of the handoff still runs.
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
                self.reaped = True
            return self._result(status, "")
        if self.terminated_at is not None:
            if alive and now < self.terminated_at + KILL_GRACE_SECONDS:
                return None
            return self._kill()
        if not alive:
            # Gone without a status: the wrapper was killed from outside (or failed itself) and could not clean
            # up. End what is left of its group (SIGTERM, then SIGKILL after the grace) before reporting.
            assert self.pid is not None
            if self.lost_at is None:
                self.lost_at = now
                _kill_group(self.pid, signal.SIGTERM)
            if _group_members(self.pid) and now < self.lost_at + KILL_GRACE_SECONDS:
                return None
            _kill_group(self.pid, signal.SIGKILL)
            return self._result(125, "the handoff command ended without an exit status (killed from outside?)")
        if now < self.started_at + self.timeout_seconds:
            return None
        self.terminated_at = now
        assert self.pid is not None
        _kill_group(self.pid, signal.SIGTERM)
        return None

    def _kill(self) -> HandoffResult:
        assert self.pid is not None
        _kill_group(self.pid, signal.SIGKILL)  # children that ignored SIGTERM, or outlived the wrapper
        if self.own and not self.reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.reaped = True
        return self._result(124, f"timed out after {self.timeout_seconds:g} s; its process group was killed")

    def _result(self, status: int, extra: str) -> HandoffResult:
        stderr = self.files.read(self.files.stderr)
        if extra:
            stderr = f"{stderr.rstrip()}\n{extra}".lstrip("\n")
        return HandoffResult(self.argv, status, self.files.read(self.files.stdout), stderr)


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

    def __init__(self, config: LaneConfig) -> None:
        self.config = config

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
        files.directory.mkdir(parents=True, exist_ok=True)
        for path in (files.status, files.stdout, files.stderr):
            path.unlink(missing_ok=True)
        # posix_spawn, not Popen: the router reaps the child itself (waitpid) whenever it next looks, and a
        # router that exits while the command runs leaves no Popen behind to complain.
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(files.stdout), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            (os.POSIX_SPAWN_OPEN, 2, str(files.stderr), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        ]
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-c", _WRAPPER, str(files.status), str(CLEANUP_GRACE_SECONDS), *argv],
            dict(os.environ if env is None else env),
            file_actions=actions,
            setsid=True,
        )
        return ProcessHandoff(argv, files, now, self.config.timeout_seconds, pid, own=True)

    def adopt(
        self, argv: tuple[str, ...], files: HandoffFiles, *, pid: int | None, started_at: float
    ) -> Handoff | None:
        """The handoff a previous router started, if it can still be followed (running, or its status written).

        None when nothing can tell whether it ran: no pid was journaled and no status was written.
        """
        if files.read_status() is None and (pid is None or not _group_alive(pid, files)):
            return None
        return ProcessHandoff(argv, files, started_at, self.config.timeout_seconds, pid)


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
        _kill_group(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return HandoffResult(argv, 124, out.decode(errors="replace"), f"timed out after {timeout:g} s")
    return HandoffResult(argv, process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
