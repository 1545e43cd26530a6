"""The ``[budget]`` table (config/budget.py) and its place in the config (config/file.py): every limit optional,
finite and above zero, on_budget wait or refuse, an IANA time zone, each bad value one line naming it, and a cost
budget only with a price on every paid lane of the order."""

from __future__ import annotations

import zoneinfo
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from fellows_fsm import ConfigError
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config, RouterConfig, config_mapping, load_config
from fellows_fsm.lanes.command.config import CommandSettings

GCP = {"command": ["gcloud", "batch", "jobs", "submit", "fsm-{dispatch_id}"]}


@attrs.frozen
class PricedLane:
    """A paid lane's settings with a price (the command kind gets ``price_per_gpu_hour`` in another change)."""

    kind: ClassVar[str] = "priced"
    walks_ladder: ClassVar[bool] = False
    name: str
    price_per_gpu_hour: float | None
    manual_only: bool = False


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    """The error's message, checked to be one line."""
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_no_budget_table_means_no_limit() -> None:
    """A config without [budget] sets no limit: nothing is held back, a dispatch would wait (not refuse), and the
    days are this machine's local ones."""
    budget = Config().budget
    assert budget == BudgetConfig()
    assert not budget.limited
    assert not budget.refuse
    assert budget.zone is None


def test_a_budget_table_loads_from_the_file(tmp_path: Path) -> None:
    """Every key of [budget] in a TOML file reaches the config: the limits, on_budget and the time zone."""
    path = tmp_path / "fellows.toml"
    path.write_text(
        "[budget]\npaid_gpu_hours_per_day = 4\npaid_cost_per_month = 200.5\nmax_paid_gpu_hours_per_job = 8\n"
        'on_budget = "refuse"\ntimezone = "Europe/Amsterdam"\n',
        encoding="utf-8",
    )
    budget = load_config(path).budget
    assert (budget.paid_gpu_hours_per_day, budget.paid_cost_per_month, budget.max_paid_gpu_hours_per_job) == (
        4,
        200.5,
        8,
    )
    assert budget.limited
    assert budget.refuse
    assert budget.zone == zoneinfo.ZoneInfo("Europe/Amsterdam")


@pytest.mark.parametrize("key", ["paid_gpu_hours_per_day", "paid_cost_per_month", "max_paid_gpu_hours_per_job"])
@pytest.mark.parametrize(
    "value",
    [0, -1, float("nan"), float("inf"), "4", True],
    ids=["zero", "negative", "nan", "inf", "a-string", "a-bool"],
)
def test_a_bad_limit_is_one_line_naming_it(key: str, value: object) -> None:
    """A limit that is not a finite number above zero is refused in one line naming the key and the value."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"budget": {key: value}})
    message = one_line(exc)
    assert f"[budget] {key}={value!r} must be a finite number above 0" in message


def test_an_unknown_on_budget_is_one_line() -> None:
    """on_budget takes 'wait' or 'refuse' only; another word is refused naming it and both."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"budget": {"on_budget": "stop"}})
    assert "[budget] on_budget='stop' is not known; use 'wait' or 'refuse'" in one_line(exc)


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus_Mons", "../../etc/passwd", "", 5], ids=["unknown", "a-path", "empty", "a-number"]
)
def test_an_unknown_time_zone_is_one_line(zone: object) -> None:
    """A timezone that is not an IANA zone name (unknown, a path, empty, not a string) is refused in one line
    naming it and saying what to give."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"budget": {"timezone": zone}})
    message = one_line(exc)
    assert f"[budget] timezone={zone!r}" in message
    assert "'Europe/Amsterdam'" in message


def test_an_unknown_budget_key_lists_the_known_ones() -> None:
    """A key [budget] does not know is refused, naming it and every known key."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"budget": {"paid_gpu_hours_per_week": 10}})
    assert one_line(exc) == (
        "defaults: [budget]: unknown key 'paid_gpu_hours_per_week' (did you mean 'paid_gpu_hours_per_day'?); known "
        "keys are currency, max_paid_gpu_hours_per_job, on_budget, paid_cost_per_month, paid_gpu_hours_per_day, scope, "
        "timezone"
    )


def test_budget_must_be_a_table() -> None:
    """``budget = 4`` at the top level (not a [budget] table) is refused in one line."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"budget": 4})
    assert "budget must be a table ([budget]), got 4" in one_line(exc)


def test_a_cost_budget_needs_a_price_on_every_paid_lane_of_the_order() -> None:
    """paid_cost_per_month with a paid lane in the order that has no price_per_gpu_hour is one line naming the
    lane; a GPU-hours budget alone needs no price."""
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"lanes": {"gcp": GCP}, "budget": {"paid_cost_per_month": 200}})
    message = one_line(exc)
    assert "[budget] paid_cost_per_month is set, but the paid lane 'gcp' in the order has no price_per_gpu_hour" in (
        message
    )
    assert "give [lanes.gcp] price_per_gpu_hour" in message
    assert Config.from_mapping({"lanes": {"gcp": GCP}, "budget": {"paid_gpu_hours_per_day": 4}}).budget.limited


def test_a_cost_budget_takes_priced_lanes_and_ignores_lanes_out_of_the_order(tmp_path: Path) -> None:
    """A cost budget is accepted when every paid lane of the order has a price; an unpriced lane the order leaves
    out (reached only by a pin) is not checked, and the message names the one unpriced lane that is in it."""
    budget = BudgetConfig(paid_cost_per_month=200)
    priced = PricedLane(name="gcp", price_per_gpu_hour=2.5)
    pinned = CommandSettings(name="runpod", command=("runpod", "{dispatch_id}"), manual_only=True)
    config = Config(lanes=(priced, pinned), budget=budget, state_dir=tmp_path)
    assert config.auto_order == ("fellows", "gcp")
    unpriced = PricedLane(name="sky", price_per_gpu_hour=None)
    with pytest.raises(ConfigError) as exc:
        Config(lanes=(priced, unpriced), router=RouterConfig(order=("fellows", "gcp", "sky")), budget=budget)
    assert "the paid lane 'sky' in the order" in one_line(exc)


@pytest.mark.parametrize(
    "table",
    [{}, {"paid_gpu_hours_per_day": 4, "max_paid_gpu_hours_per_job": 2.5, "on_budget": "refuse", "timezone": "UTC"}],
    ids=["defaults", "every-key"],
)
def test_the_journaled_config_keeps_the_budget(table: dict[str, Any]) -> None:
    """The config a background driver is started with (``config_mapping``) loads back to the same budget, and a
    budget left out stays unlimited there (no key is invented)."""
    config = Config.from_mapping({"budget": table})
    mapping = config_mapping(config)
    assert Config.from_mapping(mapping).budget == config.budget
    assert set(mapping["budget"]) == {"on_budget", "scope", *table}
