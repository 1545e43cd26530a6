"""The gcp-batch kind's table (``[lanes.<name>] kind = "gcp-batch"``): where its jobs go, on which GPUs, at what
price, checked when the config is read; and what the lane can do, as plain values (lanes/base.py ``LaneSettings``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import attrs

from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.gcp_batch.client import BatchLocation, check_credentials, check_library
from fellows_fsm.lanes.gcp_batch.machines import ATTACHED, BUNDLED
from fellows_fsm.tables import positive_seconds, refuse_unknown_keys

__all__ = ["KEYS", "KIND", "GcpBatchSettings"]

KIND = "gcp-batch"
KEYS = (
    "project",
    "region",
    "zone",
    "accelerator",
    "machine_type",
    "price_per_gpu_hour",
    "queue_timeout_seconds",
    "timeout_seconds",
    "manual_only",
    "api_endpoint",
)
_PROJECT = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _known_accelerators() -> str:
    return ", ".join(sorted([*BUNDLED, *ATTACHED]))


@attrs.frozen(kw_only=True)
class GcpBatchSettings:
    """A GCP Batch lane (``[lanes.<name>] kind = "gcp-batch"``): where its jobs go, on which GPUs, at what price."""

    kind: ClassVar[str] = KIND
    walks_ladder: ClassVar[bool] = False
    """A dispatch is handed to the lane; it walks no rungs there."""
    follows: ClassVar[bool] = True
    """Its Batch jobs are followed to their end (one list call a poll)."""

    name: str
    project: str
    region: str
    accelerator: str
    """The GPU type (``nvidia-h100-80gb``): with the job's GPU count it names the VM (lanes/gcp_batch/machines.py)."""
    price_per_gpu_hour: float
    """What one GPU-hour costs on this lane, in the user's currency (required: no price is guessed)."""
    zone: str | None = None
    machine_type: str | None = None
    """The VM type; None: the one the accelerator's family has for the job's GPU count."""
    queue_timeout_seconds: float | None = None
    """How long a job may sit QUEUED/SCHEDULED before it is deleted (None: no bound)."""
    timeout_seconds: float = 600.0
    """How long the create may take, retries included, before the handoff is lost (then the job is looked up)."""
    manual_only: bool = False
    api_endpoint: str | None = None
    """Tests only: a loopback ``http://127.0.0.1:<port>`` fake of the API (anonymous credentials); never Google."""

    def __attrs_post_init__(self) -> None:
        where = f"[lanes.{self.name}]"
        if self.name == LADDER_LANE:
            raise ConfigError("[lanes.fellows] is reserved for the SLURM ladder; configure it under [fellows]")
        for key, pattern, example in (
            ("project", _PROJECT, "'my-project-123'"),
            ("region", _REGION, "'us-central1'"),
        ):
            value = getattr(self, key)
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ConfigError(f"{where} {key}={value!r} is not a GCP {key} id; give one such as {example}")
        if self.zone is not None and (not isinstance(self.zone, str) or not self.zone.startswith(f"{self.region}-")):
            raise ConfigError(
                f"{where} zone={self.zone!r} is not a zone of region {self.region!r}; give one such as "
                f"'{self.region}-a', or leave zone out (any zone of the region)"
            )
        self._check_machine(where)
        price = self.price_per_gpu_hour
        if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) or price <= 0:
            raise ConfigError(
                f"{where} price_per_gpu_hour={price!r} must be a finite number above 0: what one GPU-hour costs on "
                "this lane in your currency, e.g. price_per_gpu_hour = 11.06"
            )
        if self.queue_timeout_seconds is not None:
            positive_seconds(f"{where} queue_timeout_seconds", self.queue_timeout_seconds)
        positive_seconds(f"{where} timeout_seconds", self.timeout_seconds)
        if not isinstance(self.manual_only, bool):
            raise ConfigError(f"{where} manual_only={self.manual_only!r} must be true or false")
        if self.api_endpoint is not None and not _loopback_http(self.api_endpoint):
            raise ConfigError(
                f"{where} api_endpoint={self.api_endpoint!r} must be a loopback http URL such as "
                "'http://127.0.0.1:8080' (a test's fake Batch API); leave it out to reach Google"
            )

    def _check_machine(self, where: str) -> None:
        accelerator, machine = self.accelerator, self.machine_type
        if not isinstance(accelerator, str) or accelerator not in {*BUNDLED, *ATTACHED}:
            raise ConfigError(
                f"{where} accelerator={accelerator!r} is not a GPU type this lane knows; use one of "
                f"{_known_accelerators()}"
            )
        if machine is not None and not isinstance(machine, str):
            raise ConfigError(f"{where} machine_type={machine!r} must be a machine type's name, e.g. 'n1-standard-8'")
        if accelerator in BUNDLED:
            types = sorted(set(BUNDLED[accelerator].values()))
            if machine is not None and machine not in types:
                raise ConfigError(
                    f"{where} machine_type={machine!r} does not carry {accelerator} GPUs; its machine types are "
                    f"{', '.join(types)} (or leave machine_type out: it follows from the job's GPU count)"
                )
        elif machine is None or not machine.startswith("n1-"):
            shown = "is not set" if machine is None else f"={machine!r} is not an N1 machine type"
            raise ConfigError(
                f"{where} machine_type {shown}: {accelerator} GPUs attach to an N1 machine; give one such as "
                "machine_type = 'n1-standard-8'"
            )

    @property
    def location(self) -> BatchLocation:
        """The project, region and zone the lane's jobs go to."""
        return BatchLocation(self.project, self.region, self.zone)

    def check_reachable(self) -> None:
        """Google's client library (the ``[gcp]`` extra, even for a fake's endpoint), then the lane's credentials
        (``check_credentials``)."""
        check_library()
        self.check_credentials()

    def shown(self) -> tuple[str, str, float | None]:
        """A Batch lane runs no command: its kind is what it runs."""
        return (f"(a {self.kind} lane)", "", None)

    def warnings(self) -> tuple[str, ...]:
        """Nothing runs here but Google's client library."""
        return ()

    def check_credentials(self) -> None:
        """Raise errors.CredentialsMissing (exit 11, saying how to log in) when the user has no application
        default credentials for this lane; nothing is sent to Batch. A lane on a loopback fake needs none."""
        if self.api_endpoint is None:
            check_credentials()

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> GcpBatchSettings:
        """The lane of a ``[lanes.<name>]`` table (its ``kind`` taken out); ConfigError naming the key if bad."""
        refuse_unknown_keys(f"[lanes.{name}]", table, {"kind", *KEYS})
        if "price_per_gpu_hour" not in table:
            raise ConfigError(
                f"[lanes.{name}] price_per_gpu_hour is not set: give what one GPU-hour costs on this lane in your "
                "currency, e.g. price_per_gpu_hour = 11.06 (no price is guessed)"
            )
        for key, what in (
            ("project", "the GCP project id its jobs are created in"),
            ("region", "the region its jobs run in, e.g. 'us-central1'"),
            ("accelerator", f"the GPU type, one of {_known_accelerators()}"),
        ):
            if key not in table:
                raise ConfigError(f"[lanes.{name}] {key} is not set: give {what}")
        return cls(name=name, **table)


def _loopback_http(url: object) -> bool:
    if not isinstance(url, str):
        return False
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError:
        return False
    return split.scheme == "http" and split.hostname in _LOOPBACK and port is not None and split.path in ("", "/")
