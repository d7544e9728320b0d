"""Kueue's own manager on the real control plane (localcluster.realplane.kueue): GPU Pods wait in line by queue.

A ResourceFlavor for one GPU product, a ClusterQueue with 4 of its GPUs of nominal quota in a cohort, and a
LocalQueue in a namespace; five one-GPU Pods that name the LocalQueue: Kueue's Pod webhook puts its scheduling gate
on each, Kueue admits four (their gates gone, their Workloads Admitted, the ResourceFlavor's node labels on their
Pods) and holds the fifth, whose place the visibility API tells; when an admitted Pod goes, the fifth is admitted.
A Pod that names no queue is left alone. The ClusterQueue written as ``v1beta2`` is stored as ``v1beta1`` through
Kueue's conversion webhook.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUEUE_DIR (the
folder tools/kueue/build.sh printed).
"""

from __future__ import annotations

import asyncio

import pytest
from localcluster.realplane.fixtures import plane_namespace
from localcluster.realplane.kueue import pending_workloads
from localcluster.testing import eventually

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
GATE = "kueue.x-k8s.io/admission"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@pytest.fixture
def queue_namespace(kueue_plane):
    with plane_namespace(kueue_plane, "kq") as name:
        yield name


def create(plane, path: str, obj: dict) -> dict:
    status, body = plane.request("POST", path, obj)
    assert status == 201, body
    return body


def gpu_pod(namespace: str, name: str, queue: str | None) -> dict:
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                            "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}}],
        },
    }


async def test_four_of_five_gpu_pods_are_admitted_and_the_fifth_waits_with_its_place_in_line(kueue_plane, queue_namespace):
    plane, ns = kueue_plane, queue_namespace
    flavor, cq = f"a100-{ns}", f"course-{ns}"
    create(plane, f"{KUEUE}/resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}}})
    create(plane, f"{KUEUE}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"cohortName": "university", "namespaceSelector": {},
                 "resourceGroups": [{"coveredResources": [GPU],
                                     "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}})
    create(plane, f"{KUEUE}/namespaces/{ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "ml101", "namespace": ns},
        "spec": {"clusterQueue": cq}})

    async def active():
        status, body = await asyncio.to_thread(plane.request, "GET", f"{KUEUE}/clusterqueues/{cq}")
        conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    await eventually(active, timeout=60, what="the ClusterQueue Active")
    # Kueue v0.15 stores ClusterQueues as v1beta1: the v1beta2 one written and read went through its conversion
    # webhook, and reads as v1beta1 with v1beta1's field names
    status, old = plane.request("GET", f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{cq}")
    assert status == 200, old
    assert old["spec"]["cohort"] == "university", old["spec"]

    for i in range(5):
        made = create(plane, f"/api/v1/namespaces/{ns}/pods", gpu_pod(ns, f"student-{i}", "ml101"))
        assert {"name": GATE} in made["spec"].get("schedulingGates", []), made["spec"]
        await asyncio.sleep(0.5)  # in order: Kueue queues by creation time
    plain = create(plane, f"/api/v1/namespaces/{ns}/pods", gpu_pod(ns, "no-queue", None))
    assert not plain["spec"].get("schedulingGates"), plain["spec"]

    async def pods():
        status, body = await asyncio.to_thread(plane.request, "GET", f"/api/v1/namespaces/{ns}/pods")
        assert status == 200, body
        return {p["metadata"]["name"]: p for p in body["items"] if p["metadata"]["name"].startswith("student-")}

    def gated(pod: dict) -> bool:
        return {"name": GATE} in (pod["spec"].get("schedulingGates") or [])

    async def four_admitted():
        found = await pods()
        admitted = [name for name, pod in found.items() if not gated(pod)]
        return sorted(admitted) if len(admitted) == 4 else None

    admitted = await eventually(four_admitted, timeout=90, what="four Pods admitted")
    assert admitted == [f"student-{i}" for i in range(4)]
    found = await pods()
    assert gated(found["student-4"])
    # an admitted Pod is placed on the flavor's nodes
    assert found["student-0"]["spec"].get("nodeSelector", {}).get(PRODUCT_LABEL) == "NVIDIA-A100-SXM4-80GB"

    status, workloads = plane.request("GET", f"{KUEUE}/namespaces/{ns}/workloads")
    assert status == 200, workloads
    admitted_workloads = [w for w in workloads["items"] if any(
        c["type"] == "Admitted" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or [])]
    assert len(workloads["items"]) == 5 and len(admitted_workloads) == 4, workloads

    [waiting] = await eventually(lambda: pending_workloads(plane, ns, "ml101"), timeout=60,
                                 what="the pending workload in the visibility API")
    assert (waiting["positionInLocalQueue"], waiting["positionInClusterQueue"]) == (0, 0), waiting
    assert waiting["metadata"]["ownerReferences"][0]["name"] == "student-4", waiting

    # a GPU freed: the first Pod goes, and the fifth is admitted
    status, body = plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/student-0")
    assert status == 200, body

    async def fifth_admitted():
        found = await pods()
        return "student-4" in found and not gated(found["student-4"])

    await eventually(fifth_admitted, timeout=90, what="the fifth Pod admitted once the first is gone")
