"""Pre-spawn quota check time as the ledger grows: 1,000 to 1,000,000 rows in SQLite and PostgreSQL, against plain KubeSpawner.

For each ledger size the script times the check a start makes before any
Kubernetes object exists (``Ledger.check_and_reserve`` for a 1-GPU start:
one write transaction under the user's lock, one read of two index range
scans, the decision, the reservation's insert; the reservation is released
afterwards, outside the timing) and prints the median and 95th percentile
in milliseconds, and the statements and transactions of one check
(tests/support/sqlcount.py). The check's commit does not wait for the
disk (``Ledger.reserve_engine``: SQLite ``synchronous=NORMAL`` in WAL mode,
PostgreSQL ``synchronous_commit=off``; the start's ``open_run``, whose
commit waits, makes it durable before compute exists). Next to it,
``commit ms`` is the median of a bare durable write transaction on the
same database (one insert of a run): what a commit that waits for the disk
costs (a SQLite file waits for its fsync, PostgreSQL for its WAL flush),
and ``waiting ms`` the check's median when its own commit waits too (as
it did before). This month's rows stay the same (1,000 runs, about 10 of
them the checked user's); the history before this month grows, and 1% of
it is the checked user's, so a flat line means flat as a user's own
history grows too, not only as other users' does.

The house rule is to compare against plain KubeSpawner in the same run.
KubeSpawner has no quota check: its nearest step that runs in-process, for
every start, before anything is sent to Kubernetes, is building the Pod
manifest (``kubespawner.objects.make_pod``). The script times that with the
settings of a GPU profile in the same run and prints the ratio check /
make_pod: what the quota adds to a start, in units of work KubeSpawner
already does. (The whole start, API calls included, is what
``benchmarks/spawn_cost.py`` compares.)

    python benchmarks/quota_check.py                      # 1k, 10k, 100k, 1M rows, SQLite
    python benchmarks/quota_check.py --postgres auto      # and on a throw-away PostgreSQL (tests/support/pgserver.py)
    python benchmarks/quota_check.py --sizes 1000,10000 --repeat 100

Rows are bulk-inserted (SQLite: the driver's ``executemany``; PostgreSQL:
``COPY``) in one transaction per step; building the 1M-row ledger takes a
few seconds on SQLite and about a minute on PostgreSQL.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support


from tests.support.sqlcount import SQLCount  # noqa: E402
from workspacespawner.db.engine import write_transaction  # noqa: E402
from workspacespawner.db.migrations import RUNS_TABLE  # noqa: E402
from workspacespawner.quota.ledger import Ledger, runs  # noqa: E402
from workspacespawner.quota.policy import Limits, Request  # noqa: E402

COLUMNS = "user_name, server_name, profile, workspace_kind, gpus, started, stopped, state"

NOW = datetime(2025, 6, 10, 12, tzinfo=UTC)
USER = "ann"
OTHER_USERS = [f"user{i:04d}" for i in range(1000)]
STAMP = "%Y-%m-%d %H:%M:%S.%f"


def add_rows(ledger: Ledger, count: int, rng: random.Random, *, this_month: bool = False) -> None:
    """Insert ``count`` closed runs, 1% of them USER's: this month's, or history before this month."""
    start = NOW.replace(day=1, hour=0)
    rows = []
    for _ in range(count):
        if this_month:
            started = start + (NOW - start - timedelta(hours=8)) * rng.random()
        else:
            started = start - timedelta(hours=8) - timedelta(days=rng.uniform(0, 3 * 365))
        stopped = started + timedelta(hours=rng.uniform(0.25, 8))
        user = USER if rng.random() < 0.01 else rng.choice(OTHER_USERS)
        gpus = rng.choice((0, 0, 1, 1, 2, 8))
        rows.append((user, "", "bench", "container", gpus, started.strftime(STAMP), stopped.strftime(STAMP), "closed"))
    raw = ledger.engine.raw_connection()
    try:
        if ledger.engine.dialect.name == "postgresql":
            with (
                raw.driver_connection.cursor() as cursor,
                cursor.copy(f"COPY {RUNS_TABLE} ({COLUMNS}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
            raw.driver_connection.commit()
        else:
            raw.driver_connection.execute("BEGIN")
            raw.driver_connection.executemany(
                f"INSERT INTO {RUNS_TABLE} ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            raw.driver_connection.execute("COMMIT")
    finally:
        raw.close()


def time_calls(fn, repeat: int) -> tuple[float, float]:
    """Median and 95th percentile of ``fn()``, in milliseconds (after a warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


LIMITS = Limits(card_hours_per_month=10**9, max_concurrent=10)
REQUEST = Request(gpus=1, server_name="bench", profile="gpu1")


def time_checks(ledger: Ledger, repeat: int) -> tuple[float, float]:
    """Median and 95th percentile of ``check_and_reserve`` alone, in ms; each reservation is released untimed."""
    times = []
    for i in range(repeat + 1):
        began = time.perf_counter()
        decision = ledger.check_and_reserve(USER, REQUEST, LIMITS, NOW)
        took = (time.perf_counter() - began) * 1000
        assert decision.allowed, decision.detail
        ledger.release(decision.reservation)
        if i:  # the first is a warm-up
            times.append(took)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def sql_of_a_check(ledger: Ledger) -> SQLCount:
    with SQLCount(ledger.reserve_engine) as sql:
        decision = ledger.check_and_reserve(USER, REQUEST, LIMITS, NOW)
    ledger.release(decision.reservation)
    return sql


def waiting_for_the_disk(url: str) -> Ledger:
    """A ledger on ``url`` whose check commits on its durable engine, waiting for the disk (the check before it stopped waiting)."""
    ledger = Ledger(url)
    ledger.reserve_engine.dispose()
    ledger.reserve_engine = ledger.engine
    return ledger


def bare_commit(ledger: Ledger):
    """A write transaction of one insert of a run (another user's): what a durable commit costs on this database."""
    insert = runs.insert().values(
        user_name="commit-floor",
        server_name="",
        profile="",
        workspace_kind="container",
        gpus=0,
        started=NOW,
        state="closed",
    )

    def commit():
        with write_transaction(ledger.engine) as conn:
            conn.execute(insert)

    return commit


def kubespawner_make_pod():
    """KubeSpawner's in-process step of every start: the Pod manifest of a 1-GPU profile."""
    from kubespawner.objects import make_pod

    def build():
        make_pod(
            name="jupyter-ann",
            cmd=["jupyterhub-singleuser"],
            port=8888,
            image="quay.io/jupyter/scipy-notebook:2025-10-20",
            cpu_limit=8,
            mem_limit="32G",
            extra_resource_limits={"nvidia.com/gpu": 1},
            node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            env={"JUPYTERHUB_USER": "ann", "JUPYTERHUB_API_TOKEN": "x" * 32},
            labels={"hub.jupyter.org/username": "ann", "component": "singleuser-server"},
            annotations={"hub.jupyter.org/username": "ann"},
            volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}],
            volume_mounts=[{"name": "home", "mountPath": "/home/jovyan"}],
            fs_gid=100,
            uid=1000,
        )

    return build


def measure(url: str, sizes: list[int], repeat: int, base_median: float) -> list[float]:
    """Print one table row per ledger size on the database at ``url``; the check medians."""
    print(
        f"{'ledger rows':>12}{'user rows':>11}{'check ms':>10}{'p95 ms':>9}{'SQL':>5}{'tx':>4}{'commit ms':>11}{'waiting ms':>12}"
        f"{'ratio':>8}   ratio = check median / make_pod median"
    )
    rng = random.Random(5)
    ledger = Ledger(url)
    ledger.upgrade()
    add_rows(ledger, 1000, rng, this_month=True)
    have = 1000
    results = []
    try:
        for size in sizes:
            add_rows(ledger, max(0, size - have), rng)
            have = max(have, size)
            if ledger.engine.dialect.name == "postgresql":
                # what autovacuum does to a table this size soon after the load; here before the timing, not during it
                with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.exec_driver_sql(f"VACUUM ANALYZE {RUNS_TABLE}")
            with ledger.engine.connect() as conn:
                mine = conn.exec_driver_sql(f"SELECT count(*) FROM {RUNS_TABLE} WHERE user_name = '{USER}'").scalar()
            median, p95 = time_checks(ledger, repeat)
            sql = sql_of_a_check(ledger)
            floor, _ = time_calls(bare_commit(ledger), repeat)
            waiting = waiting_for_the_disk(url)
            try:
                waited, _ = time_checks(waiting, repeat)
            finally:
                waiting.dispose()
            results.append(median)
            print(
                f"{size:>12,}{mine:>11,}{median:>10.3f}{p95:>9.3f}{sql.statements:>5}{sql.transactions:>4}"
                f"{floor:>11.3f}{waited:>12.3f}{median / base_median:>8.1f}"
            )
    finally:
        ledger.dispose()
    print(f"largest / smallest ledger: {results[-1] / results[0]:.2f}x for {sizes[-1] // sizes[0]:,}x the rows")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="ledger sizes, comma-separated (default: %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per size (default: %(default)s)")
    parser.add_argument(
        "--postgres",
        metavar="URL|auto",
        help="also on PostgreSQL: a server URL (a fresh database is made on it), or 'auto' for a throw-away one",
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    base_median, base_p95 = time_calls(kubespawner_make_pod(), args.repeat)
    print(f"KubeSpawner make_pod (1-GPU profile): median {base_median:.3f} ms, p95 {base_p95:.3f} ms")
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp, ExitStack() as stack:
        print("\nSQLite (a file, WAL)")
        measure(f"sqlite:///{Path(tmp) / 'ledger.sqlite'}", sizes, args.repeat, base_median)
        if args.postgres:
            from tests.support.pgserver import fresh_database, postgres_url

            server = stack.enter_context(postgres_url()) if args.postgres == "auto" else args.postgres
            print("\nPostgreSQL (loopback)")
            measure(fresh_database(server, "quota_check_bench"), sizes, args.repeat, base_median)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
