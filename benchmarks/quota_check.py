"""Pre-spawn quota check time as the ledger grows: 1,000 to 1,000,000 rows in SQLite, against plain KubeSpawner.

For each ledger size the script times the check a start makes before any
Kubernetes object exists (``Ledger.check_and_reserve`` for a 1-GPU start,
then ``Ledger.release``: one write transaction under the user's lock, two
index range scans, the decision) and prints the median and 95th percentile
in milliseconds. This month's rows stay the same (1,000 runs, about 10 of
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

    python benchmarks/quota_check.py                 # 1k, 10k, 100k, 1M rows
    python benchmarks/quota_check.py --sizes 1000,10000 --repeat 100

Rows are bulk-inserted with the driver's ``executemany`` in one transaction
per step; building the 1M-row ledger takes a few seconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from workspacespawner.db.migrations import RUNS_TABLE
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Limits, Request

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
        raw.driver_connection.execute("BEGIN")
        raw.driver_connection.executemany(
            f"INSERT INTO {RUNS_TABLE} (user_name, server_name, profile, workspace_kind, gpus, started, stopped, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
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


def quota_check(ledger: Ledger):
    limits = Limits(card_hours_per_month=10**9, max_concurrent=10)
    request = Request(gpus=1, server_name="bench", profile="gpu1")

    def check():
        decision = ledger.check_and_reserve(USER, request, limits, NOW)
        assert decision.allowed, decision.detail
        ledger.release(decision.reservation)

    return check


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="ledger sizes, comma-separated (default: %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per size (default: %(default)s)")
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.sizes.split(","))
    rng = random.Random(5)
    base_median, base_p95 = time_calls(kubespawner_make_pod(), args.repeat)
    print(f"KubeSpawner make_pod (1-GPU profile): median {base_median:.3f} ms, p95 {base_p95:.3f} ms\n")
    print(
        f"{'ledger rows':>12}{'user rows':>11}{'check ms':>10}{'p95 ms':>9}{'ratio':>8}   ratio = check median / make_pod median"
    )
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp:
        ledger = Ledger(f"sqlite:///{Path(tmp) / 'ledger.sqlite'}")
        ledger.upgrade()
        add_rows(ledger, 1000, rng, this_month=True)
        have = 1000
        results = []
        for size in sizes:
            add_rows(ledger, max(0, size - have), rng)
            have = max(have, size)
            with ledger.engine.connect() as conn:
                mine = conn.exec_driver_sql(f"SELECT count(*) FROM {RUNS_TABLE} WHERE user_name = ?", (USER,)).scalar()
            median, p95 = time_calls(quota_check(ledger), args.repeat)
            results.append(median)
            print(f"{size:>12,}{mine:>11,}{median:>10.3f}{p95:>9.3f}{median / base_median:>8.1f}")
        ledger.dispose()
    print(f"\nlargest / smallest ledger: {results[-1] / results[0]:.2f}x for {sizes[-1] // sizes[0]:,}x the rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
