"""A lane's command as a process: started once, never through a shell, in a session of its own, and followed
without blocking until it ends, times out, or is found after a restart.

A tiny wrapper (``_WRAPPER``) runs the command and writes its exit status to a file, so a router restarted while
it runs adopts it instead of running it twice; after a failure the wrapper ends everything the command started
before it writes the status. A timeout kills the whole process group. lanes.py decides what to run; this module
only runs it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

__all__ = ["HandoffFiles", "HandoffResult", "ProcessHandoff", "adopt_handoff", "run_once", "spawn_handoff"]

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


def spawn_handoff(
    argv: tuple[str, ...], files: HandoffFiles, *, now: float, timeout_seconds: float, env: Mapping[str, str] | None
) -> ProcessHandoff:
    """Start ``argv`` under the wrapper in a session of its own and return at once; ``env`` is its environment
    (else this process's)."""
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
    return ProcessHandoff(argv, files, now, timeout_seconds, pid, own=True)


def adopt_handoff(
    argv: tuple[str, ...], files: HandoffFiles, *, pid: int | None, started_at: float, timeout_seconds: float
) -> ProcessHandoff | None:
    """The handoff a previous router started, if it can still be followed (running, or its status written).

    None when nothing can tell whether it ran: no pid was journaled and no status was written.
    """
    if files.read_status() is None and (pid is None or not _group_alive(pid, files)):
        return None
    return ProcessHandoff(argv, files, started_at, timeout_seconds, pid)


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
