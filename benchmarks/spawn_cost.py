"""Spawn cost: WorkspaceSpawner against plain KubeSpawner with its own home PVC, in the same run, on the local cluster.

For each spawner a fresh local cluster (in this process) and a real
JupyterHub start; ``--users`` users each start a server (a new user), stop
it, start it again and stop it, one after another. The script prints, per
spawner, the mean seconds from the spawn request to a ready server and the
Kubernetes API calls of a first start, a stop and a start again (every
request of the API server's log but the shared watches' own,
``tests/support/callcount.py``), then the ratios WorkspaceSpawner /
KubeSpawner. With ``--show`` it lists the calls of the last user.

KubeSpawner is configured as the equivalent of WorkspaceSpawner's default
profile (``benchmarks/burst.py``): its own home PVC (``storage_pvc_ensure``,
``home-{username}``, ``ceph-rbd``, 10Gi), mounted at the home; both run the
same tiny singleuser server.

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
sys.path.insert(0, str(HERE))

import burst  # noqa: E402

from localcluster import ClusterThread  # noqa: E402
from tests.support.callcount import workspace_calls  # noqa: E402
from tests.support.hubharness import Hub  # noqa: E402

STEPS = ("first start", "stop", "start again", "stop again")


def measure(name: str, users: int, workdir: Path) -> dict:
    """Start, stop, start and stop ``users`` servers with one spawner; mean seconds per start and calls per step."""
    thread = ClusterThread(state_dir=workdir / f"{name}-cluster")
    cluster = thread.start()
    config = burst.COMMON.format(tiny=burst.TINY_SERVER) + burst.SPAWNERS[name]
    hub = Hub(workdir / f"{name}-hub", cluster.kubeconfig, config, start_timeout=120)
    hub.env["PYTHONPATH"] = str(HERE.parent)
    seconds, calls = [], {step: [] for step in STEPS}
    try:
        hub.start()
        for i in range(users + 1):
            user = f"bench{i}"
            hub.create_user(user)
            for step in STEPS:
                cluster.requests.clear()
                began = time.perf_counter()
                if "start" in step:
                    hub.start_server(user)
                    if i:
                        seconds.append(time.perf_counter() - began)
                else:
                    hub.stop_server(user)
                time.sleep(1.0)  # what the hub does after it answers (a stop's claim release) lands in this step
                calls[step].append(workspace_calls(cluster.requests.records))
            if i == 0:  # the first start also opens the shared watches: warm-up, not counted
                calls = {step: [] for step in STEPS}
    finally:
        hub.stop()
        thread.stop()
    return {"seconds": statistics.mean(seconds), "calls": calls}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=5, help="users per spawner (default: %(default)s)")
    parser.add_argument("--show", action="store_true", help="list the calls of each step of the last user")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spawn-cost-") as tmp:
        results = {name: measure(name, args.users, Path(tmp)) for name in ("KubeSpawner", "WorkspaceSpawner")}

    def mean_calls(result, step):
        return statistics.mean(len(c) for c in result["calls"][step])

    print(f"{'':18}{'start s':>9}" + "".join(f"{'calls, ' + step:>21}" for step in STEPS))
    for name, r in results.items():
        print(f"{name:18}{r['seconds']:>9.2f}" + "".join(f"{mean_calls(r, step):>21.1f}" for step in STEPS))
    base, ours = results["KubeSpawner"], results["WorkspaceSpawner"]
    print(f"{'ratio':18}{ours['seconds'] / base['seconds']:>9.2f}"
          + "".join(f"{mean_calls(ours, step) / max(mean_calls(base, step), 1e-9):>21.2f}" for step in STEPS))
    if args.show:
        for name, r in results.items():
            for step in STEPS:
                print(f"{name}, {step}: " + ", ".join(f"{m} {p}" for m, p in r["calls"][step][-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
