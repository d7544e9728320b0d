"""The dashboard's Cluster view as the hub runs it, on the local cluster with a real Prometheus.

Covers: a plain user gets 403 from ``api/cluster`` and from the page; a team lead (a member of the ``research`` team
group) and an admin read ``api/cluster``; per node, the GPUs held per user and kind (a 1-GPU container server of a
team member, a 1-GPU container server of a user outside the team, a GPU VirtualMachineInstance of a third user) and
the free GPUs equal what the cluster's Pods, VMIs and Nodes say in the same test; the team lead sees the team
member's name and a label of each person's own, "user A"... (no name, no server, no object name) for the others, the admin every name; with
the node agent's dcgm-exporter-format metrics scraped by Debian's Prometheus, each held GPU's utilisation,
framebuffer memory and power are the values the test set, joined to its holder (the VM's through its virt-launcher
Pod); the workspace whose GPU stays at 0 % is flagged idle and the busy one is not (``avg_over_time`` over a window
longer than the samples there are); the page shows the same numbers; once Prometheus is gone, the API and the
page still show the nodes and their holders, with a sentence naming Prometheus's URL and the error.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import pytest
import requests

from localcluster import ClusterThread
from tests.hub.test_dashboard_hub import DashboardHub, dashboard_config, token_of
from tests.support.hubharness import core_and_custom, free_port, login
from tests.support.prometheus import Prometheus, Unavailable
from workspacespawner.core import names

NS = "default"
GPU = "nvidia.com/gpu"
BUSY = {"util": 91, "fb_used_mib": 40000, "power_watts": 310}


@pytest.fixture(scope="module")
def prometheus_required():
    if not os.path.exists("/usr/bin/prometheus"):
        if os.environ.get("CI"):
            pytest.fail("prometheus is required in CI ($CI is set)", pytrace=False)
        pytest.skip("/usr/bin/prometheus is not installed (Debian package prometheus)")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, prometheus_required):
    """``(thread, cluster, hub, prometheus)``: the local cluster on its thread, Prometheus scraping its node agent's
    metrics, and a hub whose dashboard asks that Prometheus."""
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    prometheus = None
    try:
        url = thread.call(lambda c: c.controllers["nodeagent"].metrics.serve())
        try:
            prometheus = Prometheus({"dcgm": f"{url}/metrics"})
        except Unavailable as e:  # pragma: no cover - the fixture checked the program
            pytest.skip(str(e))
        prometheus.wait_ready()
        ledger = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"
        config = dashboard_config(ledger) + (f"c.GPUIdle.prometheus_url = {prometheus.url!r}\n"
                                             "c.GPUIdle.gpu_idle_timeout = 600\n"
                                             "c.GPUIdle.utilisation_threshold = 5\n")
        hub = DashboardHub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config, dashboard_port=free_port())
        hub.start()
        try:
            hub.wait_service()
            hub.create_user("alice")
            hub.create_user("carol", groups=("research",))
            hub.create_user("lead", groups=("research",))
            hub.create_user("dave")
            r = hub.api("POST", "/users/boss", json={"admin": True})
            assert r.status_code in (201, 409), r.text
            hub.start_server("carol", {"profile": "jupyterlab-1gpu"})
            hub.start_server("alice", {"profile": "jupyterlab-1gpu"})
            thread.call(lambda c: c.store.create(c.store.kind("kubevirt.io", "v1", "virtualmachineinstances"), NS,
                                                 gpu_vmi()))
            yield thread, cluster, hub, prometheus
        finally:
            hub.stop()
    finally:
        if prometheus is not None:
            prometheus.stop()
        thread.stop()


def gpu_vmi() -> dict:
    """A GPU VirtualMachineInstance of dave's server ``gpu``, labelled as the spawner labels its workspaces."""
    meta = {"name": "dave-gpu", "labels": {**names.owner_labels("dave"), "component": "singleuser-server"},
            "annotations": {"hub.jupyter.org/username": "dave", names.SERVER_ANNOTATION: "gpu",
                            names.OWNER_ANNOTATION: "dave"}}
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta,
        "spec": {"terminationGracePeriodSeconds": 1,
                 "domain": {"resources": {"requests": {"memory": "1Gi", "cpu": "2"}},
                            "devices": {"gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"}]}}},
    }


def wait(condition, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def cluster_holdings(cluster) -> tuple[dict, dict]:
    """From the cluster's own objects: ``{(node, user, kind): GPUs}`` of our workspaces, and ``{node: allocatable GPUs}``."""
    held = defaultdict(int)
    with core_and_custom(cluster) as (core, custom):
        for pod in core.list_namespaced_pod(NS).items:
            if (pod.metadata.labels or {}).get("kubevirt.io") == "virt-launcher":
                continue  # stands for its VMI, counted below
            user = (pod.metadata.annotations or {}).get("hub.jupyter.org/username")
            gpus = sum(int((c.resources.limits or {}).get(GPU, 0)) for c in pod.spec.containers)
            if user and gpus and pod.status.phase == "Running":
                held[(pod.spec.node_name, user, "container")] += gpus
        vmis = custom.list_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachineinstances")["items"]
        for vmi in vmis:
            if (vmi.get("status") or {}).get("phase") == "Running":
                gpus = len(vmi["spec"]["domain"]["devices"].get("gpus") or [])
                held[(vmi["status"]["nodeName"], vmi["metadata"]["annotations"]["hub.jupyter.org/username"], "vm")] += gpus
        allocatable = {n.metadata.name: int((n.status.allocatable or {}).get(GPU, 0)) for n in core.list_node().items}
    return dict(held), allocatable


def shown_holdings(data: dict) -> dict:
    found = defaultdict(int)
    for node in data["nodes"]:
        for h in node["holdings"]:
            found[(node["name"], h["user"], h["kind"])] += h["gpus"]
    return dict(found)


def test_a_plain_user_is_refused_on_the_api_and_the_page(setup):
    _thread, _cluster, hub, _prometheus = setup
    alice = token_of(hub, "alice")
    r = requests.get(hub.service_url("api/cluster"), headers=alice, timeout=60)
    assert r.status_code == 403 and "team leads and admins" in r.json()["message"]
    session = login(hub, "alice")
    assert session.get(hub.service_url("cluster"), timeout=60).status_code == 403
    assert session.get(hub.service_url(), timeout=60).status_code == 200  # her own page still works


def test_gpus_held_and_free_equal_the_clusters_and_names_follow_the_viewer(setup):
    _thread, cluster, hub, _prometheus = setup
    held, allocatable = wait(lambda: (lambda h: h if any(k[2] == "vm" for k in h[0]) else None)(cluster_holdings(cluster)),
                             "the VMI to run")
    assert sorted((user, kind, gpus) for (_n, user, kind), gpus in held.items()) == [
        ("alice", "container", 1), ("carol", "container", 1), ("dave", "vm", 1)]

    admin = token_of(hub, "boss")
    data = wait(lambda: (lambda d: d if shown_holdings(d) == held else None)(
        requests.get(hub.service_url("api/cluster"), headers=admin, timeout=60).json()), "the service's caches")
    assert shown_holdings(data) == held  # every name, the VM once (its virt-launcher Pod is not a second holder)
    for node in data["nodes"]:
        in_use = sum(g for (n, _u, _k), g in held.items() if n == node["name"])
        assert node["gpus"]["allocatable"] == allocatable[node["name"]]
        assert node["gpus"]["held"] == in_use
        assert node["gpus"]["free"] == allocatable[node["name"]] - in_use
    assert data["totals"]["gpus"]["free"] == sum(allocatable.values()) - sum(held.values())

    lead = token_of(hub, "lead", "custom:workspaces:read!group=research", "custom:workspaces:cluster")
    r = requests.get(hub.service_url("api/cluster"), headers=lead, timeout=60)
    assert r.status_code == 200, r.text
    seen = r.json()
    assert [n["name"] for n in seen["nodes"]] == [n["name"] for n in data["nodes"]]  # every node
    holdings = [h for n in seen["nodes"] for h in n["holdings"]]
    assert sorted(((h["user"], h["kind"], h["hidden"]) for h in holdings), key=lambda t: (t[0] or "", t[1])) == [
        (None, "container", True), (None, "vm", True), ("carol", "container", False)]
    assert all(h["server"] is None and h["name"] is None for h in holdings if h["hidden"])
    assert sorted(h["alias"] for h in holdings if h["hidden"]) == ["user A", "user B"]  # alice, dave: two labels
    assert "alice" not in r.text and "dave" not in r.text
    users = {(u["user"], u["hidden"], u["gpus_now"]) for u in seen["top_users"]}
    assert ("carol", False, 1) in users and (None, True, 1) in users and "alice" not in str(users)


def server_pod(cluster, user: str) -> str:
    with core_and_custom(cluster) as (core, _custom):
        (pod,) = [p for p in core.list_namespaced_pod(NS, label_selector=names.owner_selector(user)).items
                  if (p.metadata.annotations or {}).get("hub.jupyter.org/username") == user]
    return pod.metadata.name


def test_gpu_readings_come_from_prometheus_and_the_idle_workspace_is_flagged(setup):
    thread, cluster, hub, _prometheus = setup
    admin = token_of(hub, "boss")
    carol_pod = server_pod(cluster, "carol")
    holders = wait(lambda: (lambda h: h if len([w for w in h.values() if w["pod"]]) == 3 else None)(
        thread.call(lambda c: c.controllers["nodeagent"].metrics.holders()).get("gpu-node-1", {})), "three holders")
    (carol_gpu,) = [i for i, who in holders.items() if who["pod"] == carol_pod]
    vm_gpus = [i for i, who in holders.items() if who["container"] == "compute"]
    thread.call(lambda c: c.controllers["nodeagent"].metrics.set_gpu("gpu-node-1", carol_gpu, **BUSY))
    for index in vm_gpus:
        thread.call(lambda c, i=index: c.controllers["nodeagent"].metrics.set_gpu("gpu-node-1", i, util=0,
                                                                                    fb_used_mib=512, power_watts=61.5))

    last = []

    def readings():
        data = requests.get(hub.service_url("api/cluster"), headers=admin, timeout=60).json()
        last[:] = [data]
        if data["prometheus"]["error"]:
            return None
        node = next(n for n in data["nodes"] if n["name"] == "gpu-node-1")
        by_gpu = {g["gpu"]: g for g in node["gpu_readings"] or []}
        idle = {(w["user"], w["kind"]) for w in data["idle"] or []}
        busy = by_gpu.get(carol_gpu)
        done = busy and busy["util"] == BUSY["util"] and ("carol", "container") not in idle and ("dave", "vm") in idle
        return (data, by_gpu, idle) if done else None

    try:
        data, by_gpu, idle = wait(readings, "Prometheus's readings of the GPUs set", timeout=120)
    except AssertionError as e:
        raise AssertionError(f"{e}; GPU {carol_gpu} busy, {vm_gpus} idle; the service's last answer: {last}") from None
    busy = by_gpu[carol_gpu]
    assert (busy["util"], busy["fb_used_mib"], busy["power_watts"]) == (91, 40000, 310)
    assert busy["holder"] == {"user": "carol", "server": "", "kind": "container", "hidden": False,
                               "alias": None}
    for index in vm_gpus:
        assert (by_gpu[index]["util"], by_gpu[index]["fb_used_mib"], by_gpu[index]["power_watts"]) == (0, 512, 61.5)
        assert by_gpu[index]["holder"] == {"user": "dave", "server": "gpu", "kind": "vm", "hidden": False,
                                                  "alias": None}
    assert ("dave", "vm") in idle and ("carol", "container") not in idle
    assert data["idle_window"] == 600 and data["idle_threshold"] == 5

    session = login(hub, "boss")
    page = session.get(hub.service_url("cluster"), timeout=60)
    assert page.status_code == 200, page.text
    assert 'data-node="gpu-node-1"' in page.text and "91 %" in page.text and "310 W" in page.text
    assert "40000 MiB" in page.text


def test_without_prometheus_the_cluster_part_stays_with_a_sentence_naming_it(setup):
    _thread, _cluster, hub, prometheus = setup
    prometheus.stop()  # the last test of the module: nothing after it needs Prometheus
    admin = token_of(hub, "boss")
    r = requests.get(hub.service_url("api/cluster"), headers=admin, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["prometheus"]["error"].startswith(f"Prometheus at {prometheus.url} did not answer")
    assert data["idle"] is None and all(n["gpu_readings"] is None for n in data["nodes"])
    assert sum(h["gpus"] for n in data["nodes"] for h in n["holdings"]) == 3
    page = login(hub, "boss").get(hub.service_url("cluster"), timeout=60)
    assert page.status_code == 200
    assert f"Prometheus at {prometheus.url} did not answer" in page.text and 'data-node="gpu-node-1"' in page.text
    assert "while Prometheus does not answer" in page.text
