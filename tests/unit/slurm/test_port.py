"""SlurmScheduler's command sequences and its reading of SLURM's answers, through a scripted runner."""

from __future__ import annotations

import pytest

from fellows_fsm.errors import QosRejected, SchedulerError, SchedulerUnreachable, SubmitRejected
from fellows_fsm.scheduler.port import JobSpec, Phase, Scheduler
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.port import SlurmScheduler, parse_sbatch_id, parse_version

T0 = "2026-11-30T02:36:31"
SPEC = JobSpec("train", "/jobs/train it.sh", gpus=8)
V22 = (0, "slurm-wlm 22.05.8\n", "")
V23_EARLY = (0, "slurm 23.11.4\n", "")
V23 = (0, "slurm 23.11.6\n", "")
V24 = (0, "slurm-wlm 24.11.5\n", "")


def _port(replies: dict[str, list[tuple[int, str, str]]]) -> tuple[SlurmScheduler, MockRunner]:
    runner = MockRunner.scripted(replies)
    return SlurmScheduler(runner, user="alice"), runner


def test_slurm_scheduler_is_a_scheduler() -> None:
    """SlurmScheduler satisfies the port protocol the lifecycle is typed against."""
    port: Scheduler = SlurmScheduler(MockRunner.scripted({}), user="alice")
    assert port.observe([]) == {}


@pytest.mark.parametrize(("stdout", "job_id"), [("123\n", "123"), ("77;fellows\n", "77"), ("5_3\n", "5_3")])
def test_parse_sbatch_id(stdout: str, job_id: str) -> None:
    """``sbatch --parsable`` prints ``<id>`` or ``<id>;<cluster>``."""
    assert parse_sbatch_id(stdout) == job_id


def test_parse_sbatch_id_refuses_garbage() -> None:
    """Output without a job id is an error, never a made-up id."""
    with pytest.raises(SchedulerError, match="holds no job id"):
        parse_sbatch_id("Submitted batch job\n")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("slurm-wlm 22.05.8", (22, 5, 8)),
        ("slurm 23.11.1", (23, 11, 1)),
        ("slurm 24.11.0-1", (24, 11, 0)),
        ("slurm-wlm 24.11.5", (24, 11, 5)),
        ("slurm 25.05", (25, 5, 0)),
        ("", (0, 0, 0)),
    ],
    ids=["debian-12", "23.11.1", "packaged", "debian-13", "no-patch", "empty"],
)
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    """The version reads as (major, minor, patch) so it compares with an exact patch level such as 23.11.6."""
    assert parse_version(text) == version


def test_submit_renders_the_rung_and_returns_the_id() -> None:
    """submit runs the rendered sbatch once, not as an idempotent command, and returns the id."""
    port, runner = _port({"sbatch": [(0, "41;fellows\n", "")]})
    assert port.submit(SPEC, qos="normal-eur", token="fsm-d-r1") == "41"
    argv = runner.argvs[0]
    assert argv[:3] == ("sbatch", "--parsable", "--job-name=train")
    assert "--qos=normal-eur" in argv
    assert "--comment=fsm-d-r1" in argv
    assert argv[-1] == "/jobs/train it.sh"
    assert runner.idempotent == [False]


def test_a_submit_whose_reply_was_lost_is_not_repeated() -> None:
    """An sbatch whose reply was lost (socket timeout) may have queued the job: it raises at once, one attempt."""
    lost = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"
    port, runner = _port({"sbatch": [(1, "", lost), (0, "41\n", "")]})
    with pytest.raises(SchedulerUnreachable, match="may have been carried out"):
        port.submit(SPEC, qos="high-eur", token="t")
    assert runner.calls == {"sbatch": 1}
    assert runner.slept == []


def test_a_submit_that_never_reached_the_controller_is_asked_again() -> None:
    """An sbatch that could not even connect never reached slurmctld: it is retried after a back-off."""
    refused = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n"
    port, runner = _port({"sbatch": [(1, "", refused), (0, "41\n", "")]})
    assert port.submit(SPEC, qos="high-eur", token="t") == "41"
    assert runner.calls == {"sbatch": 2}
    assert runner.slept == [0.5]


def test_submit_invalid_qos_is_qos_rejected() -> None:
    """sbatch's 'Invalid qos specification' becomes QosRejected carrying the QoS and SLURM's words."""
    port, _ = _port({"sbatch": [(1, "", "sbatch: error: Batch job submission failed: Invalid qos specification\n")]})
    with pytest.raises(QosRejected, match="Invalid qos specification") as info:
        port.submit(SPEC, qos="other-eur", token="t")
    assert info.value.qos == "other-eur"


def test_submit_other_refusal_names_the_script_with_slurms_words() -> None:
    """Any other refusal is SubmitRejected with the script path and SLURM's message on one line."""
    stderr = (
        "sbatch: error: This does not look like a batch script.  The first\n"
        "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
    )
    port, _ = _port({"sbatch": [(1, "", stderr)]})
    with pytest.raises(SubmitRejected) as info:
        port.submit(SPEC, qos="high-eur", token="t")
    assert not isinstance(info.value, QosRejected)
    message = str(info.value)
    assert "/jobs/train it.sh" in message
    assert "This does not look like a batch script.  The first line must start with #!" in message


def test_cancel_if_pending_fences_then_cancels_before_23_11() -> None:
    """On 22.05 the job is fenced in slurmctld (begin time) before scancel, then read back as GONE."""
    port, runner = _port(
        {
            "scancel": [V22, (0, "", "")],
            "scontrol": [(0, "", "")],
            "squeue": [(0, f"9|CANCELLED|QOSMaxGRESPerUser|high-eur|{T0}|n/a|0|gpu|10:00|t|\n", "")],
        }
    )
    obs = port.cancel_if_pending(["9"])["9"]
    assert obs.phase is Phase.GONE
    assert [a[:3] for a in runner.argvs] == [
        ("scancel", "--version"),
        ("scontrol", "update", "jobid=9"),
        ("scancel", "--state=PENDING", "9"),
        ("squeue", "-h", "-t"),
    ]
    assert runner.argvs[1][3].startswith("StartTime=")


def test_cancel_if_pending_leaves_a_started_job_alone() -> None:
    """A job that started before the fence is refused by slurmctld: no scancel, read back STARTED."""
    port, runner = _port(
        {
            "scancel": [V22],
            "scontrol": [(1, "", "Job is no longer pending execution for job 9\n")],
            "squeue": [(0, f"9|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|t|\n", "")],
        }
    )
    assert port.cancel_if_pending(["9"])["9"].phase is Phase.STARTED
    assert runner.calls["scancel"] == 1  # only --version
    assert ("scancel", "--state=PENDING", "9") not in runner.argvs


def test_cancel_if_pending_batches_and_cancels_only_the_fenced_jobs() -> None:
    """Many ids cost one fence and one scancel; jobs slurmctld refused to fence are never cancelled, and only the
    fenced ones are reported gone (the others are read back by the next observe)."""
    refusals = "Job is no longer pending execution for job 2\nInvalid job id specified for job 4\n"
    port, runner = _port({"scancel": [V22, (0, "", "")], "scontrol": [(1, "", refusals)]})
    gone = port.cancel_if_pending(["1", "2", "3", "4", "1"], read_back=False)
    assert {j: o.phase for j, o in gone.items()} == {"1": Phase.GONE, "3": Phase.GONE}
    assert runner.argvs[1] == ("scontrol", "update", "jobid=1,2,3,4", "StartTime=now+365days")
    assert runner.argvs[2] == ("scancel", "--state=PENDING", "1", "3")
    assert runner.calls == {"scancel": 2, "scontrol": 1}


def test_cancel_if_pending_falls_back_to_scancels_filter_when_the_fence_fails_oddly() -> None:
    """A fence refused for an unexplained reason still cancels, with scancel's own state filter, but proves nothing:
    the job may have started between scancel's look and its kill, so only the next observe decides."""
    port, runner = _port({"scancel": [V22, (0, "", "")], "scontrol": [(1, "", "Access/permission denied\n")]})
    assert port.cancel_if_pending(["7"], read_back=False) == {}
    assert runner.argvs[-1] == ("scancel", "--state=PENDING", "7")


def test_cancel_if_pending_uses_ctld_from_23_11_6_and_asks_the_version_once() -> None:
    """From 23.11.6 scancel --ctld filters inside slurmctld; the version is asked only once per port."""
    port, runner = _port(
        {
            "scancel": [V23, (0, "", "")],
            "squeue": [
                (
                    0,
                    f"9|CANCELLED|Priority|high-eur|{T0}|n/a|0|gpu|10:00|t|\n8|RUNNING|None|high-eur|{T0}|gpu01|0|gpu|10:00|u|\n",
                    "",
                )
            ],
        }
    )
    seen = port.cancel_if_pending(["9", "8"])
    assert seen["9"].phase is Phase.GONE
    assert seen["8"].phase is Phase.STARTED
    port.cancel_if_pending(["9"])
    assert runner.argvs.count(("scancel", "--version")) == 1
    assert ("scancel", "--ctld", "--state=PENDING", "9", "8") in runner.argvs
    assert runner.calls["scontrol"] == 0
    assert runner.calls["squeue"] == 2


def test_cancel_if_pending_of_nothing_asks_nothing() -> None:
    """An empty batch makes no call at all."""
    port, runner = _port({})
    assert port.cancel_if_pending([]) == {}
    assert runner.calls == {}


def test_find_by_token_picks_the_newest_tagged_job() -> None:
    """find_by_token lists the user's jobs in one squeue and keeps the newest one carrying the token."""
    port, runner = _port(
        {
            "squeue": [
                (
                    0,
                    f"10|CANCELLED|None|high-eur|{T0}|n/a|0|gpu|10:00|fsm-d-r0|\n"
                    f"12|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|fsm-d-r0|\n"
                    f"11|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|fsm-other-r0|\n",
                    "",
                )
            ]
        }
    )
    found = port.find_by_token("fsm-d-r0")
    assert found is not None
    assert found.job_id == "12"
    assert runner.argvs[0][:6] == ("squeue", "-h", "-t", "all", "-u", "alice")
    assert runner.calls == {"squeue": 1}


def test_find_by_token_falls_back_to_sacct_then_none() -> None:
    """A token squeue does not show is looked up in sacct; found nowhere, the answer is None."""
    port, runner = _port(
        {
            "squeue": [(0, "", "")],
            "sacct": [(0, "3|COMPLETED|None|high-eur|" + T0 + "|gpu01|0:0|5|cpu=1|" + T0 + "|fsm-a\n", "")],
        }
    )
    found = port.find_by_token("fsm-a")
    assert found is not None
    assert found.phase is Phase.STARTED
    assert port.find_by_token("fsm-b") is None
    sacct = next(a for a in runner.argvs if a[0] == "sacct")
    assert sacct[sacct.index("-u") : sacct.index("-u") + 2] == ("-u", "alice")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        pytest.param((0, "", ""), True, id="accepted"),
        pytest.param((1, "", "Job is no longer pending execution for job 5\n"), False, id="running"),
        pytest.param((1, "", "Job has already finished for job 5\n"), False, id="finished"),
    ],
)
def test_change_qos(reply: tuple[int, str, str], expected: bool) -> None:
    """change_qos is True when slurmctld moved the pending job, False once it is no longer pending."""
    port, runner = _port({"scontrol": [reply]})
    assert port.change_qos("5", "normal-eur") is expected
    assert runner.argvs == [("scontrol", "update", "jobid=5", "qos=normal-eur")]


def test_change_qos_invalid_qos_is_qos_rejected() -> None:
    """An unknown or refused QoS raises QosRejected with SLURM's words."""
    port, _ = _port({"scontrol": [(1, "", "Invalid qos specification for job 5\n")]})
    with pytest.raises(QosRejected, match="Invalid qos specification for job 5"):
        port.change_qos("5", "nosuch")


def test_change_qos_other_refusal_is_a_scheduler_error() -> None:
    """Any other refusal (e.g. an unknown job) is a SchedulerError naming the job and QoS."""
    port, _ = _port({"scontrol": [(1, "", "Invalid job id specified for job 99\n")]})
    with pytest.raises(SchedulerError, match=r"job 99 to QoS 'low-eur'.*Invalid job id"):
        port.change_qos("99", "low-eur")


def test_cancel_scancels_every_job_in_one_call_whatever_their_state() -> None:
    """A withdraw is one scancel of all the ids, with no state filter."""
    port, runner = _port({"scancel": [(0, "", "")]})
    port.cancel(["11", "12"])
    assert runner.argvs == [("scancel", "11", "12")]


def test_cancel_of_an_ended_job_is_not_an_error() -> None:
    """scancel's 'already finished' answer for an ended job is fine; any other refusal is an error."""
    port, _ = _port({"scancel": [(1, "", "scancel: error: Kill job error on job id 11: Job has already finished\n")]})
    port.cancel(["11"])
    port, _ = _port({"scancel": [(1, "", "scancel: error: Access/permission denied for job 12\n")]})
    with pytest.raises(SchedulerError, match=r"scancel 12 failed: .*permission denied"):
        port.cancel(["12"])


@pytest.mark.parametrize(
    ("version", "ctld"),
    [(V22, False), (V23_EARLY, False), (V23, True), (V24, True)],
    ids=["22.05.8", "23.11.4", "23.11.6", "24.11.5"],
)
def test_ctld_cancel_is_gated_by_the_exact_patch_level(version: tuple[int, str, str], ctld: bool) -> None:
    """scancel --ctld is used only from 23.11.6 (the fixed single filtered cancel); before, the job is fenced."""
    port, runner = _port({"scancel": [version, (0, "", "")], "scontrol": [(0, "", "")]})
    port.cancel_if_pending(["5"], read_back=False)
    assert (("scancel", "--ctld", "--state=PENDING", "5") in runner.argvs) is ctld
    assert (("scancel", "--state=PENDING", "5") in runner.argvs) is not ctld


def test_ctld_cancel_proves_gone_every_job_its_filter_did_not_spare() -> None:
    """scancel --ctld names each job its filter spared (measured on 24.11); the others are reported GONE, and an
    error line it cannot read makes the cancel prove nothing."""
    spared = (
        "scancel: error: Kill job error on job id 2: Job state RUNNING != filter state PENDING: Cannot signal job\n"
    )
    port, _ = _port({"scancel": [V23, (0, "", spared)]})
    gone = port.cancel_if_pending(["4", "2"], read_back=False)
    assert {j: o.phase for j, o in gone.items()} == {"4": Phase.GONE}
    odd, _ = _port({"scancel": [V23, (0, "", "scancel: error: something new\n")]})
    assert odd.cancel_if_pending(["4"], read_back=False) == {}


LOST = (1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n")
LISTING = (
    "12|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|fsm-a-r0|\n"
    "13|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|fsm-b-r0|\n"
    "14|PENDING|None|high-eur|N/A|n/a|0|gpu|10:00|fsm-live-r0|\n"
)


def _lost_submits(port: SlurmScheduler, tokens: list[str]) -> None:
    for token in tokens:
        with pytest.raises(SchedulerUnreachable):
            port.submit(SPEC, qos="high-eur", token=token)


def test_after_lost_sbatch_replies_the_next_observe_lists_the_users_jobs_and_the_lookups_read_it() -> None:
    """Three sbatch replies lost: the next poll's one squeue lists every job of the user, and the three lookups of
    that tick (two found, one not: one sacct for it) run no squeue of their own: one squeue for the poll."""
    port, runner = _port({"sbatch": [LOST], "squeue": [(0, LISTING, "")], "sacct": [(0, "", "")]})
    _lost_submits(port, ["fsm-a-r0", "fsm-b-r0", "fsm-c-r0"])
    seen = port.observe(["14"])
    assert seen["14"].phase is Phase.PENDING
    assert runner.argvs[-1][:6] == ("squeue", "-h", "-t", "all", "-u", "alice")  # the user's jobs, not -j 14
    found = [port.find_by_token(t) for t in ("fsm-a-r0", "fsm-b-r0", "fsm-c-r0")]
    assert [f.job_id if f is not None else None for f in found] == ["12", "13", None]
    assert runner.calls == {"sbatch": 3, "squeue": 1, "sacct": 1}
    port.observe(["14"])  # the lookups are answered: the next poll asks for its ids again
    assert runner.argvs[-1][:6] == ("squeue", "-h", "-t", "all", "-j", "14")


def test_a_tick_s_lookups_share_one_listing_and_a_new_observe_submit_or_cancel_forgets_it() -> None:
    """Lookups with no listing of the tick take one and share it; the next observe, an sbatch or a scancel forgets
    it (a later lookup lists again: never a listing older than its tick, nor one from before a job was queued)."""
    port, runner = _port({"squeue": [(0, LISTING, "")], "sbatch": [(0, "20\n", "")], "scancel": [(0, "", "")]})
    assert port.find_by_token("fsm-a-r0") is not None
    assert port.find_by_token("fsm-b-r0") is not None
    assert runner.calls == {"squeue": 1}
    for forget in (
        lambda: port.observe(["14"]),
        lambda: port.submit(SPEC, qos="high-eur", token="fsm-n-r0"),
        lambda: port.cancel(["14"]),
    ):
        before = runner.calls["squeue"]
        forget()
        calls = runner.calls["squeue"]
        assert port.find_by_token("fsm-a-r0") is not None
        assert runner.calls["squeue"] == calls + 1, (before, calls)


def test_a_listing_answered_late_is_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing that took longer than a prompt answer came from a stalled controller (it may still queue a lost
    sbatch after it): the next lookup lists again."""
    port, runner = _port({"squeue": [(0, LISTING, "")]})
    clock = iter([0.0, 2.5, 10.0, 10.1])
    monkeypatch.setattr("fellows_fsm.slurm.port.time.monotonic", lambda: next(clock))
    port.find_by_token("fsm-a-r0")
    port.find_by_token("fsm-b-r0")
    assert runner.calls == {"squeue": 2}
