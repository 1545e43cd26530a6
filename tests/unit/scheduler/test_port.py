"""Pending reasons fall into the groups that decide what a rung can do."""

from __future__ import annotations

import pytest

from fellows_fsm import ReasonGroup, classify_reason

CASES = [
    (None, ReasonGroup.NOT_EVALUATED),
    ("None", ReasonGroup.NOT_EVALUATED),
    ("QOSMaxGRESPerUser", ReasonGroup.OWN_CAP),
    ("QOSMaxJobsPerUserLimit", ReasonGroup.OWN_CAP),
    ("QOSMaxWallDurationPerJobLimit", ReasonGroup.NEVER_FITS),
    ("QOSMaxGRESPerJob", ReasonGroup.NEVER_FITS),
    ("AssocMaxWallDurationPerJobLimit", ReasonGroup.NEVER_FITS),
    ("PartitionTimeLimit", ReasonGroup.NEVER_FITS),
    ("QOSGrpGRES", ReasonGroup.SHARED_CAP),
    ("AssocGrpGRES", ReasonGroup.SHARED_CAP),
    ("Resources", ReasonGroup.CONTENTION),
    ("Priority", ReasonGroup.CONTENTION),
    ("ReqNodeNotAvail, UnavailableNodes:gpu01", ReasonGroup.CONTENTION),
    ("InvalidQOS", ReasonGroup.INVALID),
    ("JobHeldUser", ReasonGroup.HELD),
    ("Dependency", ReasonGroup.WAITING),
    ("SomethingNew", ReasonGroup.OTHER),
]


@pytest.mark.parametrize(("reason", "group"), CASES, ids=[str(r) for r, _ in CASES])
def test_reason_groups(reason: str | None, group: ReasonGroup) -> None:
    """Each SLURM pending reason maps to the group the lifecycle guards rely on."""
    assert classify_reason(reason) is group
