"""Parsing squeue/sacct into Observations, and the one-squeue-then-one-sacct observation policy."""

from __future__ import annotations

from datetime import datetime

import pytest

from fellows_fsm.errors import SchedulerUnreachable
from fellows_fsm.scheduler.port import COULD_NOT_TELL, Phase
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.observe import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    Observer,
    parse_sacct,
    parse_slurm_time,
    parse_squeue,
    phase_of,
    squeue_argv,
)
from fellows_fsm.slurm.runner import RetryPolicy

T0 = "2026-11-30T02:36:31"


@pytest.mark.parametrize(
    ("state", "started", "phase"),
    [
        pytest.param("PENDING", False, Phase.PENDING, id="pending"),
        pytest.param("RUNNING", True, Phase.STARTED, id="running"),
        pytest.param("COMPLETING", True, Phase.STARTED, id="completing"),
        pytest.param("CONFIGURING", True, Phase.STARTED, id="configuring"),
        pytest.param("SUSPENDED", True, Phase.STARTED, id="suspended"),
        pytest.param("STOPPED", True, Phase.STARTED, id="stopped"),
        pytest.param("COMPLETED", True, Phase.STARTED, id="completed"),
        pytest.param("FAILED", True, Phase.STARTED, id="failed-after-start"),
        pytest.param("FAILED", False, Phase.GONE, id="failed-unstarted"),
        pytest.param("TIMEOUT", True, Phase.STARTED, id="timeout"),
        pytest.param("OUT_OF_MEMORY", True, Phase.STARTED, id="oom"),
        pytest.param("NODE_FAIL", False, Phase.GONE, id="node-fail-unstarted"),
        pytest.param("PREEMPTED", True, Phase.STARTED, id="preempted"),
        pytest.param("BOOT_FAIL", False, Phase.GONE, id="boot-fail"),
        pytest.param("CANCELLED", False, Phase.GONE, id="cancelled-pending"),
        pytest.param("CANCELLED", True, Phase.STARTED, id="cancelled-running"),
        pytest.param("CANCELLED by 0", False, Phase.GONE, id="sacct-cancelled-by"),
        pytest.param("DEADLINE", False, Phase.GONE, id="deadline"),
        pytest.param("REQUEUED", True, Phase.STARTED, id="requeued"),
        pytest.param("SOMETHING_NEW", True, Phase.UNKNOWN, id="unknown-word"),
    ],
)
def test_phase_mapping(state: str, started: bool, phase: Phase) -> None:
    """Each SLURM state word maps to the phase the lifecycle reads, by whether the job really started."""
    assert phase_of(state, started=started) is phase


def test_squeue_line_parses_every_field() -> None:
    """A pending line keeps its reason and QoS; a running line has a start time and no reason."""
    rows = parse_squeue(
        f"4|PENDING|QOSMaxGRESPerUser|high-eur|N/A|n/a|0|gpu|10:00|fsm-d1-r0|\n2|RUNNING|None|normal-eur|{T0}|gpu01|0|gpu|10:00|(null)|\n"
    )
    pending, running = rows["4"].observation, rows["2"].observation
    assert pending.phase is Phase.PENDING
    assert pending.reason == "QOSMaxGRESPerUser"
    assert pending.qos == "high-eur"
    assert pending.start_time is None
    assert rows["4"].comment == "fsm-d1-r0"
    assert running.phase is Phase.STARTED
    assert running.reason is None
    assert running.start_time == datetime(2026, 11, 30, 2, 36, 31).timestamp()
    assert rows["2"].comment is None


def test_pending_reason_none_stays_none() -> None:
    """The reason ``None`` (not evaluated yet) is None, never the string 'None'."""
    obs = parse_squeue("5|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|(null)|\n")["5"].observation
    assert obs.reason is None


def test_cancelled_while_pending_is_gone_despite_its_start_stamp() -> None:
    """SLURM stamps %S on a job cancelled while pending; without a batch host it never ran."""
    obs = parse_squeue(f"4|CANCELLED|QOSMaxGRESPerUser|high-eur|{T0}|n/a|0|gpu|10:00|tok|\n")["4"].observation
    assert obs.phase is Phase.GONE
    assert obs.start_time is None
    assert obs.reason is None


def test_cancelled_after_start_is_started() -> None:
    """A job cancelled while running started: the dispatch must never resubmit it."""
    obs = parse_squeue(f"3|CANCELLED|None|high-eur|{T0}|gpu01|0|gpu|10:00|(null)|\n")["3"].observation
    assert obs.phase is Phase.STARTED


def test_estimated_start_of_a_pending_job_is_not_a_start() -> None:
    """squeue shows a backfill estimate as %S for some pending jobs: that is not a start time."""
    obs = parse_squeue("6|PENDING|Resources|low-eur|2027-01-01T00:00:00|n/a|0|gpu|10:00|(null)|\n")["6"].observation
    assert obs.phase is Phase.PENDING
    assert obs.start_time is None


def test_a_pending_jobs_start_time_is_its_expected_start() -> None:
    """The same squeue field gives a pending job's backfill estimate as expected_start (no extra call)."""
    obs = parse_squeue("6|PENDING|Resources|high-eur|2027-01-01T00:00:00|n/a|0|gpu|10:00|(null)|\n")["6"].observation
    assert obs.expected_start == datetime(2027, 1, 1, 0, 0, 0).timestamp()


def test_a_pending_job_without_an_estimate_has_no_expected_start() -> None:
    """N/A in squeue's StartTime (SLURM 22.05's reading of a job over its own per-QoS cap, time limits in the way or
    not: this line as measured) is no estimate, not a time, and the reason still reads."""
    obs = parse_squeue("4|PENDING|QOSMaxGRESPerUser|high-eur|N/A|n/a|0|gpu|10:00|(null)|\n")["4"].observation
    assert (obs.expected_start, obs.reason) == (None, "QOSMaxGRESPerUser")


def test_a_running_job_has_no_expected_start() -> None:
    """Only a pending job carries an estimate; a running job's StartTime is its start."""
    obs = parse_squeue(f"2|RUNNING|None|normal-eur|{T0}|gpu01|0|gpu|10:00|(null)|\n")["2"].observation
    assert obs.expected_start is None
    assert obs.start_time is not None


def test_comment_may_hold_the_separator() -> None:
    """The comment is the last field, so a '|' inside it does not shift the other fields."""
    rows = parse_squeue("4|PENDING|Priority|high-eur|N/A|n/a|0|gpu|10:00|tok|B x|\n")
    assert rows["4"].comment == "tok|B x"
    assert rows["4"].observation.reason == "Priority"


def test_a_requeued_job_counts_as_started() -> None:
    """A job requeued before the router saw it run reads PENDING with no batch host, but RestartCnt says it ran."""
    obs = parse_squeue("7|PENDING|BeginTime|high-eur|2026-11-30T23:39:52|n/a|1|gpu|10:00|fsm-x-r0|\n")["7"].observation
    assert obs.phase is Phase.STARTED
    fresh = parse_squeue("8|PENDING|BeginTime|high-eur|2026-11-30T23:39:52|n/a|0|gpu|10:00|fsm-x-r0|\n")[
        "8"
    ].observation
    assert fresh.phase is Phase.PENDING


def test_malformed_squeue_lines_are_skipped() -> None:
    """A line not in the expected format is ignored, not guessed at."""
    assert parse_squeue("garbage\n\n") == {}


def test_sacct_lines_record_state_words_and_start() -> None:
    """sacct's 'CANCELLED by 0' is kept as the state; a job that had nodes started, one without never did."""
    rows = parse_sacct(
        f"3|CANCELLED by 0|None|high-eur|{T0}|gpu01|0:15|60|cpu=1,gres/gpu=2|{T0}|\n"
        "4|CANCELLED by 0|None|high-eur|None|None assigned|0:0|0||None|fsm-x-r0\n"
        f"2|RUNNING|None|high-eur|{T0}|gpu01|0:0|60|cpu=1|Unknown|\n"
    )
    assert rows["3"].observation.phase is Phase.STARTED
    assert rows["3"].observation.state == "CANCELLED by 0"
    assert rows["4"].observation.phase is Phase.GONE
    assert rows["4"].comment == "fsm-x-r0"
    assert rows["2"].observation.phase is Phase.STARTED


def test_sacct_start_stamped_on_a_job_cancelled_while_pending_is_not_a_start() -> None:
    """slurmdbd sometimes records the cancel time as Start of a never-run job; without nodes it never ran."""
    row = parse_sacct(f"4|CANCELLED by 0|QOSMaxGRESPerUser|high-eur|{T0}|None assigned|0:0|0||{T0}|t\n")["4"]
    assert row.observation.phase is Phase.GONE
    assert row.observation.start_time is None


@pytest.mark.parametrize("text", ["N/A", "None", "Unknown", "", "soon"])
def test_slurm_time_without_a_value(text: str) -> None:
    """Placeholder and unparsable times are None."""
    assert parse_slurm_time(text) is None


def test_squeue_argv_never_filters_by_qos_or_partition() -> None:
    """The poll asks for all states of the listed ids and nothing else."""
    argv = squeue_argv(["1", "2"])
    assert argv == ("squeue", "-h", "-t", "all", "-j", "1,2", "-O", SQUEUE_FORMAT)
    assert not any(a.startswith(("-q", "--qos", "-p", "--partition")) for a in argv)


def test_one_squeue_for_many_jobs() -> None:
    """Observing many jobs costs exactly one squeue and no sacct when squeue knows them all."""
    runner = MockRunner.scripted(
        {
            "squeue": [
                (
                    0,
                    f"1|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|a|\n2|PENDING|Priority|low-eur|N/A|n/a|0|gpu|10:00|b|\n",
                    "",
                )
            ]
        }
    )
    seen = Observer(runner).observe(["1", "2", "1"])
    assert list(seen) == ["1", "2"]
    assert seen["1"].phase is Phase.STARTED
    assert seen["2"].phase is Phase.PENDING
    assert runner.calls == {"squeue": 1}


def test_ids_squeue_forgot_go_to_one_sacct() -> None:
    """Ids missing from squeue are looked up in one sacct with an explicit --starttime."""
    runner = MockRunner.scripted(
        {
            "squeue": [(0, f"1|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|a|\n", "")],
            "sacct": [
                (0, "2|COMPLETED|None|high-eur|2026-11-29T01:00:00|gpu01|0:0|60|gres/gpu=8|2026-11-29T01:01:00|\n", "")
            ],
        }
    )
    seen = Observer(runner).observe(["1", "2", "3"])
    assert seen["2"].phase is Phase.STARTED
    assert seen["3"].phase is Phase.UNKNOWN
    assert runner.calls == {"squeue": 1, "sacct": 1}
    sacct = next(a for a in runner.argvs if a[0] == "sacct")
    assert any(a.startswith("--starttime=") for a in sacct)
    assert "2,3" in sacct
    assert sacct[-1] == SACCT_FIELDS


def test_empty_squeue_is_asked_again_before_sacct() -> None:
    """One empty squeue is never trusted: it is retried, and a later answer wins."""
    runner = MockRunner.scripted(
        {
            "squeue": [
                (0, "", ""),
                (1, "", "slurm_load_jobs error: Invalid job id specified\n"),
                (0, f"1|RUNNING|None|q|{T0}|h|0|gpu|10:00||\n", ""),
            ]
        }
    )
    seen = Observer(runner, empty_retries=2, retry_delay_seconds=0.1).observe(["1"])
    assert seen["1"].phase is Phase.STARTED
    assert runner.calls == {"squeue": 3}
    assert runner.slept == [0.1, 0.2]


def test_job_nobody_knows_is_unknown_never_finished() -> None:
    """A job neither squeue (after retries) nor sacct reports is UNKNOWN, not assumed finished."""
    runner = MockRunner.scripted(
        {
            "squeue": [(1, "", "slurm_load_jobs error: Invalid job id specified\n")],
            "sacct": [(0, "", "")],
        }
    )
    seen = Observer(runner, empty_retries=1).observe(["42"])
    assert seen["42"].phase is Phase.UNKNOWN
    assert runner.calls == {"squeue": 2, "sacct": 1}


def test_failed_sacct_leaves_jobs_unknown() -> None:
    """When sacct itself fails (e.g. slurmdbd down), the missing jobs stay UNKNOWN."""
    runner = MockRunner.scripted(
        {
            "squeue": [(0, "", "")],
            "sacct": [(1, "", "sacct: error: Problem talking to the database: Connection refused\n")],
        }
    )
    assert Observer(runner, empty_retries=0).observe(["7"])["7"].phase is Phase.UNKNOWN


def test_a_refused_sacct_leaves_jobs_unknown_after_one_attempt() -> None:
    """A sacct that answers with a refusal (no outage words) is not retried: its jobs stay UNKNOWN."""
    runner = MockRunner.scripted(
        {"squeue": [(0, "", "")], "sacct": [(1, "", "sacct: error: Problem talking to the database\n")]}
    )
    assert Observer(runner, empty_retries=0).observe(["7"])["7"].phase is Phase.UNKNOWN
    assert runner.calls == {"squeue": 1, "sacct": 1}
    assert runner.slept == []


def test_an_unreachable_squeue_raises_after_one_attempt() -> None:
    """The poll's squeue makes ONE attempt (the next poll is its retry): an unreachable controller raises at once,
    with no back-off sleep and no sacct."""
    runner = MockRunner.scripted(
        {"squeue": [(1, "", "squeue: error: Unable to contact slurm controller (connect failure)\n")]},
        retry=RetryPolicy(attempts=5),
    )
    with pytest.raises(SchedulerUnreachable, match=r"squeue could not reach .* after 1 attempt"):
        Observer(runner, empty_retries=2).observe(["7"])
    assert runner.calls == {"squeue": 1}
    assert runner.slept == []


def test_no_ids_no_calls() -> None:
    """Observing nothing asks SLURM nothing."""
    runner = MockRunner.scripted({})
    assert Observer(runner).observe([]) == {}
    assert runner.calls == {}


def _pending(job_id: str, reason: str, qos: str = "high-eur") -> str:
    return f"{job_id}|PENDING|{reason}|{qos}|N/A|n/a|0|gpu|10:00|t|\n"


def _reasons(lines: list[str], job_id: str = "5") -> list[str | None]:
    """The reasons one Observer reports for ``job_id`` over successive squeue replies ``lines``."""
    runner = MockRunner.scripted({"squeue": [(0, line, "") for line in [*lines, lines[-1]]]})
    observer = Observer(runner)
    return [observer.observe([job_id])[job_id].reason for _ in lines]


def test_limit_reason_survives_the_none_of_a_backfill_pass() -> None:
    """SLURM 24.11's QOSMaxGRESPerUser/None alternation reads as QOSMaxGRESPerUser throughout."""
    lines = [_pending("5", "QOSMaxGRESPerUser"), _pending("5", "None")] * 3
    assert _reasons(lines) == ["QOSMaxGRESPerUser"] * 6


def test_none_before_any_reason_stays_not_evaluated() -> None:
    """A job never seen with a limit reason keeps None (not evaluated yet): nothing is made up."""
    assert _reasons([_pending("5", "None"), _pending("5", "None")]) == [None, None]


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        pytest.param(_pending("5", "None", qos="normal-eur"), None, id="moved-to-another-qos"),
        pytest.param(_pending("5", "JobHeldUser"), "JobHeldUser", id="another-reason"),
        pytest.param(f"5|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|t|\n", None, id="started"),
    ],
)
def test_remembered_reason_is_forgotten_when_the_job_moves_on(second: str, expected: str | None) -> None:
    """A QoS change, another reason or a start forgets the limit: a later None is None again."""
    lines = [_pending("5", "QOSMaxGRESPerUser"), second, _pending("5", "None", qos="normal-eur")]
    assert _reasons(lines)[1:] == [expected, None]


def test_contention_reasons_are_not_remembered() -> None:
    """Only limit reasons are remembered: Resources followed by None reads as None."""
    assert _reasons([_pending("5", "Resources"), _pending("5", "None")]) == ["Resources", None]


def test_sacct_reads_how_a_started_job_ended() -> None:
    """sacct's ExitCode, ElapsedRaw, AllocTRES and End say how a started job ended: exit 3 is 3, a signal 9 with
    exit 0 reads 137, the GPUs come from gres/gpu; a running job has no end."""
    rows = parse_sacct(
        f"5|FAILED|None|high-eur|{T0}|gpu01|3:0|125|billing=1,cpu=1,gres/gpu=8,mem=1G,node=1|{T0}|t\n"
        f"6|CANCELLED by 1000|None|high-eur|{T0}|gpu01|0:9|61|cpu=1,gres/gpu:a100=2|{T0}|t\n"
        f"7|RUNNING|None|high-eur|{T0}|gpu01|0:0|61|cpu=1|Unknown|t\n"
    )
    five, six = rows["5"].observation.end, rows["6"].observation.end
    assert five is not None
    assert (five.state, five.exit_code, five.elapsed_seconds, five.gpus) == ("FAILED", 3, 125.0, 8)
    assert five.ended_at == parse_slurm_time(T0)
    assert six is not None
    assert (six.exit_code, six.gpus) == (137, 2)
    assert rows["7"].observation.end is None


def test_a_job_squeue_shows_ended_is_read_in_the_same_one_sacct() -> None:
    """squeue showing a started job ended (and another gone) costs one sacct for both, never one per job; the end
    is accounting's."""
    runner = MockRunner.scripted(
        {
            "squeue": [
                (
                    0,
                    f"1|COMPLETED|None|high-eur|{T0}|gpu01|0|gpu|10:00|a|\n"
                    f"2|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|b|\n",
                    "",
                )
            ],
            "sacct": [
                (
                    0,
                    f"1|COMPLETED|None|high-eur|{T0}|gpu01|0:0|30|gres/gpu=8|{T0}|a\n"
                    f"3|TIMEOUT|None|high-eur|{T0}|gpu01|0:15|60|gres/gpu=1|{T0}|c\n",
                    "",
                )
            ],
        }
    )
    seen = Observer(runner).observe(["1", "2", "3"])
    assert runner.calls == {"squeue": 1, "sacct": 1}
    assert "1,3" in next(a for a in runner.argvs if a[0] == "sacct")
    assert seen["1"].end is not None
    assert seen["1"].end.exit_code == 0
    assert seen["2"].end is None
    assert seen["3"].end is not None
    assert seen["3"].end.state == "TIMEOUT"


def test_accounting_down_leaves_an_ended_job_without_an_end() -> None:
    """slurmdbd down: a job squeue shows ended has no end yet (could not tell), and one squeue no longer shows is
    UNKNOWN marked "could not tell" (never counted toward a lost job)."""
    runner = MockRunner.scripted(
        {
            "squeue": [(0, f"1|FAILED|None|high-eur|{T0}|gpu01|0|gpu|10:00|a|\n", "")],
            "sacct": [(1, "", "sacct: error: Problem talking to the database: Connection refused\n")],
        }
    )
    seen = Observer(runner).observe(["1", "2"])
    assert seen["1"].phase is Phase.STARTED
    assert seen["1"].end is None
    assert seen["2"].phase is Phase.UNKNOWN
    assert seen["2"].state == COULD_NOT_TELL


def test_accounting_without_a_record_gives_squeues_word_alone() -> None:
    """Accounting answered with no record of a job squeue shows ended: its end is squeue's word alone (COMPLETED
    is exit 0 by SLURM's definition; any other word has no exit code), marked not accounted."""
    runner = MockRunner.scripted(
        {
            "squeue": [
                (
                    0,
                    f"1|COMPLETED|None|q|{T0}|gpu01|0|gpu|10:00|a|\n2|NODE_FAIL|None|q|{T0}|gpu01|0|gpu|10:00|b|\n",
                    "",
                )
            ],
            "sacct": [(0, "", "")],
        }
    )
    seen = Observer(runner).observe(["1", "2"])
    one, two = seen["1"].end, seen["2"].end
    assert one is not None
    assert (one.exit_code, one.accounted) == (0, False)
    assert two is not None
    assert (two.state, two.exit_code) == ("NODE_FAIL", None)


def test_an_unreachable_sacct_is_could_not_tell_not_an_outage() -> None:
    """A sacct the runner reads as an outage ("Connection refused") is asked once and read as "could not tell": the
    poll's squeue answered, so the cluster is not paused for it."""
    runner = MockRunner.scripted(
        {
            "squeue": [(0, f"1|COMPLETED|None|q|{T0}|gpu01|0|gpu|10:00|a|\n", "")],
            "sacct": [(1, "", "sacct: error: Connection refused\n")] * 3,
        }
    )
    seen = Observer(runner).observe(["1", "2"])
    assert runner.calls == {"squeue": 1, "sacct": 1}
    assert seen["1"].end is None
    assert seen["2"].state == COULD_NOT_TELL


def test_an_accounting_record_without_an_end_time_is_asked_again() -> None:
    """A job squeue shows ended whose accounting record has no End yet (slurmdbd catching up after an outage, its
    exit code not in yet) has no end this poll: asked again, never read as exit 0."""
    runner = MockRunner.scripted(
        {
            "squeue": [(0, f"1|FAILED|None|q|{T0}|gpu01|0|gpu|10:00|a|\n", "")],
            "sacct": [(0, f"1|FAILED|None|q|{T0}|gpu01|0:0|13|gres/gpu=1|Unknown|a\n", "")],
        }
    )
    assert Observer(runner).observe(["1"])["1"].end is None
