"""The GPU queues' Kueue objects (workspacespawner.queue.kueueobjects) as Kueue itself takes them, on the real plane.

Kueue's own manager (localcluster.realplane.kueue) with the configuration section the product asks for
(``KUEUE_CONFIG``: Kueue ignores everything but GPUs); the objects ``workspacespawner queues`` prints for two courses
in one cohort, applied as an operator would: Kueue's webhooks admit them and both ClusterQueues become Active. Seven
one-GPU Pods of the first course, asking for CPU and memory as a workspace does and labelled as the product labels a
queued workspace (its LocalQueue, the interactive WorkloadPriorityClass): four are admitted on the course's own
quota, two more on what it borrows from the other course (its borrowing limit), on the A100 flavor's nodes, and the
seventh waits in line, its place in the visibility API.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUEUE_DIR.
"""

from __future__ import annotations

import asyncio

import pytest
from localcluster.realplane.fixtures import plane_namespace
from localcluster.realplane.kueue import pending_workloads
from localcluster.testing import eventually
from traitlets.config import Config

from workspacespawner.queue.config import GPUQueues
from workspacespawner.queue.kueueobjects import INTERACTIVE, KUEUE_CONFIG, PRIORITY_LABEL, QUEUE_LABEL, render

A100 = "NVIDIA-A100-SXM4-80GB"
QUEUES = {
    "ml101": {"groups": ["ml101"], "gpus": {"nvidia.com/gpu": {A100: 4}}, "cohort": "university", "borrowing_limit": 2},
    "vision": {"groups": ["vision-lab"], "gpus": {"nvidia.com/gpu": {A100: 2}}, "cohort": "university"},
}
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def queue_plane(k8s_bin, kueue_dir, tmp_path_factory):
    from localcluster.realplane import RealControlPlane

    with RealControlPlane(tmp_path_factory.mktemp("queues"), k8s_bin, kueue_dir=kueue_dir, kueue_config=KUEUE_CONFIG) as p:
        yield p


def path_of(obj: dict) -> str:
    plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
              "WorkloadPriorityClass": "workloadpriorityclasses"}[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    return f"/apis/{obj['apiVersion']}/{f'namespaces/{namespace}/' if namespace else ''}{plural}"


def workspace_pod(namespace: str, name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "ml101", PRIORITY_LABEL: INTERACTIVE}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "notebook", "image": "quay.io/jupyter/base-notebook",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                          "limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}}}]},
    }


async def test_the_rendered_queues_are_kueues_and_a_course_borrows_up_to_its_limit(queue_plane):
    plane = queue_plane
    with plane_namespace(plane, "ws") as ns:
        config = Config()
        config.GPUQueues.queues = QUEUES
        for obj in render(GPUQueues(config=config).all(), ns):
            status, body = plane.request("POST", path_of(obj), obj)
            assert status == 201, body

        async def active():
            status, body = await asyncio.to_thread(plane.request, "GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
            found = {q["metadata"]["name"]: q for q in body.get("items", [])} if status == 200 else {}
            return all(any(c["type"] == "Active" and c["status"] == "True"
                           for c in (found.get(name, {}).get("status") or {}).get("conditions") or [])
                       for name in ("workspaces-ml101", "workspaces-vision"))

        await eventually(active, timeout=60, what="both ClusterQueues Active")
        for i in range(7):
            status, body = plane.request("POST", f"/api/v1/namespaces/{ns}/pods", workspace_pod(ns, f"student-{i}"))
            assert status == 201, body
            await asyncio.sleep(0.3)

        async def admitted():
            status, body = await asyncio.to_thread(plane.request, "GET", f"/api/v1/namespaces/{ns}/pods")
            pods = body["items"] if status == 200 else []
            return sorted(p["metadata"]["name"] for p in pods if {"name": GATE} not in (p["spec"].get("schedulingGates") or []))

        async def six():
            names = await admitted()
            return names if len(names) == 6 else None

        names = await eventually(six, timeout=90, what="six Pods admitted: four on the course's quota, two borrowed")
        assert names == [f"student-{i}" for i in range(6)]
        await asyncio.sleep(3)
        assert len(await admitted()) == 6  # the borrowing limit holds the seventh
        status, pod = plane.request("GET", f"/api/v1/namespaces/{ns}/pods/student-0")
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": A100}, pod["spec"]

        [waiting] = await eventually(lambda: pending_workloads(plane, ns, "ml101"), timeout=60, what="the seventh in line")
        assert waiting["positionInLocalQueue"] == 0 and waiting["priority"] == 1000, waiting
