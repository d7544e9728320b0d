"""The Cluster view's pure parts, with plain dicts: no cluster, no Prometheus.

Covers: joining GPU series to workspaces (our server Pod by owner labels and
annotations; a virt-launcher Pod to its VMI by ``kubevirt.io/created-by``,
never by name; Prometheus's ``exported_*`` relabelling; missing and NaN
readings), kubelet volume stats; per node GPUs (capacity, allocatable,
held by whom, free, unhealthy, unusable on a cordoned or NotReady node),
CPU and memory requested, a virt-launcher Pod never counted beside its VMI,
pools by a node label; card-hours per day from ledger runs (the same
numbers as the quota's own arithmetic, a run across midnight split between
its days), the top users, idle GPU workspaces (unknown without
Prometheus); the local cluster's stable GPU device assignment; the
Prometheus client's timeout check.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from localcluster.controllers.gpumetrics import DeviceAssignments

from workspacespawner.core.names import OWNER_ANNOTATION, SERVER_ANNOTATION, owner_labels
from workspacespawner.core.prometheus import PrometheusClient, Sample
from workspacespawner.dashboard.cluster import card_hour_trend, idle_workspaces, node_views, pool_views, top_users
from workspacespawner.gpu.metrics import ENGINE_ACTIVE, FB_USED, POWER, UTIL, holders, join_gpus, join_volumes
from workspacespawner.quota.policy import OPEN, Run, card_hours

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
POOL = "example.org/pool"


def pool_by_label(node: dict):
    """A node's pool as the value of its :data:`POOL` label (what ``TeamGPUPools`` pools on that label give)."""
    return ((node.get("metadata") or {}).get("labels") or {}).get(POOL)


def meta(name: str, user: str | None = None, server: str = "", uid: str | None = None, **extra) -> dict:
    found = {"name": name, "namespace": "jhub", "uid": uid or f"uid-{name}", **extra}
    if user is not None:
        found["labels"] = {**owner_labels(user), "component": "singleuser-server"}
        found["annotations"] = {"hub.jupyter.org/username": user, SERVER_ANNOTATION: server, OWNER_ANNOTATION: user}
    return found


def pod(name: str, user: str | None = None, server: str = "", *, gpus: int = 0, node: str = "gpu-1", cpu: str = "1",
        memory: str = "2Gi", labels: dict | None = None, phase: str = "Running") -> dict:
    metadata = meta(name, user, server)
    if labels:
        metadata["labels"] = {**metadata.get("labels", {}), **labels}
    limits = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"kind": "Pod", "metadata": metadata, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def vmi(name: str, user: str, server: str, *, gpus: int = 1, node: str = "gpu-1") -> dict:
    return {"kind": "VirtualMachineInstance", "metadata": meta(name, user, server),
            "spec": {"domain": {"resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
                                "devices": {"gpus": [{"name": f"g{i}", "deviceName": "nvidia.com/GA100"} for i in range(gpus)]}}},
            "status": {"phase": "Running", "nodeName": node}}


def launcher(name: str, of: dict, *, gpus: int = 1) -> dict:
    found = pod(name, gpus=gpus, node=of["status"]["nodeName"], cpu="4", memory="16Gi",
                labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": of["metadata"]["uid"]})
    found["metadata"]["ownerReferences"] = [{"kind": "VirtualMachineInstance", "uid": of["metadata"]["uid"]}]
    return found


def node(name: str, *, gpus: int = 8, allocatable: int | None = None, ready: bool = True, cordoned: bool = False,
         labels: dict | None = None) -> dict:
    allocatable = gpus if allocatable is None else allocatable
    return {"kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100", **(labels or {})}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(gpus)},
                       "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(allocatable)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def series(metric: str, gpu: int, value: float, *, pod_name: str = "", namespace: str = "jhub", **labels) -> Sample:
    return Sample({"__name__": metric, "gpu": str(gpu), "UUID": f"GPU-{gpu}", "modelName": "NVIDIA A100", "Hostname": "gpu-1",
                   "pod": pod_name, "namespace": namespace if pod_name else "", **labels}, value)


# -- joining metrics to workspaces ----------------------------------------------------------


def test_holders_join_server_pods_and_virt_launchers_by_labels_never_by_name():
    bob = vmi("bob-gpu", "bob", "gpu")
    pods = [
        pod("jupyter-ann", "ann", gpus=2),
        launcher("virt-launcher-bob-gpu-x1y2z", bob),
        pod("virt-launcher-carl-1-abcde"),  # named like a launcher, no label: nobody's
        pod("jupyter-mallory", "ann"),  # ann's labels copied onto mallory's pod: annotations say ann too, labels agree
    ]
    pods[3]["metadata"]["annotations"][OWNER_ANNOTATION] = "mallory"
    pods[3]["metadata"]["annotations"]["hub.jupyter.org/username"] = "mallory"
    found = holders(pods, [bob])
    assert set(found) == {("jhub", "jupyter-ann"), ("jhub", "virt-launcher-bob-gpu-x1y2z")}
    ann = found[("jhub", "jupyter-ann")]
    assert (ann.user, ann.server, ann.kind, ann.name, ann.node) == ("ann", "", "container", "jupyter-ann", "gpu-1")
    bob_holder = found[("jhub", "virt-launcher-bob-gpu-x1y2z")]
    assert (bob_holder.user, bob_holder.server, bob_holder.kind, bob_holder.name) == ("bob", "gpu", "vm", "bob-gpu")


def test_launcher_of_a_vmi_in_another_namespace_is_not_joined():
    bob = vmi("bob-gpu", "bob", "gpu")
    stray = launcher("virt-launcher-bob-gpu-aaaaa", bob)
    stray["metadata"]["namespace"] = "elsewhere"
    assert holders([stray], [bob]) == {}


def test_join_gpus_gives_readings_and_owners_per_gpu():
    ann = pod("jupyter-ann", "ann", gpus=1)
    samples = {
        UTIL: [series(UTIL, 0, 95, pod_name="jupyter-ann"), series(UTIL, 1, 0)],
        FB_USED: [series(FB_USED, 0, 30000, pod_name="jupyter-ann"), series(FB_USED, 1, math.nan)],
        POWER: [series(POWER, 0, 250.5, pod_name="jupyter-ann")],
    }
    first, second = join_gpus(samples, [ann], [])
    assert (first.node, first.gpu, first.model, first.util, first.fb_used_mib, first.power_watts) == ("gpu-1", 0, "NVIDIA A100", 95, 30000, 250.5)
    assert first.holder.user == "ann" and first.fb_free_mib is None
    assert (second.gpu, second.holder, second.util, second.fb_used_mib, second.power_watts) == (1, None, 0, None, None)


def test_join_gpus_tells_mig_slices_apart_and_reads_their_engine_activity():
    """DCGM reports a MIG slice's utilisation only as DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1): two slices of one card,
    two rows, each with its holder and its util in %; a whole card's engine activity never overrides its util."""
    cy = pod("jupyter-cy", "cy")
    dee = pod("jupyter-dee", "dee")
    mig = {"GPU_I_PROFILE": "1g.10gb", "Hostname": "gpu-1", "namespace": "jhub"}
    samples = {
        UTIL: [series(UTIL, 1, 30)],
        ENGINE_ACTIVE: [Sample({**mig, "gpu": "0", "GPU_I_ID": "7", "pod": "jupyter-cy"}, 0.6),
                        Sample({**mig, "gpu": "0", "GPU_I_ID": "8", "pod": "jupyter-dee"}, 0.01),
                        Sample({"gpu": "1", "Hostname": "gpu-1", "pod": ""}, 0.9)],
    }
    slice_cy, slice_dee, card = join_gpus(samples, [cy, dee], [])
    assert (slice_cy.gpu, slice_cy.instance, slice_cy.mig_profile, slice_cy.holder.user) == (0, "7", "1g.10gb", "cy")
    assert (round(slice_cy.util), slice_dee.holder.user, round(slice_dee.util), card.util) == (60, "dee", 1, 30)


def test_join_gpus_reads_exported_labels_and_takes_the_node_from_the_pod():
    ann = pod("jupyter-ann", "ann", gpus=1, node="gpu-7")
    relabelled = Sample({"gpu": "3", "Hostname": "dcgm-exporter-abcde", "pod": "dcgm-exporter-abcde", "namespace": "gpu-operator",
                         "exported_pod": "jupyter-ann", "exported_namespace": "jhub"}, 40)
    unheld = Sample({"gpu": "4", "Hostname": "dcgm-exporter-abcde", "kubernetes_node": "gpu-7", "pod": "", "namespace": ""}, 0)
    stats = join_gpus({UTIL: [relabelled, unheld]}, [ann], [])
    assert [(s.node, s.gpu, s.holder.user if s.holder else None) for s in stats] == [("gpu-7", 3, "ann"), ("gpu-7", 4, None)]


def test_join_volumes_pairs_used_with_capacity():
    used = [Sample({"namespace": "jhub", "persistentvolumeclaim": "home-ann"}, 5e9),
            Sample({"namespace": "jhub", "persistentvolumeclaim": "home-bob"}, 1e9)]
    capacity = [Sample({"namespace": "jhub", "persistentvolumeclaim": "home-ann"}, 10 * 2**30)]
    found = join_volumes(used, capacity)
    assert found[("jhub", "home-ann")].used_bytes == 5e9 and found[("jhub", "home-ann")].capacity_bytes == 10 * 2**30
    assert found[("jhub", "home-bob")].capacity_bytes is None


# -- nodes and pools --------------------------------------------------------------------------


def test_node_views_count_gpus_once_and_say_by_whom():
    bob = vmi("bob-gpu", "bob", "gpu", gpus=2)
    compute = [pod("jupyter-ann", "ann", gpus=3), bob, launcher("virt-launcher-bob-gpu-q", bob, gpus=2),
               pod("finished", "ann", gpus=1, phase="Succeeded"), pod("cpu-only", "carl", node="cpu-1")]
    views = node_views([node("gpu-1", gpus=8, allocatable=7), node("cpu-1", gpus=0)], compute)
    cpu, gpu = views
    assert (gpu.gpu_capacity, gpu.gpu_allocatable, gpu.gpus_held, gpu.gpus_free, gpu.gpus_unhealthy, gpu.gpus_unusable) == (8, 7, 5, 2, 1, 0)
    assert [(h.user, h.server, h.kind, h.gpus) for h in gpu.holdings] == [("ann", "", "container", 3), ("bob", "gpu", "vm", 2)]
    assert (gpu.cpu_requested, gpu.memory_requested_gib) == (5.0, 18.0)  # ann's 1 + 2 GiB and the VMI's 4 + 16 GiB; not its launcher
    assert (cpu.gpu_capacity, cpu.gpus_free, cpu.holdings, cpu.cpu_requested) == (0, 0, (), 1.0)
    assert [(h.user, h.cpu, h.memory_gib) for h in cpu.cpu_holdings] == [("carl", 1.0, 2.0)]  # #38 item 9
    assert gpu.cpu_holdings == ()


def test_a_cpu_workspace_on_a_gpu_node_is_listed_with_what_it_takes():
    """#38 item 9: the Cluster view names the CPU-only workspaces of each node, not only the GPU holders."""
    (gpu,) = node_views([node("gpu-1")], [pod("jupyter-ann", "ann", gpus=1), pod("jupyter-dan", "dan", cpu="2", memory="4Gi")])
    assert [h.user for h in gpu.holdings] == ["ann"]
    assert [(h.user, h.kind, h.cpu, h.memory_gib, h.gpus) for h in gpu.cpu_holdings] == [("dan", "container", 2.0, 4.0, 0)]


def test_a_mig_node_counts_its_slices_and_says_which():
    """A node in MIG mode advertises slices, not nvidia.com/gpu: the view counts the slices held and free by kind."""
    mig = node("mig-1", gpus=0)
    for part in ("capacity", "allocatable"):
        mig["status"][part].update({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "1"})
    slice_pod = pod("jupyter-cy", "cy", node="mig-1")
    slice_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = "1"
    [view] = node_views([mig], [slice_pod])
    assert (view.gpu_allocatable, view.gpus_held, view.gpus_free) == (8, 1, 7)
    assert view.units == "7 × MIG 1g.10gb, 1 × MIG 3g.40gb"
    assert node_views([node("gpu-1")], [])[0].units == ""  # whole GPUs only: the product says it all


@pytest.mark.parametrize("state", [{"cordoned": True}, {"ready": False}])
def test_a_cordoned_or_not_ready_node_has_no_free_gpus(state):
    (view,) = node_views([node("gpu-1", **state)], [pod("jupyter-ann", "ann", gpus=2)])
    assert (view.gpus_free, view.gpus_unusable, view.gpus_held) == (0, 8, 2)
    assert view.schedulable is not state.get("cordoned", False) and view.ready is state.get("ready", True)


def test_pools_sum_their_nodes():
    nodes = [node("a", labels={POOL: "vision"}), node("b", allocatable=6, labels={POOL: "vision"}), node("c", gpus=4)]
    compute = [pod("jupyter-ann", "ann", gpus=2, node="a"), pod("jupyter-bob", "bob", gpus=1, node="c")]
    vision, unpooled = pool_views(node_views(nodes, compute, pool_of=pool_by_label))
    assert (vision.name, vision.nodes, vision.gpu_capacity, vision.gpus_free, vision.gpus_unhealthy) == ("vision", ("a", "b"), 16, 12, 2)
    assert (unpooled.name, unpooled.nodes, unpooled.gpus_held, unpooled.gpus_free) == (None, ("c",), 1, 3)


# -- card-hours, top users, idle -----------------------------------------------------------------


def run(user: str, gpus: int, start: datetime, hours: float | None) -> Run:
    stopped = None if hours is None else start + timedelta(hours=hours)
    return Run(gpus=gpus, started=start, stopped=stopped, user=user, state=OPEN if hours is None else "closed")


def test_card_hour_trend_splits_days_and_agrees_with_the_quota():
    runs = [run("ann", 2, datetime(2026, 3, 8, 22, 0, tzinfo=UTC), 4),  # 2 GPUs, 22:00 to 02:00: 4 and 4 card-hours
            run("ann", 1, datetime(2026, 3, 10, 9, 0, tzinfo=UTC), None)]  # open: 3 hours until NOW
    days = card_hour_trend(runs, NOW, 3)
    assert [(d.day.isoformat(), d.card_hours) for d in days] == [("2026-03-08", 4.0), ("2026-03-09", 4.0), ("2026-03-10", 3.0)]
    start = datetime(2026, 3, 8, tzinfo=UTC)
    assert sum(d.card_hours for d in days) == pytest.approx(card_hours(runs, start, NOW + timedelta(days=1), NOW))
    with pytest.raises(ValueError, match="days"):
        card_hour_trend(runs, NOW, 0)


def test_card_hour_trend_follows_the_time_zone():
    runs = [run("ann", 1, datetime(2026, 3, 9, 22, 30, tzinfo=UTC), 1)]  # 23:30 to 00:30 in Berlin (UTC+1)
    days = card_hour_trend(runs, NOW, 2, "Europe/Berlin")
    assert [d.card_hours for d in days] == [0.5, 0.5]


def test_top_users_by_gpus_now_then_card_hours():
    views = node_views([node("gpu-1")], [pod("jupyter-ann", "ann", gpus=1), pod("jupyter-bob", "bob", gpus=4)])
    runs = {"carl": [run("carl", 8, NOW - timedelta(days=2), 10)], "ann": [run("ann", 1, NOW - timedelta(hours=5), None)],
            "dora": [run("dora", 1, NOW - timedelta(days=45), 10)]}
    users = top_users(views, runs, NOW)
    assert [(u.user, u.gpus_now, u.total_7, u.total_30) for u in users] == [
        ("bob", 4, 0.0, 0.0), ("ann", 1, 5.0, 5.0), ("carl", 0, 80.0, 80.0)]
    assert len(users[1].days_7) == 7 and len(users[1].days_30) == 30 and users[1].days_30[-1].day == NOW.date()
    assert [u.user for u in top_users(views, runs, NOW, limit=1)] == ["bob"]


def test_idle_workspaces_are_unknown_without_prometheus_and_flagged_below_the_threshold():
    bob = vmi("bob-gpu", "bob", "gpu", gpus=2)
    bob_launcher = launcher("virt-launcher-bob-gpu-q", bob, gpus=2)
    ann = pod("jupyter-ann", "ann", gpus=2)
    views = node_views([node("gpu-1")], [ann, bob, bob_launcher])
    assert idle_workspaces(views, None, threshold=5) is None
    averages = join_gpus({UTIL: [series(UTIL, 0, 1.5, pod_name="virt-launcher-bob-gpu-q"), series(UTIL, 1, 0, pod_name="virt-launcher-bob-gpu-q"),
                                 series(UTIL, 2, 2, pod_name="jupyter-ann"), series(UTIL, 3, 60, pod_name="jupyter-ann")]}, [ann, bob_launcher], [bob])
    (idle,) = idle_workspaces(views, averages, threshold=5)
    assert (idle.holding.user, idle.holding.kind, idle.max_util, idle.gpus) == ("bob", "vm", 1.5, (0, 1))
    assert idle_workspaces(views, [], threshold=5) == []  # nothing reported: nobody flagged


# -- the local cluster's devices; the client's settings ---------------------------------------------


def test_device_assignment_is_stable_and_reuses_freed_devices():
    devices = DeviceAssignments()
    assert devices.assign("n", 8, {"a": 2, "b": 1}) == {"a": [0, 1], "b": [2]}
    assert devices.assign("n", 8, {"b": 1, "c": 3, "a": 2}) == {"a": [0, 1], "b": [2], "c": [3, 4, 5]}
    assert devices.assign("n", 8, {"b": 1, "c": 3, "d": 4}) == {"b": [2], "c": [3, 4, 5], "d": [0, 1, 6, 7]}


def test_prometheus_client_refuses_a_timeout_that_is_not_positive():
    with pytest.raises(ValueError, match="timeout must be more than 0 seconds, not 0"):
        PrometheusClient("http://prometheus:9090", timeout=0)
    assert PrometheusClient("http://prometheus:9090/prom/", timeout=3).url == "http://prometheus:9090/prom"
