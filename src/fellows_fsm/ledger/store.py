"""The ledger's connection and every statement it runs: a reservation made in one transaction that cannot let two
machines pass one budget together, its lease, its marks (created, settled, released), and the totals the views read.

Why row locks and not SERIALIZABLE: a reservation locks the budget rows it counts against (``budget_locks``: its
team's and its user's, in one order, ``SELECT ... FOR UPDATE``), then sums and inserts under READ COMMITTED, whose
every statement sees what the previous holder committed. Contention waits on a lock instead of failing, so 4
machines x 250 handoffs need no retry loop and no statement is ever run twice; a serializable transaction would
fail and retry under exactly that load. Locking both rows serializes every pair of reservations that could share a
count, whatever scope each machine's [budget] uses.

Time is the server's: ``now()`` stamps every row and bounds every window, in the budget's zone (the server's own
TimeZone when the [budget] names none), so machines whose clocks differ still count the same windows. psycopg is
imported only inside the calls (the ``[ledger]`` extra).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.errors import ConfigError, LedgerRefused, LedgerUnreachable
from fellows_fsm.ledger.deadline import Deadline
from fellows_fsm.ledger.schema import migrate

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEADLINE_SECONDS", "Identity", "Ledger", "LiveRow", "OpenReservation", "SpendRow", "Totals"]

log = logging.getLogger(__name__)

_REFUSED = (
    "password authentication failed",
    "no password supplied",
    "authentication failed",
    "does not exist",
    "permission denied",
    "no pg_hba.conf entry",
)
"""Words of a connection failure that waiting cannot fix: the server answered and said no."""

DEADLINE_SECONDS = 15.0
"""Beyond the connect timeout, how long one call may wait for the server (a reservation waiting on another machine's
lock takes milliseconds; the server's lock_timeout is 30 s): past it the call fails as the ledger not answering."""

_COMMITTED_HOURS = """CASE state
    WHEN 'settled' THEN coalesce(gpu_hours, 0)
    WHEN 'created' THEN greatest(worst_gpu_hours, coalesce(gpu_hours, 0))
    WHEN 'reserved' THEN CASE WHEN lease_until > now() THEN worst_gpu_hours ELSE 0 END
    ELSE 0 END"""
_COMMITTED_COST = """CASE state
    WHEN 'settled' THEN coalesce(cost, 0)
    WHEN 'created' THEN coalesce(greatest(worst_cost, cost), worst_cost, cost, 0)
    WHEN 'reserved' THEN CASE WHEN lease_until > now() THEN coalesce(worst_cost, 0) ELSE 0 END
    ELSE 0 END"""
_ZONE = "coalesce(%(zone)s::text, current_setting('TimeZone'))"
_TOTALS = f"""
WITH w AS (SELECT date_trunc('day', now(), {_ZONE}) AS day, date_trunc('month', now(), {_ZONE}) AS month)
SELECT coalesce(sum(CASE WHEN r.reserved_at >= w.day THEN {_COMMITTED_HOURS} END), 0),
       coalesce(sum(CASE WHEN r.reserved_at >= w.month THEN {_COMMITTED_COST} END), 0),
       extract(epoch FROM now())
FROM w LEFT JOIN reservations r ON r.reserved_at >= least(w.day, w.month)
    AND (%(team)s::text IS NULL OR r.team = %(team)s) AND (%(user)s::text IS NULL OR r.user_name = %(user)s)
GROUP BY w.day
"""  # noqa: S608 - only this module's constant CASE expressions are joined in; every value is a placeholder


@attrs.frozen
class Identity:
    """Who a row belongs to: the team ('' for none), the user, this machine and its journal."""

    team: str
    user: str
    machine: str
    journal: str


@attrs.frozen
class Totals:
    """What a budget's rows committed, counted in the server's clock: today's paid GPU-hours, this month's cost."""

    day_gpu_hours: float
    month_cost: float
    now: float
    """The server's clock (epoch seconds) the windows were counted at."""


@attrs.frozen
class OpenReservation:
    """One of this machine's journal's reservations not settled or released yet."""

    id: int
    dispatch_id: str
    state: str
    lapsed: bool
    """A reservation whose lease ran out before its driver renewed it (it counts nothing now)."""
    seen: Any = None
    """Its ``updated_at`` as read: a release holds only if no one touched the row since (``Ledger.release``)."""


@attrs.frozen
class SpendRow:
    """What one user's handoffs on one lane committed in one window (``day``, ``week``, ``month``), counted in the
    server's clock: ended runs at what they ran, live ones (reserved, created) at their worst case."""

    window: str
    user: str
    lane: str
    runs: int
    live: int
    gpu_hours: float
    cost: float | None
    """None: no run of them has a price."""


@attrs.frozen
class LiveRow:
    """One live dispatch as its driver last published it to the ledger (``status --team``)."""

    user: str
    machine: str
    journal: str
    dispatch_id: str
    name: str
    state: str
    label: str
    lane: str
    qos: str | None
    outcome: str
    age_seconds: float
    """How long ago its driver published it (the server's clock)."""


_SPEND = f"""
WITH w AS (SELECT date_trunc('day', now(), {_ZONE}) AS day, date_trunc('week', now(), {_ZONE}) AS week,
                  date_trunc('month', now(), {_ZONE}) AS month),
r AS (SELECT r.*, {_COMMITTED_HOURS} AS hours, {_COMMITTED_COST} AS money,
             (r.state = 'created' OR (r.state = 'reserved' AND r.lease_until > now()))::int AS live,
             (r.price_per_gpu_hour IS NOT NULL)::int AS priced
      FROM reservations r, w
      WHERE r.reserved_at >= least(w.week, w.month) AND r.state <> 'released'
        AND NOT (r.state = 'reserved' AND r.lease_until <= now())
        AND (%(team)s::text IS NULL OR r.team = %(team)s) AND (%(user)s::text IS NULL OR r.user_name = %(user)s))
SELECT win.name, r.user_name, coalesce(r.lane, ''), count(*), sum(r.live), sum(r.hours), sum(r.money), sum(r.priced)
FROM r, w, LATERAL (VALUES ('day', w.day), ('week', w.week), ('month', w.month)) AS win(name, start)
WHERE r.reserved_at >= win.start
GROUP BY win.name, r.user_name, coalesce(r.lane, '')
ORDER BY win.name, r.user_name, 3
"""  # noqa: S608 - only this module's constant expressions are joined in; every value is a placeholder


_FREE = f"""
WITH w AS (SELECT date_trunc('day', now(), {_ZONE}) AS day, date_trunc('week', now(), {_ZONE}) AS week,
                  date_trunc('month', now(), {_ZONE}) AS month)
SELECT win.name, f.user_name, f.lane, count(*), sum(f.gpu_hours)
FROM free_runs f, w, LATERAL (VALUES ('day', w.day), ('week', w.week), ('month', w.month)) AS win(name, start)
WHERE f.ended_at >= least(w.week, w.month) AND f.ended_at >= win.start
    AND (%(team)s::text IS NULL OR f.team = %(team)s) AND (%(user)s::text IS NULL OR f.user_name = %(user)s)
GROUP BY win.name, f.user_name, f.lane
ORDER BY win.name, f.user_name, f.lane
"""  # noqa: S608 - only this module's constant expressions are joined in; every value is a placeholder


class Ledger:
    """The connection to the shared ledger (made at the first call, made again after a failure) and its
    statements. Every call raises ``LedgerUnreachable`` (no answer) or ``LedgerRefused`` (an answer that waiting
    cannot change); the password is given to libpq, never to a log or a message."""

    def __init__(self, config: LedgerConfig) -> None:
        self.config = config
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self.connects = 0
        """How many connections were made (what a test reads)."""
        self.deadline_seconds = config.connect_timeout_seconds + DEADLINE_SECONDS
        """How long one call may wait for the server before its connection is cut (ledger/deadline.py)."""

    # ----------------------------------------------------------------- the connection
    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.close()
        try:
            import psycopg  # noqa: PLC0415  (the [ledger] extra, needed only with a [ledger])
        except ImportError:
            raise ConfigError(
                "[ledger] needs psycopg 3, which is not installed here: pip install 'fellows-fsm[ledger]'"
            ) from None

        shown = self.config.shown
        kwargs: dict[str, Any] = {}
        password = self.config.password()  # ConfigError (exit 3) when password_env names an unset variable
        if password is not None:
            kwargs["password"] = password
        try:
            conn = psycopg.connect(
                self.config.url,
                autocommit=True,
                connect_timeout=max(1, math.ceil(self.config.connect_timeout_seconds)),
                application_name="fellows-fsm",
                options="-c lock_timeout=30s -c statement_timeout=60s",
                # A host that stops answering mid-statement drops the connection within about 10 s (keepalives, and
                # unacknowledged writes past the connect timeout), so no tick hangs on TCP's own retries.
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=2,
                tcp_user_timeout=int(1000 * max(1.0, self.config.connect_timeout_seconds)),
                **kwargs,
            )
        except psycopg.OperationalError as exc:
            words = _reason(exc)
            if any(word in words.lower() for word in _REFUSED):
                raise LedgerRefused(f"[ledger] {shown} refused the connection: {words}") from None
            raise LedgerUnreachable(f"the ledger {shown} does not answer: {words}") from None
        self.connects += 1
        try:
            migrate(conn, shown)
        except psycopg.Error as exc:
            conn.close()
            why = _reason(exc)
            raise LedgerRefused(f"[ledger] {shown}: its schema could not be brought up to date: {why}") from None
        except ConfigError:
            conn.close()
            raise
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection, if one is open."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], Any]) -> Any:
        """``work`` on the connection; a connection lost under it is LedgerUnreachable (and made again next call)."""
        conn = self._connect()  # (ConfigError without psycopg installed)
        import psycopg  # noqa: PLC0415

        deadline = Deadline(conn.fileno(), self.deadline_seconds)  # a server that hangs holds no call for ever
        try:
            with deadline:
                return work(conn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            why = f"no answer within {self.deadline_seconds:g} s" if deadline.cut else _reason(exc)
            raise LedgerUnreachable(f"the ledger {self.config.shown} stopped answering: {why}") from None

    def check(self) -> None:
        """Connect and bring the schema up to date (what ``submit`` asks before it queues anything)."""
        self._run(lambda conn: conn.execute("SELECT 1").fetchone())

    # ----------------------------------------------------------------- reservations
    def reserve(
        self,
        who: Identity,
        *,
        team_scope: bool,
        zone: str | None,
        dispatch_id: str,
        gpus: int,
        limit_seconds: float,
        price: float | None,
        decide: Callable[[Totals], str | None],
    ) -> str | None:
        """Reserve this dispatch's worst case if ``decide`` (given the budget's totals, counted under the locks)
        says it fits (None); return ``decide``'s refusal otherwise. One transaction: the budget rows locked, the
        sums, the insert. A dispatch that already holds a reservation (not lapsed or released) fits at once."""
        worst = gpus * limit_seconds / 3600.0
        cost = None if price is None else price * worst
        keys = sorted({f"user:{who.user}", *([f"team:{who.team}"] if who.team else [])})

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> str | None:
            with conn.transaction():
                for key in keys:  # one order for every machine: no deadlock
                    conn.execute("INSERT INTO budget_locks (scope_key) VALUES (%s) ON CONFLICT DO NOTHING", (key,))
                    conn.execute("SELECT 1 FROM budget_locks WHERE scope_key = %s FOR UPDATE", (key,))
                # Held already (and not lapsed): confirmed, its lease renewed and its row touched, so a reconcile
                # that read it before never releases it (release: updated_at unchanged).
                held = conn.execute(
                    "UPDATE reservations SET updated_at = clock_timestamp(), lease_until = CASE WHEN state = "
                    "'reserved' THEN now() + make_interval(secs => %s) ELSE lease_until END WHERE machine = %s "
                    "AND journal = %s AND dispatch_id = %s AND (state IN ('created', 'settled') OR "
                    "(state = 'reserved' AND lease_until > now())) RETURNING id",
                    (self.config.lease_seconds, who.machine, who.journal, dispatch_id),
                ).fetchone()
                if held is not None:
                    return None
                refusal = decide(_totals(conn, who, team_scope=team_scope, zone=zone))
                if refusal is not None:
                    return refusal
                conn.execute(
                    "INSERT INTO reservations (team, user_name, machine, journal, dispatch_id, gpus, limit_seconds, "
                    "price_per_gpu_hour, worst_gpu_hours, worst_cost, state, lease_until) VALUES (%s, %s, %s, %s, %s, "
                    "%s, %s, %s, %s, %s, 'reserved', now() + make_interval(secs => %s)) "
                    "ON CONFLICT (machine, journal, dispatch_id) DO UPDATE SET state = 'reserved', "
                    "reserved_at = now(), lease_until = excluded.lease_until, gpus = excluded.gpus, "
                    "limit_seconds = excluded.limit_seconds, price_per_gpu_hour = excluded.price_per_gpu_hour, "
                    "worst_gpu_hours = excluded.worst_gpu_hours, worst_cost = excluded.worst_cost, "
                    "updated_at = clock_timestamp()",
                    (who.team, who.user, who.machine, who.journal, dispatch_id, gpus, limit_seconds, price, worst, cost,
                     self.config.lease_seconds),
                )  # fmt: skip
                return None

        result: str | None = self._run(work)
        return result

    def open(self, who: Identity) -> list[OpenReservation]:
        """This machine's journal's reservations still reserved or created."""

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[OpenReservation]:
            rows = conn.execute(
                "SELECT id, dispatch_id, state, state = 'reserved' AND lease_until <= now(), updated_at "
                "FROM reservations WHERE machine = %s AND journal = %s AND state IN ('reserved', 'created') "
                "ORDER BY id",
                (who.machine, who.journal),
            ).fetchall()
            return [OpenReservation(int(r[0]), str(r[1]), str(r[2]), bool(r[3]), r[4]) for r in rows]

        result: list[OpenReservation] = self._run(work)
        return result

    def renew(self, ids: Sequence[int]) -> None:
        """Renew the leases of these reservations (their dispatches are still on their way to a paid lane); one
        that lapsed meanwhile is not taken again (its room may be another's now: the gate reserves it anew)."""
        if ids:
            self._run(
                lambda conn: conn.execute(
                    "UPDATE reservations SET lease_until = now() + make_interval(secs => %s), "
                    "updated_at = clock_timestamp() "
                    "WHERE id = ANY(%s) AND state = 'reserved' AND lease_until > now()",
                    (self.config.lease_seconds, list(ids)),
                )
            )

    def created(self, ids: Sequence[int], lane: str | None) -> None:
        """Mark these reservations created: their paid job may exist, so they are kept (no lease) until settled."""
        if ids:
            self._run(
                lambda conn: conn.execute(
                    "UPDATE reservations SET state = 'created', created_at = coalesce(created_at, now()), "
                    "lane = coalesce(%s, lane), updated_at = now() WHERE id = ANY(%s) AND state IN ('reserved', "
                    "'created')",
                    (lane, list(ids)),
                )
            )

    def settle(self, rid: int, *, lane: str, gpu_hours: float, cost: float | None, status: str) -> None:
        """Settle a reservation with what its paid run really ran and cost (its end is the server's now)."""
        self._run(
            lambda conn: conn.execute(
                "UPDATE reservations SET state = 'settled', lane = %s, gpu_hours = %s, cost = %s, status = %s, "
                "ended_at = now(), created_at = coalesce(created_at, now()), updated_at = now() "
                "WHERE id = %s AND state IN ('reserved', 'created')",
                (lane, gpu_hours, cost, status, rid),
            )
        )

    def release(self, rows: Sequence[tuple[int, Any]]) -> int:
        """Release reservations whose dispatch will never be handed off (it started free, ended, was withdrawn), each
        given as (id, ``updated_at`` as ``open`` read it): one touched since (its gate confirmed it for a handoff,
        or reserved it anew) is left as it is. Returns how many were released."""
        if not rows:
            return 0

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
            cursor = conn.execute(
                "UPDATE reservations r SET state = 'released', updated_at = clock_timestamp() "
                "FROM unnest(%s::bigint[], %s::timestamptz[]) AS seen(id, at) "
                "WHERE r.id = seen.id AND r.updated_at = seen.at AND r.state = 'reserved'",
                ([r[0] for r in rows], [r[1] for r in rows]),
            )
            return max(0, cursor.rowcount)

        released: int = self._run(work)
        return released

    def spend(self, who: Identity, *, team_scope: bool, zone: str | None) -> tuple[Totals, list[SpendRow]]:
        """What the budget's handoffs committed today, this week and this month, per user and lane (the views'
        ``spend --scope``), with the totals the gate counts."""

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[Totals, list[SpendRow]]:
            scope = {"zone": zone, "team": who.team if team_scope else None, "user": None if team_scope else who.user}
            rows = [
                SpendRow(str(w), str(u), str(lane), int(n), int(live), float(h), float(c) if priced else None)
                for w, u, lane, n, live, h, c, priced in conn.execute(_SPEND, scope).fetchall()
            ]
            return _totals(conn, who, team_scope=team_scope, zone=zone), rows

        result: tuple[Totals, list[SpendRow]] = self._run(work)
        return result

    def free(self, who: Identity, *, team_scope: bool, zone: str | None) -> list[tuple[str, str, str, int, float]]:
        """The free jobs' GPU-hours (``free_runs``: in no budget) that ended today, this week and this month, in the
        server's clock and ``zone``: (window, user, cluster, jobs, GPU-hours), per user and cluster."""

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[str, str, str, int, float]]:
            scope = {"zone": zone, "team": who.team if team_scope else None, "user": None if team_scope else who.user}
            return [(str(w), str(u), str(c), int(n), float(h)) for w, u, c, n, h in conn.execute(_FREE, scope)]

        result: list[tuple[str, str, str, int, float]] = self._run(work)
        return result

    def add_free(self, who: Identity, ends: Sequence[tuple[str, str, str, int, float, str, float]]) -> None:
        """Write free jobs' ends (dispatch id, job id, lane, GPUs, GPU-hours, result, end in epoch seconds) in one
        transaction; one already there is left as it is."""
        rows = [(who.team, who.user, who.machine, who.journal, *end) for end in ends]

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO free_runs (team, user_name, machine, journal, dispatch_id, job_id, lane, gpus, "
                    "gpu_hours, result, ended_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s)) "
                    "ON CONFLICT (machine, journal, dispatch_id, job_id) DO NOTHING",
                    rows,
                )

        if rows:
            self._run(work)

    def publish_live(self, who: Identity, rows: Sequence[tuple[str, str, str, str, str, str | None, str]]) -> None:
        """Replace this machine's journal's live dispatches (id, name, state, label, lane, QoS, outcome) in one
        transaction: those no longer live are removed."""
        ids = [row[0] for row in rows]
        values = [(who.team, who.user, who.machine, who.journal, *row) for row in rows]

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.transaction():
                conn.execute(
                    "DELETE FROM live_dispatches WHERE machine = %s AND journal = %s AND NOT dispatch_id = ANY(%s)",
                    (who.machine, who.journal, ids),
                )
                if values:
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            "INSERT INTO live_dispatches (team, user_name, machine, journal, dispatch_id, name, state, "
                            "label, lane, qos, outcome) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                            "ON CONFLICT (machine, journal, dispatch_id) DO UPDATE SET state = excluded.state, "
                            "label = excluded.label, lane = excluded.lane, qos = excluded.qos, "
                            "outcome = excluded.outcome, published_at = now()",
                            values,
                        )
                conn.execute(
                    "UPDATE live_dispatches SET published_at = now() WHERE machine = %s AND journal = %s",
                    (who.machine, who.journal),
                )

        self._run(work)

    def live(self, who: Identity, *, team_scope: bool) -> list[LiveRow]:
        """The live dispatches every driver of the team (or of this user) last published, by user and machine."""

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[LiveRow]:
            rows = conn.execute(
                "SELECT user_name, machine, journal, dispatch_id, name, state, label, lane, qos, outcome, "
                "extract(epoch FROM now() - published_at) FROM live_dispatches "
                "WHERE (%(team)s::text IS NULL OR team = %(team)s) "
                "AND (%(user)s::text IS NULL OR user_name = %(user)s) "
                "ORDER BY user_name, machine, journal, dispatch_id",
                {"team": who.team if team_scope else None, "user": None if team_scope else who.user},
            ).fetchall()
            return [
                LiveRow(
                    user=r[0], machine=r[1], journal=r[2], dispatch_id=r[3], name=r[4], state=r[5], label=r[6],
                    lane=r[7], qos=r[8], outcome=r[9], age_seconds=float(r[10]),
                )
                for r in rows
            ]  # fmt: skip

        result: list[LiveRow] = self._run(work)
        return result

    def totals(self, who: Identity, *, team_scope: bool, zone: str | None) -> Totals:
        """The budget's totals now, without a lock (what a view shows)."""
        result: Totals = self._run(lambda conn: _totals(conn, who, team_scope=team_scope, zone=zone))
        return result


def _totals(conn: psycopg.Connection[tuple[Any, ...]], who: Identity, *, team_scope: bool, zone: str | None) -> Totals:
    """The budget's totals: the team's rows, or the user's (on every machine, whatever team each names)."""
    scope = {"zone": zone, "team": who.team if team_scope else None, "user": None if team_scope else who.user}
    row = conn.execute(_TOTALS, scope).fetchone()
    if row is None:  # an aggregate over a one-row CTE always returns a row
        raise LedgerUnreachable(f"the ledger {conn.info.host} returned no totals")
    return Totals(float(row[0]), float(row[1]), float(row[2]))


def _reason(exc: BaseException) -> str:
    """A driver error in one line (libpq's message never carries the password)."""
    text = " ".join(str(exc).split())
    return text.removeprefix("connection failed: ")[:300] or type(exc).__name__
