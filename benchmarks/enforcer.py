"""Quota enforcer pass at 10 to 3,000 running GPU servers: pass time, SQL statements per pass, event-loop lag.

For each size N the script fills a fresh ledger with N users, each with one
open 1-GPU run (their server, tracked by the hub's quota service as a
spawner tracks it) and two closed runs this month, so that most users are
well inside their card-hours, one in ten is warned and one in twenty is
over them (grace, then stopped). The shared watch caches are N Pods
(``alive``, as the spawner hands them over). It runs one pass (the first:
warnings and stops are issued) and then ``--passes`` more (steady state) on
a real :class:`~workspacespawner.quota.enforcer.Enforcer`, and prints:

- the pass time (ms): the first, and the median of the steady ones;
- SQL statements and transactions of one steady pass and of the first
  (counted with SQLAlchemy's events, tests/support/sqlcount.py);
- the event loop's lag while the passes run (ms, p50 / p99 / max): a task
  sleeping 1 ms over and over records how late it wakes; a pass that holds
  the loop shows up here;

then the ratios of the largest size to the smallest (statements, pass
time) next to the ratio of their sizes. There is no KubeSpawner column:
KubeSpawner has no quota pass.

    python benchmarks/enforcer.py                          # 10, 100, 1000, 3000 servers, SQLite
    python benchmarks/enforcer.py --postgres auto          # the same on a throw-away PostgreSQL too
    python benchmarks/enforcer.py --sizes 10,200 --passes 3

The clock of the quota package is fixed (``policy.utcnow``, as the tests
move it), so every run sees the same month.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from traitlets.config import Config  # noqa: E402

from tests.support.sqlcount import SQLCount  # noqa: E402
from workspacespawner.quota import policy  # noqa: E402
from workspacespawner.quota.announce import ANNOUNCEMENTS  # noqa: E402
from workspacespawner.quota.config import WorkspaceQuota  # noqa: E402
from workspacespawner.quota.enforcer import Enforcer, alive_from_objects  # noqa: E402
from workspacespawner.quota.ledger import Ledger, runs  # noqa: E402
from workspacespawner.quota.policy import CLOSED, OPEN  # noqa: E402
from workspacespawner.quota.service import QuotaService, TrackedWorkspace  # noqa: E402

NOW = datetime(2025, 6, 20, 12, tzinfo=UTC)
LIMIT = 50.0  # card-hours per month


def user_name(i: int) -> str:
    return f"u{i:05d}"


def rows_of(i: int) -> list[dict]:
    """User ``i``'s runs: two closed this month and one open 1-GPU run, used so that ``i % 20`` sets their state."""
    if i % 20 == 0:
        used = LIMIT + 1.0  # over: grace, then stopped
    elif i % 10 == 0:
        used = LIMIT - 0.3  # 18 minutes left: warned
    else:
        used = 5.0
    open_for = timedelta(minutes=30)
    closed = (used - 0.5) / 2  # card-hours of each closed run (1 GPU each)
    name = user_name(i)
    first = NOW.replace(day=1, hour=1)
    common = {"user_name": name, "server_name": "", "profile": "gpu1", "workspace_kind": "container", "gpus": 1}
    common.update(last_seen=None, stopped=None)
    return [
        {**common, "started": first, "stopped": first + timedelta(hours=closed), "state": CLOSED},
        {
            **common,
            "started": first + timedelta(days=5),
            "stopped": first + timedelta(days=5, hours=closed),
            "state": CLOSED,
        },
        {**common, "started": NOW - open_for, "last_seen": NOW - timedelta(minutes=1), "state": OPEN},
    ]


def pod_of(i: int) -> dict:
    """The Pod of user ``i``'s server as the shared watch cache holds it (raw JSON)."""
    name = user_name(i)
    return {
        "metadata": {
            "name": f"jupyter-{name}",
            "annotations": {"hub.jupyter.org/username": name, "hub.jupyter.org/servername": ""},
        }
    }


def make_service(url: str, n: int) -> QuotaService:
    config = Config()
    config.WorkspaceQuota.card_hours_per_month = LIMIT
    config.WorkspaceQuota.group_limits = {"research": {"card_hours_per_month": 200}}
    config.WorkspaceQuota.metrics_top_users = 20
    service = QuotaService(WorkspaceQuota(config=config), ledger=Ledger(url))
    service.ledger.upgrade()
    with service.ledger.engine.begin() as conn:
        conn.execute(runs.insert(), [row for i in range(n) for row in rows_of(i)])
    for i in range(n):
        groups = frozenset({"students", "course-101"} | ({"research"} if i % 50 == 7 else set()))
        pod = {"apiVersion": "v1", "kind": "Pod", "name": f"jupyter-{user_name(i)}"}
        service.track(TrackedWorkspace(user_name(i), "", "bench", pod, groups, None))
    return service


class LagMonitor:
    """A task that sleeps 1 ms over and over and records how late it woke (seconds); and the garbage collector's pauses."""

    def __init__(self):
        self.lags: list[float] = []
        self.gc_pauses: list[float] = []
        self._gc_began = 0.0
        self._task: asyncio.Task | None = None

    def _gc(self, phase: str, _info) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.gc_pauses.append(time.perf_counter() - self._gc_began)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(0.001)
            self.lags.append(loop.time() - began - 0.001)

    def start(self) -> None:
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        gc.callbacks.remove(self._gc)
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def percentiles(self) -> tuple[float, float, float]:
        """p50, p99 and max lag in milliseconds."""
        lags = sorted(self.lags) or [0.0]
        return (
            statistics.median(lags) * 1000,
            lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000,
            lags[-1] * 1000,
        )


async def measure(url: str, n: int, passes: int) -> dict:
    service = make_service(url, n)
    pods = [pod_of(i) for i in range(n)]
    stopped: list[tuple[str, str]] = []

    async def stop(user, server):
        stopped.append((user, server))

    enforcer = Enforcer(service, stop=stop, alive=lambda: alive_from_objects(pods))
    gc.collect()  # the setup's objects: their promotion would set off a full collection in the first pass
    monitor = LagMonitor()
    monitor.start()
    await asyncio.sleep(0.01)
    times: list[float] = []
    counts: list[SQLCount] = []
    try:
        for _ in range(passes + 1):
            with SQLCount(service.ledger.engine) as sql:
                began = time.perf_counter()
                await enforcer.tick()
                times.append((time.perf_counter() - began) * 1000)
            counts.append(sql)
            await asyncio.sleep(0.005)
    finally:
        await monitor.stop()
        for user in ANNOUNCEMENTS.users():
            ANNOUNCEMENTS.clear(user)
        await service.close()
    p50, p99, worst = monitor.percentiles()
    return {
        "n": n,
        "first_ms": times[0],
        "tick_ms": statistics.median(times[1:]),
        "first_sql": (counts[0].statements, counts[0].transactions),
        "sql": (counts[-1].statements, counts[-1].transactions),
        "lag": (p50, p99, worst),
        "gc_ms": max(monitor.gc_pauses, default=0.0) * 1000,
        "stopped": len(stopped),
    }


def report(label: str, results: list[dict]) -> None:
    print(f"\n{label}")
    print(
        f"{'servers':>8}{'pass ms':>9}{'first ms':>10}{'SQL/pass':>10}{'tx/pass':>9}{'SQL first':>11}"
        f"{'lag p50':>9}{'lag p99':>9}{'lag max':>9}{'gc max':>8}{'stopped':>9}"
    )
    for r in results:
        print(
            f"{r['n']:>8,}{r['tick_ms']:>9.1f}{r['first_ms']:>10.1f}{r['sql'][0]:>10}{r['sql'][1]:>9}"
            f"{r['first_sql'][0]:>11}{r['lag'][0]:>9.2f}{r['lag'][1]:>9.2f}{r['lag'][2]:>9.2f}{r['gc_ms']:>8.1f}{r['stopped']:>9}"
        )
    small, large = results[0], results[-1]
    if large["n"] > small["n"]:
        print(
            f"{large['n']:,} / {small['n']:,} servers ({large['n'] / small['n']:.0f}x): "
            f"SQL statements per pass {large['sql'][0] / small['sql'][0]:.2f}x, "
            f"pass time {large['tick_ms'] / small['tick_ms']:.1f}x, "
            f"worst loop lag {large['lag'][2]:.1f} ms"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10,100,1000,3000", help="running GPU servers, comma-separated (default: %(default)s)"
    )
    parser.add_argument("--passes", type=int, default=5, help="steady passes after the first (default: %(default)s)")
    parser.add_argument(
        "--postgres",
        metavar="URL|auto",
        help="also on PostgreSQL: a server URL (a fresh database per size is made on it), or 'auto' for a throw-away one",
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    policy.utcnow = lambda: NOW  # the quota package's one clock (see policy's docstring)
    logging.getLogger("workspacespawner").setLevel(logging.ERROR)  # the warnings and stops it logs, thousands
    with tempfile.TemporaryDirectory(prefix="enforcer-bench-") as tmp, ExitStack() as stack:
        results = [asyncio.run(measure(f"sqlite:///{Path(tmp) / f'ledger-{n}.sqlite'}", n, args.passes)) for n in sizes]
        report("SQLite (a file, WAL)", results)
        if args.postgres:
            from tests.support.pgserver import fresh_database, postgres_url

            server = stack.enter_context(postgres_url()) if args.postgres == "auto" else args.postgres
            results = [
                asyncio.run(measure(fresh_database(server, f"enforcer_bench_{n}"), n, args.passes)) for n in sizes
            ]
            report("PostgreSQL (loopback)", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
