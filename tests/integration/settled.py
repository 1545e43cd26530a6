"""What every real-SLURM fault test checks at the end: each dispatch settled once, nothing left pending."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fellows_fsm.core.vocab import FOLLOWED_STATES
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal

from .conftest import Cluster, QueueRow

LEDGER_CODE = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
"""A gcp lane's command that appends the dispatch id to a ledger file (argv: the ledger, the id)."""


def walked(row: object) -> bool:
    """Is the walk of a dispatch (a journal row or a handle) over: final, or its job runs (followed to its end
    from then on, so RUNNING is not final)?"""
    return bool(getattr(row, "final", False)) or getattr(row, "state", "") in FOLLOWED_STATES


def walked_out(router: Router) -> bool:
    """Has every dispatch a router drives walked out (final, or its job runs): nothing on a rung or handing off?"""
    others = router.handing or router.running or router.pending_handoffs or router.paid.busy
    return not others and all(d.state in FOLLOWED_STATES for d in router.live.values())


def ledger(tmp_path: Path) -> list[str]:
    """The dispatch ids the gcp lane's command recorded in tmp_path/gcp.ledger."""
    path = tmp_path / "gcp.ledger"
    return path.read_text().split() if path.exists() else []


def jobs_of(slurm: Cluster, dispatch_id: str) -> list[QueueRow]:
    """Every job whose comment carries one of the dispatch's rung tokens, oldest first."""
    prefix = f"fsm-{dispatch_id}-r"
    return sorted((r for r in slurm.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))


def assert_settled(slurm: Cluster, journal: Journal, tmp_path: Path, dispatch_ids: Sequence[str]) -> None:
    """Each dispatch: one job that ran XOR one handoff (or withdrawn with neither), and none of its jobs pending."""
    handed = ledger(tmp_path)
    for dispatch_id in dispatch_ids:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        jobs = jobs_of(slurm, dispatch_id)
        ran = [j for j in jobs if j.ever_ran]
        handoffs = handed.count(dispatch_id)
        assert not [j for j in jobs if j.state == "PENDING"], f"{dispatch_id}: a job is left pending: {jobs}"
        if row.state == "WITHDRAWN":
            # Withdrawn before its job ran: none ran; withdrawn while it ran (a cancel of a RUNNING dispatch, followed
            # to its end since issue 38): that one job, and no handoff.
            started = 1 if any(s.dest == "RUNNING" for s in journal.steps(dispatch_id)) else 0
            assert (len(ran), handoffs) == (started, 0), f"{dispatch_id} withdrawn, yet {ran} ran / {handoffs} handoffs"
        else:
            assert (len(ran), handoffs) in ((1, 0), (0, 1)), f"{dispatch_id}: ran {ran}, {handoffs} handoffs"


def handoff_files(tmp_path: Path, dispatch_id: str) -> list[str]:
    """The names of the files the dispatch's handoff left in tmp_path/state/handoffs, sorted."""
    return sorted(p.name for p in (tmp_path / "state" / "handoffs").glob(f"{dispatch_id}.*"))
