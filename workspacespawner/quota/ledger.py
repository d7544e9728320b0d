"""The ledger: one row per workspace run, in any SQLAlchemy database (a SQLite file by default).

Synchronous SQLAlchemy, on purpose: it is simple and the same for SQLite,
PostgreSQL and the ``workspacespawner usage`` command. **The hub must not
call it on its event loop**: every call may wait for a lock or the network.
:class:`~workspacespawner.quota.service.QuotaService` runs each call on the
process's one database thread (:attr:`Ledger.executor`, a
:class:`~workspacespawner.db.executor.DatabaseExecutor`); so does the audit
log, and so should any other async code.

Atomicity of :meth:`Ledger.check_and_reserve`: the check and the
reservation are one transaction holding the user's lock, so two starts of
the same user racing for the last concurrent slot or the last card-hours
cannot both pass. SQLite: the transaction opens with ``BEGIN IMMEDIATE``
(the database's write lock, taken before anything is read), nothing more.
PostgreSQL: an upsert of the user's row in ``workspacespawner_quota_users``
(``ON CONFLICT DO UPDATE`` locks it as ``SELECT ... FOR UPDATE`` would).
Others: the row is made if missing, then ``SELECT ... FOR UPDATE``.

The pre-spawn check is one transaction: on SQLite of three statements
(``BEGIN IMMEDIATE``, the read, the insert); on PostgreSQL of one, a call
of the function migration 0005 made, which takes the lock, inserts the
reservation (deleted again if the decision refuses) and reads, each
query with its own snapshot, in one round trip. The read takes a user's
active runs and the runs they closed in this period in one ``UNION ALL``
through one index, ``(user_name, state, stopped)``: two range scans whose
size is this month's runs of that user, flat however many rows the table
and the user's history hold
(``benchmarks/quota_check.py`` measures it up to a million rows). The
enforcer's pass reads every user's runs the same way in one statement
(:meth:`Ledger.runs_all`, index ``(state, stopped)``).

Times are stored as naive UTC and handed out as aware UTC datetimes. The
schema is created and upgraded by alembic
(:func:`workspacespawner.db.migrate.upgrade`, for the hub to call once at
start-up), and on first use here if nobody did. Every database error
that means "cannot reach or use the database" comes out as
:class:`LedgerUnavailable` (the same class as
:class:`workspacespawner.db.DatabaseUnavailable`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from operator import itemgetter

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.dialects import postgresql

from workspacespawner.core.gpuresources import WHOLE_GPU
from workspacespawner.db import migrate
from workspacespawner.db.engine import (
    DatabaseUnavailable,
    UTCDateTime,
    can_commit_without_disk_wait,
    guarded,
    make_engine,
    once_more_if_disconnected,
    write_transaction,
)
from workspacespawner.db.executor import DatabaseExecutor, process_executor
from workspacespawner.db.migrations import RESERVE_FUNCTION, RUNS_TABLE, USERS_TABLE
from workspacespawner.quota import policy
from workspacespawner.quota.policy import (
    ACTIVE_STATES,
    CLOSED,
    OPEN,
    RESERVED,
    Decision,
    Limits,
    Request,
    Reservation,
    Run,
    Usage,
)

log = logging.getLogger("workspacespawner.quota")


#: The ledger's name for :class:`~workspacespawner.db.engine.DatabaseUnavailable` (the same class).
LedgerUnavailable = DatabaseUnavailable

#: :func:`~workspacespawner.db.engine.guarded`, naming the database as the quota ledger in its message.
_guarded = guarded(what="the quota ledger")


metadata = sa.MetaData()

#: The runs table at the newest revision (the migrations create it; this describes it for queries).
runs = sa.Table(
    RUNS_TABLE,
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_name", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False),
    sa.Column("profile", sa.String(255), nullable=False),
    sa.Column("workspace_kind", sa.String(32), nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("started", UTCDateTime, nullable=False),
    sa.Column("stopped", UTCDateTime, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("last_seen", UTCDateTime, nullable=True),
    sa.Column("stop_reason", sa.String(255), nullable=True),
    sa.Column("gpu_resource", sa.String(253), nullable=False, server_default=WHOLE_GPU),
    sa.Column("gpu_product", sa.String(255), nullable=False, server_default=""),
    sa.Column("weight", sa.Float, nullable=False, server_default="1.0"),
)

quota_users = sa.Table(USERS_TABLE, metadata, sa.Column("user_name", sa.String(255), primary_key=True))


#: Open runs marked seen per UPDATE by :meth:`Ledger.close_orphans` on databases other than PostgreSQL (one statement
#: up to this many running servers; under SQLite's limit on bound parameters). PostgreSQL takes them all as one array.
SEEN_CHUNK = 10_000

#: Rows fetched at a time by the reads of every user's runs: the driver converts a batch in one call that holds the
#: interpreter's lock, and the hub's event loop waits for it meanwhile; small batches keep that wait short.
READ_BATCH = 500
_BATCHED = {"yield_per": READ_BATCH}  # one statement's execution options (a Connection's own would outlive it)

#: The run ids :meth:`Ledger.close_orphans` marks seen, as one PostgreSQL array parameter (``id = ANY(:ids)``).
_IDS = sa.bindparam("ids", type_=postgresql.ARRAY(sa.Integer))

def _lock_rows(names: sa.Select) -> sa.Insert:
    """PostgreSQL: upsert the lock rows of the user names ``names`` selects, in its order (see :meth:`Ledger._lock_users`)."""
    insert = postgresql.insert(quota_users).from_select(["user_name"], names)
    return insert.on_conflict_do_update(index_elements=["user_name"], set_={"user_name": insert.excluded.user_name})


#: PostgreSQL: the lock rows of the names in the array parameter ``names`` (sorted), one statement for any count, so
#: SQLAlchemy compiles it once (a VALUES list per count of names compiled again at every pre-spawn check).
_LOCK_NAMED_USERS = _lock_rows(sa.select(sa.func.unnest(sa.bindparam("names", type_=postgresql.ARRAY(sa.String)))))

#: Columns a :class:`Run` carries under the same name.
_RUN_COLUMNS = (
    "server_name",
    "profile",
    "workspace_kind",
    "gpus",
    "started",
    "stopped",
    "state",
    "last_seen",
    "stop_reason",
    "gpu_resource",
    "gpu_product",
    "weight",
)
_IDENTITY = ("server_name", "profile", "workspace_kind", "gpus", "gpu_resource", "gpu_product", "weight")


#: What the period reads select, in this order: the run's id, its user, then :data:`_RUN_COLUMNS`.
_RUN_SELECT = (runs.c.id, runs.c.user_name, *(runs.c[name] for name in _RUN_COLUMNS))


def _run(row) -> Run:
    """The :class:`Run` of a row of :data:`_RUN_SELECT` (a SQLAlchemy Row or a plain tuple)."""
    return Run(id=row[0], user=row[1], **dict(zip(_RUN_COLUMNS, row[2:], strict=True)))


class RunsByUser(Mapping[str, tuple[Run, ...]]):
    """Many users' runs as one read returned them: a read-only ``{user: (Run, ...)}``, users sorted.

    Held as one list of plain row tuples (columns of :data:`_RUN_SELECT`)
    and each user's slice of it; a user's :class:`Run` objects are built
    each time they are asked for. Why: the enforcer's pass holds every
    user's runs for the whole pass, and thousands of objects alive that
    long are promoted to the garbage collector's oldest generation, which
    sets off a full collection of the hub's heap (a stall of 40–150 ms at
    3,000 servers) every pass or two. Tuples of strings, numbers and
    datetimes are dropped from the collector's tracking in their first
    collection, so this holds two tracked objects however many runs.
    """

    def __init__(self, rows: list[tuple]):
        rows.sort(key=itemgetter(1))
        self._rows = rows
        self._slices: dict[str, tuple[int, int]] = {}
        begin = 0
        for end in range(1, len(rows) + 1):
            if end == len(rows) or rows[end][1] != rows[begin][1]:
                self._slices[rows[begin][1]] = (begin, end)
                begin = end

    def __getitem__(self, user: str) -> tuple[Run, ...]:
        begin, end = self._slices[user]
        return tuple(_run(row) for row in self._rows[begin:end])

    def __iter__(self):
        return iter(self._slices)

    def __len__(self) -> int:
        return len(self._slices)

    def __contains__(self, user: object) -> bool:
        return user in self._slices

    def __repr__(self) -> str:
        return f"RunsByUser({len(self._rows)} runs of {len(self._slices)} users)"


def _runs_in_period(user: bool) -> sa.CompoundSelect:
    """Active runs and closed runs overlapping a period (parameters ``start``, ``end``; ``user`` if ``user``), in one UNION ALL.

    Built once: the hot queries are not rebuilt and re-keyed for SQLAlchemy's compiled cache on every call.
    """
    active = sa.select(*_RUN_SELECT).where(runs.c.state.in_(ACTIVE_STATES))
    closed = sa.select(*_RUN_SELECT).where(
        runs.c.state == CLOSED, runs.c.stopped > sa.bindparam("start"), runs.c.started < sa.bindparam("end")
    )
    if user:
        active = active.where(runs.c.user_name == sa.bindparam("user"))
        closed = closed.where(runs.c.user_name == sa.bindparam("user"))
    return sa.union_all(active, closed)


_RUNS_IN_PERIOD = _runs_in_period(user=False)
_USER_RUNS_IN_PERIOD = _runs_in_period(user=True)
_INSERT_RUN = runs.insert()

# The writes of a run's life, built once with bound parameters (a statement built per call costs more than its
# execution on SQLite; the compiled form is cached either way).
_AT = sa.bindparam("at", type_=UTCDateTime())
#: A reservation becomes an open run: ``run_id``, ``at``.
_OPEN_RESERVED = (runs.update().where(runs.c.id == sa.bindparam("run_id"), runs.c.state == RESERVED)
                  .values(state=OPEN, started=_AT, last_seen=_AT))
#: An open run closes: ``run_id``, ``at`` (its stop), ``why`` (the stop reason or None).
_CLOSE_OPEN = (runs.update().where(runs.c.id == sa.bindparam("run_id"), runs.c.state == OPEN)
               .values(state=CLOSED, stopped=_AT, stop_reason=sa.bindparam("why", type_=sa.String(255))))
#: A reservation is dropped: ``run_id``.
_DROP_RESERVED = runs.delete().where(runs.c.id == sa.bindparam("run_id"), runs.c.state == RESERVED)
#: A run's state: ``run_id``.
_STATE_OF = sa.select(runs.c.state).where(runs.c.id == sa.bindparam("run_id"))
#: One run: ``run_id``.
_RUN_BY_ID = sa.select(*_RUN_SELECT).where(runs.c.id == sa.bindparam("run_id"))
#: The reserved and open runs of one server: ``user``, ``server_name``.
_ACTIVE_OF = sa.select(*_RUN_SELECT).where(
    runs.c.user_name == sa.bindparam("user"), runs.c.state.in_(ACTIVE_STATES),
    runs.c.server_name == sa.bindparam("server_name"),
)
#: An open run not priced yet gets its GPU product and weight: ``run_id``, ``product``, ``weight``.
_PRICE_OPEN = (runs.update().where(runs.c.id == sa.bindparam("run_id"), runs.c.state == OPEN, runs.c.gpu_product == "")
               .values(gpu_product=sa.bindparam("product"), weight=sa.bindparam("weight")))


def _reserve_call() -> sa.Select:
    """PostgreSQL: the pre-spawn check's one statement, a call of :data:`~workspacespawner.db.migrations.RESERVE_FUNCTION`.

    Parameters: the columns of a reservation's row (``user_name``,
    ``server_name``, ``profile``, ``workspace_kind``, ``gpus``,
    ``gpu_resource``, ``gpu_product``, ``weight``, ``started``) and the
    period (``start``, ``end``). Rows of :data:`_RUN_SELECT`: the new
    reservation first (``WITH ORDINALITY`` keeps the function's order),
    then the user's runs as :meth:`Ledger._runs_in` reads them.
    """
    names = ("user_name", "server_name", "profile", "workspace_kind", "gpus", "gpu_resource", "gpu_product", "weight")
    arguments = [sa.bindparam(name, type_=runs.c[name].type) for name in names]
    arguments += [sa.bindparam(name, type_=UTCDateTime()) for name in ("started", "start", "end")]
    found = getattr(sa.func, RESERVE_FUNCTION)(*arguments).table_valued(
        *(sa.column(column.name, column.type) for column in _RUN_SELECT), with_ordinality="ordinality"
    )
    return sa.select(*(found.c[column.name] for column in _RUN_SELECT)).order_by(found.c.ordinality)


_RESERVE = _reserve_call()


def _identity(reservation: Reservation) -> dict:
    """The columns that say whose workspace a run is, what it runs and its provisional price."""
    return dict(user_name=reservation.user, **{name: getattr(reservation, name) for name in _IDENTITY})


class Ledger:
    """Workspace runs in the database at ``url``; schema created and upgraded on first use.

    Blocking: call from a worker thread in the hub (see the module docstring),
    ``executor``'s (the process's :class:`~workspacespawner.db.executor.DatabaseExecutor`
    unless given another). Safe to share between threads. ``timeout`` as in
    :func:`~workspacespawner.db.engine.make_engine`.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, executor: DatabaseExecutor | None = None):
        self.engine = make_engine(url, timeout=timeout)
        #: The pre-spawn reservation's engine: its commits do not wait for the disk (see :meth:`check_and_reserve`).
        #: It takes pooled connections without a test round trip; a check that lost its connection runs again.
        self.reserve_engine = (make_engine(url, timeout=timeout, wait_for_disk=False, ping=False)
                               if can_commit_without_disk_wait(url) else self.engine)
        #: Where async code runs this ledger's calls (and the audit log on its database, its writes).
        self.executor = executor or process_executor()
        self._sqlite = self.engine.dialect.name == "sqlite"
        self._postgresql = self.engine.dialect.name == "postgresql"
        self._ready = False
        self._ready_lock = threading.Lock()

    def dispose(self) -> None:
        """Close the database connections."""
        self.engine.dispose()
        self.reserve_engine.dispose()

    # -- schema ----------------------------------------------------------

    @_guarded
    def upgrade(self) -> str:
        """Create or upgrade the schema to the newest revision (idempotent); returns that revision.

        :func:`workspacespawner.db.migrate.upgrade` on this ledger's engine
        (an unversioned database of revision 0001 or 0002 is adopted first).
        """
        return migrate.upgrade(self.engine, what="the quota ledger")

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        with self._ready_lock:
            if not self._ready:
                self.upgrade()
                self._ready = True

    @contextmanager
    def _transaction(self, engine: sa.Engine | None = None):
        """A write transaction (on ``engine``, default :attr:`engine`): ``BEGIN IMMEDIATE`` on SQLite, an ordinary one elsewhere."""
        with write_transaction(engine or self.engine) as conn:
            yield conn

    @contextmanager
    def _write(self, engine: sa.Engine | None = None):
        self._ensure_schema()
        with self._transaction(engine) as conn:
            yield conn

    @contextmanager
    def _read(self):
        self._ensure_schema()
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @staticmethod
    def _lock_users(conn, users: Iterable[str] | sa.Select) -> None:
        """Hold the per-user lock of ``users`` (names, or a SELECT of distinct names in order) until the transaction ends.

        SQLite: nothing to send, ``BEGIN IMMEDIATE`` already holds the
        database's write lock. PostgreSQL: one upsert of the lock rows
        (``ON CONFLICT DO UPDATE`` row-locks an existing row as ``FOR UPDATE``
        does), in name order, so two lockers never deadlock. Others: the rows
        are made if missing, then ``SELECT ... FOR UPDATE``.
        """
        dialect = conn.dialect.name
        if dialect == "sqlite":
            return
        if dialect == "postgresql":
            if isinstance(users, sa.Select):
                conn.execute(_lock_rows(users))
                return
            names = sorted(set(users))
            if names:
                conn.execute(_LOCK_NAMED_USERS, {"names": names})
            return
        names = sorted(set(conn.scalars(users) if isinstance(users, sa.Select) else users))
        if not names:
            return
        existing = set(conn.scalars(sa.select(quota_users.c.user_name).where(quota_users.c.user_name.in_(names))))
        for name in names:
            if name not in existing:
                try:
                    with conn.begin_nested():
                        conn.execute(quota_users.insert().values(user_name=name))
                except exc.IntegrityError:
                    pass  # another transaction made it first
        conn.execute(
            sa.select(quota_users.c.user_name)
            .where(quota_users.c.user_name.in_(names))
            .order_by(quota_users.c.user_name)
            .with_for_update()
        ).all()

    # -- queries ---------------------------------------------------------

    @staticmethod
    def _runs_in(conn, period: tuple[datetime, datetime], user: str | None = None) -> list[Run]:
        """Active runs, and closed runs overlapping ``period``: one statement, two index range scans, flat as the table grows."""
        start, end = period
        if user is None:
            return [_run(row) for row in conn.execute(_RUNS_IN_PERIOD, {"start": start, "end": end})]
        return [_run(row) for row in conn.execute(_USER_RUNS_IN_PERIOD, {"start": start, "end": end, "user": user})]

    @_guarded
    def usage(self, user: str, period: tuple[datetime, datetime], now: datetime | None = None) -> Usage:
        """``user``'s :class:`Usage` in ``period`` (card-hours up to ``now``; active workspaces)."""
        now = policy.aware(now or policy.utcnow())
        with self._read() as conn:
            return policy.usage_from_runs(self._runs_in(conn, period, user), period, now)

    @_guarded
    def runs_of(self, user: str, period: tuple[datetime, datetime]) -> list[Run]:
        """``user``'s runs overlapping ``period`` and their active ones (one statement)."""
        with self._read() as conn:
            return self._runs_in(conn, period, user)

    @_guarded
    def usage_all(self, period: tuple[datetime, datetime], now: datetime | None = None) -> dict[str, Usage]:
        """Every user with card-hours in ``period`` or an active workspace: ``{user: Usage}``."""
        now = policy.aware(now or policy.utcnow())
        return {user: policy.usage_from_runs(found, period, now) for user, found in self.runs_all(period).items()}

    @_guarded
    def runs_all(self, period: tuple[datetime, datetime]) -> RunsByUser:
        """Every user's runs in ``period`` and their active ones (what :func:`policy.enforcement` reads), in one
        statement: ``{user: (Run, ...)}`` (a :class:`RunsByUser`), users sorted."""
        start, end = period
        with self._read() as conn:
            result = conn.execute(_RUNS_IN_PERIOD, {"start": start, "end": end}, execution_options=_BATCHED)
            return RunsByUser([tuple(row) for row in result])

    @_guarded
    def get(self, run_id: int) -> Run | None:
        """One run by id, or None."""
        with self._read() as conn:
            row = conn.execute(_RUN_BY_ID, {"run_id": run_id}).first()
            return None if row is None else _run(row)

    # -- the pre-spawn check -----------------------------------------------

    @_guarded
    def check_and_reserve(
        self,
        user: str,
        request: Request,
        limits: Limits,
        now: datetime | None = None,
        *,
        tz: str = "UTC",
        min_start_hours: float = 0.25,
    ) -> Decision:
        """Decide on a start and, if allowed, reserve its place, atomically for ``user``.

        Under the user's lock: an older reservation of the same server (left
        by a crash: JupyterHub starts only stopped servers) is dropped; an
        older open run of it stays open (its compute may still be going: a
        ghost being removed) and is decided on as if it ended now, until
        :meth:`open_run` closes it. The month's usage is read,
        :func:`policy.decide` decides, and an allowed start gets a
        ``reserved`` row, returned as ``decision.reservation``. Two racing
        calls for the same user see each other's reservations, never the
        same free place.

        The commit does not wait for the disk (:attr:`reserve_engine`): a
        reservation holds no GPU, and :meth:`open_run`, whose commit does
        wait, makes it durable before compute can exist. A crash of the
        machine or database server in between may lose it; the start's
        :meth:`open_run` then opens a run all the same.

        Statements: on PostgreSQL one, a call of the reserve function
        (migration 0005: the lock, the reservation, made before the decision
        and deleted if it refuses, and the read); elsewhere the lock, the
        read and the insert. The pooled connection is not tested before
        use; a check whose connection turns out lost runs once more on a
        new one (a second run drops the first one's reservation, if its
        commit got through, as that of a crash).
        """
        now = policy.aware(now or policy.utcnow())
        period = policy.month_bounds(now, tz)
        return once_more_if_disconnected(lambda: self._check_and_reserve(user, request, limits, now, period, min_start_hours))

    def _check_and_reserve(
        self, user: str, request: Request, limits: Limits, now: datetime, period: tuple[datetime, datetime],
        min_start_hours: float,
    ) -> Decision:
        """:meth:`check_and_reserve`'s one transaction, at ``now`` (aware) in ``period``."""
        reservation = Reservation.of(user, request, now)
        values = {**_identity(reservation), "started": now, "state": RESERVED}
        with self._write(self.reserve_engine) as conn:
            if self._postgresql:
                # One call: the lock, a provisional reservation (first row), the runs (migration 0005).
                rows = conn.execute(_RESERVE, {**values, "start": period[0], "end": period[1]}).all()
                run_id, found = rows[0][0], map(_run, rows[1:])
            else:
                self._lock_users(conn, [user])
                run_id, found = None, self._runs_in(conn, period, user)
            seen = []
            for run in found:
                if run.state in ACTIVE_STATES and run.server_name == request.server_name:
                    if run.state == RESERVED:
                        self._end(conn, run, None, "restarted")
                        continue
                    run = replace(run, state=CLOSED, stopped=now)
                seen.append(run)
            usage = policy.usage_from_runs(seen, period, now)
            decision = policy.decide(request, usage, limits, now, min_start_hours=min_start_hours)
            if not decision.allowed:
                if run_id is not None:
                    conn.execute(_DROP_RESERVED, {"run_id": run_id})
                return decision
            if run_id is None:
                run_id = conn.execute(_INSERT_RUN, values).inserted_primary_key[0]
        return Decision(allowed=True, reservation=replace(reservation, id=run_id))

    # -- the run's life --------------------------------------------------

    @staticmethod
    def _active_of(conn, user: str, server_name: str) -> list:
        """Rows of ``(user, server_name)`` that are reserved or open."""
        return conn.execute(_ACTIVE_OF, {"user": user, "server_name": server_name}).all()

    @_guarded
    def open_run(
        self, reservation: Reservation, started_at: datetime | None = None, *, watched: timedelta | None = None
    ) -> int:
        """Compute is about to be created: the reservation becomes an open run from ``started_at``.

        An older open run of the same server (its start waited for the old
        compute to go) is closed first: at ``started_at`` if it was seen
        alive within ``watched`` of it, else at its last sighting (never
        charging for time the hub did not see it). A reservation made while
        the ledger was down (``id`` None) gets a new open row, and so does
        one whose row is gone or closed (its commit lost in a crash, or
        dropped meanwhile as stale or by a newer start of the server):
        compute is about to exist, and every second of it is metered; a run
        whose compute never appears is closed by the reconciliation at its
        start, costing nothing. One the reconciliation already opened (its
        compute was seen alive) keeps its run. Returns the run id.
        """
        started_at = policy.aware(started_at or policy.utcnow())
        with self._write() as conn:
            self._lock_users(conn, [reservation.user])
            for row in self._active_of(conn, reservation.user, reservation.server_name):
                old = _run(row)
                if old.state != OPEN or old.id == reservation.id:
                    continue
                last = old.last_seen and policy.aware(old.last_seen)
                recent = watched is not None and last is not None and started_at - last <= watched
                self._end(conn, old, started_at if recent else None, "restarted")
            if reservation.id is not None:
                if conn.execute(_OPEN_RESERVED, {"run_id": reservation.id, "at": started_at}).rowcount:
                    return reservation.id
                if conn.execute(_STATE_OF, {"run_id": reservation.id}).scalar() == OPEN:
                    return reservation.id
            values = {**_identity(reservation), "started": started_at, "last_seen": started_at, "state": OPEN}
            return conn.execute(_INSERT_RUN, values).inserted_primary_key[0]

    @_guarded
    def price_run(self, run_id: int, product: str, weight: float) -> bool:
        """The run was placed on a node of GPU type ``product``: charge it ``weight`` card-hours per unit-hour.

        One UPDATE, only of a run that is still open and not priced yet
        (its ``gpu_product`` empty: a profile that names its product was
        priced when it was reserved), so a run's price is set once and
        never changes afterwards (a hub restart, a later weight change: the
        run keeps it). The weight applies to the run's whole time, from
        ``started``. ``product``: the node's ``nvidia.com/gpu.product``
        label; ``""`` for a node without it (the run stays unpriced and
        keeps ``weight`` as given). Returns whether the run was priced.
        """
        if weight < 0:
            raise ValueError(f"a weight is card-hours per unit-hour >= 0, not {weight!r}")
        with self._write() as conn:
            done = conn.execute(_PRICE_OPEN, {"run_id": run_id, "product": product or "", "weight": float(weight)})
            return bool(done.rowcount)

    @_guarded
    def release(self, reservation: Reservation) -> None:
        """A start failed before Running: drop its reservation (an opened run is left alone)."""
        if reservation.id is None:
            return
        with self._write() as conn:
            conn.execute(_DROP_RESERVED, {"run_id": reservation.id})

    @staticmethod
    def _end(conn, run: Run, stopped_at: datetime | None, reason: str | None) -> Run | None:
        """Close an open run at ``stopped_at`` (None: its last sighting), or drop a reservation."""
        if run.state == RESERVED:
            conn.execute(_DROP_RESERVED, {"run_id": run.id})
            return None
        if run.state != OPEN:
            return None
        stopped = stopped_at if stopped_at is not None else (run.last_seen or run.started)
        stopped = max(policy.aware(stopped), run.started)
        reason = run.stop_reason or reason
        done = conn.execute(_CLOSE_OPEN, {"run_id": run.id, "at": stopped, "why": reason})
        if not done.rowcount:
            return None
        return Run(**{**run.__dict__, "state": CLOSED, "stopped": stopped, "stop_reason": reason})

    @_guarded
    def close_run(self, run_id: int, stopped_at: datetime | None, *, reason: str | None = None) -> Run | None:
        """The workspace stopped at ``stopped_at``; None means "already gone": close at its last sighting.

        Idempotent: a closed run is never closed again (no double count); a
        reservation is dropped. ``reason`` is kept unless one was recorded
        before (the enforcer's). Returns the closed run, or None.
        """
        with self._write() as conn:
            row = conn.execute(_RUN_BY_ID, {"run_id": run_id}).first()
            return None if row is None else self._end(conn, _run(row), stopped_at, reason)

    @_guarded
    def close_server(
        self, user: str, server_name: str, stopped_at: datetime | None, *, reason: str | None = None
    ) -> list[Run]:
        """:meth:`close_run` for whatever is active for ``(user, server_name)``: what a spawner's stop calls."""
        with self._write() as conn:
            rows = conn.execute(
                sa.select(*_RUN_SELECT).where(
                    runs.c.user_name == user, runs.c.server_name == server_name, runs.c.state.in_(ACTIVE_STATES)
                )
            ).all()
            closed = [self._end(conn, _run(row), stopped_at, reason) for row in rows]
        return [run for run in closed if run is not None]

    @_guarded
    def set_stop_reason(self, run_id: int, reason: str) -> None:
        """Record why an open run is being stopped (kept when it closes)."""
        with self._write() as conn:
            conn.execute(runs.update().where(runs.c.id == run_id, runs.c.state == OPEN).values(stop_reason=reason))

    @_guarded
    def close_orphans(
        self,
        alive: set[tuple[str, str]],
        seen_at: datetime,
        *,
        min_age: timedelta = timedelta(minutes=2),
        reservation_timeout: timedelta = timedelta(minutes=30),
        kinds: Iterable[str] | None = None,
        watched: timedelta | None = None,
    ) -> list[Run]:
        """Reconcile with the cluster: ``alive`` is every ``(user, server_name)`` running at ``seen_at``.

        - An open run that is alive gets ``last_seen = seen_at``.
        - An open run that is not alive, and older than ``min_age`` (so a
          run opened after the cluster was looked at is spared), is closed
          at its last sighting: never left open forever, never counted
          twice, and never charged for the time the hub could not see it.
          With ``watched``: one last seen within ``watched`` of ``seen_at``
          was watched without a gap and is closed at ``seen_at``, when it
          was seen gone (its GPU was held until the previous pass and maybe
          up to this one: every held second is charged).
        - A reservation older than ``reservation_timeout`` (its start
          never finished, e.g. the hub died mid-start) is opened from when it
          was made if the workspace is alive, dropped otherwise.

        ``alive`` must be complete for the workspace ``kinds`` it covers
        (``container``, ``vm``; None: all), from synced watch caches: runs of
        other kinds are left alone. Returns the runs closed.
        """
        seen_at = policy.aware(seen_at)
        closed: list[Run] = []
        with self._write() as conn:
            active_users = sa.select(runs.c.user_name).where(runs.c.state.in_(ACTIVE_STATES)).distinct()
            self._lock_users(conn, active_users.order_by(runs.c.user_name))
            active_runs = sa.select(*_RUN_SELECT).where(runs.c.state.in_(ACTIVE_STATES))
            active = [_run(row) for row in conn.execute(active_runs, execution_options=_BATCHED)]
            if kinds is not None:
                covered = set(kinds)
                active = [run for run in active if run.workspace_kind in covered]
            seen = [run.id for run in active if run.state == OPEN and (run.user, run.server_name) in alive]
            if seen and conn.dialect.name == "postgresql":  # one array parameter: no query text of thousands of them
                conn.execute(runs.update().where(runs.c.id == sa.any_(_IDS)).values(last_seen=seen_at), {"ids": seen})
            else:
                for chunk in range(0, len(seen), SEEN_CHUNK):
                    conn.execute(
                        runs.update().where(runs.c.id.in_(seen[chunk : chunk + SEEN_CHUNK])).values(last_seen=seen_at)
                    )
            for run in active:
                is_alive = (run.user, run.server_name) in alive
                if run.state == OPEN and not is_alive and run.started <= seen_at - min_age:
                    last = run.last_seen and policy.aware(run.last_seen)
                    watched_until_now = watched is not None and last is not None and seen_at - last <= watched
                    done = self._end(conn, run, seen_at if watched_until_now else None, "gone")
                    if done is not None:
                        closed.append(done)
                elif run.state == RESERVED and run.started <= seen_at - reservation_timeout:
                    if is_alive:
                        conn.execute(runs.update().where(runs.c.id == run.id).values(state=OPEN, last_seen=seen_at))
                    else:
                        self._end(conn, run, None, None)
        return closed
