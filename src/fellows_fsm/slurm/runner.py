"""Run one SLURM command (an argv list, never a shell) through a Transport (here, or over ssh) with a timeout,
and classify how it failed.

It rides through an unreachable controller with bounded exponential back-off and counts calls per command.
It never interprets a command's output beyond failure classes, and never retries a non-idempotent command
whose request may already have reached the controller (a submit that timed out may have created the job).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence

import attrs

from fellows_fsm.errors import SchedulerUnreachable, SlurmCommandMissing
from fellows_fsm.slurm.transport import CommandMissing, LocalTransport, NoAnswer, Request, Transport

__all__ = [
    "ONE_ATTEMPT",
    "CommandResult",
    "CommandRunner",
    "RetryPolicy",
    "slurm_env",
]

log = logging.getLogger(__name__)

# The controller never saw the request: safe to repeat any command.
_NOT_CONNECTED = ("Unable to contact slurm controller", "Connection refused")
_DATABASE_DOWN = ("Problem talking to the database", "slurm_persist_conn_open", "PersistInit")
"""sacct's words when slurmdbd (the accounting database), not the controller, does not answer: a failed command
(its jobs stay UNKNOWN), never an unreachable controller, even with "Connection refused" after them."""
# The request may have reached the controller: repeat only commands that change nothing.
_MAYBE_DELIVERED = ("Socket timed out", "Zero Bytes were transmitted")

# The SLURM clients' input variables: each would reshape what a command does or reports behind the options it
# is given (SBATCH_GRES, SBATCH_TIMELIMIT or SBATCH_WAIT in the shell that started the driver would change the
# job's GPUs and time after the ladder was checked, or freeze the driver; SQUEUE_STATES would filter a poll).
# Every command states each option it relies on, so all are dropped, here and on the login host alike.
_DROPPED_ENV_PREFIXES = (
    "SBATCH_", "SLURM_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SCANCEL_", "SCONTROL_", "SACCTMGR_", "SINFO_",
)  # fmt: skip
_KEPT_ENV = ("SLURM_CONF",)
"""Kept although its prefix is dropped: it says which cluster (its config) the commands talk to."""
# Times come back in ISO form whatever the user's (or the login host's) SLURM_TIME_FORMAT, and in UTC whatever the
# zone of this machine or of the cluster's login host: they are read (and written) as UTC, never in a local zone.
_SET_ENV = {"SLURM_TIME_FORMAT": "standard", "TZ": "UTC"}
_JOB_ENVIRONMENT = frozenset({"sbatch"})
"""Commands whose environment becomes the job's (sbatch exports it): they keep the user's TZ, and are given no
time to read or write in a zone (``--deadline`` is relative: render.py ``format_deadline``)."""


def _set_env(name: str) -> dict[str, str]:
    env = dict(_SET_ENV)
    if name in _JOB_ENVIRONMENT:
        del env["TZ"]
    return env


def slurm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a SLURM client: ``base`` (default: ours, read now) with SLURM_CONF passed through.

    Times come back in ISO form and in UTC whatever the user's SLURM_TIME_FORMAT and TZ, and the clients' input
    variables (SBATCH_*, SLURM_* but SLURM_CONF, SQUEUE_*, ...) are dropped, since every call states its own
    options.
    """
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        if key in _KEPT_ENV or not key.startswith(_DROPPED_ENV_PREFIXES)
    }
    env.update(_SET_ENV)
    return env


@attrs.frozen
class RetryPolicy:
    """How long to ride through an unreachable controller: attempts, back-off, and a total time budget."""

    attempts: int = 4
    """Tries in all, the first included."""
    first_delay_seconds: float = 0.5
    max_delay_seconds: float = 8.0
    budget_seconds: float = 30.0
    """No retry starts once this much time (commands and sleeps together) has passed."""

    def delay(self, retry: int) -> float:
        """The sleep before retry number ``retry`` (1-based): doubling from the first delay, capped."""
        return float(min(self.max_delay_seconds, self.first_delay_seconds * 2 ** (retry - 1)))


ONE_ATTEMPT = RetryPolicy(attempts=1)
"""For the calls a poll makes on a cadence: the next poll is the retry, so the controller sees one per interval."""


@attrs.frozen
class CommandResult:
    """What one command run returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    """Wall time of the last attempt."""

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.returncode == 0

    @property
    def message(self) -> str:
        """The command's own error words: stderr's last non-empty line, else stdout's."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit status {self.returncode}"


class CommandRunner:
    """Runs SLURM client commands; ``calls`` counts runs (attempts) per command name, ``seconds`` their time.

    Commands go through ``transport`` (default: here, ``LocalTransport(env)``; ``SshTransport`` runs them on the
    cluster's login host; ``fellows_fsm.slurm.mock.MockTransport`` answers from a function). ``env`` (default: the
    process environment, read at each call) is filtered as ``slurm_env`` says; ``sleep`` is injectable so tests
    of the back-off do not wait.
    """

    def __init__(
        self,
        *,
        timeout_seconds: float = 30.0,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.retry = retry or RetryPolicy()
        self.env = None if env is None else dict(env)
        self.transport: Transport = transport if transport is not None else LocalTransport(self.env)
        self._sleep = sleep
        self.calls: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def sleep(self, seconds: float) -> None:
        """Sleep through the injected function (``time.sleep`` looked up now by default)."""
        (self._sleep or time.sleep)(seconds)

    @staticmethod
    def _now() -> float:
        return time.perf_counter()

    def run(
        self,
        argv: Sequence[str],
        *,
        idempotent: bool = True,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run ``argv`` (``stdin`` fed to it; here, in directory ``cwd`` if given) and return its result, whatever
        its exit status, unless the controller (or, over ssh, the host) is unreachable.

        ``retry`` overrides the runner's policy for this call (the poll's own squeue makes ONE attempt: the
        next poll, a poll interval later, is its retry).

        Unreachable (the known stderr lines, the process timing out, ssh's own failures) is retried with back-off
        within the policy; a command that is not ``idempotent`` is retried only if the request surely never left.
        Raises SchedulerUnreachable when the retries are spent, SshLoginRefused (at once) when ssh cannot log in,
        SlurmCommandMissing (a SchedulerError) when the binary is missing.
        """
        argv = tuple(argv)
        name = os.path.basename(argv[0])
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        attempt = 0
        reached = False  # did any attempt perhaps reach the cluster (a lost reply, not a refused connection)?
        spent = 0.0  # command time plus back-off sleeps, counted as planned (the sleep may be injected)
        while True:
            attempt += 1
            t0 = self._now()
            outcome = self._attempt(argv, name, timeout, stdin, cwd)
            if isinstance(outcome, CommandResult):
                return outcome
            spent += self._now() - t0
            why, delivered = outcome
            reached = reached or delivered
            if delivered and not idempotent:
                raise SchedulerUnreachable(
                    f"{name} got no reply from {self.transport.peer} ({why}); the request may have been "
                    "carried out, so it is not repeated blindly"
                )
            policy = retry or self.retry
            delay = policy.delay(attempt)
            if attempt >= policy.attempts or spent + delay > policy.budget_seconds:
                raise SchedulerUnreachable(
                    f"{name} could not reach {self.transport.peer} ({why}) after {attempt} attempt(s) in "
                    f"{spent:.1f} s; {self.transport.reach_hint}",
                    delivered=reached,
                )
            log.warning("%s: %s; retry %d in %.1f s", name, why, attempt, delay)
            self.sleep(delay)
            spent += delay

    def _attempt(
        self, argv: tuple[str, ...], name: str, timeout: float, stdin: bytes | None, cwd: str | None
    ) -> CommandResult | tuple[str, bool]:
        """One run: its result, or why the controller counts as unreachable and whether it may have acted."""
        request = Request(
            argv,
            _set_env(name),
            _DROPPED_ENV_PREFIXES,
            stdin,
            timeout,
            keep_env=_KEPT_ENV,
            cwd=None if self.transport.remote else cwd,
        )
        self.calls[name] += 1
        t0 = self._now()
        try:
            reply = self.transport.run(request)
        except CommandMissing as exc:
            raise SlurmCommandMissing(
                f"the SLURM command {name!r} cannot run: {exc}; install SLURM's client "
                "commands (Debian: apt-get install slurm-client) or load them (e.g. `module load slurm`), or set "
                "[fellows] host to run them on a login node over ssh"
            ) from None
        except NoAnswer as exc:
            self.seconds[name] += self._now() - t0
            return exc.why, exc.delivered
        elapsed = self._now() - t0
        self.seconds[name] += elapsed
        result = CommandResult(argv, reply.returncode, reply.stdout, reply.stderr, elapsed)
        if result.ok:
            return result
        if any(marker in reply.stderr for marker in _NOT_CONNECTED) and not any(
            marker in reply.stderr for marker in _DATABASE_DOWN
        ):
            return result.message, False
        if any(marker in reply.stderr for marker in _MAYBE_DELIVERED):
            return result.message, True
        return result
