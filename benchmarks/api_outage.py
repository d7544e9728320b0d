"""After an API server outage: how long the first start takes, with our watch loop and with kubespawner's, same run.

For each watch loop a fresh local cluster (in this process) and a real
JupyterHub with WorkspaceSpawner start; a user starts and stops a server (so
every watch of the hub is up). Then, for each ``--outage`` length in turn,
every request of the hub is answered 503 and its open watches are dropped
for that many seconds, and right after it a new user starts a server: the
script prints the seconds from that spawn request to a ready server (or
"timed out" past the hub's ``--start-timeout``), for both loops, and the
ratio ours / kubespawner's. A start on the quiet cluster before the first
outage is the baseline.

"kubespawner" runs the hub with kubespawner's own ``_watch_and_update`` and
``_list_and_update`` put back on our reflectors (their hub config does it):
waits of 0.2 to 25.6 s, giving up after about 50 s of errors.

    python benchmarks/api_outage.py --outage 10 30 60

Numbers are from a loopback API server and local processes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from localcluster import ClusterThread  # noqa: E402
from tests.support.hubharness import CONFIG_D, Hub  # noqa: E402

PROFILE = {"profile": "jupyterlab-cpu"}
CONFIG = "".join(f"load_subconfig({str(CONFIG_D / piece)!r})\n" for piece in ("10-workspace-spawner.py", "20-profiles.py"))
#: The hub config lines that give each loop (kubespawner's: its methods put back on our mixin).
LOOPS = {
    "ours": "",
    "kubespawner": (
        "from kubespawner.reflector import ResourceReflector\n"
        "from workspacespawner.k8s.watchloop import RecoveringReflector\n"
        "RecoveringReflector._watch_and_update = ResourceReflector._watch_and_update\n"
        "RecoveringReflector._list_and_update = ResourceReflector._list_and_update\n"
    ),
}


def timed_start(hub: Hub, user: str) -> float | None:
    """Seconds from the spawn request to a ready server, or None when the start failed or timed out."""
    hub.create_user(user)
    began = time.perf_counter()
    try:
        hub.start_server(user, PROFILE)
    except AssertionError:
        return None
    took = time.perf_counter() - began
    hub.stop_server(user)
    return took


def measure(loop: str, outages: list[float], start_timeout: int, workdir: Path) -> dict:
    """The seconds of a quiet start, then of the first start after each outage, with ``loop``."""
    thread = ClusterThread(state_dir=workdir / f"{loop}-cluster")
    cluster = thread.start()
    hub = Hub(workdir / f"{loop}-hub", cluster.kubeconfig, CONFIG + LOOPS[loop], start_timeout=start_timeout)
    results = {}
    try:
        hub.start()
        results["quiet"] = timed_start(hub, "quiet")
        for i, seconds in enumerate(outages):
            cluster.faults.add("*", "", status=503, reason="ServiceUnavailable", count=10**9)
            thread.call(lambda c: c.store.close_watches())
            time.sleep(seconds)
            cluster.faults.clear()
            results[seconds] = timed_start(hub, f"after{i}")
            print(f"  {loop}: {seconds:g} s outage -> {_shown(results[seconds])}", flush=True)
    finally:
        hub.stop()
        thread.stop()
    return results


def _shown(value: float | None) -> str:
    return "timed out" if value is None else f"{value:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, nargs="+", default=[10, 30, 60], help="outage lengths, seconds")
    parser.add_argument("--start-timeout", type=int, default=60, help="the hub's start_timeout, seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {loop: measure(loop, args.outage, args.start_timeout, Path(tmp)) for loop in LOOPS}
    print(f"\nfirst start after an outage (start timeout {args.start_timeout} s)")
    print(f"{'outage':>10} {'ours':>10} {'kubespawner':>12} {'ratio':>7}")
    for key in ["quiet", *args.outage]:
        ours, theirs = results["ours"][key], results["kubespawner"][key]
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
        label = key if key == "quiet" else f"{key:g} s"
        print(f"{label:>10} {_shown(ours):>10} {_shown(theirs):>12} {ratio:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
