"""CDI's own cdi-controller clones a golden image on the real control plane (localcluster.realplane.cdicontroller).

A DataVolume whose ``sourceRef`` is a DataSource in another namespace is moved by cdi-controller, not by our CDI
agent (which does not run there): CDI's clone populator plans a CSI clone (the StorageProfile says ``csi-clone``),
our ceph-csi provisioner makes the clone as a copy, CDI grows it to the size asked and rebinds its volume to the
DataVolume's PVC. The disk holds the golden image's files; the golden image is untouched; CDI's temporary claim goes.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUBEVIRT_BIN, where
this machine grants a network namespace.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from localcluster.goldenimage import make_golden_image
from localcluster.realplane.fixtures import read
from localcluster.testing import eventually
from localcluster.volumes import claim_path, disk_image_path

GOLDEN_NAMESPACE = "cdi-golden"


@pytest.fixture
def cdi_cluster(kubevirt_cluster):
    if kubevirt_cluster.plane.cdi_controller is None:
        pytest.skip("cdi-controller needs a network namespace of its own (unshare --net), which this machine refuses")
    return kubevirt_cluster


def root_disk(namespace: str, image: str) -> dict:
    """A root disk as the product writes one (backends/vm/manifests.py): Block, ReadWriteOnce, larger than its image."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "root", "namespace": namespace},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": image, "namespace": GOLDEN_NAMESPACE},
            "storage": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "storageClassName": "ceph-rbd",
                        "resources": {"requests": {"storage": "2Gi"}}},
        },
    }


async def clone_a_new_image(cdi_cluster, namespace: str, files: dict[str, str], *, size: str) -> str:
    """Make a golden image of ``size`` holding ``files``, and ask for :func:`root_disk` ``root`` (2Gi) cloning it in
    ``namespace``; the image's name."""
    image = f"img-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(cdi_cluster.thread.call, lambda a: make_golden_image(a, GOLDEN_NAMESPACE, image, files, size=size))
    status, body = await asyncio.to_thread(cdi_cluster.plane.request, "POST",
                                           f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes",
                                           root_disk(namespace, image))
    assert status == 201, body
    return image


async def test_cdi_controller_clones_a_golden_image_by_a_csi_clone(cdi_cluster, kubevirt_namespace):
    ns = kubevirt_namespace
    plane, agents = cdi_cluster.plane, cdi_cluster.agents
    assert "cdi-controller" in plane.pids()
    assert "cdi" not in agents.controllers  # our imitation of CDI does not run beside it
    profile = await eventually(lambda: read(plane, "/apis/cdi.kubevirt.io/v1beta1/storageprofiles/ceph-rbd"),
                               what="the StorageProfile")
    assert profile["status"]["cloneStrategy"] == "csi-clone", profile
    image = await clone_a_new_image(cdi_cluster, ns, {"etc/os-release": 'NAME="Debian GNU/Linux"\n'}, size="1Gi")

    async def finished():
        dv = await read(plane, f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{ns}/datavolumes/root")
        return dv if (dv.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    dv = await eventually(finished, timeout=120, what="the clone's end")
    assert (dv["status"]["phase"], dv["status"]["progress"]) == ("Succeeded", "100.0%"), dv["status"]
    pvc = await read(plane, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/root")
    assert pvc["status"]["phase"] == "Bound" and pvc["status"]["capacity"]["storage"] in ("2Gi", "2147483648"), pvc
    assert pvc["spec"]["dataSourceRef"]["kind"] == "VolumeCloneSource", pvc["spec"]  # CDI's populator filled it

    async def reasons():
        events = await read(plane, f"/api/v1/namespaces/{ns}/events")
        seen = {e["reason"] for e in events["items"] if e["involvedObject"]["name"] == "root"}
        return seen if "CloneSucceeded" in seen else None

    # a CSI clone, as CDI's populator recorded its choice on the claim; never a host-assisted copy's phases (those
    # of the CSI clone, CSICloneInProgress and the like, may all be skipped by a clone this fast: seen once in CI)
    assert pvc["metadata"]["annotations"].get("cdi.kubevirt.io/cloneType") == "csi-clone", pvc["metadata"]
    seen = await eventually(reasons, what="CDI's CloneSucceeded Event")
    assert not seen & {"CloneInProgress", "CloneFromSnapshotSourceInProgress"}, seen

    disk = disk_image_path(claim_path(agents, ns, "root"), "Block")
    golden = disk_image_path(claim_path(agents, GOLDEN_NAMESPACE, image), "Block")
    assert (disk / "etc/os-release").read_text() == 'NAME="Debian GNU/Linux"\n'
    assert disk.resolve() != golden.resolve() and (golden / "etc/os-release").exists()

    async def temporary_claim_gone():
        claims = await read(plane, f"/api/v1/namespaces/{GOLDEN_NAMESPACE}/persistentvolumeclaims")
        return not [c for c in claims["items"] if c["metadata"]["name"].startswith("tmp-pvc-")]

    await eventually(temporary_claim_gone, timeout=60, what="CDI's temporary claim gone")



async def test_cdi_controller_refuses_a_clone_smaller_than_its_source(cdi_cluster, kubevirt_namespace):
    """What our CDI agent now does too (localcluster/tests/test_localcluster_cdi.py), and the product's start turns
    into a sentence naming vm_root_disk_size (workspacespawner.backends.vm.vmstatus.clone_refused)."""
    ns, plane = kubevirt_namespace, cdi_cluster.plane
    await clone_a_new_image(cdi_cluster, ns, {"etc/os-release": "x\n"}, size="4Gi")

    async def refused():
        dv = await read(plane, f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{ns}/datavolumes/root")
        bound = next((c for c in (dv.get("status") or {}).get("conditions") or [] if c["type"] == "Bound"), {})
        return dv if bound.get("reason") == "CloneValidationFailed" else None

    dv = await eventually(refused, timeout=60, what="CDI's CloneValidationFailed")
    bound = next(c for c in dv["status"]["conditions"] if c["type"] == "Bound")
    # phase Pending, or none yet: CDI may write the condition first (the product reads both alike)
    assert (dv["status"].get("phase", "Pending"), bound["status"]) == ("Pending", "Unknown"), dv["status"]
    assert bound["message"] == ("The clone doesn't meet the validation requirements: target resources requests "
                                "storage size is smaller than the source 2147483648 < 4294967296"), bound
    status, _ = await asyncio.to_thread(plane.request, "GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/root")
    assert status == 404
