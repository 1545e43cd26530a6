"""The background driver: ONE process per journal, started on demand, that walks every dispatch to its end.

Any command that finds live work in a journal and no driver holding its lock starts one (``ensure_driver``): a
process of its own session, with no terminal, stdin from /dev/null, its output in a bounded log in the state dir.
It drives with the config the journal carries (``driver-config``), never the current directory's or the shell's,
and exits after ``[router] driver_idle_seconds`` with nothing live. Who runs it never matters: the flock decides
(the others exit quietly). It prints nothing; the CLI says what it started.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import logging.handlers
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.driver.budget import journaled_budget
from fellows_fsm.driver.compaction import Compaction
from fellows_fsm.driver.environment import Health, env_problem_line
from fellows_fsm.driver.inbox import (
    DRIVER_CONFIG,
    config_remembered,
    has_work,
    journaled_config,
    notify_work,
    remember_config,
)
from fellows_fsm.driver.reports import TickReport
from fellows_fsm.driver.router import Router
from fellows_fsm.driver.wake import WakeChannel, wake_problem
from fellows_fsm.errors import FellowsError, JournalBusy
from fellows_fsm.journal.lock import DriverOwner, lock_held
from fellows_fsm.journal.outbox import UNDELIVERABLE
from fellows_fsm.journal.statefs import check_room
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import HandoffLane
from fellows_fsm.lanes.slurm.lane import ladder_lane
from fellows_fsm.scheduler.port import Scheduler

if TYPE_CHECKING:
    from fellows_fsm.notify.service import Notifier

__all__ = ["LOG_BYTES", "DriverStatus", "ensure_driver", "log_path", "main", "serve", "spawn", "status", "stop"]

log = logging.getLogger(__name__)

LOG_BYTES = 1_000_000
"""The driver log rotates past this size (one old file kept): bounded, however long it runs."""
START_WAIT_SECONDS = 10.0
"""How long a starter waits for the driver it started to hold the lock before saying it did not start."""
LOCK_TRIES = 20
"""A lock probe (``lock_held``) holds the lock for an instant: a driver tries this many times, 50 ms apart."""


def log_path(journal_path: Path) -> Path:
    """The background driver's log, beside the journal."""
    return journal_path.with_name("driver.log")


# --------------------------------------------------------------------------- starting it
def ensure_driver(config: Config, journal: Journal | None = None) -> DriverOwner | None:
    """Start the background driver of ``config``'s journal if it has work and no process drives it.

    Returns the new driver's owner record (so the caller can say once what it started), or None when a driver
    already runs (or there is nothing to do). Ten commands calling this at once start one driver: they take turns
    under a spawn flock, and each one after the first finds the lock held.
    """
    path = config.journal_path
    own = journal is None
    journal = journal if journal is not None else Journal(path, readonly=True)
    try:
        work = has_work(journal) or notify_work(journal)
        if journal.driver_alive() or not work or not os.access(path.parent, os.W_OK):
            return None  # driven already, nothing to do, or a journal this user cannot drive (status still reads)
        if not config_remembered(journal):
            if journal.readonly:
                with contextlib.closing(Journal(path)) as writable:
                    remember_config(config, writable)
            else:
                remember_config(config, journal)
    finally:
        if own:
            journal.close()
    check_room(path.parent)  # a driver that cannot journal would only start and die: say so once, start none
    with open(path.with_name(path.name + ".spawn-lock"), "a", encoding="utf-8") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)  # released when the file closes
        lock = path.with_name(path.name + ".lock")
        if lock_held(lock):
            return None
        spawn(path)
        for _ in range(int(START_WAIT_SECONDS / 0.02)):  # counted, not timed: a frozen clock cannot stall it
            owner = _owner(lock)
            if owner is not None and owner.kind == "background" and _alive(owner.pid) and lock_held(lock):
                return owner
            time.sleep(0.02)
    raise FellowsError(
        f"the background driver of {path} did not start within {START_WAIT_SECONDS:g} s; see {log_path(path)}, "
        "or drive in the foreground with `fellows-fsm watch --once` (e.g. from cron)"
    )


def spawn(path: Path) -> None:
    """Start ``python -m fellows_fsm.driver.process JOURNAL``, whose child forks the driver off and exits at once: no
    zombie, no terminal, nothing inherited but the environment."""
    child = subprocess.Popen(
        [sys.executable, "-m", "fellows_fsm.driver.process", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        cwd="/",
    )
    child.wait(timeout=START_WAIT_SECONDS)


def _owner(lock: Path) -> DriverOwner | None:
    try:
        return DriverOwner.parse(lock.read_text(encoding="utf-8"))
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- what it does
def serve(
    config: Config,
    scheduler: Scheduler,
    *,
    clock: Clock | None = None,
    lanes: Mapping[str, HandoffLane] | None = None,
    stop_event: threading.Event | None = None,
    log: str | None = None,
    kind: str = "background",
    health: Health | None = None,
) -> bool:
    """Drive the journal until nothing has been live for ``driver_idle_seconds`` (or ``stop_event`` is set).

    Returns False at once, touching nothing, if another process drives the journal. The lock is released only
    after a last look for work: a dispatch enqueued while this driver was deciding to exit is never left without
    one (its submitter saw the lock held, so it started none). ``health`` (the background driver's): its own
    environment is looked at each turn, before a wake-up's requests are answered (driver/environment.py).
    """
    stop_event = stop_event or threading.Event()
    clock = clock or SystemClock()
    journal = Journal(config.journal_path, allow_network_fs=config.allow_network_state_dir)
    channel = WakeChannel(config.journal_path, stop_event)
    notifier: Notifier | None = None
    try:
        if not _take_lock(journal, kind=kind, log=log, at=clock.now()):
            return False
        channel.open()  # before the first poll: a message journaled after it wakes this driver, one before it is read
        from fellows_fsm.notify.service import Notifier  # noqa: PLC0415 - httpx and prometheus_client: the driver's only

        notifier = Notifier(
            config, journal, budget=lambda: journaled_budget(journal) or config.budget, calls=_calls(scheduler)
        ).start()
        while True:
            router = Router(config, scheduler, journal, clock=clock, lanes=lanes).start()
            try:
                _run(router, config, clock, channel, look=_looker(journal, health), notifier=notifier)
            finally:
                router.gate.close()  # its connection to the [ledger], if any
            if stop_event.is_set() or not has_work(journal):
                notifier.stop()  # (before the lock goes: the next driver's senders do not overlap these)
                notifier = None
                journal.release_driver()
                return True
            journal.release_driver()
            if not _take_lock(journal, kind=kind, log=log, at=clock.now()):
                return True  # another driver took over the work in between
    finally:
        if notifier is not None:
            notifier.stop()
        channel.close()
        journal.close()


def _calls(scheduler: Scheduler) -> Callable[[], Mapping[str, Mapping[str, int]]] | None:
    """The driver's SLURM calls per command (its ladder lane's port), for the metrics; None for a port that does
    not count them."""
    runner = getattr(scheduler, "runner", None)
    counts = getattr(runner, "calls", None)
    if counts is None:
        return None
    return lambda: {LADDER_LANE: dict(counts)}


def _take_lock(journal: Journal, *, kind: str, log: str | None, at: float) -> bool:
    for attempt in range(LOCK_TRIES):
        try:
            journal.acquire_driver(kind=kind, log=log, at=at)
        except JournalBusy:
            if attempt + 1 < LOCK_TRIES:
                time.sleep(0.05)
            continue
        return True
    return False


def _looker(journal: Journal, health: Health | None) -> Callable[[], None]:
    """What the driver does each turn about its environment: nothing without ``health``."""
    if health is None:
        return lambda: None

    def journaled() -> dict[str, str] | None:
        saved = journal.get_meta(DRIVER_CONFIG)
        return dict(saved.get("env", {})) if isinstance(saved, dict) else None

    def look() -> None:
        health.refresh(journal, journaled)

    return look


def _run(
    router: Router,
    config: Config,
    clock: Clock,
    channel: WakeChannel,
    *,
    look: Callable[[], None],
    notifier: Notifier,
) -> None:
    stop_event = channel.stop
    grace = config.router.driver_idle_seconds
    idle_since: list[float] = []

    def woken() -> bool:
        if not channel.woken():
            return False
        look()  # a submit or cancel from a shell that finds SLURM: its PATH before its request is answered
        return True

    def until(_: object) -> bool:
        look()
        if stop_event.is_set():
            return True
        if router.busy or notifier.busy():  # an event still to send keeps the driver (till it is given up on)
            idle_since.clear()
            return False
        if not idle_since:
            idle_since.append(clock.now())
        return clock.now() - idle_since[0] >= grace

    # A stop (SIGTERM) or a wake-up ends the wait; the tick in hand was finished. After a turn: the notifications'
    # senders are woken, and what ended long ago moves to the archive a batch at a time, at a low cadence
    # (driver/compaction.py).
    compaction = Compaction(config.journal_path, config.journal.keep_days, clock)

    def on_tick(report: TickReport) -> None:
        notifier.on_tick(report)
        compaction.step(report)

    router.run(until=until, on_tick=on_tick, sleep=channel.sleep, linger=True, woken=woken)


# --------------------------------------------------------------------------- status and stop, for the CLI
@attrs.frozen
class DriverStatus:
    """What ``fellows-fsm driver status`` says: the lock's owner record, whether it holds the lock now."""

    journal: Path
    owner: DriverOwner | None
    """The record of the process holding the lock, or of the last one (``running`` False)."""
    running: bool
    live: int
    log: Path
    wake: str | None = None
    """Why a command cannot wake the driver (the poll still drives), or None."""
    env: str | None = None
    """Why the running driver cannot run SLURM's commands (driver/environment.py: ``env_problem_line``), or None."""
    undeliverable: Mapping[str, int] = attrs.field(factory=dict)
    """How many events each sink gave up on (``fellows-fsm notify log`` shows them)."""


def status(config: Config) -> DriverStatus:
    """Who drives ``config``'s journal now (reads only; starts nothing)."""
    path = config.journal_path
    lock = path.with_name(path.name + ".lock")
    running = lock_held(lock)
    live, env, undeliverable = 0, None, {}
    if path.exists():
        with contextlib.closing(Journal(path, readonly=True)) as journal:
            live = len(journal.dispatches(live_only=True))
            env = env_problem_line(journal)
            with contextlib.suppress(FellowsError):  # (a journal of an older schema has no outbox yet)
                counts = journal.delivery_counts()
                undeliverable = {sink: n for (sink, status), n in counts.items() if status == UNDELIVERABLE}
    owner = _owner(lock)
    background = running and owner is not None and owner.kind == "background"  # the one that listens (wake.py)
    wake = wake_problem(path) if background else None
    return DriverStatus(path, owner, running, live, log_path(path), wake, env, undeliverable)


def stop(config: Config, *, wait: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> DriverOwner | None:
    """Ask the journal's driver to stop (SIGTERM: it finishes the tick in hand and releases the lock); wait for
    it. Returns the stopped driver's record, or None if no driver ran. Live dispatches stay journaled."""
    path = config.journal_path
    lock = path.with_name(path.name + ".lock")
    owner = _owner(lock)
    if not lock_held(lock) or owner is None:
        return None
    if owner.kind != "background":
        raise FellowsError(
            f"{path} is driven by a program of its own ({owner.describe()}), not the background driver: stop it there"
        )
    if owner.host != os.uname().nodename:
        raise FellowsError(f"the driver of {path} runs on {owner.host} (pid {owner.pid}): stop it there")
    with contextlib.suppress(ProcessLookupError):
        os.kill(owner.pid, signal.SIGTERM)
    for _ in range(int(wait / 0.05)):
        if not lock_held(lock):
            return owner
        sleep(0.05)
    raise FellowsError(f"the driver of {path} (pid {owner.pid}) did not stop within {wait:g} s")
    return owner


# --------------------------------------------------------------------------- the process itself
def main(argv: list[str] | None = None) -> int:
    """``python -m fellows_fsm.driver.process JOURNAL``: fork off the driver (the caller's child exits at once)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print("usage: python -m fellows_fsm.driver.process JOURNAL")
        return 0
    if len(args) != 1 or args[0].startswith("-"):  # an option is never a journal (nothing is created for it)
        print("usage: python -m fellows_fsm.driver.process JOURNAL", file=sys.stderr)
        return 2
    path = Path(args[0])
    if os.fork():
        return 0  # the starter waits for this process only: the driver below is reparented, never a zombie
    os.setsid()
    return _driver_process(path)


def _driver_process(path: Path) -> int:
    logfile = log_path(path)
    handler = logging.handlers.RotatingFileHandler(logfile, maxBytes=LOG_BYTES, backupCount=1, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("transitions").setLevel(logging.WARNING)  # one line per callback otherwise
    with open(logfile, "a", encoding="utf-8") as out:  # a crash's traceback lands in the log too
        os.dup2(out.fileno(), 2)
    stop_event = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.info("signal %d: finishing the tick in hand, then releasing the journal", signum)
        stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    inherited = dict(os.environ)  # the starting command's, before the journal's SLURM environment is set
    try:
        config = journaled_config(path)
        log.info("driver %d starting for %s (config %s)", os.getpid(), path, config.source)
        health = Health((config.fellows, *config.other_slurm_lanes), inherited=inherited)
        scheduler = ladder_lane(config).scheduler
        drove = serve(config, scheduler, stop_event=stop_event, log=str(logfile), health=health)
        log.info("driver %d %s", os.getpid(), "exits: nothing live" if drove else "not needed: another drives")
        return 0
    except FellowsError as exc:
        log.error("driver %d cannot drive %s: %s", os.getpid(), path, exc)
        return 1
    except Exception:
        log.exception("driver %d crashed", os.getpid())
        return 1


if __name__ == "__main__":
    sys.exit(main())
