"""A command lane's paid job followed: the contract of its ``status`` command's answer, and the runs of it for
many dispatches side by side, each bounded, so one poll is never held up longer than ``status_timeout_seconds``.

The contract: ``status`` exits 0 and its first line starts with one of queued, running, succeeded, failed,
cancelled (any case); the rest of that line is the note shown to the user. Any other exit or word is "could not
tell" (``PaidStatus.UNKNOWN``: asked again next poll, never read as an end). What to run, and its environment, is
lanes/command/lane.py's; running one command is ``run_once`` there. Nothing here goes through a shell.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.lanes.handoff import HandoffResult

__all__ = ["STATUS_WORDS", "STATUS_WORKERS", "last_line", "look_all", "read_status"]

STATUS_WORDS: Mapping[str, PaidStatus] = {
    "queued": PaidStatus.QUEUED,
    "running": PaidStatus.RUNNING,
    "succeeded": PaidStatus.SUCCEEDED,
    "failed": PaidStatus.FAILED,
    "cancelled": PaidStatus.CANCELLED,
}
"""The words a status's first line may start with (any case), and what each says."""
STATUS_WORKERS = 4
"""How many status commands of one lane run at once (a small pool: the machine polls many lanes)."""
NOTE_CHARS = 200
"""A note (or what was seen) is cut to this many characters: it is one line of the views."""
_LINE = re.compile(r"\s*([A-Za-z]+)(?![\w])(.*)", re.DOTALL)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` ('' if none), cut to one short line."""
    lines = [line for line in text.splitlines() if line.strip()]
    return _short(lines[-1]) if lines else ""


def read_status(result: HandoffResult) -> PaidLook:
    """What one run of a lane's status says, by the contract above (never an end unless exit 0 and a word)."""
    if result.exit_status != 0:
        said = last_line(result.stderr) or last_line(result.stdout) or "no output"
        return PaidLook(PaidStatus.UNKNOWN, f"could not tell: status exited {result.exit_status}: {said}")
    lines = result.stdout.splitlines()
    if not lines:
        return PaidLook(PaidStatus.UNKNOWN, "could not tell: status exited 0 but printed nothing")
    first = lines[0]
    found = _LINE.fullmatch(first)
    status = STATUS_WORDS.get(found.group(1).lower()) if found else None
    if found is None or status is None:
        seen = repr(_short(first)) if first.strip() else "nothing"
        words = ", ".join(STATUS_WORDS)
        return PaidLook(PaidStatus.UNKNOWN, f"could not tell: status's first line was {seen}, not one of {words}")
    return PaidLook(status, _short(found.group(2).lstrip(" \t:")))


def look_all(
    dispatch_ids: Sequence[str],
    run: Callable[[str, float], PaidLook],
    *,
    timeout: float,
    first: Collection[str] = (),
    workers: int = STATUS_WORKERS,
    clock: Callable[[], float] | None = None,
) -> tuple[dict[str, PaidLook], list[str]]:
    """``run(dispatch_id, seconds_left)`` for every dispatch, at most ``workers`` at once, each given what is left
    of the poll's ``timeout`` (it kills its command then). A dispatch whose turn comes after the timeout is not
    asked this poll (could not tell), so the whole look is bounded by the timeout, not by the number of ids.
    Returns every dispatch's look, and those not asked: pass them as ``first`` next poll, so that slow statuses
    never leave the same dispatches behind poll after poll. ``clock`` tells seconds (``time.monotonic`` when
    None, looked up at each call; the runs read it in the pool's threads)."""
    ids = list(dict.fromkeys(dispatch_ids))
    if not ids:
        return {}, []
    ahead = [i for i in dict.fromkeys(first) if i in ids]
    ids = ahead + [i for i in ids if i not in set(ahead)]

    def now() -> float:
        return clock() if clock is not None else time.monotonic()  # looked up at each call

    deadline = now() + timeout
    unasked: list[str] = []

    def one(dispatch_id: str) -> PaidLook:
        left = deadline - now()
        if left <= 0:
            unasked.append(dispatch_id)
            return PaidLook(PaidStatus.UNKNOWN, f"not asked this poll: its {timeout:g} s for status were used up")
        return run(dispatch_id, left)

    with ThreadPoolExecutor(max_workers=min(workers, len(ids)), thread_name_prefix="fsm-status") as pool:
        answers = dict(zip(ids, pool.map(one, ids), strict=True))
    return answers, [i for i in ids if i in set(unasked)]
