"""Command lanes: where a dispatch goes when the free ladder cannot start it (GCP), or when pinned.

A lane renders its configured argv template for one dispatch and runs it once, with a timeout and
never through a shell. It knows nothing of the lifecycle machine; the router decides when to call it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Protocol

import attrs

from fellows_fsm.config import LaneConfig
from fellows_fsm.errors import ConfigError
from fellows_fsm.scheduler import JobSpec

__all__ = ["FELLOWS", "CommandLane", "HandoffResult", "Lane"]

FELLOWS = "fellows"
"""The name of the SLURM ladder lane."""


class Lane(Protocol):
    """What the router needs to know of any lane."""

    @property
    def name(self) -> str:
        """The lane's name, as used by ``--pin`` and ``[router] order``."""
        ...

    @property
    def manual_only(self) -> bool:
        """True if the lane runs only when a dispatch is pinned to it."""
        ...


@attrs.frozen
class HandoffResult:
    """What one run of a lane's command did."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_status == 0


def placeholders(dispatch_id: str, spec: JobSpec) -> Mapping[str, str]:
    """The values a lane's argv template may use."""
    limit = spec.time_limit_seconds
    return {
        "dispatch_id": dispatch_id,
        "job_name": spec.name,
        "script": spec.script,
        "gpus": str(spec.gpus),
        "time_limit_seconds": "" if limit is None else str(limit),
        "time_limit_minutes": "" if limit is None else str(max(1, -(-limit // 60))),
        "workdir": os.path.dirname(os.path.abspath(spec.script)),
    }


class CommandLane:
    """A lane that hands a job over by running one command (``gcloud batch jobs submit``, ``sky launch``)."""

    def __init__(self, config: LaneConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        """The lane's name."""
        return self.config.name

    @property
    def manual_only(self) -> bool:
        """True if this lane is only used when pinned."""
        return self.config.manual_only

    def render(self, template: tuple[str, ...], dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """Fill ``template``'s placeholders for one dispatch; each item stays one argv item."""
        values = placeholders(dispatch_id, spec)
        try:
            return tuple(item.format_map(values) for item in template)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"[lanes.{self.name}] template {list(template)!r} cannot be filled: {exc}") from None

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """The handoff argv for one dispatch."""
        return self.render(self.config.command, dispatch_id, spec)

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """Run the probe, if configured: True if the lane already has this dispatch, None if unknowable."""
        if self.config.probe is None:
            return None
        result = self._run(self.render(self.config.probe, dispatch_id, spec))
        return result.ok

    def hand_off(self, argv: tuple[str, ...]) -> HandoffResult:
        """Run the handoff command once and return what it did (a failure is a result, not an exception)."""
        return self._run(argv)

    def _run(self, argv: tuple[str, ...]) -> HandoffResult:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.config.timeout_seconds,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return HandoffResult(argv, 127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired as exc:
            return HandoffResult(argv, 124, _text(exc.stdout), f"timed out after {exc.timeout:g} s")
        return HandoffResult(argv, done.returncode, done.stdout, done.stderr)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
