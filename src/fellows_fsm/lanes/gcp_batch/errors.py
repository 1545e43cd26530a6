"""The gcp-batch kind's errors: every one a LaneError (exit 8), whose message names the job, the project and what
to do (fellows_fsm/errors.py holds the tree every kind's errors hang from)."""

from __future__ import annotations

from fellows_fsm.errors import LaneError

__all__ = ["BatchError", "BatchRefused", "BatchUnavailable", "MachineRefused"]


class BatchError(LaneError):
    """The GCP Batch API did not do what a gcp-batch lane asked; the message names the job, the project and what
    to do."""


class BatchRefused(BatchError):
    """The API answered no (permission denied, an invalid job, a name taken by another job): never retried.
    ``code`` is the API's HTTP status (None when refused before any call), ``api_message`` its own words."""

    def __init__(self, message: str, *, code: int | None = None, api_message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.api_message = api_message


class BatchUnavailable(BatchError):
    """The API did not answer, or answered 429/5xx, on every try. ``maybe_made``: a try may have reached it (a
    timeout or a lost reply), so a create may exist: the next create by the same name finds it."""

    def __init__(self, message: str, *, maybe_made: bool) -> None:
        super().__init__(message)
        self.maybe_made = maybe_made


class MachineRefused(LaneError):
    """No single GCP VM fits the job on this lane (a GPU count no machine has, an accelerator with no machine
    type): nothing was sent to Google."""
