"""N simultaneous spawns through the hub's REST API: WorkspaceSpawner against plain KubeSpawner, in the same run.

For each spawner, a fresh local cluster (``workspacespawner localcluster``,
its own process) and a real JupyterHub (tests/support/hubharness.py) start;
``--users`` users are made, then all their servers are asked for at once
(one POST each, from a pool of threads) and the script waits until every
one is ready: it reads the proxy's routes (configurable-http-proxy's REST
API; the hub adds a server's route once the server is ready), which costs
the hub nothing, then checks once that the hub says so too. It prints, per
spawner:

- ``ready s``: from the first POST to the last server ready;
- ``hub CPU s`` and ``cluster CPU s``: CPU time (user + system) the hub
  process and the cluster process spent meanwhile (the servers' own
  processes are not counted: they are the cluster's workloads);
- ``lag p50`` / ``lag p99`` (ms): the hub's event-loop lag meanwhile, from a
  task the hub's config starts that sleeps 10 ms over and over and records
  how late it wakes;
- ``RSS/server KB``: the hub's resident memory growth from before the burst
  to all ready, per server;
- ``GC s`` and ``full GCs``: of the hub CPU, the seconds the garbage
  collector took meanwhile, and how many of its passes were full
  collections (``gc.callbacks`` in the hub's config): a full collection
  walks every tracked object of the process, so it costs more in a hub
  that holds more;

all measured after one warm-up server per spawner (started, ready, and
left running before the burst, not counted): what a spawner does once per
hub process (lazy imports, starting its watches, opening its databases,
migrating the ledger) is not a cost per server, and a hub in service has
paid it long before any burst;

then the ratios WorkspaceSpawner / KubeSpawner. Both spawners run the same
singleuser command, a tiny HTTP server (a few lines of Python, no
Jupyter), so hundreds of servers fit on a small machine, and make the same
Pod: WorkspaceSpawner with the shipped ``jupyterhub_config.d`` pieces (its
default profile is a CPU container) and quotas on (a SQLite ledger);
KubeSpawner configured as its equivalent (:data:`KUBESPAWNER`: its own home
PVC through ``storage_pvc_ensure``, ``home-{username}``, ``ceph-rbd``,
10Gi, mounted at the home and working directory, the default profile's
scratch tier as an emptyDir at ``/scratch`` with the init container that
writes its notice, the same image and environment;
tests/cluster/test_burst_baseline.py checks that the two Pods agree but for
the owner labels).

    python benchmarks/burst.py --users 100
    python benchmarks/burst.py --users 300 --rounds 3   # and the median of each ratio over the rounds
    python benchmarks/burst.py --users 50 --spawners WorkspaceSpawner
    python benchmarks/burst.py --users 300 --rounds 3 --quotas off   # what the quotas cost
    python benchmarks/burst.py --users 300 --spawners WorkspaceSpawner --without interning --without cached-reads
        # what each helper of the watch caches buys: a hub with it off beside one as shipped, without / with

One run's ratios move by several hundredths between runs of the same
code on a shared 2-core machine (the hub CPU ratio at 300 has read from
1.03 to 1.32); ``--rounds`` repeats the whole comparison, alternating
which spawner goes first, and prints the median of each ratio.

Each CPU node of the local cluster takes 110 Pods (its ``pods``
capacity); the cluster gets ``ceil(users / 100)`` of them
(``workspacespawner localcluster --cpu-nodes``).

Numbers are from a loopback API server and local processes: they compare
the two spawners' work, not a real cluster's latency.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from tests.support.hubharness import Hub, config_pieces  # noqa: E402
from workspacespawner.gpu import placement  # noqa: E402

#: The singleuser server of both spawners: answers every request 200, binds the hub's port on the Pod's address.
TINY_SERVER = textwrap.dedent(
    """\
    import os, socket, urllib.parse
    port = urllib.parse.urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "")).port or 8888
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(128)
    while True:
        c, _ = s.accept()
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
        except OSError:
            pass
        c.close()
    """
)

#: Hub config: the event-loop lag monitor (writes one JSON line a second: time, lags in ms since the last line, and
#: the garbage collector's seconds and full collections since the hub started, from ``gc.callbacks``).
LAG_MONITOR = """
import asyncio as _asyncio, gc as _gc, json as _json, time as _time

_gc_spent = {{"seconds": 0.0, "full": 0, "began": 0.0}}

def _gc_clock(phase, info):
    if phase == "start":
        _gc_spent["began"] = _time.perf_counter()
    else:
        _gc_spent["seconds"] += _time.perf_counter() - _gc_spent["began"]
        _gc_spent["full"] += info["generation"] == 2

_gc.callbacks.append(_gc_clock)

async def _lag_monitor(path):
    loop = _asyncio.get_running_loop()
    lags, last = [], _time.time()
    while True:
        began = loop.time()
        await _asyncio.sleep(0.01)
        lags.append(round((loop.time() - began - 0.01) * 1000, 3))
        if _time.time() - last >= 1:
            with open(path, "a") as f:
                f.write(_json.dumps([_time.time(), lags, _gc_spent["seconds"], _gc_spent["full"]]) + "\\n")
            lags, last = [], _time.time()

_asyncio.get_event_loop().call_soon(lambda: _asyncio.ensure_future(_lag_monitor({path!r})))
"""

COMMON = """
import sys
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.active_server_limit = 0
c.JupyterHub.api_page_max_limit = 2000
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}  # a POST answers 202 at once: the burst is not queued on it
c.JupyterHub.log_level = "WARN"
c.ConfigurableHTTPProxy.auth_token = {proxy_token!r}
c.KubeSpawner.cmd = [sys.executable, "-S", "-c", {tiny!r}]
c.KubeSpawner.start_timeout = 600
c.KubeSpawner.http_timeout = 600
c.KubeSpawner.k8s_api_request_timeout = 60  # a loaded 2-core machine answers slowly: wait, do not fail the start
c.KubeSpawner.k8s_api_request_retry_timeout = 900
c.JupyterHub.cleanup_servers = False  # the cluster's end ends the servers: no 2N stops to wait for at exit
c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2025-10-20"
c.KubeSpawner.cpu_limit = 2  # as WorkspaceSpawner's default profile
c.KubeSpawner.mem_limit = "4G"
c.KubeSpawner.cpu_guarantee = 0.05  # requests: 100 servers fit the local cluster's 16-core CPU node
c.KubeSpawner.mem_guarantee = "32M"
"""

#: The scratch tier's notice, as WorkspaceSpawner's default profile words it (in the Pod's environment and the file).
SCRATCH_NOTICE = (
    "/scratch is scratch space on this node's local disk (20Gi at most). Everything in it is deleted when your server "
    "stops, restarts or moves to another node. Keep files you need in your home directory or a team folder under /shared."
)
IMAGE = "quay.io/jupyter/scipy-notebook:2025-10-20"
#: The environment WorkspaceSpawner's default profile adds: the tiers' cache locations, ``WORKSPACE_SCRATCH*`` and
#: code-server's socket.
ENVIRONMENT = {
    "XDG_CACHE_HOME": "/scratch/.cache", "PIP_CACHE_DIR": "/scratch/.cache/pip", "UV_CACHE_DIR": "/scratch/.cache/uv",
    "CONDA_PKGS_DIRS": "/scratch/.cache/conda/pkgs", "npm_config_cache": "/scratch/.cache/npm",
    "HF_HUB_CACHE": "/scratch/.cache/huggingface/hub", "HF_DATASETS_CACHE": "/scratch/.cache/huggingface/datasets",
    "TORCH_HOME": "/scratch/.cache/torch", "HF_HOME": "/home/jovyan/.cache/huggingface",
    "WORKSPACE_SCRATCH": "/scratch", "WORKSPACE_SCRATCH_NOTICE": SCRATCH_NOTICE, "JUPYTER_VSCODE_PROXY_USE_SOCKET": "true",
}
#: The scratch tier's init container, which writes the notice into scratch.
SCRATCH_NOTICE_CONTAINER = {
    "name": "scratch-notice", "image": IMAGE,
    "command": ["sh", "-c", 'printf "%s\\n" "$NOTICE" > "$NOTICE_FILE"'],
    "env": [{"name": "NOTICE", "value": SCRATCH_NOTICE}, {"name": "NOTICE_FILE", "value": "/scratch/README-SCRATCH.txt"}],
    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}},
    "securityContext": {"allowPrivilegeEscalation": False},
    "volumeMounts": [{"mountPath": "/scratch", "name": "scratch"}],
}

#: KubeSpawner configured to make the Pod WorkspaceSpawner's default profile makes (tests/cluster/test_burst_baseline.py
#: compares the two): the same image, home PVC and mount, working directory, scratch emptyDir with its notice's init
#: container, environment, and the preference for nodes without GPUs. Only the owner labels and annotations differ: KubeSpawner cannot write the owner's
#: hashed id.
#: The preferred node affinity of a CPU workspace (WorkspaceSpawner's ``cpu_prefers_cpu_nodes``): nodes without a GPU.
CPU_NODES_FIRST = placement.cpu_nodes_first()
KUBESPAWNER = f"""
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.image = {IMAGE!r}
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.pvc_name_template = "home-{{username}}"
c.KubeSpawner.storage_class = "ceph-rbd"
c.KubeSpawner.storage_capacity = "10Gi"
c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
c.KubeSpawner.volumes = [
    {{"name": "home", "persistentVolumeClaim": {{"claimName": "home-{{username}}"}}}},
    {{"name": "scratch", "emptyDir": {{"sizeLimit": "20Gi"}}}},
]
c.KubeSpawner.volume_mounts = [{{"name": "home", "mountPath": "/home/jovyan"}}, {{"name": "scratch", "mountPath": "/scratch"}}]
c.KubeSpawner.working_dir = "/home/jovyan"
c.KubeSpawner.environment = {ENVIRONMENT!r}
c.KubeSpawner.init_containers = [{SCRATCH_NOTICE_CONTAINER!r}]
c.KubeSpawner.node_affinity_preferred = [{CPU_NODES_FIRST!r}]
"""

SPAWNERS = {
    "KubeSpawner": KUBESPAWNER,
    "WorkspaceSpawner": config_pieces("10-workspace-spawner.py", "20-profiles.py"),
}
#: What ``--quotas off`` adds to WorkspaceSpawner's hub: no quota check, ledger or enforcer (the audit log stays).
QUOTAS_OFF = "c.WorkspaceQuota.enabled = False\n"


#: What ``--without NAME`` adds to a second WorkspaceSpawner hub: one helper of the hub's watch caches turned off, so
#: the run shows what it buys (issue #37: each must pay its way). Each patch is made in the hub's config, before a
#: reflector starts; the caches then work as they would without the helper.
WITHOUT = {
    # workspacespawner.k8s.interning: objects stored as decoded, every string its own copy
    "interning": "import workspacespawner.k8s.interning as _i\n_i.interned = lambda value, previous=None: value\n",
    # workspacespawner.k8s.cachedkube: every get and list asks the API server
    "cached-reads": "from workspacespawner.k8s.cachedkube import CachedKube as _k\n_k._cache = lambda self, kind, namespace: None\n",
}
#: The name a ``--without`` hub goes by in the tables.
WITHOUT_PREFIX = "WorkspaceSpawner without "


def spawner_config(name: str, *, quotas: bool = True) -> str:
    """The config text of spawner ``name`` (a key of :data:`SPAWNERS`, or :data:`WITHOUT_PREFIX` and a key of
    :data:`WITHOUT`) in the burst; ``quotas`` False turns WorkspaceSpawner's quotas off (:data:`QUOTAS_OFF`;
    KubeSpawner has none)."""
    helper = name.removeprefix(WITHOUT_PREFIX) if name.startswith(WITHOUT_PREFIX) else None
    base = "WorkspaceSpawner" if helper is not None else name
    return SPAWNERS[base] + ("" if quotas or base != "WorkspaceSpawner" else QUOTAS_OFF) + WITHOUT.get(helper, "")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_cluster(state_dir: Path, cpu_nodes: int = 1) -> tuple[subprocess.Popen, Path]:
    """``workspacespawner localcluster --cpu-nodes cpu_nodes`` in its own process; returns it and its kubeconfig."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workspacespawner",
            "localcluster",
            "--state-dir",
            str(state_dir),
            "--log-level",
            "WARNING",
            "--cpu-nodes",
            str(cpu_nodes),
        ],
        stdout=subprocess.PIPE,
        stderr=open(state_dir.parent / f"{state_dir.name}.log", "wb"),
        text=True,
        env=dict(os.environ, PYTHONPATH=str(HERE.parent)),
    )
    for line in proc.stdout:
        if line.startswith("kubeconfig: "):
            return proc, Path(line.split(": ", 1)[1].strip())
    raise RuntimeError("the local cluster did not start")


def ready_count(hub: Hub) -> int:
    """How many servers the hub says are ready (its REST API: the users list, which loads every user's spawner
    state; asked once at the end, not polled)."""
    r = hub.api("GET", "/users", params={"state": "ready", "limit": 2000})
    r.raise_for_status()
    body = r.json()
    return len(body["items"] if isinstance(body, dict) else body)


#: The proxy's REST API token, set in the hub's config, so the script can read the proxy's routes.
PROXY_TOKEN = secrets.token_hex(16)


def proxy_api_url(hub: Hub) -> str:
    """The configurable-http-proxy REST API URL the harness gave the hub."""
    return re.search(r'c\.ConfigurableHTTPProxy\.api_url = "([^"]+)"', hub.config_file.read_text()).group(1)


def routed_servers(api_url: str) -> int:
    """How many user servers the proxy routes to: the hub adds a server's route once it is ready.

    Read from configurable-http-proxy, not from the hub: polling the hub's
    users list twice a second took a quarter of the hub's CPU at 300 servers
    (every user's spawner state loaded and encoded each time), more of it
    for the spawner whose state is larger and whose burst lasts longer.
    """
    r = requests.get(f"{api_url}/api/routes", headers={"Authorization": f"token {PROXY_TOKEN}"}, timeout=30)
    r.raise_for_status()
    return sum(1 for path in r.json() if path.startswith("/user/"))


def lag_percentiles(path: Path, since: float, until: float) -> tuple[float, float]:
    lags = []
    if path.exists():
        for line in path.read_text().splitlines():
            stamp, values, *_gc = json.loads(line)
            if since <= stamp <= until + 1:
                lags.extend(values)
    if not lags:
        return float("nan"), float("nan")
    lags.sort()
    return statistics.median(lags), lags[min(len(lags) - 1, int(0.99 * len(lags)))]


def garbage_collection(path: Path, since: float, until: float) -> tuple[float, int]:
    """The hub's garbage-collector seconds and full collections from ``since`` to ``until`` (the monitor's lines)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    before = [line for line in lines if line[0] <= since] or lines[:1]
    during = [line for line in lines if line[0] <= until + 1] or lines[-1:]
    if not before or not during:
        return float("nan"), 0
    return during[-1][2] - before[-1][2], during[-1][3] - before[-1][3]


def measure(name: str, users: int, workdir: Path, *, quotas: bool = True) -> dict:
    state = workdir / f"{name}-cluster"
    state.mkdir(parents=True)
    cluster, kubeconfig = start_cluster(state, cpu_nodes=-(-users // 100))
    lag_file = workdir / f"{name}-lag.jsonl"
    config = COMMON.format(tiny=TINY_SERVER, proxy_token=PROXY_TOKEN) + spawner_config(name, quotas=quotas) + LAG_MONITOR.format(path=str(lag_file))
    hub = Hub(workdir / f"{name}-hub", kubeconfig, config, start_timeout=600)
    hub.env["PYTHONPATH"] = str(HERE.parent)
    try:
        hub.start()
        names = [f"burst{i:04d}" for i in range(users)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(hub.create_user, [*names, "warmup"]))
        hub.spawn("warmup").raise_for_status()
        hub.wait_ready("warmup", timeout=600)
        time.sleep(2)  # the hub settles
        hub_cpu, cluster_cpu, rss = cpu_seconds(hub.proc.pid), cpu_seconds(cluster.pid), rss_kb(hub.proc.pid)
        began, wall = time.perf_counter(), time.time()
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(hub.spawn, names))
        refused = [r.status_code for r in answers if r.status_code not in (201, 202)]
        if refused:
            raise RuntimeError(f"{name}: {len(refused)} spawns answered {sorted(set(refused))}\n{hub.log()}")
        deadline, proxy = time.monotonic() + 1200, proxy_api_url(hub)
        while (ready := routed_servers(proxy) - 1) < users:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: {ready} of {users} ready after 1200 s\n{hub.log()}")
            time.sleep(0.5)
        elapsed = time.perf_counter() - began
        settled = time.monotonic() + 30  # the hub marks a server ready a moment after it adds the route
        while ready_count(hub) - 1 < users:
            if time.monotonic() > settled:
                raise RuntimeError(f"{name}: the proxy routes {users} servers, the hub does not say all are ready")
            time.sleep(1)
        result = {
            "ready_s": elapsed,
            "hub_cpu": cpu_seconds(hub.proc.pid) - hub_cpu,
            "cluster_cpu": cpu_seconds(cluster.pid) - cluster_cpu,
            "rss_kb": (rss_kb(hub.proc.pid) - rss) / users,
            "lag": lag_percentiles(lag_file, wall, time.time()),
        }
        time.sleep(1.5)  # the monitor's next line covers the end
        result["gc"] = garbage_collection(lag_file, wall, wall + elapsed)
    finally:
        hub.stop()
        cluster.terminate()
        try:
            cluster.wait(60)
        except subprocess.TimeoutExpired:
            cluster.kill()
    return result


COLUMNS = (
    # (heading, width, format, value of a result)
    ("ready s", 9, ".1f", lambda r: r["ready_s"]),
    ("hub CPU s", 11, ".1f", lambda r: r["hub_cpu"]),
    ("cluster CPU s", 15, ".1f", lambda r: r["cluster_cpu"]),
    ("lag p50", 9, ".1f", lambda r: r["lag"][0]),
    ("lag p99", 9, ".1f", lambda r: r["lag"][1]),
    ("RSS/server KB", 15, ".0f", lambda r: r["rss_kb"]),
    ("GC s", 7, ".2f", lambda r: r["gc"][0]),
    ("full GCs", 10, "d", lambda r: r["gc"][1]),
)
#: The columns compared as WorkspaceSpawner / KubeSpawner (the GC columns are shown, not compared).
RATIO_COLUMNS = COLUMNS[:6]


def ratios(base: dict, ours: dict) -> list[float]:
    """WorkspaceSpawner / KubeSpawner for each of :data:`RATIO_COLUMNS`."""
    return [value(ours) / value(base) for _heading, _width, _fmt, value in RATIO_COLUMNS]


#: The width of a row's label (``without cached-reads / with`` is the longest).
LABEL_WIDTH = 30


def print_headings(columns) -> None:
    """The headings of ``columns`` (entries of :data:`COLUMNS`), right-aligned to their widths."""
    print(f"{'':{LABEL_WIDTH}}" + "".join(f"{heading:>{width}}" for heading, width, _fmt, _value in columns))


def print_ratios(row: str, found: list[float]) -> None:
    """A row of ratios under the headings of :data:`RATIO_COLUMNS`."""
    print(f"{row:{LABEL_WIDTH}}" + "".join(f"{ratio:>{width}.2f}" for ratio, (_h, width, _f, _v) in zip(found, RATIO_COLUMNS)))


def label(name: str) -> str:
    """A spawner's row label: a ``--without`` hub as ``without <helper>``."""
    return name.replace(WITHOUT_PREFIX, "without ")


def print_round(users: int, results: dict) -> dict[str, list[float]]:
    """One round's table; its ratios by row label: ``ratio`` (WorkspaceSpawner / KubeSpawner) when both ran, and
    ``without X / with`` for each ``--without`` hub."""
    print(f"{users} simultaneous spawns")
    print_headings(COLUMNS)
    for name, r in results.items():
        print(f"{label(name):{LABEL_WIDTH}}" + "".join(f"{value(r):>{width}{fmt}}" for _heading, width, fmt, value in COLUMNS))
    found = {}
    if {"KubeSpawner", "WorkspaceSpawner"} <= set(results):
        found["ratio"] = ratios(results["KubeSpawner"], results["WorkspaceSpawner"])
    for name in results:
        if name.startswith(WITHOUT_PREFIX) and "WorkspaceSpawner" in results:
            found[f"{label(name)} / with"] = ratios(results["WorkspaceSpawner"], results[name])
    for row, values in found.items():
        print_ratios(row, values)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100, help="simultaneous spawns (default: %(default)s)")
    parser.add_argument(
        "--spawners", default=",".join(SPAWNERS), help="which, comma-separated, in order (default: %(default)s)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="rounds, each measuring every spawner afresh, the order alternating; with more than one, the median "
             "of each ratio is printed last (default: %(default)s)",
    )
    parser.add_argument(
        "--quotas", choices=("on", "off"), default="on",
        help="WorkspaceSpawner's quotas: on as shipped (a SQLite ledger), or off, to see what they cost "
             "(default: %(default)s)",
    )
    parser.add_argument(
        "--without", action="append", default=[], choices=sorted(WITHOUT), metavar="HELPER",
        help="also run WorkspaceSpawner with this helper of its watch caches turned off, and print without / with "
             f"(repeatable; one of {', '.join(sorted(WITHOUT))})",
    )
    args = parser.parse_args(argv)
    order, quotas = args.spawners.split(","), args.quotas == "on"
    order += [WITHOUT_PREFIX + helper for helper in args.without]
    if args.without and "WorkspaceSpawner" not in order:
        parser.error("--without compares with WorkspaceSpawner: keep it in --spawners")
    if not quotas:
        print("WorkspaceSpawner with quotas off")
    every: dict[str, list[list[float]]] = {}
    for number in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="burst-") as tmp:
            results = {name: measure(name, args.users, Path(tmp), quotas=quotas) for name in (order if number % 2 == 0 else order[::-1])}
        if args.rounds > 1:
            print(f"\nround {number + 1} of {args.rounds}")
        for row, found in print_round(args.users, results).items():
            every.setdefault(row, []).append(found)
    if args.rounds > 1 and every:
        print(f"\nmedian ratios of {args.rounds} rounds")
        print_headings(RATIO_COLUMNS)
        for row, rounds in every.items():
            print_ratios(row, [statistics.median(column) for column in zip(*rounds)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
