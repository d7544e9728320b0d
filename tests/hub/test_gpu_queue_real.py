"""A GPU workspace whose queue is full waits in line, through a real JupyterHub on the real plane with Kueue (#41).

Kueue's own manager runs beside the real control plane (localcluster.realplane.kueue) with the configuration section
the product asks for, and the objects ``workspacespawner queues`` renders are applied as an operator would: the
course "ml101" has one A100 of nominal quota, although the node has eight free. The hub has the same queue.

- ann (ml101) starts the 1-GPU profile: her Pod names the queue, Kueue admits it, she runs.
- bob (ml101) starts it too: he is not refused; his spawn page says he is 1st of 1 in line, and no run of his is
  metered while he waits. When ann stops, Kueue admits him and his JupyterLab opens without another click; his run
  starts once he was admitted, not when he asked.
- carol (ml101) starts while bob holds the queue's GPU: after the queue's ``max_wait_seconds`` her start ends with
  her place in line and what she can do; nothing of hers is left running or metered, and her home stays.
- In chromium, ivy's progress page says 2nd of 2, then 1st of 1, and her JupyterLab opens when a GPU frees,
  without another click (screenshots in test-artifacts/queue-*.png).
- The Cluster view's queue (workspacespawner.dashboard.queues) from the real ClusterQueue: 1 admitted, 1 waiting,
  1 of 1 GPU in use; a member's spawn page says how many wait in the queue.
- Stop Server on the pending page (JupyterHub's cancel of a spawn) leaves nothing behind; a Workload an admin
  deactivates ends the start at once with a sentence.
- Kueue's manager is killed and started again while max waits: she stays in line and is admitted when ivy stops.
- A VM profile waits too: kai's virt-launcher Pod carries the queue's labels and is held at Kueue's gate, his guest
  boots when max stops, without a click, metered from then; lou cancels her VM's wait: her VM stops, her root disk
  and home stay.
- The operator removes the queue while gina waits: her start ends with a sentence. Kueue's manager dies: jo's start
  is refused in our words (its webhook does not answer), nothing left, nothing metered.
- helm-values/gpu-queues-rbac.yaml: the hub's ServiceAccount reads a line, a Workload and the ClusterQueues with its
  grants (through the real API server's aggregation and Kueue's visibility server's own authorization), and is
  refused each without them.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUEUE_DIR.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest
import sqlalchemy as sa
import yaml
from localcluster.goldenimage import make_golden_image

from tests.browser.test_browser_demo import CHROMIUM, launch, log_in
from tests.support import planes
from tests.support.chartvalues import HELM_VALUES
from tests.support.hubharness import Hub, config_pieces, core_and_custom, core_v1, login
from tests.support.paths import ARTIFACTS
from workspacespawner.core import names
from workspacespawner.core.names import MANAGED_BY, MANAGED_BY_LABEL
from workspacespawner.dashboard.queues import queue_views
from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE, npm_proxy
from workspacespawner.queue.config import GPUQueues
from workspacespawner.queue.kueueobjects import INTERACTIVE, KUEUE_CONFIG, PRIORITY_LABEL, QUEUE_LABEL, render
from workspacespawner.queue.line import GATE, JOB_UID_LABEL, PENDING_PATH
from workspacespawner.quota.ledger import Ledger

A100 = "NVIDIA-A100-SXM4-80GB"
QUEUES = {"ml101": {"groups": ["ml101"], "gpus": {"nvidia.com/gpu": {A100: 1}}, "max_wait_seconds": 60}}
PROFILE = {"profile": "jupyterlab-1gpu"}
VM_PROFILE = {"profile": "vm-one-gpu"}
VM_PROFILES = """
c.KubeSpawner.profile_list = c.KubeSpawner.profile_list + [{
    "display_name": "VM with one GPU",
    "slug": "vm-one-gpu",
    "kubespawner_override": {"workspace_kind": "vm", "extra_resource_limits": {"nvidia.com/gpu": 1},
                             "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
}]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from localcluster.realplane.agents import RealCluster

    bin_dir = planes.skip_unless_real()
    kueue_dir = os.environ.get("WORKSPACESPAWNER_KUEUE_DIR")
    if not kueue_dir:
        pytest.skip("WORKSPACESPAWNER_KUEUE_DIR is not set (the folder printed by tools/kueue/build.sh)")
    real = RealCluster(tmp_path_factory.mktemp("cluster"), bin_dir, kueue_dir=Path(kueue_dir),
                       kueue_config=KUEUE_CONFIG, kubevirt_bin=planes.real_kubevirt_bin()).start()
    try:
        real.thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES, timeout=120)  # for the VM profile
        config = kubernetes.config.new_client_from_config(str(real.kubeconfig))
        try:
            custom = kubernetes.client.CustomObjectsApi(config)
            plurals = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
                       "LocalQueue": "localqueues", "WorkloadPriorityClass": "workloadpriorityclasses"}
            settings = queue_config(QUEUES)
            for obj in render(GPUQueues(config=settings).all(), "default"):
                group, version = obj["apiVersion"].split("/")
                namespace = obj["metadata"].get("namespace")
                if namespace:
                    custom.create_namespaced_custom_object(group, version, namespace, plurals[obj["kind"]], obj)
                else:
                    custom.create_cluster_custom_object(group, version, plurals[obj["kind"]], obj)
            deadline = time.monotonic() + 60
            while not all(c["type"] == "Active" and c["status"] == "True" for c in _conditions(custom)):
                assert time.monotonic() < deadline, _conditions(custom)
                time.sleep(0.5)
        finally:
            config.close()
        yield real.agents
    finally:
        real.stop()


def queue_config(queues: dict):
    from traitlets.config import Config

    config = Config()
    config.GPUQueues.queues = queues
    return config


def _conditions(custom) -> list[dict]:
    found = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "workspaces-ml101")
    return (found.get("status") or {}).get("conditions") or [{"type": "Active", "status": "Unknown"}]


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite'}"


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory, ledger_url):
    """A hub with the course's queue, behind JupyterHub's reference proxy from npm: the Python port would hand the
    progress page its events in one burst at the end (:func:`workspacespawner.demo.npm_proxy`), and the place in
    line must move on the page."""
    proxy = asyncio.run(npm_proxy(tmp_path_factory.mktemp("proxy")))
    assert proxy is not None, "npm could not install configurable-http-proxy (see the log above)"
    config = f"c.ConfigurableHTTPProxy.command = {proxy!r}\n"
    config += config_pieces("10-workspace-spawner.py", "20-profiles.py") + VM_PROFILES + f"""
c.GPUQueues.queues = {QUEUES!r}
c.WorkspaceQuota.ledger_url = {ledger_url!r}
c.WorkspaceQuota.enforce_interval = 1
c.Spawner.poll_interval = 1
""" + config_pieces("90-check-config.py")
    extra, timeout = planes.hub_settings(cluster)
    hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config + extra, start_timeout=timeout).start()
    yield hub
    hub.stop()


class Progress:
    """The spawn-progress messages of a user's start, read as they come on a thread of their own."""

    def __init__(self, hub: Hub, user: str):
        self.messages: list[str] = []
        self.end: dict = {}
        self.thread = threading.Thread(target=self._read, args=(hub, user), daemon=True)
        self.thread.start()

    def _read(self, hub: Hub, user: str) -> None:
        with hub.api("GET", f"/users/{user}/server/progress", stream=True) as r:
            r.raise_for_status()
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    event = json.loads(line[5:])
                    self.messages.append(event.get("message", ""))
                    if event.get("ready") or event.get("failed"):
                        self.end = event
                        return

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.messages if text in m]
            if found:
                return found[-1]
            time.sleep(0.2)
        raise AssertionError(f"no progress message with {text!r} in {timeout}s: {self.messages}")


def start_in_background(hub: Hub, user: str, profile: dict = PROFILE) -> Progress:
    answer: dict = {}
    threading.Thread(target=lambda: answer.update(r=hub.spawn(user, profile)), daemon=True).start()
    deadline = time.monotonic() + 30
    while not hub.user(user).get("servers", {}).get(""):
        assert time.monotonic() < deadline and "r" not in answer or answer["r"].ok, answer
        time.sleep(0.1)
    return Progress(hub, user)


def cluster_queues(cluster) -> list[dict]:
    """Our ClusterQueues as the dashboard's Cluster view lists them."""
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        return kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")["items"]
    finally:
        client.close()


def spawn_page(hub: Hub, user: str) -> str:
    r = login(hub, user).get(f"{hub.url}/hub/spawn", timeout=30)
    assert r.status_code == 200, r.text
    return html.unescape(r.text)


def pod_of(cluster, user: str):
    with core_v1(cluster) as core:
        pods = core.list_namespaced_pod("default", label_selector=names.owner_selector(user)).items
    return pods[0] if pods else None


def runs_of(ledger_url: str, user: str) -> list:
    ledger = Ledger(ledger_url)
    try:
        with ledger.engine.connect() as conn:
            ids = conn.execute(sa.text("SELECT id FROM workspacespawner_runs WHERE user_name = :user ORDER BY id"),
                               {"user": user}).scalars().all()
        return [ledger.get(i) for i in ids]
    finally:
        ledger.dispose()


def test_a_student_waits_in_line_sees_the_place_and_opens_when_a_gpu_frees(hub, cluster, ledger_url):
    for user in ("ann", "bob"):
        hub.create_user(user, groups=("ml101",))
    hub.start_server("ann", PROFILE)
    pod = pod_of(cluster, "ann")
    assert pod.metadata.labels[QUEUE_LABEL] == "ml101" and pod.metadata.labels[PRIORITY_LABEL] == INTERACTIVE
    assert not pod.spec.scheduling_gates and pod.spec.node_selector["nvidia.com/gpu.product"] == A100

    progress = start_in_background(hub, "bob")
    said = progress.wait_for("1st of 1")
    assert said == ("In line for 1 NVIDIA A100 80GB GPU (queue ml101): 1st of 1; the last one started less than a "
                    "minute ago. Your workspace opens here when it is your turn; you need not click again."), said
    assert GATE in [gate.name for gate in pod_of(cluster, "bob").spec.scheduling_gates]
    deadline = time.monotonic() + 30  # Kueue writes the ClusterQueue's counts a moment after the line moves
    while (line_now := queue_views(GPUQueues(config=queue_config(QUEUES)).all(), cluster_queues(cluster))[0]).waiting != 1:
        assert time.monotonic() < deadline, line_now
        time.sleep(0.5)
    assert (line_now.active, line_now.admitted, line_now.waiting) == (True, 1, 1), line_now
    assert [(g.resource, g.nominal, g.used, g.borrowed) for g in line_now.gpus] == [("nvidia.com/gpu", 1, 1, 0)]
    hub.create_user("fay", groups=("ml101",))
    cards = dict(re.findall(r'data-slug="([^"]+)">(.*?)</label>', spawn_page(hub, "fay"), re.S))
    assert "Queue ml101: 1 waiting now. If its GPUs are taken, you wait in line" in cards["jupyterlab-1gpu"]
    assert "Queue ml101" not in cards["jupyterlab-cpu"]
    assert all(run.state != "open" for run in runs_of(ledger_url, "bob")), runs_of(ledger_url, "bob")  # not metered
    time.sleep(3)
    turn_after_stop(hub, ledger_url, progress, holder="ann", waiter="bob")


def turn_after_stop(hub: Hub, ledger_url: str, progress: Progress, *, holder: str, waiter: str) -> None:
    """``holder`` (who holds the queue's GPU) stops: ``waiter`` is admitted, told so, and ready without a click, and
    metered from then, not from when they asked."""
    freed = datetime.now(UTC)
    hub.stop_server(holder)
    hub.wait_ready(waiter)
    progress.wait_for("Your turn: 1 NVIDIA A100 80GB GPU admitted by the queue")
    [run] = [run for run in runs_of(ledger_url, waiter) if run.state == "open"]
    assert run.started.replace(tzinfo=UTC) >= freed.replace(microsecond=0) and run.gpus == 1, (run.started, freed)


def test_a_wait_past_the_queues_limit_ends_with_the_place_and_leaves_nothing(hub, cluster, ledger_url):
    hub.create_user("carol", groups=("ml101",))
    assert hub.user("bob")["servers"][""]["ready"]  # bob holds the queue's one GPU
    began = time.monotonic()
    progress = start_in_background(hub, "carol")
    progress.wait_for("In line for 1 NVIDIA A100")
    progress.thread.join(timeout=110)
    assert progress.end.get("failed"), progress.messages
    waited = time.monotonic() - began
    assert 60 <= waited < 100, waited
    message = progress.end["message"]
    assert ("You waited 1 minute for 1 NVIDIA A100 80GB GPU (queue ml101) and were still 1st of 1 in line: the longest "
            "wait allowed. Nothing was started and no card-hours were charged.") in message, message
    wait_gone(cluster, "carol")
    assert runs_of(ledger_url, "carol") == []  # her reservation was dropped; no run was opened
    with core_v1(cluster) as core:
        claims = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector("carol"))
    assert len(claims.items) == 1  # a failed start never deletes a disk


def test_stop_server_while_in_line_leaves_nothing_behind(hub, cluster, ledger_url):
    """JupyterHub's "Stop Server" on the pending page (the REST API's DELETE) is the Cancel of a wait."""
    hub.create_user("dave", groups=("ml101",))
    assert hub.user("bob")["servers"][""]["ready"]
    progress = start_in_background(hub, "dave")
    progress.wait_for("In line for 1 NVIDIA A100")
    hub.stop_server("dave")
    wait_gone(cluster, "dave")
    assert runs_of(ledger_url, "dave") == []
    with core_v1(cluster) as core:
        claims = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector("dave"))
    assert len(claims.items) == 1


def test_a_workload_taken_out_of_the_line_ends_the_start_with_a_sentence(hub, cluster, ledger_url):
    """An admin deactivates a waiting Workload (``spec.active: false``): Kueue keeps the Pod at its gate, and the
    start ends within seconds, not at the wait's limit."""
    hub.create_user("erin", groups=("ml101",))
    assert hub.user("bob")["servers"][""]["ready"]
    progress = start_in_background(hub, "erin")
    progress.wait_for("In line for 1 NVIDIA A100")
    uid = pod_of(cluster, "erin").metadata.uid
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        custom, where = kubernetes.client.CustomObjectsApi(client), ("kueue.x-k8s.io", "v1beta2", "default", "workloads")
        [workload] = custom.list_namespaced_custom_object(*where, label_selector=f"{JOB_UID_LABEL}={uid}")["items"]
        began = time.monotonic()
        custom.patch_namespaced_custom_object(*where, workload["metadata"]["name"], {"spec": {"active": False}})
    finally:
        client.close()
    progress.thread.join(timeout=30)
    assert progress.end.get("failed") and time.monotonic() - began < 20, progress.messages
    assert "Your workspace was taken out of the line for 1 NVIDIA A100 80GB GPU (queue ml101) before its turn" in (
        progress.end["message"]), progress.end
    wait_gone(cluster, "erin")
    assert runs_of(ledger_url, "erin") == []


def wait_gone(cluster, user: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while pod_of(cluster, user) is not None:
        assert time.monotonic() < deadline, pod_of(cluster, user)
        time.sleep(0.3)


def test_the_hubs_role_reads_a_line_and_a_workload_and_without_it_the_hub_is_refused(cluster):
    plane = cluster.plane
    path = PENDING_PATH.format(namespace="default", name="ml101")
    workloads = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads?labelSelector={JOB_UID_LABEL}%3Dx"
    queues = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
    hub_account = "system:serviceaccount:default:hub"
    for read in (path, workloads, queues):
        status, body = plane.request("GET", read, as_user=hub_account)
        assert status == 403, body
    for doc in yaml.safe_load_all((HELM_VALUES / "gpu-queues-rbac.yaml").read_text()):
        for subject in doc.get("subjects", []):
            subject["namespace"] = "default"
        kind = {"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
                "ClusterRoleBinding": "clusterrolebindings"}[doc["kind"]]
        where = "" if kind.startswith("cluster") else "namespaces/default/"
        if not kind.startswith("cluster"):
            doc["metadata"]["namespace"] = "default"
        status, body = plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{where}{kind}", doc)
        assert status == 201, body
    deadline = time.monotonic() + 30
    while (answer := plane.request("GET", path, as_user=hub_account))[0] != 200:
        assert time.monotonic() < deadline, answer
        time.sleep(0.5)
    assert answer[1]["kind"] == "PendingWorkloadsSummary", answer
    status, body = plane.request("GET", workloads, as_user=hub_account)
    assert status == 200 and body["items"] == [], body
    status, body = plane.request("GET", queues, as_user=hub_account)
    assert status == 200 and [q["metadata"]["name"] for q in body["items"]] == ["workspaces-ml101"], body


#: The browser's Notification as the progress page's script uses it: permission not asked yet, granted when asked,
#: and each notification written to the console (a headless browser shows none).
NOTIFICATION = """
window.Notification = class {
  constructor(title, options) { console.log("notification: " + title + " | " + ((options || {}).body || "")); }
  static requestPermission() { window.Notification.permission = "granted"; return Promise.resolve("granted"); }
};
window.Notification.permission = "default";
"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_in_a_browser_the_place_moves_and_jupyterlab_opens_without_a_click(hub, cluster):
    """Issue #41's "done when": ivy's progress page says 2nd of 2, then 1st of 1 when the one before her is
    admitted, and her JupyterLab opens when a GPU frees, without another click. The tab's title shows her place;
    she asks to be told, and the browser notifies her when it is her turn. Screenshots:
    ``test-artifacts/queue-*.png`` (copies in tests/browser/screenshots for the docs)."""
    from playwright.sync_api import sync_playwright

    for user in ("hal", "ivy"):
        hub.create_user(user, groups=("ml101",))
    assert hub.user("bob")["servers"][""]["ready"]
    hal = start_in_background(hub, "hal")
    hal.wait_for("1st of 1")
    ARTIFACTS.mkdir(exist_ok=True)
    notified = []
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "ivy")
        page.add_init_script(NOTIFICATION)  # the browser's notifications, as this page's script calls them
        page.on("console", lambda m: notified.append(m.text) if m.text.startswith("notification: ") else None)
        page.check(f"input[value={PROFILE['profile']}]")
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url("**/hub/spawn-pending/**", timeout=60_000)
        page.locator("#progress-details").evaluate("details => { details.open = true; }")
        page.locator("#progress-message", has_text="2nd of 2").wait_for(timeout=30_000)
        assert page.title().startswith("2nd of 2 in line - "), page.title()  # seen from another tab
        page.get_by_role("button", name="Tell me when it is my turn").click()
        page.get_by_text("Your browser will tell you when it is your turn").wait_for(timeout=10_000)
        page.screenshot(path=str(ARTIFACTS / "queue-2nd-of-2.png"), full_page=True)
        hub.stop_server("bob")  # a GPU frees: hal's turn, and ivy moves up
        page.locator("#progress-message", has_text="1st of 1").wait_for(timeout=30_000)
        assert page.title().startswith("1st of 1 in line - "), page.title()
        page.screenshot(path=str(ARTIFACTS / "queue-1st-of-1.png"), full_page=True)
        hub.stop_server("hal")  # hal leaves (his start cancelled, or his server stopped): ivy's turn
        page.wait_for_url("**/user/ivy/lab**", timeout=90_000)
        assert notified == ["notification: Your turn: your workspace is starting | Your turn: 1 NVIDIA A100 80GB GPU "
                            "admitted by the queue; starting your server"], notified
        page.wait_for_selector(".jp-Launcher", timeout=120_000)
        page.screenshot(path=str(ARTIFACTS / "queue-jupyterlab-opened.png"))
        browser.close()
    assert hub.user("ivy")["servers"][""]["ready"]


def test_kueue_restarted_while_a_student_waits_keeps_her_in_line_and_admits_her_after(hub, cluster, ledger_url):
    """Kueue's manager is killed and started again (its Deployment would) while max waits: her start goes on (no
    place can be read meanwhile; the wait's limit still holds), her place shows again, and she is admitted when the
    GPU frees. Nothing is metered while she waits."""
    hub.create_user("max", groups=("ml101",))
    assert hub.user("ivy")["servers"][""]["ready"]  # ivy holds the queue's one GPU
    progress = start_in_background(hub, "max")
    progress.wait_for("In line for 1 NVIDIA A100 80GB GPU (queue ml101): 1st of 1")
    said = len(progress.messages)
    cluster.plane.kueue.restart()
    assert not progress.end, progress.messages  # still waiting
    assert GATE in [gate.name for gate in pod_of(cluster, "max").spec.scheduling_gates]
    assert all(run.state != "open" for run in runs_of(ledger_url, "max"))  # reserved, not metered
    turn_after_stop(hub, ledger_url, progress, holder="ivy", waiter="max")
    assert not [m for m in progress.messages[said:] if "left" in m or "cannot take" in m], progress.messages


def test_a_vm_workspace_waits_in_line_and_boots_when_admitted_and_a_cancel_keeps_its_disks(hub, cluster, ledger_url):
    """A VM profile's start waits as a container's does: KubeVirt gives the virt-launcher Pod the VMI's labels,
    Kueue holds it at its gate (virt-controller waits), and the guest boots once the queue admits it, without
    another click; a VM start cancelled in line stops its VM and keeps its root disk and home."""
    for user in ("kai", "lou"):
        hub.create_user(user, groups=("ml101",))
    assert hub.user("max")["servers"][""]["ready"]  # max holds the queue's one GPU
    kai = start_in_background(hub, "kai", VM_PROFILE)
    kai.wait_for("In line for 1 NVIDIA A100 80GB GPU (queue ml101): 1st of 1", timeout=120)
    launcher = pod_of(cluster, "kai")
    assert launcher.metadata.labels["kubevirt.io"] == "virt-launcher", launcher.metadata.labels
    assert launcher.metadata.labels[QUEUE_LABEL] == "ml101" and launcher.metadata.labels[PRIORITY_LABEL] == INTERACTIVE
    assert GATE in [gate.name for gate in launcher.spec.scheduling_gates or ()]
    assert all(run.state != "open" for run in runs_of(ledger_url, "kai"))

    lou = start_in_background(hub, "lou", VM_PROFILE)
    lou.wait_for("2nd of 2", timeout=120)
    hub.stop_server("lou")  # the Cancel: her VM stops, her disks stay
    wait_gone(cluster, "lou")
    assert runs_of(ledger_url, "lou") == []
    with core_and_custom(cluster) as (core, custom):
        owner = names.owner_selector("lou")
        claims = core.list_namespaced_persistent_volume_claim("default", label_selector=owner).items
        disks = custom.list_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", "default", "datavolumes",
                                                     label_selector=owner)["items"]
        vmis = custom.list_namespaced_custom_object("kubevirt.io", "v1", "default", "virtualmachineinstances",
                                                    label_selector=owner)["items"]
    assert [d["metadata"]["labels"][names.DISK_LABEL] for d in disks] == [names.ROOT_DISK] and vmis == []
    assert any(c.metadata.labels.get(names.COMPONENT_LABEL) == names.STORAGE_COMPONENT for c in claims), claims
    turn_after_stop(hub, ledger_url, kai, holder="max", waiter="kai")


def test_a_queue_deleted_while_a_student_waits_ends_the_start_with_a_sentence(hub, cluster, ledger_url):
    """The operator removes the LocalQueue (the last test here: the queue is gone after it)."""
    hub.create_user("gina", groups=("ml101",))
    assert hub.user("kai")["servers"][""]["ready"]  # kai's VM holds the queue's one GPU
    progress = start_in_background(hub, "gina")
    progress.wait_for("In line for 1 NVIDIA A100")
    client = kubernetes.config.new_client_from_config(str(cluster.kubeconfig))
    try:
        kubernetes.client.CustomObjectsApi(client).delete_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "default", "localqueues", "ml101")
    finally:
        client.close()
    began = time.monotonic()
    progress.thread.join(timeout=40)
    assert progress.end.get("failed") and time.monotonic() - began < 30, progress.messages
    assert "The queue ml101 cannot take your workspace now: it was removed or stopped." in progress.end["message"], (
        progress.end)
    wait_gone(cluster, "gina")
    assert runs_of(ledger_url, "gina") == []


def test_kueues_webhook_down_refuses_the_start_in_our_words_and_leaves_nothing(hub, cluster, ledger_url):
    """Kueue's manager is gone (killed: the last test here), so its Pod webhook (failurePolicy Fail) cannot be
    called and the API server refuses the workspace's Pod."""
    os.killpg(cluster.plane.pids()["kueue"], signal.SIGKILL)
    hub.create_user("jo", groups=("ml101",))
    r = hub.spawn("jo", PROFILE)
    if r.status_code in (201, 202):  # the refusal came after the hub's slow-spawn answer: read it from the progress
        progress = Progress(hub, "jo")
        progress.thread.join(timeout=60)
        message = progress.end.get("message", "")
    else:
        assert r.status_code == 503, r.text
        message = r.json()["message"]
    assert ("A check the cluster runs before anything starts (an admission webhook, such as the GPU queues') is not "
            "answering, so nothing was started and no disk was changed.") in message, message
    assert pod_of(cluster, "jo") is None and runs_of(ledger_url, "jo") == []
    with core_v1(cluster) as core:
        claims = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector("jo"))
    assert len(claims.items) == 1
