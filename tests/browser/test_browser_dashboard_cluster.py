"""The dashboard's Cluster view in a real browser (Debian's chromium, driven by playwright) on the demo's configuration.

With the local cluster's node agent metrics scraped by Debian's Prometheus: the researcher (a member of the demo's
``research`` team group: a team lead) and the admin each open /services/workspaces/cluster; the GPU node's held and
free GPUs on the page equal the cluster's Pods and Node in the same test; the researcher's own 1-GPU server is named
with its GPU's utilisation, and student1's appears to her as "user A" (never by name), while the admin sees
both names; student1 (no team) gets 403 on the page and through the API, and no Cluster link. Screenshots for a
person to look at, at 1280 px and at a 390 px phone width: test-artifacts/dashboard-cluster-teamlead.png,
dashboard-cluster-admin.png, dashboard-cluster-teamlead-phone.png.
"""

from __future__ import annotations

import os

import pytest

from localcluster import ClusterThread
from tests.browser.test_browser_demo import CHROMIUM, launch, log_in
from tests.hub.test_dashboard_hub import DashboardHub
from tests.support.hubharness import core_and_custom, free_port
from tests.support.paths import ARTIFACTS
from tests.support.prometheus import Prometheus
from workspacespawner.core import names
from workspacespawner.demo import DEMO_NODES, config_dir, demo_config

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

GPU_NODE = "gpu-node-1"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if not os.path.exists("/usr/bin/prometheus"):
        if os.environ.get("CI"):
            pytest.fail("prometheus is required in CI ($CI is set)", pytrace=False)
        pytest.skip("/usr/bin/prometheus is not installed (Debian package prometheus)")
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"), nodes=DEMO_NODES)
    cluster = thread.start()
    prometheus = None
    try:
        url = thread.call(lambda c: c.controllers["nodeagent"].metrics.serve())
        prometheus = Prometheus({"dcgm": f"{url}/metrics"})
        prometheus.wait_ready()
        state = tmp_path_factory.mktemp("demo")
        port = free_port()
        config = demo_config(state, config_dir(), port=8000, dashboard_port=port)
        config += f"\nc.GPUIdle.prometheus_url = {prometheus.url!r}\n"
        hub = DashboardHub(state, cluster.kubeconfig, config, dashboard_port=port).start()
        try:
            hub.wait_service()
            yield thread, cluster, hub
        finally:
            hub.stop()
    finally:
        if prometheus is not None:
            prometheus.stop()
        thread.stop()


def server_pod(cluster, user: str):
    with core_and_custom(cluster) as (core, _custom):
        (pod,) = [q for q in core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items
                  if q.metadata.annotations.get("hub.jupyter.org/username") == user]
        node = core.read_node(pod.spec.node_name)
    return pod, int(node.status.allocatable["nvidia.com/gpu"])


def test_the_team_lead_and_the_admin_see_the_cluster_and_a_student_is_refused(demo):
    from playwright.sync_api import sync_playwright

    thread, cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    p = sync_playwright().start()
    browser = launch(p)
    lead, admin, student = (log_in(browser, hub.url, user) for user in ("researcher", "admin", "student1"))
    hub.start_server("researcher", {"profile": "jupyterlab-1gpu"})
    hub.start_server("student1", {"profile": "jupyterlab-1gpu"})
    hub.create_user("student2")
    hub.start_server("student2", {"profile": "jupyterlab-cpu"})  # a CPU-only holder (#38 item 9)
    mine, allocatable = server_pod(cluster, "researcher")
    theirs, _ = server_pod(cluster, "student1")
    held = {mine.spec.node_name: 1}
    held[theirs.spec.node_name] = held.get(theirs.spec.node_name, 0) + 1
    assert list(held) == [GPU_NODE]
    devices = thread.call(lambda c: c.controllers["nodeagent"].metrics.holders())[GPU_NODE]
    (my_gpu,) = [i for i, who in devices.items() if who["pod"] == mine.metadata.name]
    thread.call(lambda c: c.controllers["nodeagent"].metrics.set_gpu(GPU_NODE, my_gpu, util=80, fb_used_mib=30000,
                                                                     power_watts=280))

    try:
        lead.goto(hub.service_url("cluster"))
        card = lead.locator(f"article.cluster-node[data-node='{GPU_NODE}']")
        card.wait_for(timeout=60_000)
        row = lead.locator(f"article[data-node='{GPU_NODE}'] tr.cluster-gpu[data-gpu='{my_gpu}'] [data-field=util]")
        for _ in range(60):  # the readings are there once Prometheus has scraped the values set
            if row.count() and row.inner_text().strip() == "80 %":
                break
            lead.wait_for_timeout(1000)
            lead.reload()
        assert row.inner_text().strip() == "80 %"
        assert card.locator("[data-field=held]").inner_text() == str(held[GPU_NODE])
        assert card.locator("[data-field=free]").inner_text() == str(allocatable - held[GPU_NODE])
        rows = card.locator("tr.cluster-holding")
        assert sorted(rows.nth(i).get_attribute("data-user") for i in range(rows.count())) == ["", "researcher"]
        assert "user A" in card.inner_text() and "student1" not in lead.content()  # her own label, not "another user"
        lead.screenshot(path=str(ARTIFACTS / "dashboard-cluster-teamlead.png"), full_page=True)
        lead.set_viewport_size({"width": 390, "height": 844})
        lead.reload()
        lead.screenshot(path=str(ARTIFACTS / "dashboard-cluster-teamlead-phone.png"), full_page=True)

        admin.goto(hub.service_url("cluster"))
        admin_card = admin.locator(f"article.cluster-node[data-node='{GPU_NODE}']")
        admin_card.wait_for(timeout=60_000)
        rows = admin_card.locator("tr.cluster-holding")
        assert sorted(rows.nth(i).get_attribute("data-user") for i in range(rows.count())) == ["researcher", "student1"]
        api = admin.request.get(hub.service_url("api/cluster"))
        assert api.status == 200
        (node,) = [n for n in api.json()["nodes"] if n["name"] == GPU_NODE]
        assert admin_card.locator("[data-field=free]").inner_text() == str(node["gpus"]["free"])
        mig = admin.locator("article.cluster-node[data-node='gpu-node-mig']").inner_text()
        assert "9 × MIG 1g.10gb, 1 × MIG 2g.20gb, 1 × MIG 3g.40gb" in mig, mig  # units, by kind
        assert "2 cards as 11 MIG slices" in mig and "GPUs" not in mig.split("\n")[1], mig
        cpu_rows = admin.locator("tr.cluster-cpu-holding")  # CPU-only workspaces are named per node too (#38 item 9)
        assert [cpu_rows.nth(i).get_attribute("data-user") for i in range(cpu_rows.count())] == ["student2"]
        assert "2.0 cores" in cpu_rows.first.inner_text() and "4.0 GiB" in cpu_rows.first.inner_text()
        totals = api.json()["totals"]["gpus"]  # the header: cards, slices and shares apart, not one "GPUs" sum
        header = admin.locator("[data-totals]")
        assert header.locator("[data-field=cards]").inner_text() == str(totals["cards"])
        assert header.locator("[data-field=mig_slices]").inner_text() == str(totals["mig_slices"]) != "0"
        assert header.locator("[data-field=shares]").inner_text() == str(totals["shares"]) != "0"
        assert totals["cards"] < totals["capacity"]
        admin.screenshot(path=str(ARTIFACTS / "dashboard-cluster-admin.png"), full_page=True)

        assert student.goto(hub.service_url("cluster")).status == 403
        assert student.request.get(hub.service_url("api/cluster")).status == 403
        student.goto(hub.service_url())
        assert student.locator("nav >> text=Cluster").count() == 0
    finally:
        browser.close()
        p.stop()
