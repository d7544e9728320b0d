"""The local cluster's CDI: DataVolumes cloned from golden-image DataSources, blank disks, failures.

Covers the clone's phases and progress, the copy of the golden image's files
into the target PVC (owned by its DataVolume), cross-namespace sourceRefs,
the CloneWithoutSource report for a missing DataSource, the CloneValidationFailed report for a target smaller than
its source, claim adoption and
injected failures (``cdi.fail_next`` / ``cdi.fail_names``).
"""

from __future__ import annotations

from localcluster.goldenimage import make_golden_image
from localcluster.testing import get_object as get
from localcluster.testing import wait_for
from localcluster.volumes import DISK_IMAGE, claim_path

from localcluster import LocalCluster

DVS = ("cdi.kubevirt.io", "v1beta1", "datavolumes")
DATA_SOURCES = ("cdi.kubevirt.io", "v1beta1", "datasources")
PVCS = ("", "v1", "persistentvolumeclaims")
OS_RELEASE = 'NAME="Ubuntu"\nVERSION_ID="22.04"\n'


def root_disk(name: str, *, source_ref: dict | None = None, source: dict | None = None, size: str = "30Gi") -> dict:
    spec: dict = {"storage": {"resources": {"requests": {"storage": size}}, "storageClassName": "ceph-rbd"}}
    if source_ref is not None:
        spec["sourceRef"] = source_ref
    if source is not None:
        spec["source"] = source
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "labels": {"hub.jupyter.org/username": "ann"}},
        "spec": spec,
    }


def dv_status(cluster, name):
    return (get(cluster, DVS, name) or {}).get("status") or {}


def condition(status: dict, ctype: str) -> dict:
    return next(c for c in status.get("conditions", []) if c["type"] == ctype)


def record_phases(cluster, name):
    """Every (phase, progress) the DataVolume passes through, in order."""
    seen = []

    def hook(event_type, kind, obj, old):
        if kind.key == DVS and obj["metadata"]["name"] == name:
            status = obj.get("status") or {}
            step = (status.get("phase"), status.get("progress"))
            if status.get("phase") and (not seen or seen[-1] != step):
                seen.append(step)

    cluster.store.on_change(hook)
    return seen


def create_dv(cluster, body, namespace="default"):
    return cluster.store.create(cluster.store.kind(*DVS), namespace, body)


async def test_clone_from_golden_image_in_another_namespace(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        cluster.controllers["cdi"].clone_seconds = 0.2
        ds = await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": OS_RELEASE})
        assert condition(ds["status"], "Ready")["status"] == "True"
        phases = record_phases(cluster, "root-ann")
        dv = create_dv(cluster, root_disk("root-ann", source_ref={"kind": "DataSource", "name": "ubuntu-22.04-gpu", "namespace": "golden-images"}))
        await wait_for(lambda: dv_status(cluster, "root-ann").get("phase") == "Succeeded")
        status = dv_status(cluster, "root-ann")
        assert status["progress"] == "100.0%"
        assert status["claimName"] == "root-ann"
        assert condition(status, "Ready")["status"] == "True"
        assert condition(status, "Bound")["status"] == "True"
        assert condition(status, "Running") == {**condition(status, "Running"), "status": "False", "reason": "Completed"}
        names = [p for p, _ in phases]
        assert names[0] == "CloneScheduled"
        assert "CloneInProgress" in names and names[-1] == "Succeeded"
        progress = [pr for p, pr in phases if p == "CloneInProgress"]
        assert len(progress) >= 3 and progress == sorted(progress, key=lambda s: float(s.rstrip("%")))
        assert all(pr.endswith("%") and len(pr.split(".")[1]) == 3 for pr in progress)  # "N.NN%"
        target = get(cluster, PVCS, "root-ann")
        assert target["metadata"]["ownerReferences"][0]["uid"] == dv["metadata"]["uid"]
        assert target["metadata"]["ownerReferences"][0]["controller"] is True
        assert target["spec"]["resources"]["requests"]["storage"] == "30Gi"
        assert target["metadata"]["labels"]["hub.jupyter.org/username"] == "ann"
        assert get(cluster, PVCS, "root-ann")["spec"]["volumeMode"] == "Filesystem"  # from the Block golden image: CDI's disk.img
        assert (claim_path(cluster, "default", "root-ann") / DISK_IMAGE / "etc" / "os-release").read_text() == OS_RELEASE


async def test_missing_datasource_reports_clone_without_source_then_recovers(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        cluster.controllers["cdi"].clone_seconds = 0.05
        create_dv(cluster, root_disk("root-bob", source_ref={"kind": "DataSource", "name": "ubuntu-22.04-gpu"}))
        await wait_for(lambda: dv_status(cluster, "root-bob").get("conditions"))
        status = dv_status(cluster, "root-bob")
        assert status["phase"] == "Pending"
        bound = condition(status, "Bound")
        assert (bound["status"], bound["reason"]) == ("Unknown", "CloneWithoutSource")
        assert bound["message"] == "The source datasource ubuntu-22.04-gpu doesn't exist"
        assert condition(status, "Ready")["reason"] == "CloneWithoutSource"
        store = cluster.store
        events = [e for e in store.objects(store.kind("", "v1", "events")) if e["reason"] == "CloneWithoutSource"]
        assert events and events[0]["type"] == "Warning"
        assert get(cluster, PVCS, "root-bob") is None
        await make_golden_image(cluster, "default", "ubuntu-22.04-gpu", {"etc/hostname": "golden\n"})
        await wait_for(lambda: dv_status(cluster, "root-bob").get("phase") == "Succeeded")
        assert (claim_path(cluster, "default", "root-bob") / DISK_IMAGE / "etc" / "hostname").read_text() == "golden\n"


async def test_a_clone_smaller_than_its_source_is_refused_as_cdi_refuses_it(tmp_path):
    """CDI's clone validation (seen on the real plane's cdi-controller): a target asking for less than the source PVC
    stays Pending with reason CloneValidationFailed, a Warning Event, and no PVC."""
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": OS_RELEASE}, size="4Gi")
        ref = {"kind": "DataSource", "name": "ubuntu-22.04-gpu", "namespace": "golden-images"}
        create_dv(cluster, root_disk("root-small", source_ref=ref, size="2Gi"))
        await wait_for(lambda: dv_status(cluster, "root-small").get("conditions"))
        status = dv_status(cluster, "root-small")
        bound = condition(status, "Bound")
        assert (status["phase"], bound["status"], bound["reason"]) == ("Pending", "Unknown", "CloneValidationFailed")
        assert bound["message"] == ("The clone doesn't meet the validation requirements: target resources requests "
                                    "storage size is smaller than the source 2147483648 < 4294967296")
        assert condition(status, "Ready")["reason"] == "CloneValidationFailed"
        store = cluster.store
        assert [e["type"] for e in store.objects(store.kind("", "v1", "events")) if e["reason"] == "CloneValidationFailed"] == ["Warning"]
        assert get(cluster, PVCS, "root-small") is None
        create_dv(cluster, root_disk("root-same", source_ref=ref, size="4Gi"))
        await wait_for(lambda: dv_status(cluster, "root-same").get("phase") == "Succeeded")


async def test_datasource_pointing_at_missing_pvc_is_not_ready(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        cluster.store.create(cluster.store.kind(*DATA_SOURCES), "default", {
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": "img"},
            "spec": {"source": {"pvc": {"namespace": "default", "name": "gone"}}},
        })
        await wait_for(lambda: (get(cluster, DATA_SOURCES, "img").get("status") or {}).get("conditions"))
        ready = condition(get(cluster, DATA_SOURCES, "img")["status"], "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "NotFound")
        create_dv(cluster, root_disk("root-x", source_ref={"kind": "DataSource", "name": "img"}))
        await wait_for(lambda: dv_status(cluster, "root-x").get("conditions"))
        assert condition(dv_status(cluster, "root-x"), "Bound")["message"] == "The source pvc gone doesn't exist"


async def test_injected_failure_marks_the_datavolume_failed(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        cdi = cluster.controllers["cdi"]
        cdi.clone_seconds = 0.05
        cdi.fail_next = 1
        await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": OS_RELEASE})
        ref = {"kind": "DataSource", "name": "ubuntu-22.04-gpu", "namespace": "golden-images"}
        create_dv(cluster, root_disk("root-fail", source_ref=ref))
        await wait_for(lambda: dv_status(cluster, "root-fail").get("phase") == "Failed")
        running = condition(dv_status(cluster, "root-fail"), "Running")
        assert (running["status"], running["reason"]) == ("False", "Error")
        assert "no space left on device" in running["message"]
        assert cdi.fail_next == 0
        cdi.fail_names = {"default/root-named"}
        create_dv(cluster, root_disk("root-ok", source_ref=ref))
        create_dv(cluster, root_disk("root-named", source_ref=ref))
        await wait_for(lambda: dv_status(cluster, "root-ok").get("phase") == "Succeeded")
        await wait_for(lambda: dv_status(cluster, "root-named").get("phase") == "Failed")


async def test_blank_and_pvc_sources(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        cluster.controllers["cdi"].clone_seconds = 0.05
        create_dv(cluster, root_disk("scratch", source={"blank": {}}, size="5Gi"))
        await wait_for(lambda: dv_status(cluster, "scratch").get("phase") == "Succeeded")
        assert claim_path(cluster, "default", "scratch").is_dir()
        (claim_path(cluster, "default", "scratch") / "data.bin").write_text("x")
        create_dv(cluster, root_disk("copy", source={"pvc": {"namespace": "default", "name": "scratch"}}))
        await wait_for(lambda: dv_status(cluster, "copy").get("phase") == "Succeeded")
        assert (claim_path(cluster, "default", "copy") / "data.bin").read_text() == "x"


async def test_existing_bound_claim_is_adopted(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi")) as cluster:
        store = cluster.store
        store.create(store.kind(*PVCS), "default", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "root-old"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "30Gi"}}, "storageClassName": "ceph-rbd"},
        })
        await wait_for(lambda: (get(cluster, PVCS, "root-old").get("status") or {}).get("phase") == "Bound")
        (claim_path(cluster, "default", "root-old") / "keep.txt").write_text("mine")
        dv = create_dv(cluster, root_disk("root-old", source_ref={"kind": "DataSource", "name": "whatever"}))
        await wait_for(lambda: dv_status(cluster, "root-old").get("phase") == "Succeeded")
        refs = get(cluster, PVCS, "root-old")["metadata"]["ownerReferences"]
        assert refs[0]["uid"] == dv["metadata"]["uid"]
        assert (claim_path(cluster, "default", "root-old") / "keep.txt").read_text() == "mine"
