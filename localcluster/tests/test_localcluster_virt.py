"""The local cluster's KubeVirt: the start/stop/restart subresources and the VM -> VMI controller.

Covers ``vm_action`` against each run strategy (202 paths, 404, 409, 500, 400
as virt-api answers them), the firmware UUID virt-controller writes into a VM
that has none (and the VMI inherits), a Halted VM started once its root DataVolume has
Succeeded, stop deleting the VMI (the virt controller finalizes VMIs that
never reached a node; placed ones are finalized here by hand, standing in for
the node agent), and the VM's printableStatus for a missing PVC, a failed
DataVolume, an unschedulable VMI and a crash loop.
"""

from __future__ import annotations

import uuid

import pytest
from localcluster.errors import ApiError
from localcluster.goldenimage import make_golden_image
from localcluster.testing import create_object as create
from localcluster.testing import get_object as get
from localcluster.testing import wait_for
from localcluster.vmactions import vm_action

from localcluster import LocalCluster

VMS = ("kubevirt.io", "v1", "virtualmachines")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")
DVS = ("cdi.kubevirt.io", "v1beta1", "datavolumes")
PVCS = ("", "v1", "persistentvolumeclaims")


def virtual_machine(name: str, *, run_strategy: str = "Halted", gpus: int = 0, home: str | None = None, root: str | None = None) -> dict:
    disks, volumes = [], []
    if root:
        disks.append({"name": "root", "disk": {"bus": "virtio"}})
        volumes.append({"name": "root", "dataVolume": {"name": root}})
    if home:
        disks.append({"name": "home", "disk": {"bus": "virtio"}})
        volumes.append({"name": "home", "persistentVolumeClaim": {"claimName": home}})
    devices: dict = {"disks": disks}
    if gpus:
        devices["gpus"] = [{"name": f"gpu{i}", "deviceName": "nvidia.com/gpu"} for i in range(gpus)]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": run_strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": name}},
                "spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "4Gi"}, "devices": devices}, "volumes": volumes},
            },
        },
    }


def data_volume(name: str) -> dict:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "ubuntu-22.04-gpu", "namespace": "golden-images"},
            "storage": {"resources": {"requests": {"storage": "30Gi"}}, "storageClassName": "ceph-rbd"},
        },
    }


def home_claim(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "storageClassName": "ceph-rbd"},
    }


def printable(cluster, name):
    return ((get(cluster, VMS, name) or {}).get("status") or {}).get("printableStatus")


def vmi_phase(cluster, name):
    return ((get(cluster, VMIS, name) or {}).get("status") or {}).get("phase")


def set_vmi_status(cluster, name, **status):
    vmi = get(cluster, VMIS, name)
    vmi["status"] = {**(vmi.get("status") or {}), **status}
    cluster.store.replace(cluster.store.kind(*VMIS), "default", name, vmi, subresource="status")


def finalize_vmi(cluster, name):
    """What the node agent does once the guest is down: lift the finalizer."""
    vmi = get(cluster, VMIS, name)
    vmi["metadata"]["finalizers"] = []
    cluster.store.replace(cluster.store.kind(*VMIS), "default", name, vmi)


def expect_error(cluster, action, name, code, message=None, body=None):
    with pytest.raises(ApiError) as caught:
        vm_action(cluster.store, "default", name, action, body)
    assert caught.value.code == code
    if message is not None:
        assert caught.value.message == message
    return caught.value


async def test_vm_action_semantics_without_controllers(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        store = cluster.store
        expect_error(cluster, "start", "ghost", 404, 'virtualmachine.kubevirt.io "ghost" not found')
        create(cluster, VMS, virtual_machine("vm-ann"))
        expect_error(cluster, "stop", "vm-ann", 409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm-ann": VM is not running')
        expect_error(cluster, "restart", "vm-ann", 409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm-ann": RunStategy Halted does not support manual restart requests')
        vm_action(store, "default", "vm-ann", "start", {"dryRun": ["All"]})
        assert get(cluster, VMS, "vm-ann")["spec"]["runStrategy"] == "Halted"
        vm_action(store, "default", "vm-ann", "start", {})
        assert get(cluster, VMS, "vm-ann")["spec"]["runStrategy"] == "Always"
        expect_error(cluster, "start", "vm-ann", 409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm-ann": Always does not support manual start requests')
        vmi = create(cluster, VMIS, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": "vm-ann"},
                                     "spec": virtual_machine("x")["spec"]["template"]["spec"]})
        set_vmi_status(cluster, "vm-ann", phase="Running")
        expect_error(cluster, "start", "vm-ann", 409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm-ann": VM is already running')
        vm_action(store, "default", "vm-ann", "restart", None)
        requests = get(cluster, VMS, "vm-ann")["status"]["stateChangeRequests"]
        assert requests == [{"action": "Stop", "uid": vmi["metadata"]["uid"]}, {"action": "Start"}]
        expect_error(cluster, "restart", "vm-ann", 500, "Internal error occurred: unable to complete request: stop/start already underway")
        expect_error(cluster, "restart", "vm-ann", 400, "For force restart, only gracePeriod=0 is supported for now", {"gracePeriodSeconds": 5})
        vm_action(store, "default", "vm-ann", "stop", {})
        assert get(cluster, VMS, "vm-ann")["spec"]["runStrategy"] == "Halted"


async def test_manual_run_strategy_uses_state_change_requests(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("virt",)) as cluster:
        store = cluster.store
        create(cluster, VMS, virtual_machine("vm-man", run_strategy="Manual"))
        await wait_for(lambda: printable(cluster, "vm-man") == "Stopped")
        expect_error(cluster, "stop", "vm-man", 409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm-man": VM is not running')
        vm_action(store, "default", "vm-man", "start", {})
        await wait_for(lambda: vmi_phase(cluster, "vm-man") == "Scheduling")
        await wait_for(lambda: "stateChangeRequests" not in get(cluster, VMS, "vm-man")["status"])
        assert printable(cluster, "vm-man") == "Starting"
        vm_action(store, "default", "vm-man", "stop", {})
        # Never placed on a node: the virt controller lifts the finalizer itself.
        await wait_for(lambda: get(cluster, VMIS, "vm-man") is None)
        await wait_for(lambda: printable(cluster, "vm-man") == "Stopped")
        assert get(cluster, VMS, "vm-man")["spec"]["runStrategy"] == "Manual"


async def test_vm_gets_a_stable_firmware_uuid(tmp_path):
    # KubeVirt's CalculateLegacyUUID: UUIDv5 of the VM name in this namespace (pkg/virt-controller/watch/vm/firmware.go).
    kubevirt_namespace = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")
    async with LocalCluster(state_dir=tmp_path, controllers=("virt",)) as cluster:
        created = create(cluster, VMS, virtual_machine("vm-fw"))
        firmware = await wait_for(lambda: get(cluster, VMS, "vm-fw")["spec"]["template"]["spec"]["domain"].get("firmware"))
        assert firmware == {"uuid": str(uuid.uuid5(kubevirt_namespace, "vm-fw"))}
        assert get(cluster, VMS, "vm-fw")["metadata"]["generation"] == created["metadata"]["generation"] + 1
        vm_action(cluster.store, "default", "vm-fw", "start", {})
        await wait_for(lambda: vmi_phase(cluster, "vm-fw") == "Scheduling")
        assert get(cluster, VMIS, "vm-fw")["spec"]["domain"]["firmware"] == firmware  # the guest's instance id
        chosen = virtual_machine("vm-own")
        chosen["spec"]["template"]["spec"]["domain"]["firmware"] = {"uuid": "0b4d4e07-49c3-4b41-9d4a-6a3a33f9a4b8"}
        create(cluster, VMS, chosen)
        await wait_for(lambda: printable(cluster, "vm-own") == "Stopped")
        assert get(cluster, VMS, "vm-own")["spec"]["template"]["spec"]["domain"]["firmware"] == {"uuid": "0b4d4e07-49c3-4b41-9d4a-6a3a33f9a4b8"}


async def test_start_waits_for_datavolume_then_runs_and_stops(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi", "scheduler", "virt")) as cluster:
        store = cluster.store
        cluster.controllers["cdi"].clone_seconds = 0.3
        await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": 'NAME="Ubuntu"\n'})
        create(cluster, PVCS, home_claim("home-ann"))
        create(cluster, VMS, virtual_machine("vm-ann", gpus=1, home="home-ann", root="root-ann"))
        await wait_for(lambda: printable(cluster, "vm-ann") == "Stopped")
        create(cluster, DVS, data_volume("root-ann"))
        vm_action(store, "default", "vm-ann", "start", {})
        await wait_for(lambda: printable(cluster, "vm-ann") == "Provisioning")
        assert get(cluster, VMIS, "vm-ann") is None
        await wait_for(lambda: vmi_phase(cluster, "vm-ann") == "Scheduled")
        vmi = get(cluster, VMIS, "vm-ann")
        vm = get(cluster, VMS, "vm-ann")
        assert vmi["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
        assert vmi["metadata"]["ownerReferences"][0]["controller"] is True
        assert vmi["metadata"]["labels"]["kubevirt.io/domain"] == "vm-ann"
        assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == "gpu-node-1"
        assert vmi["metadata"]["finalizers"] == ["foregroundDeleteVirtualMachine"]
        await wait_for(lambda: printable(cluster, "vm-ann") == "Starting")
        assert get(cluster, VMS, "vm-ann")["status"]["created"] is True
        # The node agent's part, by hand: the guest runs and is ready.
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        set_vmi_status(cluster, "vm-ann", phase="Running", conditions=[ready], interfaces=[{"ipAddress": "127.2.0.1", "name": "default"}])
        await wait_for(lambda: printable(cluster, "vm-ann") == "Running")
        status = get(cluster, VMS, "vm-ann")["status"]
        assert status["ready"] is True
        assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "True"
        vm_action(store, "default", "vm-ann", "stop", {})
        await wait_for(lambda: printable(cluster, "vm-ann") == "Stopping")
        assert get(cluster, VMIS, "vm-ann")["metadata"]["deletionTimestamp"]
        finalize_vmi(cluster, "vm-ann")
        await wait_for(lambda: printable(cluster, "vm-ann") == "Stopped")
        status = get(cluster, VMS, "vm-ann")["status"]
        assert status["ready"] is False and status["created"] is False
        # Stopping never touches the disks.
        assert get(cluster, PVCS, "root-ann") and get(cluster, PVCS, "home-ann")


async def test_missing_pvc_reads_error_pvc_not_found(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "virt")) as cluster:
        create(cluster, VMS, virtual_machine("vm-bob", run_strategy="Always", home="home-bob"))
        await wait_for(lambda: printable(cluster, "vm-bob") == "ErrorPvcNotFound")
        condition = next(c for c in get(cluster, VMIS, "vm-bob")["status"]["conditions"] if c["type"] == "Synchronized")
        assert condition["message"] == "PVC default/home-bob does not exist, waiting for it to appear"
        assert vmi_phase(cluster, "vm-bob") == "Pending"
        create(cluster, PVCS, home_claim("home-bob"))
        await wait_for(lambda: vmi_phase(cluster, "vm-bob") == "Scheduling")
        await wait_for(lambda: printable(cluster, "vm-bob") == "Starting")


async def test_failed_datavolume_reads_datavolume_error(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi", "virt")) as cluster:
        cdi = cluster.controllers["cdi"]
        cdi.clone_seconds, cdi.fail_next = 0.05, 1
        await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": "x"})
        create(cluster, DVS, data_volume("root-cy"))
        create(cluster, VMS, virtual_machine("vm-cy", run_strategy="Always", root="root-cy"))
        await wait_for(lambda: printable(cluster, "vm-cy") == "DataVolumeError")
        assert get(cluster, VMIS, "vm-cy") is None


async def test_unschedulable_vmi_reads_error_unschedulable(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler", "virt")) as cluster:
        create(cluster, VMS, virtual_machine("vm-huge", run_strategy="Always", gpus=9))
        await wait_for(lambda: printable(cluster, "vm-huge") == "ErrorUnschedulable")
        conditions = get(cluster, VMS, "vm-huge")["status"]["conditions"]
        scheduled = next(c for c in conditions if c["type"] == "PodScheduled")
        assert "Insufficient nvidia.com/gpu" in scheduled["message"]
        vm_action(cluster.store, "default", "vm-huge", "stop", {})
        await wait_for(lambda: get(cluster, VMIS, "vm-huge") is None)
        await wait_for(lambda: printable(cluster, "vm-huge") == "Stopped")


async def test_failed_vmi_crash_loops_then_restarts(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("virt",)) as cluster:
        cluster.controllers["virt"].crashloop_seconds = 0.1
        create(cluster, VMS, virtual_machine("vm-crash", run_strategy="Always"))
        await wait_for(lambda: vmi_phase(cluster, "vm-crash") == "Scheduling")
        first = get(cluster, VMIS, "vm-crash")["metadata"]["uid"]
        set_vmi_status(cluster, "vm-crash", phase="Failed")
        await wait_for(lambda: printable(cluster, "vm-crash") == "CrashLoopBackOff")
        failure = get(cluster, VMS, "vm-crash")["status"]["startFailure"]
        assert failure["consecutiveFailCount"] == 1 and failure["lastFailedVMIUID"] == first
        await wait_for(lambda: (get(cluster, VMIS, "vm-crash") or {"metadata": {"uid": first}})["metadata"]["uid"] != first)
        await wait_for(lambda: printable(cluster, "vm-crash") == "Starting")


async def test_subresources_over_http(tmp_path):
    import aiohttp

    async with LocalCluster(state_dir=tmp_path, controllers=("virt",)) as cluster:
        create(cluster, VMS, virtual_machine("vm-http"))
        base = f"{cluster.url}/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines"
        async with aiohttp.ClientSession() as session:
            async with session.put(f"{base}/vm-http/start", json={}) as response:
                assert response.status == 202
            await wait_for(lambda: vmi_phase(cluster, "vm-http") == "Scheduling")
            async with session.put(f"{base}/vm-http/start", json={}) as response:
                assert response.status == 409
                body = await response.json()
                assert (body["kind"], body["reason"]) == ("Status", "Conflict")
                assert body["message"].endswith("VM is already running")
            async with session.put(f"{base}/nobody/stop") as response:
                assert response.status == 404
            async with session.put(f"{base}/vm-http/stop", json={}) as response:
                assert response.status == 202
            await wait_for(lambda: printable(cluster, "vm-http") == "Stopped")


async def test_a_watch_of_pods_sees_the_launcher_pod_run_with_its_vmi(tmp_path):
    """The virt-launcher Pod's status follows its VMI through the API, as every write does: a watcher (the hub's Pod
    cache) gets each change. It once changed the stored object in place, so GET showed it Running while no watch
    event ever said so, and the hub never saw its guest-console-log container start."""
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "cdi", "scheduler", "virt")) as cluster:
        store = cluster.store
        cluster.controllers["cdi"].clone_seconds = 0
        seen = []
        store.on_change(lambda event, kind, obj, old: seen.append(((obj.get("status") or {}).get("phase"), event))
                        if kind.kind == "Pod" else None)
        await make_golden_image(cluster, "golden-images", "ubuntu-22.04-gpu", {"etc/os-release": 'NAME="Ubuntu"\n'})
        create(cluster, VMS, virtual_machine("vm-ann", root="root-ann"))
        create(cluster, DVS, data_volume("root-ann"))
        vm_action(store, "default", "vm-ann", "start", {})
        await wait_for(lambda: vmi_phase(cluster, "vm-ann") == "Scheduled")
        await wait_for(lambda: seen)
        set_vmi_status(cluster, "vm-ann", phase="Running", interfaces=[{"ipAddress": "127.2.0.1", "name": "default"}])
        await wait_for(lambda: ("Running", "MODIFIED") in seen)
        [pod] = [p for p in store.objects(store.kind("", "v1", "pods"))]
        assert {s["name"]: list(s["state"]) for s in pod["status"]["containerStatuses"]} == {
            "compute": ["running"], "guest-console-log": ["running"]}
