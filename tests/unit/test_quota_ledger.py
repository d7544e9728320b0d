"""The usage ledger on real databases: a SQLite file (always) and a throw-away PostgreSQL server (when installed).

Covers: the schema created on first use; the race of N parallel
check-and-reserve calls from threads with their own connections, never
passing more starts than the concurrency limit or the last card-hours
allow; a run's life (reserve, open, close, release) without double counts;
crash recovery of open runs and stale reservations from what the cluster
holds (close_orphans), limited to the workspace kinds that view covers; a restarted server closing its stale run; the
migration of a revision-1 schema made by hand (with and without a version
table) keeping its rows; the per-user check using the index, not a table
scan; the ledger unreachable (GPU starts fail closed, CPU ones proceed as
configured).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from traitlets.config import Config

from tests.support.sqlcount import SQLCount
from workspacespawner.db.migrate import head_revision
from workspacespawner.db.migrations import RUNS_TABLE, VERSION_TABLE
from workspacespawner.quota import policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import _RESERVE, Ledger, LedgerUnavailable, _identity, _run, runs
from workspacespawner.quota.policy import CLOSED, OPEN, RESERVED, Limits, Request, Reservation
from workspacespawner.quota.refusal import QuotaRefused
from workspacespawner.quota.service import QuotaService

NOW = datetime(2025, 6, 10, 12, tzinfo=UTC)
JUNE = policy.month_bounds(NOW, "UTC")


@pytest.fixture
def url(database_url):
    """A fresh ledger database: a SQLite file, or a new database on the PostgreSQL server (tests/conftest.py)."""
    return database_url


@pytest.fixture
def ledger(url):
    ledger = Ledger(url)
    yield ledger
    ledger.dispose()


def race(url: str, requests: list[Request], limits: Limits, *, min_start_hours=0.25):
    """Run one check_and_reserve per request at once, each thread with its own Ledger (own connection)."""
    ledgers = [Ledger(url) for _ in requests]
    ledgers[0].upgrade()
    barrier = threading.Barrier(len(requests))
    results: list = [None] * len(requests)

    def one(i):
        barrier.wait()
        results[i] = ledgers[i].check_and_reserve("ann", requests[i], limits, NOW, min_start_hours=min_start_hours)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for each in ledgers:
        each.dispose()
    return results


def test_schema_is_created_on_first_use(ledger):
    assert ledger.upgrade() == head_revision() >= "0002"
    inspector = sa.inspect(ledger.engine)
    assert {"ix_wsruns_user_state_stopped", "ix_wsruns_state_stopped"} <= {
        i["name"] for i in inspector.get_indexes(RUNS_TABLE)
    }
    assert ledger.upgrade() == head_revision()  # idempotent


def test_parallel_starts_never_exceed_the_concurrency_limit(url):
    for round_ in range(3):
        requests = [Request(gpus=0, server_name=f"r{round_}s{i}") for i in range(12)]
        results = race(url, requests, Limits(max_concurrent=3 * (round_ + 1)))
        assert sum(d.allowed for d in results) == 3, [d.reason for d in results]
        assert {d.reason for d in results if not d.allowed} == {"concurrency"}
    check = Ledger(url)
    try:
        assert check.usage("ann", JUNE, NOW).running == 9
    finally:
        check.dispose()


def test_parallel_gpu_starts_never_share_the_last_card_hours(url):
    ledger = Ledger(url)
    # 9.5 of 10 card-hours used: 0.5 left covers two 1-GPU workspaces for 15 minutes, not three
    spent = ledger.check_and_reserve(
        "ann", Request(gpus=1, server_name="old"), Limits(card_hours_per_month=100), NOW - timedelta(days=2)
    )
    ledger.open_run(spent.reservation, NOW - timedelta(days=2))
    ledger.close_run(spent.reservation.id, NOW - timedelta(days=2) + timedelta(hours=9.5))
    ledger.dispose()
    results = race(
        url,
        [Request(gpus=1, server_name=f"s{i}") for i in range(10)],
        Limits(card_hours_per_month=10, max_concurrent=50),
    )
    assert sum(d.allowed for d in results) == 2
    refused = [d for d in results if not d.allowed]
    assert {d.reason for d in refused} == {"card-hours"} and all(d.left == pytest.approx(0.5) for d in refused)


def test_a_runs_life_is_counted_once(ledger):
    limits = Limits(card_hours_per_month=50, max_concurrent=2)
    decision = ledger.check_and_reserve(
        "ann", Request(gpus=2, server_name="", profile="two", workspace_kind="vm"), limits, NOW
    )
    reservation = decision.reservation
    assert ledger.get(reservation.id).state == RESERVED
    assert ledger.usage("ann", JUNE, NOW + timedelta(hours=1)).card_hours == 0  # a reservation holds no GPU yet
    assert ledger.open_run(reservation, NOW + timedelta(minutes=2)) == reservation.id
    assert ledger.usage("ann", JUNE, NOW + timedelta(minutes=32)).card_hours == pytest.approx(1.0)
    closed = ledger.close_run(reservation.id, NOW + timedelta(minutes=62))
    assert (closed.state, closed.stopped) == (CLOSED, NOW + timedelta(minutes=62))
    assert ledger.close_run(reservation.id, NOW + timedelta(hours=5)) is None  # closed once, never again
    ledger.release(reservation)  # an opened run is not released
    run = ledger.get(reservation.id)
    assert (run.state, run.profile, run.workspace_kind, run.gpus) == (CLOSED, "two", "vm", 2)
    assert ledger.usage("ann", JUNE, NOW + timedelta(days=1)).card_hours == pytest.approx(2.0)


def test_compute_is_metered_even_when_its_reservation_is_gone(ledger):
    """A reservation's commit may be lost in a crash (it does not wait for the disk), or it was dropped meanwhile
    (stale, or a newer start of the server): the start that goes on to create compute opens a run all the same."""
    reservation = ledger.check_and_reserve("ann", Request(gpus=2, profile="two"), Limits(), NOW).reservation
    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(sa.table(RUNS_TABLE, sa.column("id"))).where(sa.column("id") == reservation.id))
    run_id = ledger.open_run(reservation, NOW + timedelta(minutes=1))
    run = ledger.get(run_id)
    assert (run.state, run.started, run.gpus, run.profile, run.user) == (OPEN, NOW + timedelta(minutes=1), 2, "two", "ann")
    assert ledger.usage("ann", JUNE, NOW + timedelta(minutes=31)).card_hours == pytest.approx(1.0)


def test_a_reservation_the_reconciliation_opened_keeps_its_run(ledger):
    reservation = ledger.check_and_reserve("ann", Request(gpus=1), Limits(), NOW).reservation
    ledger.close_orphans({("ann", "")}, NOW + timedelta(hours=1), reservation_timeout=timedelta(minutes=30))
    assert ledger.get(reservation.id).state == OPEN  # its compute was seen alive: opened from when it was made
    assert ledger.open_run(reservation, NOW + timedelta(hours=1)) == reservation.id
    assert ledger.usage("ann", JUNE, NOW + timedelta(hours=2)).running == 1


def test_the_reservation_commit_does_not_wait_for_the_disk_and_the_run_does(ledger, url):
    """SQLite file: the reservation's connection has synchronous=NORMAL (1), the others FULL (2) in WAL mode."""
    if not url.startswith("sqlite"):
        with ledger.reserve_engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
        return
    with ledger.reserve_engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    with ledger.engine.connect() as conn:
        assert (conn.exec_driver_sql("PRAGMA synchronous").scalar(), conn.exec_driver_sql("PRAGMA journal_mode").scalar()) == (2, "wal")


def test_close_server_closes_what_is_active_for_that_server(ledger):
    limits = Limits(max_concurrent=5)
    default = ledger.check_and_reserve("ann", Request(gpus=1), limits, NOW).reservation
    named = ledger.check_and_reserve("ann", Request(gpus=1, server_name="thesis"), limits, NOW).reservation
    ledger.open_run(default, NOW)
    ledger.open_run(named, NOW)
    closed = ledger.close_server("ann", "thesis", NOW + timedelta(hours=1))
    assert [run.server_name for run in closed] == ["thesis"]
    assert [run.server_name for run in ledger.usage("ann", JUNE, NOW).active] == [""]


def test_crash_recovery_closes_runs_the_cluster_no_longer_holds(ledger):
    limits = Limits(max_concurrent=10)

    def opened(server, at):
        reservation = ledger.check_and_reserve("ann", Request(gpus=1, server_name=server), limits, at).reservation
        ledger.open_run(reservation, at)
        return reservation.id

    alive_id = opened("alive", NOW)
    gone_id = opened("gone", NOW)
    unseen_id = opened("unseen", NOW + timedelta(hours=1, minutes=30))
    # the enforcer's pass at 13:00 saw everything alive
    ledger.close_orphans({("ann", "alive"), ("ann", "gone")}, NOW + timedelta(hours=1))
    # a start the hub died in the middle of, and another whose workspace did come up
    stale_gone = ledger.check_and_reserve("ann", Request(gpus=1, server_name="stale-gone"), limits, NOW).reservation
    stale_up = ledger.check_and_reserve("ann", Request(gpus=1, server_name="stale-up"), limits, NOW).reservation
    # hub down from 13:00; back at 15:00, the cluster holds "alive" and "stale-up" only
    back = NOW + timedelta(hours=3)
    just_opened = opened("just-opened", back - timedelta(seconds=30))  # opened after the cluster was looked at
    closed = ledger.close_orphans({("ann", "alive"), ("ann", "stale-up")}, back)
    assert {run.id: run.stopped for run in closed} == {
        gone_id: NOW + timedelta(hours=1),  # its last sighting, not the hub's return
        unseen_id: NOW + timedelta(hours=1, minutes=30),  # never seen: closed where it started, nothing charged
    }
    assert ledger.get(alive_id).state == OPEN and ledger.get(alive_id).last_seen == back
    assert ledger.get(just_opened).state == OPEN
    assert ledger.get(stale_gone.id) is None
    assert ledger.get(stale_up.id).state == OPEN
    assert ledger.close_orphans({("ann", "alive"), ("ann", "stale-up")}, back) == []  # never closed twice
    # alive: 3 h, gone: 1 h, unseen: 0, stale-up: from its reservation (12:00) to 15:00, just-opened: 30 s
    assert ledger.usage("ann", JUNE, back).card_hours == pytest.approx(3 + 1 + 0 + 3 + 30 / 3600)


def test_a_run_watched_until_it_went_is_closed_when_seen_gone(ledger):
    """Issue #13: a ghost removed while the hub watched is charged to the pass that saw it gone, not the one before."""
    reservation = ledger.check_and_reserve("ann", Request(gpus=1), Limits(max_concurrent=1), NOW).reservation
    ledger.open_run(reservation, NOW)
    ledger.close_orphans({("ann", "")}, NOW + timedelta(minutes=10), watched=timedelta(minutes=2))
    [run] = ledger.close_orphans(set(), NOW + timedelta(minutes=11), watched=timedelta(minutes=2), min_age=timedelta(0))
    assert run.stopped == NOW + timedelta(minutes=11)


def test_a_view_of_pods_only_leaves_vm_runs_alone(ledger):
    limits = Limits(max_concurrent=5)
    for server, kind in (("box", "vm"), ("lab", "container")):
        reservation = ledger.check_and_reserve(
            "ann", Request(gpus=1, server_name=server, workspace_kind=kind), limits, NOW
        )
        ledger.open_run(reservation.reservation, NOW)
    closed = ledger.close_orphans(set(), NOW + timedelta(hours=1), kinds=("container",))
    assert [(run.server_name, run.workspace_kind) for run in closed] == [("lab", "container")]
    assert [run.server_name for run in ledger.usage("ann", JUNE, NOW).active] == ["box"]


def test_a_restarted_server_closes_its_stale_run(ledger):
    limits = Limits(max_concurrent=1)
    first = ledger.check_and_reserve("ann", Request(gpus=1), limits, NOW).reservation
    ledger.open_run(first, NOW)
    ledger.close_orphans({("ann", "")}, NOW + timedelta(hours=2))
    # the hub lost track of it; JupyterHub starts the (stopped) server again
    again = ledger.check_and_reserve("ann", Request(gpus=1), limits, NOW + timedelta(hours=5))
    assert again.allowed  # decided as if the old run ended now (not a second concurrent server)
    assert ledger.get(first.id).state == OPEN  # its compute may still be going until the start's fence saw it gone
    ledger.open_run(again.reservation, NOW + timedelta(hours=5), watched=timedelta(minutes=2))
    assert ledger.get(first.id).stopped == NOW + timedelta(hours=2)  # unseen for hours: closed at its last sighting


def test_a_ghost_watched_until_the_next_start_is_charged_until_that_start(ledger):
    """Issue #13: the next start closes the old run only when its compute is gone (the run opens), not at the reservation."""
    limits = Limits(max_concurrent=1)
    first = ledger.check_and_reserve("ann", Request(gpus=1), limits, NOW).reservation
    ledger.open_run(first, NOW)
    ledger.close_orphans({("ann", "")}, NOW + timedelta(minutes=10))  # its stop failed: still there, still seen
    again = ledger.check_and_reserve("ann", Request(gpus=1), limits, NOW + timedelta(minutes=10, seconds=30)).reservation
    ledger.open_run(again, NOW + timedelta(minutes=11), watched=timedelta(minutes=2))  # the fence saw the ghost go
    assert ledger.get(first.id).stopped == NOW + timedelta(minutes=11)
    assert ledger.get(again.id).state == OPEN


def make_v1_schema(url: str, *, with_version_table: bool) -> None:
    """Revision 0001's table, written out by hand as a database of the first release would hold it."""
    engine = sa.create_engine(url)
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"""CREATE TABLE {RUNS_TABLE} (
                id {"SERIAL" if postgres else "INTEGER NOT NULL"} PRIMARY KEY,
                user_name VARCHAR(255) NOT NULL,
                server_name VARCHAR(255) DEFAULT '' NOT NULL,
                profile VARCHAR(255) DEFAULT '' NOT NULL,
                workspace_kind VARCHAR(32) DEFAULT 'container' NOT NULL,
                gpus INTEGER DEFAULT '0' NOT NULL,
                started TIMESTAMP NOT NULL,
                stopped TIMESTAMP
            )"""
        )
        conn.exec_driver_sql(f"CREATE INDEX ix_wsruns_user_started ON {RUNS_TABLE} (user_name, started)")
        conn.exec_driver_sql(
            f"INSERT INTO {RUNS_TABLE} (id, user_name, server_name, profile, workspace_kind, gpus, started, stopped) VALUES "
            "(1, 'ann', '', 'gpu1', 'container', 1, '2025-06-01 10:00:00.000000', '2025-06-01 12:00:00.000000'),"
            "(2, 'ann', 'thesis', 'gpu2', 'vm', 2, '2025-06-10 11:00:00.000000', NULL),"
            "(3, 'bob', '', 'cpu', 'container', 0, '2025-05-20 09:00:00.000000', '2025-05-21 09:00:00.000000')"
        )
        if postgres:
            conn.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('{RUNS_TABLE}', 'id'), 3)")
        if with_version_table:
            conn.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
            conn.exec_driver_sql(f"INSERT INTO {VERSION_TABLE} VALUES ('0001')")
    engine.dispose()


@pytest.mark.parametrize("with_version_table", [True, False])
def test_a_revision_1_schema_is_upgraded_and_keeps_its_rows(url, with_version_table):
    make_v1_schema(url, with_version_table=with_version_table)
    ledger = Ledger(url)
    try:
        use = ledger.usage("ann", JUNE, NOW)  # the first use upgrades
        assert ledger.upgrade() == head_revision()
        assert [(run.id, run.state) for run in (ledger.get(1), ledger.get(2), ledger.get(3))] == [
            (1, CLOSED),
            (2, OPEN),
            (3, CLOSED),
        ]
        assert ledger.get(2).workspace_kind == "vm" and ledger.get(2).started == datetime(2025, 6, 10, 11, tzinfo=UTC)
        assert use.card_hours == pytest.approx(2 + 2) and [run.server_name for run in use.active] == ["thesis"]
        # the upgraded ledger works as a new one: the open run counts toward concurrency
        refused = ledger.check_and_reserve("ann", Request(gpus=0), Limits(max_concurrent=1), NOW)
        assert refused.reason == "concurrency"
        new = ledger.check_and_reserve("ann", Request(gpus=0), Limits(max_concurrent=2), NOW)
        assert new.reservation.id > 3 and ledger.get(new.reservation.id).state == RESERVED  # PostgreSQL's refusal used an id
    finally:
        ledger.dispose()


def test_a_check_and_reserve_is_one_transaction_of_few_statements(ledger, url):
    """The pre-spawn check: SQLite: BEGIN IMMEDIATE (the lock), one read, one insert. PostgreSQL: one call of the
    reserve function (migration 0005: the lock, the reservation, the read)."""
    ledger.upgrade()
    ledger.check_and_reserve("ann", Request(gpus=1, server_name="old"), Limits(max_concurrent=5), NOW - timedelta(days=40))
    ledger.check_and_reserve("ann", Request(gpus=1, server_name="other"), Limits(max_concurrent=5), NOW)
    for returning in (False, True):  # the user's first start, and a later one (their lock row exists)
        user = "bob" if not returning else "ann"
        with SQLCount(ledger.reserve_engine) as sql:
            decision = ledger.check_and_reserve(user, Request(gpus=1, server_name="x"), Limits(max_concurrent=5), NOW)
        assert decision.allowed
        expected = 1 if url.startswith("postgresql") else 3
        assert (sql.statements, sql.transactions) == (expected, 1), str(sql)


def test_a_refused_check_keeps_no_reservation_and_still_drops_a_stale_one(ledger):
    """A crash left a reservation of the server; the next check of it is refused: neither that reservation nor the
    refused check's own (PostgreSQL reserves before it decides) is left, and runs of other servers stay."""
    kept = ledger.check_and_reserve("ann", Request(gpus=0, server_name="other"), Limits(), NOW).reservation
    ledger.check_and_reserve("ann", Request(gpus=1, server_name="lab"), Limits(), NOW)  # never opened: stale
    refused = ledger.check_and_reserve("ann", Request(gpus=1, server_name="lab"), Limits(card_hours_per_month=0), NOW)
    assert (refused.allowed, refused.reason) == (False, "card-hours")
    active = ledger.usage("ann", JUNE, NOW).active
    assert [(run.id, run.server_name, run.state) for run in active] == [(kept.id, "other", RESERVED)]


def test_a_check_whose_pooled_connection_was_lost_runs_again_on_a_new_one(ledger, url):
    """The check's engine does not test a pooled connection before use (a round trip per check): one the database
    closed while idle (a restart, a failover) fails its first statement, and the check runs once more."""
    if not url.startswith("postgresql"):
        pytest.skip("a SQLite file has no connection to lose")
    first = ledger.check_and_reserve("ann", Request(gpus=0, server_name="a"), Limits(), NOW)
    with ledger.engine.connect() as conn:  # the database ends every other session of this database (the pooled one)
        ended = conn.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )).scalar()
    assert ended >= 1
    with SQLCount(ledger.reserve_engine) as sql:
        again = ledger.check_and_reserve("ann", Request(gpus=0, server_name="b"), Limits(), NOW)
    assert again.allowed and sql.transactions == 2, str(sql)
    active = ledger.usage("ann", JUNE, NOW).active
    assert sorted((run.server_name, run.id) for run in active) == [("a", first.reservation.id), ("b", again.reservation.id)]


def test_the_reserve_function_reads_what_the_ledger_reads(ledger, url):
    """PostgreSQL's one-call check (migration 0005) must decide on the same runs as the statements other databases
    send: a revision that changes the read or the runs table without replacing the function fails here."""
    if not url.startswith("postgresql"):
        pytest.skip("the reserve function is PostgreSQL's")
    existing = [
        ("ann", "open", NOW - timedelta(days=3), None),
        ("ann", "reserved", NOW - timedelta(hours=1), None),
        ("ann", "closed", JUNE[0] - timedelta(hours=2), JUNE[0] + timedelta(hours=1)),  # overlaps the month's start
        ("ann", "closed", JUNE[0] - timedelta(days=3), JUNE[0] - timedelta(days=2)),  # before it
        ("ann", "closed", NOW - timedelta(days=2), NOW - timedelta(days=1)),
        ("bob", "open", NOW - timedelta(days=1), None),
        ("bob", "closed", NOW - timedelta(days=2), NOW - timedelta(days=1)),
    ]
    ledger.upgrade()
    with ledger.engine.begin() as conn:
        for user, state, started, stopped in existing:
            conn.execute(
                runs.insert().values(user_name=user, server_name=state, profile="p", workspace_kind="container",
                                     gpus=1, started=started, stopped=stopped, state=state)
            )
    request = Request(gpus=2, server_name="new", profile="two", workspace_kind="vm", gpu_product="A100", gpu_weight=2.5)
    values = {**_identity(Reservation.of("ann", request, NOW)), "started": NOW, "start": JUNE[0], "end": JUNE[1]}
    with ledger.engine.connect() as conn, conn.begin() as transaction:
        rows = conn.execute(_RESERVE, values).all()
        read = {run.id: run for run in Ledger._runs_in(conn, JUNE, "ann")}
        transaction.rollback()
    new = _run(rows[0])
    assert (new.user, new.server_name, new.profile, new.workspace_kind, new.gpus, new.started, new.state) == (
        "ann", "new", "two", "vm", 2, NOW, RESERVED
    )
    assert (new.gpu_product, new.weight, new.stopped, new.last_seen) == ("A100", 2.5, None, None)
    assert {run.id: run for run in map(_run, rows[1:])} == {key: run for key, run in read.items() if key != new.id}
    assert sorted(run.server_name for run in map(_run, rows[1:])) == ["closed", "closed", "open", "reserved"]


def test_the_per_user_check_uses_the_index(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.upgrade()
    with ledger.engine.connect() as conn:
        for where in (
            "user_name = 'ann' AND state IN ('reserved', 'open')",
            "user_name = 'ann' AND state = 'closed' AND stopped > '2025-06-01' AND started < '2025-07-01'",
        ):
            plan = " ".join(
                row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN SELECT * FROM {RUNS_TABLE} WHERE {where}")
            )
            assert "USING INDEX ix_wsruns_user_state_stopped" in plan, plan
    ledger.dispose()


# -- the ledger unreachable -----------------------------------------------------------


def unreachable_service(tmp_path, allow_cpu: bool) -> QuotaService:
    config = Config()
    config.WorkspaceQuota.ledger_url = f"sqlite:///{tmp_path / 'no-such-dir' / 'ledger.sqlite'}"
    config.WorkspaceQuota.allow_cpu_when_ledger_down = allow_cpu
    config.WorkspaceQuota.ledger_timeout = 0.5
    return QuotaService(WorkspaceQuota(config=config))


def test_an_unreachable_ledger_raises_ledger_unavailable(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'no-such-dir' / 'ledger.sqlite'}")
    with pytest.raises(LedgerUnavailable, match="cannot be used"):
        ledger.check_and_reserve("ann", Request(gpus=1), Limits(), NOW)


async def test_ledger_down_gpu_fails_closed_cpu_proceeds(tmp_path):
    service = unreachable_service(tmp_path, allow_cpu=True)
    try:
        with pytest.raises(QuotaRefused) as info:
            await service.reserve(user="ann", groups=[], request=Request(gpus=1))
        assert info.value.reason == "ledger-down" and info.value.status_code == 503
        assert "cannot be reached" in info.value.jupyterhub_message
        reservation = await service.reserve(user="ann", groups=[], request=Request(gpus=0, server_name="cpu"))
        assert reservation is not None and reservation.id is None  # proceeds, unmetered
        assert await service.running(reservation) is None  # still down: logged, not raised
        await service.stopped("ann", "cpu")
    finally:
        await service.close()


async def test_ledger_down_cpu_refused_when_configured(tmp_path):
    service = unreachable_service(tmp_path, allow_cpu=False)
    try:
        with pytest.raises(QuotaRefused) as info:
            await service.reserve(user="ann", groups=[], request=Request(gpus=0))
        assert info.value.reason == "ledger-down"
    finally:
        await service.close()


async def test_a_run_opened_while_the_ledger_was_down_is_recorded_when_it_is_back(tmp_path):
    service = QuotaService(WorkspaceQuota(), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    try:
        unmetered = policy.Reservation(None, "ann", "", "gpu", "container", 1, NOW)
        run_id = await service.running(unmetered)
        assert service.ledger.get(run_id).state == OPEN
    finally:
        await service.close()
