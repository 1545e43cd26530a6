"""A command lane followed to its end (issue 27 item 2): its ``status`` and ``cancel`` templates run as real tiny
scripts (never a mocked subprocess), their contract read (lanes/command/follow.py), and their keys checked at load.

The contract: ``status`` exits 0 and its first line starts with queued, running, succeeded, failed or cancelled
(any case; the rest of the line is the note); anything else is "could not tell" (PaidStatus.UNKNOWN, never an
end). ``cancel`` exits 0 once the paid job is cancelled or already gone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm import ConfigError, JobSpec
from fellows_fsm.config.file import Config
from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import PaidLaneError
from fellows_fsm.lanes.base import PaidLane
from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.command.follow import look_all
from fellows_fsm.lanes.command.lane import COMMAND, HANDOFFS, CommandLane
from fellows_fsm.lanes.handoff import HandoffFiles
from fellows_fsm.lanes.registry import lane_table, parse_lane
from tests.unit.cli_helpers import SchedulingFake, _toml, refused, run, world

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=3600)
ID = "0123abcd0123"


def _script(tmp_path: Path, name: str, body: str) -> str:
    """An executable sh script ``name`` in tmp_path running ``body`` (its path, an argv item)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def _lane(tmp_path: Path, status: str | None = None, cancel: str | None = None, **keys: Any) -> CommandLane:
    """A command lane whose status (and cancel) is a script of this body, given the dispatch id as $1."""
    settings = LaneConfig(
        name="sky",
        command=("true",),
        status=None if status is None else (_script(tmp_path, "status.sh", status), "{dispatch_id}"),
        cancel=None if cancel is None else (_script(tmp_path, "cancel.sh", cancel), "{dispatch_id}"),
        **keys,
    )
    return CommandLane(settings)


def _look(lane: CommandLane, dispatch_id: str = ID) -> PaidLook:
    """The one look at one dispatch (its job given)."""
    answer = lane.look([dispatch_id], specs={dispatch_id: SPEC})
    assert set(answer) == {dispatch_id}
    return answer[dispatch_id]


# --------------------------------------------------------------------------------------------- the status contract
WORDS = {
    "queued": PaidStatus.QUEUED,
    "running": PaidStatus.RUNNING,
    "succeeded": PaidStatus.SUCCEEDED,
    "failed": PaidStatus.FAILED,
    "cancelled": PaidStatus.CANCELLED,
}


@pytest.mark.parametrize("case", ["lower", "upper", "title"])
@pytest.mark.parametrize("word", sorted(WORDS))
def test_each_word_in_any_case_is_its_status_and_the_rest_of_the_line_its_note(
    word: str, case: str, tmp_path: Path
) -> None:
    """A status that exits 0 printing one of the five words (any case) first is that status; the rest is the note."""
    printed = getattr(word, case)()
    lane = _lane(tmp_path, status=f"echo '{printed} on sky-7 since 12:00'; echo 'second line is ignored'")
    assert _look(lane) == PaidLook(WORDS[word], "on sky-7 since 12:00")


def test_a_word_alone_has_an_empty_note(tmp_path: Path) -> None:
    """A first line of only the word (surrounding blanks aside) gives the status and an empty note."""
    assert _look(_lane(tmp_path, status="echo '  RUNNING  '")) == PaidLook(PaidStatus.RUNNING, "")


@pytest.mark.parametrize(
    ("printed", "seen"),
    [
        pytest.param("pending for quota", "'pending for quota'", id="other-word"),
        pytest.param("runningish now", "'runningish now'", id="word-prefix"),
        pytest.param("FAILED_NO_RESOURCE", "'FAILED_NO_RESOURCE'", id="skypilot-word"),
        pytest.param("canceled", "'canceled'", id="us-spelling"),
        pytest.param("", "nothing", id="empty-line"),
    ],
)
def test_any_other_first_line_is_could_not_tell_and_says_what_was_seen(printed: str, seen: str, tmp_path: Path) -> None:
    """A first line that does not start with one of the words is UNKNOWN, its note quoting what was printed."""
    look = _look(_lane(tmp_path, status=f"echo '{printed}'; echo succeeded"))
    assert look.status is PaidStatus.UNKNOWN
    assert seen in look.note
    assert "\n" not in look.note


def test_no_output_at_all_is_could_not_tell(tmp_path: Path) -> None:
    """A status that exits 0 printing nothing is UNKNOWN, never an end."""
    look = _look(_lane(tmp_path, status="exit 0"))
    assert look.status is PaidStatus.UNKNOWN
    assert "printed nothing" in look.note


def test_a_non_zero_exit_is_could_not_tell_even_with_a_word(tmp_path: Path) -> None:
    """A status exiting non-zero is UNKNOWN whatever it printed, its note naming the exit and its last stderr line."""
    lane = _lane(tmp_path, status="echo succeeded; echo 'sky: API server unreachable' >&2; exit 3")
    look = _look(lane)
    assert look.status is PaidStatus.UNKNOWN
    assert "exited 3" in look.note
    assert "sky: API server unreachable" in look.note


def test_a_status_program_that_does_not_exist_is_could_not_tell(tmp_path: Path) -> None:
    """A status whose program is missing is UNKNOWN (asked again next poll), never an error of the whole look."""
    lane = CommandLane(LaneConfig(name="sky", command=("true",), status=(str(tmp_path / "no-such-sky"),)))
    look = _look(lane)
    assert look.status is PaidStatus.UNKNOWN
    assert "exited 127" in look.note


def _alive(pid: int) -> bool:
    """True while ``pid`` is a live process (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


@contextlib.contextmanager
def _reaped(pid_file: Path) -> Iterator[None]:
    """Kill the process named in ``pid_file`` at the end if it is still alive (a failing test leaves nothing)."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_hung_status_is_killed_with_its_process_group_at_its_timeout(tmp_path: Path) -> None:
    """A status that hangs is killed with every process of its group at status_timeout_seconds: UNKNOWN, saying so."""
    pid_file = tmp_path / "child.pid"
    lane = _lane(tmp_path, status=f"sleep 600 & echo $! > {pid_file}; wait", status_timeout_seconds=0.5)
    with _reaped(pid_file):
        look = _look(lane)
        child = int(pid_file.read_text())
        for _ in range(200):  # a SIGKILLed process may take a moment to be gone; no time is asserted
            if not _alive(child):
                break
            time.sleep(0.05)
        assert not _alive(child), "the hung status's child still runs"
    assert look.status is PaidStatus.UNKNOWN
    assert "timed out after 0.5 s" in look.note


def test_a_hung_status_that_left_its_group_holds_up_nothing(tmp_path: Path) -> None:
    """A status whose child left the group (setsid) and keeps its output open still ends the look at its timeout."""
    pid_file = tmp_path / "escaped.pid"
    body = f"setsid sleep 600 & echo $! > {pid_file}; sleep 600"
    lane = _lane(tmp_path, status=body, status_timeout_seconds=0.5)
    with _reaped(pid_file):
        look = _look(lane)
    assert look.status is PaidStatus.UNKNOWN
    assert "timed out" in look.note


def test_a_hung_status_of_one_dispatch_never_stops_the_others_being_told(tmp_path: Path) -> None:
    """Side by side: one dispatch's hung status is UNKNOWN at its timeout while every other dispatch is told."""
    hung = "dead00000000"
    body = f'if [ "$1" = {hung} ]; then exec sleep 600; fi; echo "running $1"'
    lane = _lane(tmp_path, status=body, status_timeout_seconds=1.0)
    ids = [hung, *(f"{n:012x}" for n in range(1, 6))]
    answer = lane.look(ids, specs=dict.fromkeys(ids, SPEC))
    assert answer[hung].status is PaidStatus.UNKNOWN
    assert {i: answer[i] for i in ids[1:]} == {i: PaidLook(PaidStatus.RUNNING, i) for i in ids[1:]}


def test_twenty_dispatches_run_twenty_statuses_each_with_its_own_dispatch_id(tmp_path: Path) -> None:
    """One look at 20 dispatches runs the status 20 times, each rendered for its dispatch and given its own
    FSM_DISPATCH_ID in the environment."""
    ledger = tmp_path / "ledger"
    lane = _lane(tmp_path, status=f'echo "$1 $FSM_DISPATCH_ID" >> {ledger}; echo "queued $FSM_DISPATCH_ID"')
    ids = [f"{n:012x}" for n in range(20)]
    answer = lane.look(ids, specs=dict.fromkeys(ids, SPEC))
    assert answer == {i: PaidLook(PaidStatus.QUEUED, i) for i in ids}
    runs = ledger.read_text().splitlines()
    assert sorted(runs) == sorted(f"{i} {i}" for i in ids)


def test_the_status_gets_every_job_value_in_its_environment_and_only_safe_values_in_its_argv(tmp_path: Path) -> None:
    """The status argv is the template filled for the dispatch ({gpus}, {time_limit_minutes}); the job's own
    values reach it as FSM_* variables, as for the handoff command."""
    echo = _script(tmp_path, "echo.sh", 'echo "running $* $FSM_JOB_NAME $FSM_GPUS $FSM_TIME_LIMIT_SECONDS"')
    settings = LaneConfig(
        name="sky", command=("true",), status=(echo, "fsm-{dispatch_id}", "--gpus={gpus}", "{time_limit_minutes}m")
    )
    look = CommandLane(settings).look([ID], specs={ID: SPEC})[ID]
    assert look == PaidLook(PaidStatus.RUNNING, f"fsm-{ID} --gpus=8 60m train 8 3600")


def test_without_the_job_a_dispatch_id_template_still_runs_with_its_id_in_the_environment(tmp_path: Path) -> None:
    """Looked at with no job given, a status using only {dispatch_id} runs, FSM_DISPATCH_ID set."""
    lane = _lane(tmp_path, status='echo "succeeded $1 $FSM_DISPATCH_ID"')
    assert lane.look([ID]) == {ID: PaidLook(PaidStatus.SUCCEEDED, f"{ID} {ID}")}


def test_without_the_job_a_template_needing_it_is_could_not_tell(tmp_path: Path) -> None:
    """Looked at with no job given, a status using {gpus} is not run: UNKNOWN, naming the placeholder."""
    marker = tmp_path / "ran"
    ran = _script(tmp_path, "ran.sh", f"touch {marker}; echo running")
    lane = CommandLane(LaneConfig(name="sky", command=("true",), status=(ran, "{gpus}")))
    look = lane.look([ID])[ID]
    assert look.status is PaidStatus.UNKNOWN
    assert "{gpus}" in look.note
    assert not marker.exists()


def _handed_off(lane: CommandLane, files: HandoffFiles, spec: JobSpec) -> None:
    """Run a handoff (``true``) through the lane's ``start`` as the driver does, to its end."""
    files.prepare()
    handoff = lane.start(files.dispatch_id, spec, files, now=time.time())
    for _ in range(400):
        result = handoff.result(time.time())
        if result is not None:
            assert result.ok, result.stderr
            return
        time.sleep(0.05)
    raise AssertionError("the handoff did not end")


def test_a_handoff_keeps_its_job_values_so_a_restarted_lane_follows_and_cancels_with_them(tmp_path: Path) -> None:
    """The job's values a handoff got are kept beside its files: a lane built again from the same state dir (a
    restarted driver), asked with no job, fills {gpus} and {time_limit_minutes} and sets FSM_JOB_NAME from them."""
    ledger = tmp_path / "ledger"
    echo = _script(tmp_path, "echo.sh", 'echo "running $* $FSM_JOB_NAME"')
    cancel = _script(tmp_path, "cancel.sh", f'echo "$* $FSM_JOB_NAME" >> {ledger}')
    settings = LaneConfig(
        name="sky", command=("true",), status=(echo, "{dispatch_id}", "{gpus}"), cancel=(cancel, "{time_limit_minutes}")
    )
    _handed_off(COMMAND.build(settings, state_dir=tmp_path), HandoffFiles(tmp_path / HANDOFFS, ID), SPEC)
    again = COMMAND.build(settings, state_dir=tmp_path)
    assert again.look([ID]) == {ID: PaidLook(PaidStatus.RUNNING, f"{ID} 8 train")}
    again.delete(ID)
    assert ledger.read_text().splitlines() == ["60 train"]


def test_kept_job_values_edited_into_code_are_refused_and_never_run(tmp_path: Path) -> None:
    """A kept gpus value edited by hand into shell code is refused against its alphabet: could not tell, and the
    status is never run."""
    marker = tmp_path / "ran"
    ran = _script(tmp_path, "ran.sh", f"touch {marker}; echo running")
    settings = LaneConfig(name="sky", command=("true",), status=(ran, "{gpus}"))
    files = HandoffFiles(tmp_path / HANDOFFS, ID)
    _handed_off(COMMAND.build(settings, state_dir=tmp_path), files, SPEC)
    kept = json.loads(files.job.read_text())
    files.job.write_text(json.dumps({**kept, "gpus": f"8; touch {marker}"}))
    look = COMMAND.build(settings, state_dir=tmp_path).look([ID])[ID]
    assert look.status is PaidStatus.UNKNOWN
    assert "not made of digits" in look.note
    assert not marker.exists()


HOSTILE = ["$(touch {made})", "`touch {made}`", "x; touch {made}", "x && touch {made} #", "'; touch {made}; '"]


@pytest.mark.parametrize("name", HOSTILE, ids=["dollar-paren", "backticks", "semicolon", "and", "quotes"])
def test_a_job_name_that_is_shell_code_never_runs_in_status_or_cancel(name: str, tmp_path: Path) -> None:
    """A job name made of shell code reaches status and cancel as text in FSM_JOB_NAME, read by a shell that
    expands the variable: the code never runs (its file is never made) and the note is the text itself."""
    made = tmp_path / "made"
    hostile = name.format(made=made)
    spec = JobSpec(name=hostile, script="train.sbatch", gpus=1)
    status = ("sh", "-c", 'echo "running $FSM_JOB_NAME"')
    cancel = ("sh", "-c", 'echo "cancelling $FSM_JOB_NAME" >&2; test -n "$FSM_JOB_NAME"')
    lane = CommandLane(LaneConfig(name="sky", command=("true",), status=status, cancel=cancel))
    assert lane.look([ID], specs={ID: spec}) == {ID: PaidLook(PaidStatus.RUNNING, hostile)}
    lane.delete(ID, spec=spec)
    assert not made.exists(), "a job value ran as code"


# --------------------------------------------------------------------------------------------------------- cancel
def test_a_cancel_that_exits_0_is_done(tmp_path: Path) -> None:
    """``delete`` runs the cancel once, rendered for the dispatch, and returns when it exits 0."""
    ledger = tmp_path / "ledger"
    lane = _lane(tmp_path, status="echo running", cancel=f'echo "$1 $FSM_DISPATCH_ID" >> {ledger}')
    lane.delete(ID, spec=SPEC)
    assert ledger.read_text().splitlines() == [f"{ID} {ID}"]


def test_a_cancel_of_a_job_already_gone_that_exits_0_is_done(tmp_path: Path) -> None:
    """A cancel that says the job is already gone and exits 0 is a cancel done (nothing raised)."""
    lane = _lane(tmp_path, status="echo running", cancel="echo 'no such job: already gone' >&2; exit 0")
    lane.delete(ID)


def test_a_cancel_that_fails_raises_one_line_with_its_last_stderr_line(tmp_path: Path) -> None:
    """A cancel exiting non-zero raises PaidLaneError: one line naming the lane, the dispatch and the last stderr
    line."""
    body = "echo 'contacting controller' >&2; echo 'sky: permission denied for fsm job' >&2; exit 2"
    lane = _lane(tmp_path, status="echo running", cancel=body)
    with pytest.raises(PaidLaneError) as caught:
        lane.delete(ID, spec=SPEC)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"[lanes.sky] cancel of dispatch {ID} exited 2: ")
    assert message.endswith("sky: permission denied for fsm job")


def test_a_cancel_that_hangs_is_killed_at_the_lane_timeout_and_raises(tmp_path: Path) -> None:
    """A cancel that hangs past timeout_seconds is killed with its group and raises PaidLaneError saying so."""
    lane = _lane(tmp_path, status="echo running", cancel="exec sleep 600", timeout_seconds=0.5)
    with pytest.raises(PaidLaneError, match=r"exited 124: timed out after 0\.5 s"):
        lane.delete(ID)


def test_a_lane_with_no_cancel_refuses_to_delete_in_one_line(tmp_path: Path) -> None:
    """``delete`` on a lane with no cancel template raises PaidLaneError saying the lane has none."""
    lane = _lane(tmp_path, status="echo running")
    with pytest.raises(PaidLaneError, match=r"^\[lanes\.sky\] has no cancel command; ") as caught:
        lane.delete(ID)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------ the lane and its keys
def test_a_lane_follows_only_with_a_status(tmp_path: Path) -> None:
    """A command lane is a PaidLane; it follows its jobs iff ``status`` is set; price and queue timeout are its
    keys (None when absent)."""
    plain = CommandLane(LaneConfig(name="gcp", command=("true",)))
    assert isinstance(plain, PaidLane)
    assert (plain.follows, plain.price_per_gpu_hour, plain.queue_timeout_seconds) == (False, None, None)
    followed = _lane(tmp_path, status="echo running", cancel="true", price_per_gpu_hour=2.5, queue_timeout_seconds=3600)
    assert (followed.follows, followed.price_per_gpu_hour, followed.queue_timeout_seconds) == (True, 2.5, 3600)


def test_looking_on_a_lane_with_no_status_raises_one_line() -> None:
    """A lane without ``status`` cannot be asked: ``look`` raises PaidLaneError, one line naming the lane."""
    plain = CommandLane(LaneConfig(name="gcp", command=("true",)))
    with pytest.raises(PaidLaneError, match=r"^\[lanes\.gcp\] has no status command; "):
        plain.look([ID])


def test_a_lane_with_every_new_key_reads_back_from_its_table() -> None:
    """status, cancel, price, queue and status timeouts go through the table the journal keeps and back unchanged."""
    table = {
        "command": ["sky", "jobs", "launch", "-n", "fsm-{dispatch_id}"],
        "status": ["fsm-sky-status", "fsm-{dispatch_id}"],
        "cancel": ["sky", "jobs", "cancel", "-y", "-n", "fsm-{dispatch_id}"],
        "price_per_gpu_hour": 2.75,
        "queue_timeout_seconds": 1800,
        "status_timeout_seconds": 20,
    }
    settings = COMMAND.parse("sky", table)
    assert settings.status == ("fsm-sky-status", "fsm-{dispatch_id}")
    assert settings.cancel == ("sky", "jobs", "cancel", "-y", "-n", "fsm-{dispatch_id}")
    assert (settings.price_per_gpu_hour, settings.queue_timeout_seconds, settings.status_timeout_seconds) == (
        2.75,
        1800,
        20,
    )
    assert parse_lane("sky", lane_table(settings)) == settings
    assert COMMAND.parse("sky", COMMAND.table(settings)) == settings


def test_a_lane_journaled_before_these_keys_reads_back_as_a_lane_that_is_not_followed() -> None:
    """A command lane's table without the new keys (as journaled before) is a lane with no status, no cancel, no
    price, no queue timeout and the 30 s status timeout."""
    settings = COMMAND.parse("gcp", {"command": ["gcloud", "{dispatch_id}"], "manual_only": False})
    assert (settings.status, settings.cancel, settings.price_per_gpu_hour, settings.queue_timeout_seconds) == (
        None,
        None,
        None,
        None,
    )
    assert settings.status_timeout_seconds == 30.0
    assert not CommandLane(settings).follows


def test_a_price_of_zero_is_a_free_lane() -> None:
    """A price of 0 is allowed (a free lane counted in GPU-hours)."""
    assert COMMAND.parse("gcp", {"command": ["true"], "price_per_gpu_hour": 0}).price_per_gpu_hour == 0


def _refusal(lane: dict[str, Any]) -> str:
    """The one-line refusal of a config with this ``[lanes.gcp]`` table."""
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"lanes": {"gcp": lane}}, source="fellows.toml")
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith("fellows.toml: [lanes.gcp]")
    return message


STATUS = ["sky-status", "fsm-{dispatch_id}"]


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        pytest.param({"price_per_gpu_hour": math.nan}, ["price_per_gpu_hour=nan", "finite"], id="price-nan"),
        pytest.param({"price_per_gpu_hour": -1.5}, ["price_per_gpu_hour=-1.5", ">= 0"], id="price-negative"),
        pytest.param({"price_per_gpu_hour": math.inf}, ["price_per_gpu_hour=inf", "finite"], id="price-inf"),
        pytest.param({"price_per_gpu_hour": "2.5"}, ["price_per_gpu_hour='2.5'", "a number"], id="price-string"),
        pytest.param({"price_per_gpu_hour": True}, ["price_per_gpu_hour=True", "a number"], id="price-bool"),
        pytest.param({"status": STATUS, "queue_timeout_seconds": 0}, ["queue_timeout_seconds=0"], id="queue-zero"),
        pytest.param({"status_timeout_seconds": -1}, ["status_timeout_seconds=-1"], id="status-timeout-negative"),
        pytest.param({"status": "sky jobs queue"}, ["status='sky jobs queue'", "never a shell"], id="status-string"),
        pytest.param({"status": []}, ["status=", "non-empty list"], id="status-empty"),
        pytest.param({"status": ["sky", "{job_name}"]}, ["status", "{job_name}", "$FSM_JOB_NAME"], id="status-user"),
        pytest.param({"status": ["sky", "{jobid}"]}, ["status", "{jobid}", "not known"], id="status-unknown"),
        pytest.param(
            {"status": STATUS, "cancel": ["sky", "{script}"]}, ["cancel", "{script}", "$FSM_SCRIPT"], id="cancel-user"
        ),
        pytest.param({"cancel": ["sky", "jobs", "cancel"]}, ["cancel", "without status"], id="cancel-no-status"),
        pytest.param(
            {"status": STATUS, "queue_timeout_seconds": 600},
            ["queue_timeout_seconds", "no cancel"],
            id="queue-no-cancel",
        ),
    ],
)
def test_a_bad_follow_key_is_one_line_naming_lane_key_and_value(keys: dict[str, Any], words: list[str]) -> None:
    """A bad price, timeout, status or cancel template is refused when the config is read, in one line."""
    message = _refusal({"command": ["true"], **keys})
    for word in words:
        assert word in message, message


# ------------------------------------------------------------------------------ the documented SkyPilot lane
DOCS = Path(__file__).parents[4] / "docs" / "configuration.md"
SKY_QUEUE = """\
Fetching managed job statuses...
Managed jobs
ID  TASK  NAME               REQUESTED   SUBMITTED    TOT. DURATION  JOB DURATION  #RECOVERIES  STATUS
5   -     fsm-00000000000a   1x[H100:8]  2 mins ago   2m 3s          -             0            PENDING
4   -     fsm-00000000000b   1x[H100:8]  9 mins ago   9m 1s          8m 40s        0            RUNNING
3   -     fsm-00000000000c   1x[H100:8]  1 hr ago     1h 2m          58m 10s       1            SUCCEEDED
2   -     fsm-00000000000d   1x[H100:8]  2 hrs ago    3m 2s          -             0            FAILED_NO_RESOURCE
1   -     fsm-00000000000e   1x[H100:8]  3 hrs ago    5m             4m            0            CANCELLED
0   -     fsm-00000000000ab  1x[H100:8]  3 hrs ago    5m             4m            0            RUNNING
"""


def _documented_sky_lane() -> LaneConfig:
    """The ``[lanes.sky]`` example of docs/configuration.md's SkyPilot section, as the command kind reads it."""
    text = DOCS.read_text(encoding="utf-8").split("### SkyPilot managed jobs, followed", 1)[1]
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    return COMMAND.parse("sky", tomllib.loads(block)["lanes"]["sky"])


def test_the_documented_skypilot_lane_follows_and_cancels_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented SkyPilot lane, run against a stand-in ``sky`` printing a managed-jobs queue, reads each
    SkyPilot status as the contract's word, a job not in the queue as could not tell, and cancels by name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "queue.txt").write_text(SKY_QUEUE)
    ledger = tmp_path / "cancels"
    _script(
        bin_dir,
        "sky",
        f'if [ "$1 $2" = "jobs queue" ]; then cat {tmp_path / "queue.txt"}; exit 0; fi\n'
        f'if [ "$1 $2" = "jobs cancel" ]; then echo "$*" >> {ledger}; exit 0; fi\nexit 2',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    lane = CommandLane(_documented_sky_lane())
    assert lane.follows
    assert (lane.price_per_gpu_hour, lane.queue_timeout_seconds) == (2.5, 3600)
    ids = [f"{n:012x}" for n in (10, 11, 12, 13, 14, 15)]
    answer = lane.look(ids, specs=dict.fromkeys(ids, SPEC))
    assert {i: answer[i] for i in ids[:5]} == {
        ids[0]: PaidLook(PaidStatus.QUEUED, "PENDING"),
        ids[1]: PaidLook(PaidStatus.RUNNING, "RUNNING"),
        ids[2]: PaidLook(PaidStatus.SUCCEEDED, ""),
        ids[3]: PaidLook(PaidStatus.FAILED, "FAILED_NO_RESOURCE"),
        ids[4]: PaidLook(PaidStatus.CANCELLED, ""),
    }
    assert answer[ids[5]].status is PaidStatus.UNKNOWN, "fsm-...0ab is another job, not fsm-...00f"
    lane.delete(ids[1], spec=SPEC)
    assert ledger.read_text().splitlines() == [f"jobs cancel --yes --name fsm-{ids[1]}"]


@pytest.mark.parametrize("price", ["nan", "-0.5", "inf"])
def test_a_bad_price_in_the_toml_file_refuses_submit_in_one_line_and_queues_nothing(
    price: str, env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """``price_per_gpu_hour = nan`` (or negative, or inf) in fellows.toml: submit exits 3 with one line naming the
    lane, the key and the value, and nothing is queued or journaled."""
    (env / "fellows.toml").write_text(_toml(env) + f"price_per_gpu_hour = {price}\n")
    before = world(env, scheduling_fake)
    result = run("submit", "--detach", str(script))
    refused(result, 3, "[lanes.gcp]", f"price_per_gpu_hour={float(price)!r}")
    assert world(env, scheduling_fake) == before
    assert scheduling_fake.calls["submit"] == 0


# ---------------------------------------------------------------------------------- the poll's bound (look_all)
def test_a_poll_never_runs_past_its_timeout_and_who_was_not_asked_goes_first_next_time() -> None:
    """Statuses that take 10 s each (on a clock the test moves) against a 25 s poll: the fourth is not asked
    (could not tell, nothing run for it) and is returned as behind; passed as ``first`` next poll, it goes first."""
    asked: list[str] = []
    clock = [1000.0]

    def slow(dispatch_id: str, seconds: float) -> PaidLook:
        asked.append(dispatch_id)
        clock[0] += 10
        return PaidLook(PaidStatus.RUNNING, f"{seconds:g}")

    def now() -> float:
        return clock[0]

    ids = ["a", "b", "c", "d"]
    answers, behind = look_all(ids, slow, timeout=25, workers=1, clock=now)
    assert asked == ["a", "b", "c"]
    assert [answers[i].note for i in "abc"] == ["25", "15", "5"]
    assert answers["d"].status is PaidStatus.UNKNOWN
    assert "not asked this poll" in answers["d"].note
    assert behind == ["d"]
    asked.clear()
    answers, behind = look_all(ids, slow, timeout=25, first=behind, workers=1, clock=now)
    assert asked == ["d", "a", "b"]
    assert behind == ["c"]


def test_a_dispatch_id_that_is_not_hex_is_never_run_nor_looked_up_as_a_file(tmp_path: Path) -> None:
    """A dispatch id outside its hex alphabet (a path, shell text) is could not tell for status and an error for
    cancel, and neither command runs."""
    marker = tmp_path / "ran"
    ran = _script(tmp_path, "ran.sh", f"touch {marker}; echo running")
    settings = LaneConfig(name="sky", command=("true",), status=(ran, "{dispatch_id}"), cancel=(ran, "{dispatch_id}"))
    lane = COMMAND.build(settings, state_dir=tmp_path)
    for bad in ["../../etc/x", "abc; touch x", ""]:
        assert lane.look([bad])[bad].status is PaidStatus.UNKNOWN
        with pytest.raises(PaidLaneError, match="not run"):
            lane.delete(bad)
    assert not marker.exists()
