"""``fellows-fsm wait ID...`` (and ``submit --wait``): block until every named dispatch has ended, say how each
ended, and exit 0 when each ``succeeded``, else the code of the first result that did not (``EXIT_CODES``), 124 when
``--timeout`` passes first. The waiting is the API's (``Fellows.wait``); here are the words and the codes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import click

from fellows_fsm.api import Fellows
from fellows_fsm.clock import iso_utc
from fellows_fsm.core.vocab import Result
from fellows_fsm.driver.ends import result
from fellows_fsm.errors import FellowsError, UsageError, WaitTimeout
from fellows_fsm.journal.ends import JobEnded
from fellows_fsm.journal.queries import find
from fellows_fsm.journal.snapshot import dispatch_json, paid_facts
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.app import config_of, config_option, echo_json, main, open_fellows
from fellows_fsm.ui.paid import hours_words
from fellows_fsm.ui.words import span

__all__ = ["EXIT_CODES", "NO_RESULT", "end_words", "exit_code", "finish", "wait", "wait_all"]

EXIT_CODES: dict[str, int] = {
    Result.SUCCEEDED: 0,
    Result.FAILED: 20,
    Result.TIMEOUT: 21,
    Result.OUT_OF_MEMORY: 22,
    Result.NODE_FAIL: 23,
    Result.PREEMPTED: 24,
    Result.CANCELLED: 25,
    Result.UNKNOWN: 26,
}
"""``wait``'s exit code per result (docs/usage.md's table); 124 is ``--timeout``."""
NO_RESULT = 27
"""``wait``'s exit code for a dispatch that ended without a job that ran (refused, no lane or budget left, handed
to a lane that does not follow its job)."""


def exit_code(results: Sequence[str | None]) -> int:
    """0 when every result is ``succeeded``, else the code of the first that is not."""
    for word in results:
        if word != Result.SUCCEEDED:
            return EXIT_CODES.get(word, NO_RESULT) if word is not None else NO_RESULT
    return 0


def end_words(end: JobEnded) -> str:
    """How a free job ended, for people: ``succeeded (exit 0) at 2026-12-07T01:02:03Z after 1h 02m 03s, 8.27
    GPU-hours``."""
    words = end.result + (f" (exit {end.exit_code})" if end.exit_code is not None else "")
    words += f" at {iso_utc(end.ended_at)}"
    if end.elapsed_seconds is not None:
        words += f" after {span(end.elapsed_seconds)}, {hours_words(end.gpu_hours)} GPU-hours"
    return words


def finish(ctx: click.Context, ended: Sequence[str | None] | None, error: FellowsError | None) -> None:
    """How ``submit`` ends: with ``--wait`` (``ended``: the results) wait's exit code, the error said in its line;
    else the dispatch's error, if any (raised: its own exit code)."""
    if ended is None:
        if error is not None:
            raise error
        return
    if error is not None:
        click.echo(f"fellows-fsm: error: {error}", err=True)
    ctx.exit(exit_code(ended))


def wait_all(fellows: Fellows, dispatch_ids: Sequence[str], timeout: float | None) -> list[str | None]:
    """Block until every dispatch is final (WaitTimeout, exit 124, when ``timeout`` seconds pass first); their
    results, in order."""
    limit = None if timeout is None else time.monotonic() + timeout
    for dispatch_id in dispatch_ids:
        left = None if limit is None else max(0.0, limit - time.monotonic())
        try:
            fellows.wait(dispatch_id, left)
        except WaitTimeout:
            waiting = [i for i in dispatch_ids if not fellows.handle(i).final]
            raise WaitTimeout(
                f"{', '.join(waiting)} not ended after {timeout:g} s; the driver follows them on "
                f"(`fellows-fsm status`, `fellows-fsm wait {' '.join(waiting)}`)"
            ) from None
    return [result(fellows.journal, i)[0] for i in dispatch_ids]


def ended_line(journal: Journal, dispatch_id: str) -> str:
    """One line saying how the dispatch ended."""
    row = journal.dispatch(dispatch_id)
    assert row is not None
    end = journal.ends([dispatch_id]).get(dispatch_id)
    if end is not None:
        return f"dispatch {dispatch_id} {end_words(end)} (SLURM job {end.job_id or '-'})"
    word = result(journal, dispatch_id)[0]
    return f"dispatch {dispatch_id} ended {row.label}" + (f": {word}" if word is not None else f" ({row.outcome})")


def dispatch_object(journal: Journal, dispatch_id: str) -> dict[str, Any]:
    """A dispatch's JSON object, its end included."""
    row = journal.dispatch(dispatch_id)
    assert row is not None
    handoff = journal.handoff(dispatch_id)
    paid, budget = paid_facts(journal, row, handoff)
    return dispatch_json(row, handoff, paid=paid, budget=budget, end=journal.ends([dispatch_id]).get(dispatch_id))


@main.command(short_help="Block until dispatches end; exit 0 if each succeeded.")
@click.argument("dispatch_ids", nargs=-1, required=True, metavar="ID...")  # an id or a unique prefix of one
@click.option("--timeout", type=float, metavar="SECONDS", help="Give up after this long (exit 124); the jobs go on.")
@click.option("--json", "as_json", is_flag=True, help="Print the dispatches as a JSON list once they ended.")
@config_option
@click.pass_context
def wait(ctx: click.Context, dispatch_ids: tuple[str, ...], timeout: float | None, as_json: bool) -> None:
    """Block until every named dispatch has ended (its job ended, or it ended without one), print how each ended,
    and exit 0 when each succeeded; otherwise the exit code of the first that did not (failed 20, timeout 21,
    out_of_memory 22, node_fail 23, preempted 24, cancelled 25, unknown 26, no job ran 27); 124 when --timeout
    passes first."""
    if timeout is not None and not timeout >= 0:
        raise UsageError(f"--timeout {timeout!r} must be a number of seconds, 0 or more")
    with open_fellows(config_of(ctx)) as fellows:
        dispatch_ids = tuple(find(fellows.journal, i).id for i in dispatch_ids)  # a prefix; unknown: exit 2, at once
        results = wait_all(fellows, dispatch_ids, timeout)
        if as_json:
            echo_json([dispatch_object(fellows.journal, i) for i in dispatch_ids])
        else:
            for dispatch_id in dispatch_ids:
                click.echo(ended_line(fellows.journal, dispatch_id))
    ctx.exit(exit_code(results))
