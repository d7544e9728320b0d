"""The Cluster view's GPU queues (workspacespawner.dashboard.queues, views.cluster.read_queues) from ClusterQueues.

The ClusterQueue is the one ``workspacespawner queues`` renders, with the status Kueue v0.15 writes (its field names
are checked against Kueue itself in tests/hub/test_gpu_queue_real.py). A queue whose ClusterQueue is not in the
cluster says so; a Kueue that cannot be read leaves the part out with a sentence, and a site without queues asks
nothing of the API.
"""

from __future__ import annotations

from types import SimpleNamespace

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.dashboard.queues import queue_json, queue_views
from workspacespawner.dashboard.views.cluster import read_queues
from workspacespawner.queue.config import GPUQueue
from workspacespawner.queue.kueueobjects import cluster_queue

A100 = "NVIDIA-A100-SXM4-80GB"
ML101 = GPUQueue("ml101", ("ml101",), {("nvidia.com/gpu", A100): 4, ("nvidia.com/mig-1g.10gb", A100): 14},
                 cohort="university", borrowing_limit=2)
VISION = GPUQueue("vision", ("vision-lab",), {("nvidia.com/gpu", "*"): 2})
QUEUES = {"ml101": ML101, "vision": VISION}


def with_status(obj: dict, **status) -> dict:
    return {**obj, "status": status}


ML101_NOW = with_status(
    cluster_queue(ML101, "jhub"), admittedWorkloads=6, pendingWorkloads=9, reservingWorkloads=6,
    conditions=[{"type": "Active", "status": "True", "reason": "Ready"}],
    flavorsUsage=[{"name": "nvidia-a100-sxm4-80gb", "resources": [
        {"name": "nvidia.com/gpu", "total": "6", "borrowed": "2"}, {"name": "nvidia.com/mig-1g.10gb", "total": "0"}]}],
)


def test_each_queue_shows_its_gpus_in_use_borrowed_admitted_and_waiting():
    ml101, vision = queue_views(QUEUES, [ML101_NOW], GPUEconomy().display_name)
    assert queue_json(ml101) == {
        "name": "ml101", "cohort": "university", "found": True, "active": True, "admitted": 6, "waiting": 9,
        "gpus": [
            {"resource": "nvidia.com/gpu", "product": "NVIDIA A100 80GB", "nominal": 4, "used": 6, "borrowed": 2},
            {"resource": "nvidia.com/mig-1g.10gb", "product": "NVIDIA A100 80GB", "nominal": 14, "used": 0,
             "borrowed": 0},
        ],
    }
    assert (vision.found, vision.active, vision.gpus) == (False, False, ())  # not applied: the page says so


async def test_the_queues_are_one_list_of_ours_or_a_sentence_and_none_without_queues():
    calls = []

    class CustomApi:
        async def list_cluster_custom_object(self, group, version, plural, **kwargs):
            calls.append((group, version, plural, kwargs))
            if fail:
                raise ApiException(status=404, reason="Not Found")
            return {"items": [ML101_NOW]}

    fail = False
    ctx = SimpleNamespace(gpu_queues=QUEUES, kube=SimpleNamespace(custom_api=CustomApi()), economy=GPUEconomy())
    views, error = await read_queues(ctx)
    assert [v.name for v in views] == ["ml101", "vision"] and error is None
    assert calls == [("kueue.x-k8s.io", "v1beta2", "clusterqueues",
                      {"label_selector": "app.kubernetes.io/managed-by=workspacespawner"})]
    fail = True
    views, error = await read_queues(ctx)
    assert views is None and error == ("Kueue's ClusterQueues cannot be read just now (ApiException); the GPU queues "
                                       "are left out.")
    ctx.gpu_queues = {}
    assert await read_queues(ctx) == ([], None) and len(calls) == 2


def test_the_cluster_page_lists_each_queue_and_says_when_kueue_cannot_be_read():
    from dataclasses import replace

    from tests.unit.test_dashboard_cluster_view import ADMIN, readings, render
    from workspacespawner.dashboard.views.cluster import cluster_data

    def page(**queues) -> str:
        found = cluster_data(ADMIN, replace(readings(), **queues), prometheus_url=None, threshold=5,
                             window_seconds=3600)
        return render(ADMIN, found)

    html = page(queues=queue_views(QUEUES, [ML101_NOW], GPUEconomy().display_name))
    row = html[html.index('data-queue="ml101"'):html.index('data-queue="vision"')]
    assert 'data-field="admitted">6<' in row and 'data-field="waiting">9<' in row and 'data-field="borrowed">2<' in row
    assert "NVIDIA A100 80GB nvidia.com/gpu: 6 in use, quota 4" in row and "university" in row
    assert "not in the cluster: run <code>workspacespawner queues</code>" in html[html.index('data-queue="vision"'):]
    broken = page(queues=None, queues_error="Kueue's ClusterQueues cannot be read just now (ApiException); the GPU "
                                            "queues are left out.")
    assert 'data-field="queues-error">Kueue&#39;s ClusterQueues cannot be read just now' in broken
    assert "GPU queues" not in page(queues=[])  # a site without queues: no section
