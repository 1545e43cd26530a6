"""The checks every TOML table shares (``[fellows]``, each ``[lanes.<name>]`` of every kind, ``[budget]``,
``[notify.<name>]``): unknown keys refused, seconds that must be positive and bounded, an argv template. Below both
config/ and lanes/, so neither imports the other for them. Nothing here does I/O."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fellows_fsm.errors import ConfigError

__all__ = ["MAX_CAP_SECONDS", "argv_template", "did_you_mean", "positive_seconds", "refuse_unknown_keys"]

MAX_CAP_SECONDS = 30 * 86_400.0
"""The longest span a table may give in seconds (a park cap, a timeout): 30 days."""


def positive_seconds(key: str, value: object, *, most: float = MAX_CAP_SECONDS) -> float:
    """Return ``value`` as seconds, or raise a ConfigError naming ``key`` and the value (every table's check)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}={value!r} is not a number of seconds; give a positive number such as 600")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive, finite number of seconds, such as 600")
    if seconds > most:
        raise ConfigError(f"{key}={value!r} is over the maximum of {most:g} seconds; give at most {most:g}")
    return seconds


def refuse_unknown_keys(where: str, table: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise a ConfigError naming the first key of ``table`` (``where``: ``[lanes.gcp]``, ``[budget]``) that is not
    one of ``known``, and every key that is (every table's check)."""
    allowed = set(known)
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r}{did_you_mean(key, allowed)}; known keys are {', '.join(sorted(allowed))}"
            )


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to a mistyped ``word``, or '' when none is close."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def argv_template(key: str, value: object, example: str, check_item: Callable[[str, str], None]) -> tuple[str, ...]:
    """``value`` as an argv (a non-empty list of strings, never a shell string; ``example`` shows one), each item
    checked by ``check_item(key, item)`` (its placeholders), or a ConfigError naming ``key`` and the value (a command
    lane's templates and a command sink's argv)."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            f"{key}={value!r} must be a non-empty list of arguments (argv, never a shell string), e.g. {example}"
        )
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{key} item {item!r} must be a string")
        check_item(key, item)
    return tuple(value)
