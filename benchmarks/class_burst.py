"""A class burst on too few GPUs: students waiting in Kueue's line against students refused and clicking again.

At 9:00 a class asks for more GPUs than there are. The script runs the same burst twice on one real control plane
with Kueue's own manager (localcluster.realplane, ``WORKSPACESPAWNER_K8S_BIN`` and ``WORKSPACESPAWNER_KUEUE_DIR``):
``--gpus`` A100s on two GPU nodes, two courses (``--course-a`` and ``--course-b`` students, one GPU each), a real
JupyterHub with WorkspaceSpawner and the 1-GPU profile, and

- **queue**: the courses' GPU queues (``c.GPUQueues.queues``: half the GPUs each, one cohort, so a course lends what
  it does not use), applied as ``workspacespawner queues`` renders them: every student clicks once and waits;
- **refuse**: no queues, as before issue #41: a start that finds no GPU is refused at once with the numbers, and
  the student clicks again ``--retry`` seconds later, until one starts.

Every student's server, once ready, is used for ``--session`` seconds and stopped (the student is done). The
singleuser server is a tiny HTTP server (benchmarks/burst.py's), so the numbers are the hub's, the queue's and the
cluster's, not JupyterLab's start. Printed per way:

- ``done s``: from the burst to the last student done;
- ``starts lost``: starts that ended without a server (refusals in the second way: each one a click that failed);
- ``gap p50 / p90 s``: from a GPU freed (a server seen gone) to the next student's server ready, while someone
  waited;
- ``idle GPU-s``: GPU-seconds no server held while a student waited (sampled twice a second);
- ``A/B share``: the GPUs each course held on average while both had students waiting (fair: half each);

then the ratios queue / refuse of done, gap and idle GPU-seconds.

    python benchmarks/class_burst.py                      # 40 students (24 + 16), 16 GPUs
    python benchmarks/class_burst.py --course-a 8 --course-b 4 --gpus 4 --session 10   # a quick one
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from benchmarks.burst import TINY_SERVER  # noqa: E402
from tests.support.hubharness import Hub, config_pieces  # noqa: E402
from workspacespawner.queue.config import GPUQueues  # noqa: E402
from workspacespawner.queue.kueueobjects import KUEUE_CONFIG, render  # noqa: E402

A100 = "NVIDIA-A100-SXM4-80GB"
PROFILE = {"profile": "jupyterlab-1gpu"}
#: How often the script looks at the hub's servers (its REST API's user list: one request).
LOOK = 0.5

HUB = """
import sys
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}  # every POST answers at once
c.JupyterHub.log_level = "WARN"
c.JupyterHub.cleanup_servers = False
c.KubeSpawner.cmd = [sys.executable, "-S", "-c", {tiny!r}]
c.KubeSpawner.start_timeout = 900
c.KubeSpawner.http_timeout = 120
c.KubeSpawner.k8s_api_request_timeout = 60
c.WorkspaceQuota.ledger_url = {ledger!r}
c.WorkspaceQuota.max_gpus = 1
"""


def nodes(gpus: int) -> list[dict]:
    """A CPU node and two GPU nodes sharing ``gpus`` A100s (tainted as the local cluster's GPU nodes are)."""
    from localcluster.controllers.scheduler import GPU_TAINT

    half = gpus // 2
    gpu_nodes = [{"name": f"gpu-node-{i + 1}", "cpu": "64", "memory": "512Gi", "gpus": n, "gpu_product": A100,
                  "taints": [GPU_TAINT]} for i, n in enumerate((gpus - half, half)) if n]
    return [{"name": "cpu-node-1", "cpu": "16", "memory": "64Gi", "gpus": 0}, *gpu_nodes]


def queues(gpus: int) -> dict:
    """The two courses' queues: half the GPUs each, in one cohort."""
    half = gpus // 2
    return {
        "course-a": {"groups": ["course-a"], "gpus": {"nvidia.com/gpu": {A100: gpus - half}}, "cohort": "class",
                     "max_wait_seconds": 850},
        "course-b": {"groups": ["course-b"], "gpus": {"nvidia.com/gpu": {A100: half}}, "cohort": "class",
                     "max_wait_seconds": 850},
    }


def apply_queues(kubeconfig: Path, spec: dict) -> None:
    import kubernetes
    from traitlets.config import Config

    config = Config()
    config.GPUQueues.queues = spec
    plurals = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
               "WorkloadPriorityClass": "workloadpriorityclasses"}
    client = kubernetes.config.new_client_from_config(str(kubeconfig))
    try:
        custom = kubernetes.client.CustomObjectsApi(client)
        for obj in render(GPUQueues(config=config).all(), "default"):
            group, version = obj["apiVersion"].split("/")
            if obj["metadata"].get("namespace"):
                custom.create_namespaced_custom_object(group, version, "default", plurals[obj["kind"]], obj)
            else:
                custom.create_cluster_custom_object(group, version, plurals[obj["kind"]], obj)
        deadline = time.monotonic() + 60
        for name in spec:
            while True:
                found = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"workspaces-{name}")
                conditions = (found.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Active" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ClusterQueue workspaces-{name} not Active: {conditions}")
                time.sleep(0.5)
    finally:
        client.close()


@dataclass
class Student:
    name: str
    course: str
    click_at: float = 0.0  # when the student (next) clicks Start
    clicked: bool = False
    post: object = None  # the click's POST (a Future of the hub's answer)
    ready_at: float | None = None
    stop_sent: bool = False
    done_at: float | None = None
    lost: int = 0


@dataclass
class Run:
    students: list[Student]
    freed: list[float] = field(default_factory=list)  # a GPU freed: a server seen gone after its session
    ready: list[float] = field(default_factory=list)
    idle_gpu_seconds: float = 0.0
    elapsed: float = 0.0
    shares: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


def burst(hub: Hub, students: list[Student], *, gpus: int, session: float, retry: float) -> Run:
    """Run the class on ``hub`` until every student is done (see the module docstring)."""
    run = Run(students)
    pool = ThreadPoolExecutor(32)
    began = time.monotonic()
    for s in students:
        s.click_at = began
    deadline = began + 1800
    while any(s.done_at is None for s in students):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done after 1800 s: {[s for s in students if s.done_at is None][:5]}\n{hub.log()}")
        now = time.monotonic()
        for s in students:
            if not s.clicked and s.done_at is None and now >= s.click_at:
                s.clicked = True
                s.post = pool.submit(lambda name: (hub.spawn(name, PROFILE), time.monotonic()), s.name)
        asked = time.monotonic()
        r = hub.api("GET", "/users", params={"limit": 2000})
        r.raise_for_status()
        body = r.json()
        servers = {u["name"]: (u.get("servers") or {}).get("") for u in (body["items"] if isinstance(body, dict) else body)}
        now = time.monotonic()
        held = defaultdict(int)
        for s in students:
            server = servers.get(s.name)
            if s.clicked and s.ready_at is None:
                if server and server.get("ready"):
                    s.ready_at = now
                    run.ready.append(now)
                elif server is None and s.post.done() and s.post.result()[1] < asked:  # answered, no server: refused
                    s.lost += 1
                    s.clicked, s.click_at = False, now + retry
            if s.ready_at is not None and s.done_at is None:
                held[s.course] += 1
                if not s.stop_sent and now - s.ready_at >= session:
                    s.stop_sent = True
                    pool.submit(hub.api, "DELETE", f"/users/{s.name}/server")
                elif s.stop_sent and server is None:
                    s.done_at = now
                    run.freed.append(now)
        waiting = [s for s in students if s.ready_at is None]
        if waiting:
            run.idle_gpu_seconds += max(0, gpus - sum(held.values())) * LOOK
            if {s.course for s in waiting} == {"a", "b"}:
                for course in ("a", "b"):
                    run.shares[course].append(held[course])
        time.sleep(LOOK)
    pool.shutdown(wait=True)
    run.elapsed = max(s.done_at for s in students) - began
    return run


def gaps(run: Run) -> list[float]:
    """From each GPU freed while someone waited to the next server ready after it (one ready per freed GPU)."""
    readies, found = sorted(run.ready), []
    for freed in sorted(run.freed):
        later = [r for r in readies if r >= freed]
        if not later:
            continue
        found.append(later[0] - freed)
        readies.remove(later[0])
    return found


def measure(way: str, cluster, workdir: Path, args) -> Run:
    queued = way == "queue"
    spec = queues(args.gpus)
    ledger = f"sqlite:///{workdir / f'{way}-ledger.sqlite'}"
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + HUB.format(tiny=TINY_SERVER, ledger=ledger)
    if queued:
        config += f"c.GPUQueues.queues = {spec!r}\n"
    hub = Hub(workdir / f"{way}-hub", cluster.kubeconfig, config, start_timeout=900)
    hub.env["PYTHONPATH"] = str(HERE.parent)
    hub.start()
    try:
        students = [Student(f"{way}-a{i:02d}", "a") for i in range(args.course_a)]
        students += [Student(f"{way}-b{i:02d}", "b") for i in range(args.course_b)]
        for s in students:
            hub.create_user(s.name, groups=(f"course-{s.course}",))
        return burst(hub, students, gpus=args.gpus, session=args.session, retry=args.retry)
    finally:
        hub.stop()


def summary(run: Run) -> dict:
    found = gaps(run)
    share = {c: statistics.mean(v) if v else float("nan") for c, v in run.shares.items()}
    return {
        "done": run.elapsed,
        "lost": sum(s.lost for s in run.students),
        "gap50": statistics.median(found) if found else float("nan"),
        "gap90": statistics.quantiles(found, n=10)[-1] if len(found) >= 2 else float("nan"),
        "idle": run.idle_gpu_seconds,
        "share": f"{share.get('a', float('nan')):.1f}/{share.get('b', float('nan')):.1f}",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--course-a", type=int, default=24, help="students of course A (default: %(default)s)")
    parser.add_argument("--course-b", type=int, default=16, help="students of course B (default: %(default)s)")
    parser.add_argument("--gpus", type=int, default=16, help="A100s in the cluster (default: %(default)s)")
    parser.add_argument("--session", type=float, default=20.0,
                        help="seconds each student uses a server once it is ready (default: %(default)s)")
    parser.add_argument("--retry", type=float, default=10.0,
                        help="seconds a refused student waits before clicking again (default: %(default)s)")
    args = parser.parse_args(argv)
    from localcluster.realplane.agents import RealCluster

    k8s, kueue = os.environ.get("WORKSPACESPAWNER_K8S_BIN"), os.environ.get("WORKSPACESPAWNER_KUEUE_DIR")
    if not k8s or not kueue:
        parser.error("set WORKSPACESPAWNER_K8S_BIN (tools/k8s/build.sh) and WORKSPACESPAWNER_KUEUE_DIR (tools/kueue/build.sh)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="class-burst-") as tmp:
        workdir = Path(tmp)
        real = RealCluster(workdir / "cluster", Path(k8s), kueue_dir=Path(kueue), kueue_config=KUEUE_CONFIG,
                           nodes=nodes(args.gpus)).start()
        try:
            apply_queues(real.kubeconfig, queues(args.gpus))
            for way in ("queue", "refuse"):
                print(f"{way}: {args.course_a} + {args.course_b} students, {args.gpus} GPUs ...", flush=True)
                results[way] = summary(measure(way, real.agents, workdir, args))
        finally:
            real.stop()
    print(f"\n{args.course_a} + {args.course_b} students, {args.gpus} A100s, {args.session:g} s sessions, "
          f"retry after {args.retry:g} s")
    print(f"{'':8}{'done s':>9}{'starts lost':>13}{'gap p50 s':>11}{'gap p90 s':>11}{'idle GPU-s':>12}{'A/B share':>11}")
    for way, r in results.items():
        print(f"{way:8}{r['done']:9.1f}{r['lost']:13d}{r['gap50']:11.1f}{r['gap90']:11.1f}{r['idle']:12.0f}{r['share']:>11}")
    q, f = results["queue"], results["refuse"]
    print(f"queue / refuse: done {q['done'] / f['done']:.2f}, gap p50 {q['gap50'] / f['gap50']:.2f}, "
          f"idle GPU-s {q['idle'] / f['idle'] if f['idle'] else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
