"""The ``[lanes.<name>]`` tables: a command lane's argv templates, the placeholders they may use, and the
environment every value of a job reaches a lane command through.

A template is checked when the config is built, so it fills for every dispatch; a value the job's user controls
is refused as a placeholder (it could be code to the program that gets it). lanes/command/lane.py (the command kind)
fills and runs them; lanes/registry.py finds the kind of each ``[lanes.<name>]`` table.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.tables import argv_template, positive_seconds, refuse_unknown_keys

__all__ = ["LANE_ENVIRONMENT", "PLACEHOLDERS", "USER_VALUES", "CommandSettings", "gpu_hour_price"]

PLACEHOLDERS = frozenset({"dispatch_id", "gpus", "time_limit_seconds", "time_limit_minutes"})
"""The argv placeholders: only values fellows-fsm makes itself from a safe alphabet (hex digits, decimal digits),
which no program can read as code. Every value of a job reaches a lane command through the environment."""
LANE_ENVIRONMENT = {
    "dispatch_id": "FSM_DISPATCH_ID",
    "job_name": "FSM_JOB_NAME",
    "script": "FSM_SCRIPT",
    "workdir": "FSM_WORKDIR",
    "gpus": "FSM_GPUS",
    "time_limit_seconds": "FSM_TIME_LIMIT_SECONDS",
    "time_limit_minutes": "FSM_TIME_LIMIT_MINUTES",
}
"""The environment variable of every value a lane command gets (the job's user controls job_name, script, workdir)."""
USER_VALUES = frozenset({"job_name", "script", "workdir"})
"""Values a job's user controls: refused as argv placeholders (an argument may be code to the program that
gets it: ``sh -c``, ``perl -E``, ``find -exec``, ssh's remote command...), passed only in the environment."""
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


_SAMPLE_VALUES = dict.fromkeys(PLACEHOLDERS, "1")


def _check_template_item(key: str, item: str) -> None:
    """Refuse an argv item whose ``{...}`` fields are malformed or unknown (it must fill for every dispatch)."""
    for name in _PLACEHOLDER.findall(item.replace("{{", "").replace("}}", "")):
        if name in USER_VALUES:
            variable = LANE_ENVIRONMENT[name]
            raise ConfigError(
                f"{key} uses placeholder {{{name}}}, a value the job's user controls, which could run as code in "
                f"an argument; read it from the environment as ${variable} instead, e.g. "
                f"['sh', '-c', 'exec sky launch \"${variable}\"']"
            )
        if name not in PLACEHOLDERS:
            raise ConfigError(
                f"{key} uses placeholder {{{name}}}, which is not known; "
                f"use one of {', '.join('{' + p + '}' for p in sorted(PLACEHOLDERS))}"
            )
    try:
        item.format_map(_SAMPLE_VALUES)
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(
            f"{key} item {item!r} is not a valid template ({exc}); write placeholders as {{dispatch_id}} "
            "and a literal brace as {{ or }}"
        ) from None


def gpu_hour_price(key: str, value: object) -> float:
    """``value`` as a price per GPU-hour (a finite number >= 0; 0: a free lane, still counted in GPU-hours), or a
    ConfigError naming ``key`` and the value (every lane kind's ``price_per_gpu_hour`` check)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}={value!r} is not a number; give what one GPU-hour costs in your currency, e.g. 2.5")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{key}={value!r} must be a finite number >= 0 (what one GPU-hour costs in your currency, e.g. 2.5); "
            "leave it out if the cost is unknown"
        )
    return float(value)


def _argv(key: str, value: object) -> tuple[str, ...]:
    return argv_template(key, value, "['gcloud', 'batch', 'jobs', 'submit', 'fsm-{dispatch_id}']", _check_template_item)


@attrs.frozen(kw_only=True)
class CommandSettings:
    """A command lane (``[lanes.<name>]``, ``kind = "command"``, the default): GCP, or a manual-only lane such as
    RunPod."""

    kind: ClassVar[str] = "command"
    walks_ladder: ClassVar[bool] = False
    """A dispatch is handed to a command lane, it walks no rungs there."""

    name: str
    command: tuple[str, ...]
    """The argv template run once to hand a job over; placeholders like ``{dispatch_id}``."""
    probe: tuple[str, ...] | None = None
    """Optional argv template that exits 0 when the lane already has this dispatch's job."""
    manual_only: bool = False
    """A manual-only lane is never in the auto order; it runs only when a dispatch is pinned to it."""
    timeout_seconds: float = 600.0
    """How long the command, the probe or the cancel may run before its process group is killed."""
    status: tuple[str, ...] | None = None
    """Optional argv template that says where the dispatch's paid job stands (lanes/command/follow.py: its contract); a
    lane with it is followed after the handoff until the job ends."""
    cancel: tuple[str, ...] | None = None
    """Optional argv template that cancels the dispatch's paid job (exit 0: cancelled or already gone)."""
    logs: tuple[str, ...] | None = None
    """Optional argv template that prints the dispatch's job's logs (``fellows-fsm logs``; same placeholders and
    checks as ``status``; the job's values in its environment)."""
    price_per_gpu_hour: float | None = None
    """What one GPU-hour costs on this lane, in the user's currency (None: unknown; GPU-hours are still counted)."""
    queue_timeout_seconds: float | None = None
    """How long a paid job may sit queued before it is cancelled and the dispatch ends PAID_FAILED (None: no
    bound)."""
    status_timeout_seconds: float = 30.0
    """How long one run of ``status`` may take before its process group is killed (could not tell, this poll)."""

    @property
    def follows(self) -> bool:
        """Its paid job is followed to its end only when the lane says how to ask (``status``)."""
        return self.status is not None

    def check_reachable(self) -> None:
        """Nothing to check before a submit: a missing program is a warning (``warnings``), the handoff says the
        rest."""

    def shown(self) -> tuple[str, str, float | None]:
        """Its command, its probe ("-" for none) and its timeout."""
        return (" ".join(self.command), " ".join(self.probe) if self.probe else "-", self.timeout_seconds)

    def warnings(self) -> tuple[str, ...]:
        """A program of its command or probe that is not on PATH here."""
        found: list[str] = []
        for what, argv in (("command", self.command), ("probe", self.probe)):
            if argv is None or "{" in argv[0]:
                continue
            if shutil.which(argv[0]) is None:
                found.append(
                    f"[lanes.{self.name}] {what}: {argv[0]!r} is not found on PATH here; the handoff fails "
                    "unless it exists where fellows-fsm runs the dispatch"
                )
        return tuple(found)

    def __attrs_post_init__(self) -> None:
        where = f"[lanes.{self.name}]"
        _argv(f"{where} command", self.command)
        for key in ("probe", "status", "cancel", "logs"):
            if getattr(self, key) is not None:
                _argv(f"{where} {key}", getattr(self, key))
        positive_seconds(f"{where} timeout_seconds", self.timeout_seconds)
        positive_seconds(f"{where} status_timeout_seconds", self.status_timeout_seconds)
        if self.price_per_gpu_hour is not None:
            gpu_hour_price(f"{where} price_per_gpu_hour", self.price_per_gpu_hour)
        if self.queue_timeout_seconds is not None:
            positive_seconds(f"{where} queue_timeout_seconds", self.queue_timeout_seconds)
        if self.cancel is not None and self.status is None:
            raise ConfigError(
                f"{where} has cancel without status: fellows-fsm cancels only a paid job it follows; add status "
                "(an argv that prints queued, running, succeeded, failed or cancelled), or remove cancel"
            )
        if self.queue_timeout_seconds is not None and self.cancel is None:
            raise ConfigError(
                f"{where} queue_timeout_seconds={self.queue_timeout_seconds!r} needs status and cancel: a job stuck "
                "queued is cancelled at that timeout, and this lane has no cancel; add status and cancel, or remove "
                "queue_timeout_seconds"
            )
        if self.name == LADDER_LANE:
            raise ConfigError("[lanes.fellows] is reserved for the SLURM ladder; configure it under [fellows]")

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> CommandSettings:
        """The lane of a ``[lanes.<name>]`` table (its ``kind`` taken out); ConfigError naming the key if bad."""
        allowed = {
            "command",
            "probe",
            "manual_only",
            "timeout_seconds",
            "status",
            "cancel",
            "logs",
            "price_per_gpu_hour",
            "queue_timeout_seconds",
            "status_timeout_seconds",
        }
        refuse_unknown_keys(f"[lanes.{name}]", table, {"kind", *allowed})
        if "command" not in table:
            raise ConfigError(
                f"[lanes.{name}] has no command; give the argv that hands a job over, e.g. "
                "command = ['gcloud', 'batch', 'jobs', 'submit', 'fsm-{dispatch_id}']"
            )
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
        return cls(name=name, **values)  # argv as tuples: a lane read back from the journal equals its config
