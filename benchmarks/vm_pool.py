"""A VM workspace's first start with and without the root-disk pool: time to a running guest, and what was cloned.

On the local cluster, whose CDI emulation takes ``--clone-seconds`` per
clone (a stand-in for the minutes a real 30-200 GiB clone takes; the copy
itself is a small folder), the script starts ``--users`` first VM
workspaces of fresh users without a pool (each start clones its own root
disk), then as many with a pool kept at ``--users`` ready disks (each start
claims one), and prints per start the seconds from the start call to a
guest that answers, the DataVolumes the start itself created, and the
medians with their ratio. There is no KubeSpawner column: KubeSpawner has
no VM workspaces.

    python benchmarks/vm_pool.py                         # 3 users, 20 s clones
    python benchmarks/vm_pool.py --users 5 --clone-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localcluster.goldenimage import make_golden_image  # noqa: E402

from localcluster import ClusterThread  # noqa: E402
from workspacespawner.backends.vm import manifests as vmmanifests  # noqa: E402
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings  # noqa: E402
from workspacespawner.backends.vm.pool import POOL_SELECTOR, RootDiskPoolKeeper, shape_for  # noqa: E402
from workspacespawner.backends.vm.workspace import VMWorkspace  # noqa: E402
from workspacespawner.config.rootdiskpool import PoolEntry  # noqa: E402
from workspacespawner.k8s import watches  # noqa: E402
from workspacespawner.k8s.cachedkube import CachedKube  # noqa: E402
from workspacespawner.k8s.kinds import DATA_VOLUME  # noqa: E402

NS, GOLDEN_NS, IMAGE = "default", "golden-images", "ubuntu-24.04-bench-2026-11"
SERVER = """\
import http.server, sys
opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"up")
    def log_message(self, *args):
        pass
http.server.HTTPServer((opts["ip"], int(opts["port"])), H).serve_forever()
"""
COMMAND = vmmanifests.singleuser_command(["/usr/bin/python3", "/opt/bench-server.py"])
SETTINGS = VMSettings(golden_image=IMAGE, golden_image_namespace=GOLDEN_NS, root_disk_size="2Gi", cpu_cores=1, memory="1Gi",
                      termination_grace_seconds=5, attach_home=False)


def _env(user: str) -> dict[str, str]:
    return {"JUPYTERHUB_API_TOKEN": "t", "JUPYTERHUB_USER": user, "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/"}


def _created_datavolumes(thread: ClusterThread, since: int) -> list[str]:
    return [r.body["metadata"]["name"] for r in thread.cluster.requests.records[since:]
            if r.method == "POST" and r.path.endswith("/datavolumes") and r.status == 201]


async def _first_start(thread, custom_api, core_api, user: str, pool) -> tuple[float, list[str]]:
    ident = VMIdentity.for_workspace(namespace=NS, user_name=user, kubespawner_username=user, base_name=f"ws-{user}", home_pvc="")
    ws = VMWorkspace(ident=ident, settings=SETTINGS, custom_api=custom_api, core_api=core_api, start_timeout=600, stop_timeout=30,
                     pool=pool)
    mark = len(thread.cluster.requests.records)
    began = time.monotonic()
    await ws.start(env=_env(user), command=COMMAND)
    took = time.monotonic() - began
    made = _created_datavolumes(thread, mark)
    await ws.stop()
    return took, made


async def _run(args, thread: ClusterThread) -> None:
    from kubespawner.clients import load_config, shared_client

    await thread.acall(partial(make_golden_image, size="1Gi"), GOLDEN_NS, IMAGE, {"opt/bench-server.py": SERVER})
    load_config()
    custom_api, core_api = shared_client("CustomObjectsApi"), shared_client("CoreV1Api")
    await watches.shared_reflector(watches.DataVolumeReflector, NS, custom_api=custom_api)
    rows = []
    for i in range(args.users):
        took, made = await _first_start(thread, custom_api, core_api, f"clone{i}", None)
        rows.append(("no pool", f"clone{i}", took, made))
    keeper = RootDiskPoolKeeper(CachedKube(core_api, custom_api), NS, [PoolEntry(shape_for(SETTINGS), args.users)], interval=1.0)
    filled = time.monotonic()
    while True:  # fill the pool before the starts: the time a pool saves is the clone it did ahead
        await keeper.refill()
        disks = await keeper.kube.list(DATA_VOLUME, NS, labels=POOL_SELECTOR, fresh=True)
        ready = [d for d in disks if (d.get("status") or {}).get("phase") == "Succeeded"]
        if len(ready) >= args.users:
            break
        await asyncio.sleep(0.5)
    fill_seconds = time.monotonic() - filled
    for i in range(args.users):
        took, made = await _first_start(thread, custom_api, core_api, f"pooled{i}", keeper)
        rows.append(("pool", f"pooled{i}", took, made))
    await watches.stop_all()

    print(f"First VM start, local cluster, clones take {args.clone_seconds:.0f} s (pool of {args.users} filled in {fill_seconds:.1f} s)")
    print(f"{'':8} {'user':10} {'seconds':>8}  DataVolumes the start created")
    for kind, user, took, made in rows:
        print(f"{kind:8} {user:10} {took:8.2f}  {', '.join(made) or '-'}")
    plain = statistics.median(t for k, _u, t, _m in rows if k == "no pool")
    pooled = statistics.median(t for k, _u, t, _m in rows if k == "pool")
    print(f"median: no pool {plain:.2f} s, pool {pooled:.2f} s; pool / no pool = {pooled / plain:.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=3, help="first starts of each kind (default 3)")
    parser.add_argument("--clone-seconds", type=float, default=20.0, help="how long the local CDI takes per clone (default 20)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as state:
        thread = ClusterThread(state_dir=Path(state) / "cluster")
        cluster = thread.start()
        try:
            cluster.controllers["cdi"].clone_seconds = args.clone_seconds
            os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
            os.environ.pop("KUBERNETES_SERVICE_HOST", None)
            from kubernetes_asyncio.config import kube_config

            kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(cluster.kubeconfig)
            asyncio.run(_run(args, thread))
        finally:
            thread.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
