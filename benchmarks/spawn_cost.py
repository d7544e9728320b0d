"""Spawn cost: WorkspaceSpawner against plain KubeSpawner, in the same run, on the local cluster.

For each spawner a real JupyterHub starts and stops ``--users`` servers one
after another; the script prints, per spawner, the mean time from the spawn
request to a ready server (seconds), the Kubernetes API requests made per
start and per stop (from the local cluster's request log), and the ratios
WorkspaceSpawner / KubeSpawner.

    python benchmarks/spawn_cost.py --users 5

Numbers are from a loopback API server and local processes: they compare
the two spawners' work, not a real cluster's latency.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from tests.support.hubharness import CONFIG_D, Hub  # noqa: E402
from workspacespawner.localcluster import ClusterThread  # noqa: E402

SPAWNERS = {
    "KubeSpawner": 'c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"\n',
    "WorkspaceSpawner": "\n".join(
        f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in ("10-workspace-spawner.py", "20-profiles.py")
    )
    + "\n",
}


def per_spawn_calls(cluster) -> int:
    """Requests aimed at one workspace: everything but the shared reflectors' list and watch calls.

    Reflectors (one per resource and namespace, for all users) re-list and
    re-watch on their own schedule; counting them would charge a spawn for
    whatever watch happened to time out during it.
    """
    return sum(1 for r in cluster.requests.matching() if not (r.method == "GET" and r.path.rstrip("/").endswith(("/pods", "/events"))))


def measure(name: str, config: str, users: int, workdir: Path) -> dict:
    """Start and stop ``users`` servers with one spawner; return mean seconds and API calls."""
    thread = ClusterThread(state_dir=workdir / f"{name}-cluster")
    cluster = thread.start()
    hub = Hub(workdir / f"{name}-hub", cluster.kubeconfig, config).start()
    seconds, start_calls, stop_calls = [], [], []
    try:
        for i in range(users + 1):
            user = f"bench{i}"
            hub.create_user(user)
            cluster.requests.clear()
            began = time.perf_counter()
            hub.start_server(user)
            elapsed = time.perf_counter() - began
            started = per_spawn_calls(cluster)
            cluster.requests.clear()
            hub.stop_server(user)
            stopped = per_spawn_calls(cluster)
            if i == 0:
                continue  # the first start also opens the shared watches: warm-up, not counted
            seconds.append(elapsed)
            start_calls.append(started)
            stop_calls.append(stopped)
    finally:
        hub.stop()
        thread.stop()
    return {
        "seconds": statistics.mean(seconds),
        "start_calls": statistics.mean(start_calls),
        "stop_calls": statistics.mean(stop_calls),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=5, help="servers started and stopped per spawner (default: %(default)s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spawn-cost-") as tmp:
        results = {name: measure(name, config, args.users, Path(tmp)) for name, config in SPAWNERS.items()}
    base, ours = results["KubeSpawner"], results["WorkspaceSpawner"]
    print(f"{'':18}{'start s':>10}{'API calls/start':>18}{'API calls/stop':>16}")
    for name, r in results.items():
        print(f"{name:18}{r['seconds']:>10.2f}{r['start_calls']:>18.1f}{r['stop_calls']:>16.1f}")
    print(
        f"{'ratio':18}{ours['seconds'] / base['seconds']:>10.2f}"
        f"{ours['start_calls'] / base['start_calls']:>18.2f}{ours['stop_calls'] / base['stop_calls']:>16.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
