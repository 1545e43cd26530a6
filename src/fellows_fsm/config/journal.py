"""The ``[journal]`` table: how long a finished dispatch stays in the journal before it moves to the archive."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.tables import refuse_unknown_keys

__all__ = ["COMPACT_EVERY_SECONDS", "DEFAULT_KEEP_DAYS", "JournalConfig", "keep_days_value"]

DEFAULT_KEEP_DAYS = 14.0
"""Two weeks: the finished dispatches a person or a program still looks at (`status`'s recent ones, `watch`,
`history` of last week's work) and the budget's day and week windows are read from the journal alone, and the full
check after a crash reads two weeks of rows, not the whole past. Older ones are read from the archive (history,
status --all, spend and the budget's month window), so the choice changes no answer, only which file holds it."""
COMPACT_EVERY_SECONDS = 6 * 3600.0
"""A driver moves what is due at its start and then every six hours it drives (a batch a poll: driver/compaction.py)."""


def keep_days_value(key: str, value: object) -> float:
    """``value`` as a number of days of 0 or more (0: every finished dispatch moves), else one ConfigError line."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)) or value < 0:
        raise ConfigError(f"{key}={value!r} must be a number of days of 0 or more, such as {DEFAULT_KEEP_DAYS:g}")
    return float(value)


@attrs.frozen
class JournalConfig:
    """``[journal]``: ``keep_days``, how many days a finished dispatch stays in the journal (then the archive)."""

    keep_days: float = DEFAULT_KEEP_DAYS

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> JournalConfig:
        refuse_unknown_keys("[journal]", table, ("keep_days",))
        if "keep_days" in table:
            return cls(keep_days=keep_days_value("[journal] keep_days", table["keep_days"]))
        return cls()

    def table(self) -> dict[str, Any]:
        return {"keep_days": self.keep_days}
