"""The ``[budget]`` table: how many paid GPU-hours a day, how much money a month and how many GPU-hours one job may
take on a paid lane, what a dispatch does when its paid run would pass them, and which calendar counts the days.

Every bad value is refused when the config is built, one line naming the key and the value. Nothing here reads the
clock or the journal: core/budget.py counts the runs against these limits.
"""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Mapping
from typing import Any

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.tables import refuse_unknown_keys

__all__ = ["ON_BUDGET", "SCOPES", "BudgetConfig"]

ON_BUDGET = ("wait", "refuse")
"""What a dispatch whose paid run would pass the budget does: wait on its last free rung, or end NO_BUDGET."""

SCOPES = ("user", "team")
"""Whose spending a budget counts with a [ledger]: all of this user's machines, or the whole team's."""

_LIMITS = ("paid_gpu_hours_per_day", "paid_cost_per_month", "max_paid_gpu_hours_per_job")


def _limit(key: str, value: object) -> None:
    """Refuse a limit that is not a finite number above zero (a bool is not a number here)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"[budget] {key}={value!r} must be a finite number above 0, or left out for no limit")


@attrs.frozen(kw_only=True)
class BudgetConfig:
    """The ``[budget]`` table (default: no limit at all, nothing is ever held back by it)."""

    paid_gpu_hours_per_day: float | None = None
    """At most this many paid GPU-hours handed off per calendar day (worst cases of live runs counted)."""
    paid_cost_per_month: float | None = None
    """At most this much money (the lanes' ``price_per_gpu_hour`` currency) handed off per calendar month."""
    max_paid_gpu_hours_per_job: float | None = None
    """No one paid run may need more than this many GPU-hours (its GPUs times its time limit)."""
    on_budget: str = "wait"
    """'wait': the dispatch waits on its last free rung until the budget has room; 'refuse': it ends NO_BUDGET."""
    currency: str | None = None
    """What the lanes' ``price_per_gpu_hour`` and ``paid_cost_per_month`` are counted in (``EUR``, ``USD``, ``€``),
    shown beside every cost by ``spend`` and ``config check``; None: costs are bare numbers."""
    timezone: str | None = None
    """The IANA zone whose calendar days, weeks (from Monday) and months the budget counts in; None: this
    machine's local time (with a [ledger]: the ledger server's own TimeZone setting)."""
    scope: str = "user"
    """With a [ledger]: 'user' counts every machine of this user, 'team' every member of the [ledger] team
    (without a [ledger] the budget is this journal's, whatever the scope)."""

    def __attrs_post_init__(self) -> None:
        for key in _LIMITS:
            _limit(key, getattr(self, key))
        if self.scope not in SCOPES:
            raise ConfigError(f"[budget] scope={self.scope!r} is not known; use 'user' or 'team'")
        if self.on_budget not in ON_BUDGET:
            raise ConfigError(f"[budget] on_budget={self.on_budget!r} is not known; use 'wait' or 'refuse'")
        if self.currency is not None and (
            not isinstance(self.currency, str)
            or not self.currency.strip()
            or len(self.currency) > 12
            or not self.currency.isprintable()
            or any(c.isspace() for c in self.currency)
        ):
            raise ConfigError(
                f"[budget] currency={self.currency!r} must be a short word such as 'EUR', 'USD' or '€' (at most 12 "
                "characters, no spaces), or left out"
            )
        self.zone  # noqa: B018  (refuse an unknown zone when the config is built, not at the first handoff)

    def money(self, words: str) -> str:
        """``words`` (an amount as the views write it) with the currency after it, when one is set."""
        return f"{words} {self.currency}" if self.currency else words

    @property
    def limited(self) -> bool:
        """Is any limit set (without one, no handoff is ever held back)?"""
        return any(getattr(self, key) is not None for key in _LIMITS)

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``: a dispatch its budget cannot take ends NO_BUDGET instead of waiting."""
        return self.on_budget == "refuse"

    @property
    def zone(self) -> zoneinfo.ZoneInfo | None:
        """The budget's time zone (None: the machine's local time)."""
        if self.timezone is None:
            return None
        if not isinstance(self.timezone, str) or not self.timezone.strip():
            raise ConfigError(
                f"[budget] timezone={self.timezone!r} must be an IANA zone name such as 'Europe/Amsterdam' or "
                "'UTC', or left out for this machine's local time"
            )
        try:
            return zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            raise ConfigError(
                f"[budget] timezone={self.timezone!r} is not a known IANA time zone; use a name such as "
                "'Europe/Amsterdam' or 'UTC', or leave it out for this machine's local time"
            ) from None

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> BudgetConfig:
        """The budget of a ``[budget]`` table; ConfigError naming the key if one is unknown or bad."""
        refuse_unknown_keys("[budget]", table, (a.name for a in attrs.fields(cls)))
        return cls(**dict(table))

    def table(self) -> dict[str, Any]:
        """The ``[budget]`` table this was built from (every key, None for one left out)."""
        return {a.name: getattr(self, a.name) for a in attrs.fields(type(self))}
