"""Words a user reads (ui/words.py): pending reasons, durations and GPU counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import ReasonGroup
from fellows_fsm.ui import words as ui_words
from tests.unit.cli_helpers import SchedulingFake, run


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("QOSMaxGRESPerUser", "your own high-eur GPU cap is full"),
        ("QOSMaxCpuPerUserLimit", "your own high-eur limit is reached"),
        ("Resources", "free GPUs"),
        ("Priority", "higher-priority"),
        ("QOSMaxWallDurationPerJobLimit", "MaxWall"),
        ("InvalidQOS", "refuses high-eur"),
        ("JobHeldUser", "scontrol release 42"),
        (None, "has not looked at it yet"),
        ("SomethingNew", "pending"),
    ],
    ids=["own-gpu-cap", "own-other-cap", "resources", "priority", "never-fits", "invalid", "held", "none", "other"],
)
def test_explain_reason_in_plain_words(reason: str | None, words: str) -> None:
    """Each pending reason reads as a short sentence about the rung."""
    assert words in ui_words.explain_reason(reason, "high-eur", "42")


def test_every_reason_group_has_words() -> None:
    """No reason group falls through without a sentence."""
    assert set(ui_words._GROUP_WORDS) == set(ReasonGroup)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (4.2, "5s"), (65, "1m 05s"), (3723, "1h 02m 03s"), (2 * 86400 + 3 * 3600, "2d 03h 00m")],
    ids=["zero", "rounds-up", "minutes", "hours", "days"],
)
def test_span_reads_like_a_countdown(seconds: float, text: str) -> None:
    """Durations read as short countdowns."""
    assert ui_words.span(seconds) == text


@pytest.mark.parametrize(("gpus", "words"), [(1, "(1 GPU,"), (8, "(8 GPUs,")], ids=["one", "eight"])
def test_gpu_counts_read_as_english(
    env: Path, scheduling_fake: SchedulingFake, script: Path, gpus: int, words: str
) -> None:
    """The live view says "1 GPU" and "8 GPUs"."""
    result = run("submit", "--gpus", str(gpus), str(script))
    assert result.exit_code == 0, result.output
    assert words in result.stdout
