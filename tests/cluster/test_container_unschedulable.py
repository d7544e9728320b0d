"""When a container start gives up for want of a node: the scheduler's answer read by the container backend.

The real control plane showed kube-scheduler marking a Pod Unschedulable
("pod has unbound immediate PersistentVolumeClaims") for the moment its new
home claim is being provisioned; the spawn then failed at once with "No node
can run your server". A claim still being provisioned is a wait, not a
verdict: only a Pod no node can take is.
"""

from __future__ import annotations

from localcluster.testing import create_object as create
from localcluster.testing import get_object as get
from localcluster.testing import wait_for

from localcluster import LocalCluster
from workspacespawner.backends.container import progress

PODS = ("", "v1", "pods")
PVCS = ("", "v1", "persistentvolumeclaims")


def pod(name: str, claim: str, gpus: int = 0) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2024-01-01", "resources": resources}],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def unschedulable(cluster, name):
    conditions = (get(cluster, PODS, name) or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


async def test_a_claim_being_provisioned_is_no_reason_to_give_up(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "scheduler")) as cluster:
        cluster.controllers["storage"].enabled = False  # the provisioner has not got to the claim yet
        create(cluster, PVCS, {"metadata": {"name": "home-ann"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        create(cluster, PODS, pod("jupyter-ann", "home-ann"))
        await wait_for(lambda: unschedulable(cluster, "jupyter-ann"))
        assert progress.unschedulable_reason(get(cluster, PODS, "jupyter-ann")) is None


async def test_a_pod_no_node_can_take_is_unschedulable(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "scheduler")) as cluster:
        create(cluster, PVCS, {"metadata": {"name": "home-bo"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        create(cluster, PODS, pod("jupyter-bo", "home-bo", gpus=16))
        # The claim's own "being provisioned" Unschedulable may come first (no verdict): wait for the scheduler's.
        await wait_for(lambda: unschedulable(cluster, "jupyter-bo")
                       and progress.unschedulable_reason(get(cluster, PODS, "jupyter-bo")) is not None)
        assert "Insufficient nvidia.com/gpu" in progress.unschedulable_reason(get(cluster, PODS, "jupyter-bo"))
