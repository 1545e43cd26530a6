"""A lane's command as a process: started once, never through a shell, in a session of its own, and followed
without blocking until it ends, times out, or is found after a restart.

A tiny wrapper (``_WRAPPER``) runs the command and writes its exit status to a file, so a router restarted while
it runs adopts it instead of running it twice; after a failure the wrapper ends everything the command started
before it writes the status. A timeout kills the whole process group. lane.py decides what to run; this module
only runs it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

from fellows_fsm.lanes.handoff import MARK_BYTES, HandoffFiles, HandoffResult

__all__ = [
    "ProcessHandoff",
    "adopt_handoff",
    "find_wrapper",
    "kill_group",
    "spawn_handoff",
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
# 124). Killed with SIGKILL from outside, it can neither clean up nor say how the command ended: the router follows
# what is left of its group to the end (or the timeout) and reports the handoff lost, never failed on a guess.
# Before anything runs it overwrites the router's mark in the status file ("new" -> "run <its pid>"), so a router
# restarted before it journaled the wrapper's pid knows whether the command can have started, and its group.
_WRAPPER = (
    f"MARK_BYTES = {MARK_BYTES}\n"
    + """\
import ctypes, os, signal, subprocess, sys, time
status, grace, me = sys.argv[1], float(sys.argv[2]), os.getpid()
try:  # the mark the router left ("new"), overwritten in place: no block to allocate, even on a full disk
    with open(status + ".tmp", "r+b") as f:
        f.write(f"run {me}".encode())
except OSError as exc:
    sys.stderr.write(f"cannot mark the handoff started in {status}.tmp: {exc.strerror}; the command was not run\\n")
    sys.exit(126)
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
        todo = [pid for pid in pids if late or pid not in sent]
        # All stopped first: a shell whose child just died cannot run its next line; each meets its signal on SIGCONT.
        for sig in (signal.SIGSTOP, signal.SIGKILL if late else signal.SIGTERM, signal.SIGCONT):
            for pid in todo:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        sent.update(todo)
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
with open(status + ".tmp", "r+b") as f:  # in place again, then renamed: a full disk cannot lose the status
    f.write(str(code).encode().ljust(MARK_BYTES))
os.replace(status + ".tmp", status)
"""
)


def _stat(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...), or None for no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _is_wrapper(pid: int, files: HandoffFiles) -> bool:
    """True while ``pid`` is a live (not zombie) wrapper of this handoff (never a reused pid)."""
    fields = _stat(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(files.status).encode() in cmdline


def _members(pgid: int, files: HandoffFiles) -> list[int]:
    """The live (not zombie) processes of the handoff's process group ``pgid``: the command and its children
    still run after the wrapper died. None if the pid now belongs to another program (our group is gone then:
    a group id is never reused while a member lives)."""
    leader = _stat(pgid)
    if leader is not None and leader[0] not in (b"Z", b"X") and not _is_wrapper(pgid, files):
        return []
    found = []
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] not in (b"Z", b"X") and fields[2] == str(pgid).encode():
            found.append(int(entry))
    return found


def find_wrapper(files: HandoffFiles) -> int | None:
    """The pid of a live wrapper of this handoff, found by its command line (its pid was never journaled)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _is_wrapper(int(entry), files) and int(entry) != os.getpid():
            return int(entry)
    return None


def kill_group(pid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pid``, if it is still there."""
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
    """When what was left of a lost wrapper's group was sent SIGTERM (at the timeout)."""
    reaped: bool = False

    def _leader_running(self) -> bool:
        if self.pid is None:
            return False
        if not self.own:
            return _is_wrapper(self.pid, self.files)
        if not self.reaped:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done = self.pid
            self.reaped = done == self.pid
        return not self.reaped

    def result(self, now: float) -> HandoffResult | None:
        """The result once the wrapper wrote the exit status; at the timeout, SIGTERM to the whole group, then
        SIGKILL to whatever of it is left (at once when the wrapper died, else after a grace), and report 124.
        A wrapper gone without a status (killed from outside): what is left of its group is followed to its end
        (killed at the timeout), then the result is lost (no exit status): nobody can tell what it did."""
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
            return self._lost(now)
        if now < self.started_at + self.timeout_seconds:
            return None
        self.terminated_at = now
        assert self.pid is not None
        kill_group(self.pid, signal.SIGTERM)
        return None

    def _lost(self, now: float) -> HandoffResult | None:
        """The wrapper is gone without a status: follow its group (the command may be making the paid job right
        now) until it is empty; at the timeout SIGTERM it, SIGKILL after the grace."""
        left = [] if self.pid is None else _members(self.pid, self.files)
        if left and self.lost_at is None and now < self.started_at + self.timeout_seconds:
            return None
        if left and self.lost_at is None:
            assert self.pid is not None
            self.lost_at = now
            kill_group(self.pid, signal.SIGTERM)
        if left and self.lost_at is not None and now < self.lost_at + KILL_GRACE_SECONDS:
            return None
        if left and self.pid is not None:
            kill_group(self.pid, signal.SIGKILL)
        if self.files.started() is False:
            return self._result(126, "the handoff's wrapper ended before it started the command")
        return self._result(None, "the handoff's wrapper ended without an exit status (killed from outside?)")

    def _kill(self) -> HandoffResult:
        assert self.pid is not None
        kill_group(self.pid, signal.SIGKILL)  # children that ignored SIGTERM, or outlived the wrapper
        if self.own and not self.reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.reaped = True
        return self._result(124, f"timed out after {self.timeout_seconds:g} s; its process group was killed")

    def _result(self, status: int | None, extra: str) -> HandoffResult:
        stderr = self.files.read(self.files.stderr)
        if extra:
            stderr = f"{stderr.rstrip()}\n{extra}".lstrip("\n")
        return HandoffResult(self.argv, status, self.files.read(self.files.stdout), stderr)


def spawn_handoff(
    argv: tuple[str, ...], files: HandoffFiles, *, now: float, timeout_seconds: float, env: Mapping[str, str] | None
) -> ProcessHandoff:
    """Start ``argv`` under the wrapper in a session of its own and return at once; ``env`` is its environment
    (else this process's). Its files are made first (``HandoffFiles.prepare``) unless they are still new."""
    if files.started() is not False:
        files.prepare()
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
    """The handoff a previous router started, followed from where it is: running, ended with its status written,
    or lost (its result then says so). None only when the command surely never started (its mark is still
    "new"): then, and only then, it may be started."""
    if pid is None or not _is_wrapper(pid, files):
        pid = find_wrapper(files) or pid or files.marked_pid()
    if files.started() is False and (pid is None or not _is_wrapper(pid, files)):
        return None  # no wrapper alive, and none ever got as far as the command
    return ProcessHandoff(argv, files, started_at, timeout_seconds, pid)
