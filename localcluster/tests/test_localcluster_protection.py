"""Storage object in use protection: the pvc-protection and pv-protection finalizers and their controller.

A claim deleted while a Pod placed on a node uses it stays Terminating (a
finished Pod still counts until it is deleted; a Pod not yet scheduled does
not) and goes, with its volume and data, once the Pod is gone; a VMI using a
claim directly or as its DataVolume holds it the same way; a PV deleted while
Bound waits for its claim; a stripped finalizer comes back; and without the
protection controller a deleted claim stays Terminating. ``kubectl get pvc``
prints Terminating.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from localcluster.defaults import PV_PROTECTION, PVC_PROTECTION
from localcluster.testing import create_object as create
from localcluster.testing import get_object as get
from localcluster.testing import wait_for
from localcluster.volumes import volume_path
from test_localcluster_storage import claim

from localcluster import ClusterThread, LocalCluster

PVCS = ("", "v1", "persistentvolumeclaims")
PVS = ("", "v1", "persistentvolumes")
PODS = ("", "v1", "pods")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")


def pod(name: str, claim_name: str, node: str | None = "cpu-node-1") -> dict:
    spec = {
        "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2025-01-01"}],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim_name}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def vmi(name: str, data_volume: str) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}, "memory": {"guest": "1Gi"}},
            "volumes": [{"name": "root", "dataVolume": {"name": data_volume}}],
        },
    }


async def bound(cluster, name: str) -> str:
    await wait_for(lambda: (get(cluster, PVCS, name).get("status") or {}).get("phase") == "Bound")
    return get(cluster, PVCS, name)["spec"]["volumeName"]


def terminating(cluster, key, name, namespace="default") -> bool:
    obj = get(cluster, key, name, namespace)
    return bool(obj and obj["metadata"].get("deletionTimestamp"))


async def settle(cluster) -> None:
    """Let the controllers see every change so far (they run on this loop)."""
    for _ in range(2):
        await wait_for(lambda: all(c._queue.empty() for c in cluster.controllers.values()))
        await asyncio.sleep(0.05)


async def test_claim_in_use_stays_terminating_until_its_pod_is_gone(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "protection")) as cluster:
        store = cluster.store
        create(cluster, PVCS, claim("home-ann"))
        pv_name = await bound(cluster, "home-ann")
        assert get(cluster, PVCS, "home-ann")["metadata"]["finalizers"] == [PVC_PROTECTION]
        assert get(cluster, PVS, pv_name, None)["metadata"]["finalizers"] == [PV_PROTECTION]
        (volume_path(cluster, pv_name) / "thesis.tex").write_text("\\chapter{One}")
        create(cluster, PODS, pod("jupyter-ann", "home-ann"))
        deleted = store.delete(store.kind(*PVCS), "default", "home-ann")
        assert deleted["metadata"]["deletionTimestamp"]
        await settle(cluster)
        held = get(cluster, PVCS, "home-ann")
        assert held["metadata"]["finalizers"] == [PVC_PROTECTION] and held["status"]["phase"] == "Bound"
        assert (volume_path(cluster, pv_name) / "thesis.tex").exists()
        # A finished Pod still holds it: only deleting the Pod object lets it go.
        running = get(cluster, PODS, "jupyter-ann")
        running["status"] = {"phase": "Succeeded"}
        store.replace(store.kind(*PODS), "default", "jupyter-ann", running, subresource="status")
        await settle(cluster)
        assert get(cluster, PVCS, "home-ann") is not None
        store.delete(store.kind(*PODS), "default", "jupyter-ann")
        await wait_for(lambda: get(cluster, PVCS, "home-ann") is None)
        await wait_for(lambda: get(cluster, PVS, pv_name, None) is None)
        assert not volume_path(cluster, pv_name).exists()


async def test_unscheduled_pods_do_not_hold_a_claim(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "protection")) as cluster:
        create(cluster, PVCS, claim("home-bob"))
        await bound(cluster, "home-bob")
        create(cluster, PODS, pod("jupyter-bob", "home-bob", node=None))
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "home-bob")
        await wait_for(lambda: get(cluster, PVCS, "home-bob") is None)


async def test_a_vmi_holds_its_data_volume_claim(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "protection")) as cluster:
        store = cluster.store
        create(cluster, PVCS, claim("root-cy"))
        await bound(cluster, "root-cy")
        created = create(cluster, VMIS, vmi("vm-cy", "root-cy"))
        created["status"] = {"phase": "Scheduled", "nodeName": "gpu-node-1"}
        store.replace(store.kind(*VMIS), "default", "vm-cy", created, subresource="status")
        store.delete(store.kind(*PVCS), "default", "root-cy")
        await settle(cluster)
        assert terminating(cluster, PVCS, "root-cy")
        store.delete(store.kind(*VMIS), "default", "vm-cy")
        await wait_for(lambda: get(cluster, PVCS, "root-cy") is None)


async def test_a_bound_volume_waits_for_its_claim_and_finalizers_come_back(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "protection")) as cluster:
        store = cluster.store
        create(cluster, PVCS, claim("data"))
        pv_name = await bound(cluster, "data")
        stripped = get(cluster, PVCS, "data")
        stripped["metadata"]["finalizers"] = ["example.com/hold"]
        store.replace(store.kind(*PVCS), "default", "data", stripped)
        await wait_for(lambda: PVC_PROTECTION in get(cluster, PVCS, "data")["metadata"]["finalizers"])
        assert "example.com/hold" in get(cluster, PVCS, "data")["metadata"]["finalizers"]
        store.delete(store.kind(*PVS), None, pv_name)
        await settle(cluster)
        assert terminating(cluster, PVS, pv_name, None)
        assert get(cluster, PVS, pv_name, None)["status"]["phase"] == "Bound"
        held = get(cluster, PVCS, "data")
        held["metadata"]["finalizers"] = [PVC_PROTECTION]
        store.replace(store.kind(*PVCS), "default", "data", held)
        store.delete(store.kind(*PVCS), "default", "data")
        await wait_for(lambda: get(cluster, PVS, pv_name, None) is None)
        assert get(cluster, PVCS, "data") is None


async def test_without_the_protection_controller_a_deleted_claim_stays_terminating(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage",)) as cluster:
        create(cluster, PVCS, claim("orphan"))
        await bound(cluster, "orphan")
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "orphan")
        await settle(cluster)
        assert terminating(cluster, PVCS, "orphan")


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_shows_a_held_claim_as_terminating(tmp_path):
    with ClusterThread(state_dir=tmp_path / "cluster", controllers=("storage", "protection")) as cluster:
        env = {"KUBECONFIG": str(cluster.kubeconfig), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

        def kubectl(*args: str) -> str:
            done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        manifest = tmp_path / "claim.yaml"
        manifest.write_text(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: home}\n"
            "spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n"
        )
        kubectl("apply", "-f", str(manifest))
        manifest.write_text(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: user}\nspec:\n  nodeName: cpu-node-1\n"
            "  containers: [{name: main, image: busybox:1.36}]\n"
            "  volumes: [{name: home, persistentVolumeClaim: {claimName: home}}]\n"
        )
        kubectl("apply", "-f", str(manifest))
        kubectl("wait", "--for=jsonpath={.status.phase}=Bound", "pvc/home", "--timeout=10s")
        kubectl("delete", "pvc", "home", "--wait=false")
        line = kubectl("get", "pvc", "home", "--no-headers").split()
        assert line[:2] == ["home", "Terminating"]
        assert kubectl("get", "pvc", "home", "-o", "jsonpath={.metadata.finalizers}") == '["kubernetes.io/pvc-protection"]'
        kubectl("delete", "pod", "user", "--grace-period=0", "--force")
        kubectl("wait", "--for=delete", "pvc/home", "--timeout=10s")
