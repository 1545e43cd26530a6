"""A cancel asked of the journal's driver by a process that does not drive it (``Fellows.cancel``).

The request is journaled as ``cancel:<id>`` in the meta table; the driver answers it at its next tick
(``Router.take_requests``: it withdraws the dispatch and journals the jobs it scancelled, or the error) and this
side waits for that answer, starting the background driver again whenever none runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from fellows_fsm.driver.withdrawal import CANCEL_ANSWER, CANCEL_REQUEST
from fellows_fsm.errors import FellowsError, JournalBusy
from fellows_fsm.journal.queries import refuse_handed_off
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.store import Journal

__all__ = ["request_cancel"]


def request_cancel(
    journal: Journal,
    row: DispatchRow,
    *,
    at: float,
    step: float,
    wait: float,
    ensure_driver: Callable[[], object],
    sleep: Callable[[float], None],
) -> list[str]:
    """Journal a cancel of ``row`` for the journal's driver and return the ids of the jobs it scancelled.

    ``ensure_driver`` is called before each look (a driver that stopped is started again); the answer is looked
    for every ``step`` seconds, up to ``wait`` seconds, then JournalBusy names the driver (the request stays
    journaled for its next tick). A dispatch handed to a command lane is refused first (FellowsError), as is an
    answer that carries an error.
    """
    refuse_handed_off(journal, row)
    journal.drop_meta(CANCEL_ANSWER + row.id)
    journal.put_meta(CANCEL_REQUEST + row.id, {"at": at})
    for attempt in itertools.count():  # counted, not timed: a frozen test clock must not make it wait forever
        ensure_driver()
        answer = journal.get_meta(CANCEL_ANSWER + row.id)
        if answer is not None:
            journal.drop_meta(CANCEL_ANSWER + row.id)
            if "error" in answer:
                raise FellowsError(str(answer["error"]))
            return [str(j) for j in answer["jobs"]]
        if attempt * step >= wait:
            owner = journal.owner()
            holder = owner.describe() if owner is not None else "an unknown process"
            raise JournalBusy(
                holder,
                f"journal {journal.path} is driven by another router ({holder}), which did not answer the "
                f"cancel of dispatch {row.id} within {wait:g} s; the request stays journaled and the journal's "
                "driver does it at its next tick",
            )
        sleep(step)
    raise AssertionError("unreachable")  # pragma: no cover - the loop above returns or raises
