"""The one error tree of fellows_fsm; every message names the offending value and what to do.

    FellowsError                      exit 1  (root: catch this to catch everything we raise)
    +-- UsageError                    exit 2  a command-line value click cannot check (a script's #SBATCH line,
    |                                         an sbatch option after `--` that fellows-fsm owns)
    +-- ConfigError (ValueError)      exit 3  a config value, file or environment variable is wrong
    |   +-- TraceError                exit 3  a simulator trace line is wrong (names the line and the key)
    |   +-- LedgerRefused             exit 3  the [ledger] refused this tool: a wrong password, a missing database
    |                                         or role, a schema newer than this version knows (nothing queued)
    +-- TransitionNotAllowed          exit 4  a trigger fired from a state, or past a guard, that forbids it
    +-- SchedulerError                exit 5  the scheduler refused or failed a request
    |   +-- SchedulerUnreachable      exit 6  the controller did not answer (retried before this is raised), or
    |   |   |                                 ssh to the cluster's host failed (refused, dropped, timed out)
    |   |   +-- SshLoginRefused       exit 9  ssh cannot log in to [fellows] host: unknown or changed host key,
    |   |                                     refused authentication, unknown host name (nothing was queued)
    |   +-- SlurmCommandMissing       exit 5  a SLURM command cannot run where it is run (not on PATH: a shell
    |   |                                     without `module load slurm`); named with the PATH it was looked on
    |   +-- SubmitRejected            exit 5  sbatch refused the job (bad script, impossible request)
    |       +-- QosRejected           exit 5  the QoS is not granted or does not exist
    +-- JournalError                  exit 7  the journal is unreadable, corrupt, or held by another router
    |   +-- JournalBusy               exit 7  another live router drives it (names the holder)
    |   +-- JournalFull               exit 7  the state dir's filesystem is full: nothing can be journaled
    +-- LedgerUnreachable             exit 1  the [ledger] did not answer within connect_timeout_seconds (a paid
    |                                         handoff waits for it; free walks never do)
    +-- LaneError                     exit 8  a fallback lane (e.g. the GCP command) failed
    |   +-- HandoffUnknown            exit 10 the lane's command was started but how it ended is unknown (its
    |   |                                     wrapper was killed, and the lane has no probe): check the lane
    |   +-- PaidLaneError             exit 8  a paid lane's status or cancel could not be read or done
    |   +-- CredentialsMissing        exit 11 a paid lane in the dispatch's order has no credentials (nothing
    |   |                                     was queued)
    |   +-- NoBudget                  exit 12 the dispatch's paid run would pass the [budget] (on_budget =
    |   |                                     "refuse"): it ended NO_BUDGET, nothing paid
    |   +-- ...                       exit 8  each lane kind's own (lanes/<kind>/errors.py: the gcp-batch kind's
    |                                         BatchError, BatchRefused, BatchUnavailable, MachineRefused)
    +-- NoJob                         exit 30 `logs`: the dispatch has no job whose output there is (yet)
    +-- LogMissing                    exit 31 `logs`: the job's output file is missing or unreadable where it ran
    +-- Interrupted (KeyboardInterrupt) exit 130 Ctrl-C while a dispatch was being queued (it was withdrawn)

Usage errors click finds itself are click's (exit 2, with its usage text). Nothing here prints; the CLI
turns these into one line on stderr.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CredentialsMissing",
    "FellowsError",
    "HandoffUnknown",
    "Interrupted",
    "JournalBusy",
    "JournalError",
    "JournalFull",
    "LaneError",
    "LedgerRefused",
    "LedgerUnreachable",
    "LogMissing",
    "NoBudget",
    "NoJob",
    "PaidLaneError",
    "QosRejected",
    "SchedulerError",
    "SchedulerUnreachable",
    "SlurmCommandMissing",
    "SshLoginRefused",
    "SubmitRejected",
    "TraceError",
    "TransitionNotAllowed",
    "UsageError",
    "WaitTimeout",
]


class FellowsError(Exception):
    """Root of every error fellows_fsm raises on purpose."""

    exit_code: int = 1


class UsageError(FellowsError, ValueError):
    """A command-line value is wrong in a way click cannot see; the message names it and what to give instead."""

    exit_code = 2


class ConfigError(FellowsError, ValueError):
    """A configuration value is invalid; the message names the key and the bad value."""

    exit_code = 3


class TraceError(ConfigError):
    """A simulator trace line is not valid; the message names the file, the line number and the bad key."""


class TransitionNotAllowed(FellowsError):
    """A lifecycle trigger was fired from a state, or past a guard, that does not allow it."""

    exit_code = 4


class SchedulerError(FellowsError):
    """The scheduler (SLURM or the fake) refused or failed a request."""

    exit_code = 5


class SchedulerUnreachable(SchedulerError):
    """The SLURM controller did not answer in time, even after retries.

    ``delivered``: the request may have reached the cluster (a reply lost, not a connection refused); False when
    no attempt ever left (ssh could not connect, the client could not contact slurmctld): nothing was done there.
    """

    exit_code = 6

    def __init__(self, message: str, *, delivered: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered


class SshLoginRefused(SchedulerUnreachable):
    """ssh cannot log in to the cluster's host until someone acts (a host key, a key, a name); ``host`` names it.

    A walking dispatch treats it as an unreachable cluster (its ladder's clock stops); a new submit stops on it.
    """

    exit_code = 9

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message, delivered=False)  # ssh never logged in: no command ran there
        self.host = host


class SlurmCommandMissing(SchedulerError):
    """A SLURM client command cannot run where it is run (not installed, not on PATH); nothing reached the
    cluster. The driver treats its cluster as one it cannot watch (the windows wait), never as a refusal."""


class SubmitRejected(SchedulerError):
    """The scheduler refused a submission; the message carries the scheduler's own words."""


class QosRejected(SubmitRejected):
    """The scheduler refused a QoS as not granted or unknown."""

    def __init__(self, qos: str, message: str) -> None:
        super().__init__(message)
        self.qos = qos


class JournalError(FellowsError):
    """The journal cannot be opened, is corrupt, or is driven by another live router."""

    exit_code = 7


class JournalBusy(JournalError):
    """Another live process holds the journal's driver lock; ``holder`` is what its lock file says of it."""

    def __init__(self, holder: str, message: str) -> None:
        super().__init__(message)
        self.holder = holder


class JournalFull(JournalError):
    """The state dir's filesystem has no room: nothing is journaled, so nothing is started or queued."""


class LaneError(FellowsError):
    """A lane (such as the GCP command) failed to take a job."""

    exit_code = 8


class HandoffUnknown(LaneError):
    """A lane's command was started but nobody can tell how it ended: it is never run again; check the lane."""

    exit_code = 10


class PaidLaneError(LaneError):
    """A paid lane could not say where its jobs stand, or could not cancel one (the line says what to do)."""


class CredentialsMissing(LaneError):
    """A paid lane the dispatch may reach has no credentials; nothing was queued."""

    exit_code = 11


class LedgerRefused(ConfigError):
    """The shared ledger answered, and refused: a wrong password, no such database or role, a schema newer than this
    version of fellows-fsm knows. The message names the ledger by its redacted URL, never the password."""


class LedgerUnreachable(FellowsError):
    """The shared ledger did not answer (refused, timed out): no paid job is handed off until it does."""


class NoBudget(LaneError):
    """The dispatch ended NO_BUDGET: its paid run would have passed the [budget]."""

    exit_code = 12


class NoJob(FellowsError):
    """``logs`` of a dispatch that has no SLURM job yet (or ended without one): nothing to print."""

    exit_code = 30


class LogMissing(FellowsError):
    """``logs``: the job's output file is not there, or cannot be read, where the job ran (named: path and host)."""

    exit_code = 31


class WaitTimeout(FellowsError, TimeoutError):
    """``wait`` (``submit --wait``, ``Fellows.wait``) gave up at its ``--timeout``: the dispatch goes on, walked and
    followed by the driver; the message names what had not ended."""

    exit_code = 124


class Interrupted(FellowsError, KeyboardInterrupt):
    """Ctrl-C came while a dispatch was being queued; the message says what was left (withdrawn, or not).

    It is also a KeyboardInterrupt, so a program embedding the router still sees the interrupt as one.
    """

    exit_code = 130
