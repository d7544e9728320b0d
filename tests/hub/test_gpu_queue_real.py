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
- helm-values/gpu-queues-rbac.yaml: the hub's ServiceAccount reads a line with its Role (through the real API
  server's aggregation and Kueue's visibility server's own authorization), and is refused without it.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUEUE_DIR.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest
import sqlalchemy as sa
import yaml

from tests.support import planes
from tests.support.chartvalues import HELM_VALUES
from tests.support.hubharness import Hub, config_pieces, core_v1
from workspacespawner.core import names
from workspacespawner.queue.config import GPUQueues
from workspacespawner.queue.kueueobjects import INTERACTIVE, KUEUE_CONFIG, PRIORITY_LABEL, QUEUE_LABEL, render
from workspacespawner.queue.line import GATE, PENDING_PATH
from workspacespawner.quota.ledger import Ledger

A100 = "NVIDIA-A100-SXM4-80GB"
QUEUES = {"ml101": {"groups": ["ml101"], "gpus": {"nvidia.com/gpu": {A100: 1}}, "max_wait_seconds": 40}}
PROFILE = {"profile": "jupyterlab-1gpu"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from localcluster.realplane.agents import RealCluster

    bin_dir = planes.skip_unless_real()
    kueue_dir = os.environ.get("WORKSPACESPAWNER_KUEUE_DIR")
    if not kueue_dir:
        pytest.skip("WORKSPACESPAWNER_KUEUE_DIR is not set (the folder printed by tools/kueue/build.sh)")
    real = RealCluster(tmp_path_factory.mktemp("cluster"), bin_dir, kueue_dir=Path(kueue_dir),
                       kueue_config=KUEUE_CONFIG).start()
    try:
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
    config = config_pieces("10-workspace-spawner.py", "20-profiles.py") + f"""
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


def start_in_background(hub: Hub, user: str) -> Progress:
    answer: dict = {}
    threading.Thread(target=lambda: answer.update(r=hub.spawn(user, PROFILE)), daemon=True).start()
    deadline = time.monotonic() + 30
    while not hub.user(user).get("servers", {}).get(""):
        assert time.monotonic() < deadline and "r" not in answer or answer["r"].ok, answer
        time.sleep(0.1)
    return Progress(hub, user)


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
    said = progress.wait_for("In line for 1 NVIDIA A100")
    assert said == ("In line for 1 NVIDIA A100 80GB GPU (queue ml101): 1st of 1. Your workspace opens here when it is "
                    "your turn; you need not click again."), said
    assert GATE in [gate.name for gate in pod_of(cluster, "bob").spec.scheduling_gates]
    assert all(run.state != "open" for run in runs_of(ledger_url, "bob")), runs_of(ledger_url, "bob")  # not metered
    time.sleep(3)
    freed = datetime.now(UTC)
    hub.stop_server("ann")
    hub.wait_ready("bob")
    progress.wait_for("Your turn: 1 NVIDIA A100 80GB GPU admitted by the queue")
    [run] = [run for run in runs_of(ledger_url, "bob") if run.state == "open"]
    assert run.started.replace(tzinfo=UTC) >= freed.replace(microsecond=0), (run.started, freed)
    assert run.gpus == 1


def test_a_wait_past_the_queues_limit_ends_with_the_place_and_leaves_nothing(hub, cluster, ledger_url):
    hub.create_user("carol", groups=("ml101",))
    assert hub.user("bob")["servers"][""]["ready"]  # bob holds the queue's one GPU
    began = time.monotonic()
    progress = start_in_background(hub, "carol")
    progress.wait_for("In line for 1 NVIDIA A100")
    progress.thread.join(timeout=90)
    assert progress.end.get("failed"), progress.messages
    waited = time.monotonic() - began
    assert 40 <= waited < 80, waited
    message = progress.end["message"]
    assert ("You waited 1 minute for 1 NVIDIA A100 80GB GPU (queue ml101) and were still 1st of 1 in line: the longest "
            "wait allowed. Nothing was started and no card-hours were charged.") in message, message
    deadline = time.monotonic() + 30
    while pod_of(cluster, "carol") is not None:
        assert time.monotonic() < deadline, pod_of(cluster, "carol")
        time.sleep(0.3)
    assert runs_of(ledger_url, "carol") == []  # her reservation was dropped; no run was opened
    with core_v1(cluster) as core:
        claims = core.list_namespaced_persistent_volume_claim("default", label_selector=names.owner_selector("carol"))
    assert len(claims.items) == 1  # a failed start never deletes a disk
    hub.stop_server("bob")


def test_the_hubs_role_reads_a_line_and_without_it_the_hub_is_refused(cluster):
    plane = cluster.plane
    path = PENDING_PATH.format(namespace="default", name="ml101")
    hub_account = "system:serviceaccount:default:hub"
    status, body = plane.request("GET", path, as_user=hub_account)
    assert status == 403, body
    for doc in yaml.safe_load_all((HELM_VALUES / "gpu-queues-rbac.yaml").read_text()):
        doc["metadata"]["namespace"] = "default"
        for subject in doc.get("subjects", []):
            subject["namespace"] = "default"
        kind = {"Role": "roles", "RoleBinding": "rolebindings"}[doc["kind"]]
        status, body = plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/{kind}", doc)
        assert status == 201, body
    deadline = time.monotonic() + 30
    while (answer := plane.request("GET", path, as_user=hub_account))[0] != 200:
        assert time.monotonic() < deadline, answer
        time.sleep(0.5)
    assert answer[1]["kind"] == "PendingWorkloadsSummary", answer
