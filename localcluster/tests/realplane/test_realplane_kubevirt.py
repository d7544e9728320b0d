"""KubeVirt's own virt-api on the real control plane (localcluster.realplane.kubevirt):
its admission webhooks, reached by kube-apiserver on a loopback URL, refuse a
VirtualMachine KubeVirt refuses, with KubeVirt's own words, and default one it
admits; its subresource API is served behind the aggregator.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and
WORKSPACESPAWNER_KUBEVIRT_BIN (the folder tools/kubevirt/build.sh printed).
"""

from __future__ import annotations

import asyncio
import copy
import uuid

import pytest
from localcluster.realplane.fixtures import plane_namespace
from localcluster.realplane.kubevirt import FEATURE_GATES, PERMITTED_HOST_DEVICES
from localcluster.testing import eventually, run_kubectl


def vm(namespace: str, name: str) -> dict:
    """A VM as the product writes one, in brief: a root disk on virtio, the home PVC over virtiofs, one GPU."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                            "filesystems": [{"name": "home", "virtiofs": {}}],
                            "hostDevices": [{"name": "gpu0", "deviceName": PERMITTED_HOST_DEVICES[0]}],
                        },
                    },
                    "volumes": [
                        {"name": "root", "persistentVolumeClaim": {"claimName": "root"}},
                        {"name": "home", "persistentVolumeClaim": {"claimName": "home"}},
                    ],
                }
            },
        },
    }


@pytest.fixture
def vm_namespace(kubevirt_plane):
    with plane_namespace(kubevirt_plane, "kv") as name:
        yield name


def create_vm(plane, manifest: dict):
    return plane.request(
        "POST", f"/apis/kubevirt.io/v1/namespaces/{manifest['metadata']['namespace']}/virtualmachines", manifest
    )


def test_a_disk_bus_typo_is_refused_by_virt_apis_validating_webhook(kubevirt_plane, vm_namespace):
    bad = vm(vm_namespace, "typo")
    bad["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = "virtoi"
    status, body = create_vm(kubevirt_plane, bad)
    assert status == 422, body
    # kube-apiserver's words for a webhook's denial, then KubeVirt's own (vmi-create-admitter.go)
    assert body["message"].startswith(
        'admission webhook "virtualmachine-validator.kubevirt.io" denied the request: '
    ), body
    assert (
        "spec.template.spec.domain.devices.disks[0] is set with an unrecognized bus virtoi, "
        "must be one of: [virtio scsi sata usb]"
    ) in body["message"], body
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "spec.template.spec.domain.devices.disks[0] is set with an unrecognized bus virtoi, "
            "must be one of: [virtio scsi sata usb]",
            "field": "spec.template.spec.domain.devices.disks[0].disk.bus",
        }
    ], body
    assert (
        kubevirt_plane.request("GET", f"/apis/kubevirt.io/v1/namespaces/{vm_namespace}/virtualmachines/typo")[0] == 404
    )


def test_a_valid_vm_is_admitted_and_defaulted_by_virt_apis_mutating_webhook(kubevirt_plane, vm_namespace):
    manifest = vm(vm_namespace, "good")
    sent = copy.deepcopy(manifest)
    status, body = create_vm(kubevirt_plane, manifest)
    assert status == 201, body
    template = body["spec"]["template"]["spec"]
    assert "machine" not in sent["spec"]["template"]["spec"]["domain"]
    # the mutating webhook (pkg/defaults: setVMDefaultMachineType, setDefaultArchitecture) filled these in
    assert template["domain"]["machine"] == {"type": "q35"}, template["domain"]
    assert template["architecture"] == "amd64", template
    # what the product needs of the KubeVirt CR: its virtiofs home and its GPU are admitted
    assert template["domain"]["devices"]["filesystems"] == [{"name": "home", "virtiofs": {}}]
    assert template["domain"]["devices"]["hostDevices"] == [{"name": "gpu0", "deviceName": PERMITTED_HOST_DEVICES[0]}]


async def test_without_the_host_devices_gate_kubevirt_refuses_a_gpu(kubevirt_plane, vm_namespace):
    """The KubeVirt CR's gates are what admits the product's VMs: with HostDevices off, virt-api
    refuses the GPU. (Not so virtiofs: KubeVirt v1.4.0 admits a virtiofs PVC without its gate, which
    only decides whether virt-controller runs the virtiofs container privileged.)"""
    path = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
    status, kv = kubevirt_plane.request("GET", path)
    assert status == 200, kv
    assert set(FEATURE_GATES) <= set(kv["spec"]["configuration"]["developerConfiguration"]["featureGates"])
    off = copy.deepcopy(kv)
    off["spec"]["configuration"]["developerConfiguration"]["featureGates"] = ["ExperimentalVirtiofsSupport"]
    assert kubevirt_plane.request("PUT", path, off)[0] == 200
    try:

        async def refused():
            status, body = await asyncio.to_thread(
                create_vm, kubevirt_plane, vm(vm_namespace, f"gated-{uuid.uuid4().hex[:6]}")
            )
            return body if status == 422 else None

        body = await eventually(refused, timeout=30, what="a VM with a GPU refused")
        assert body["message"] == (
            'admission webhook "virtualmachine-validator.kubevirt.io" denied the request: '
            "Host Devices feature gate is not enabled in kubevirt-config"
        ), body
    finally:
        status, current = kubevirt_plane.request("GET", path)
        current["spec"]["configuration"]["developerConfiguration"]["featureGates"] = list(FEATURE_GATES)
        assert kubevirt_plane.request("PUT", path, current)[0] == 200


def test_the_subresource_api_is_virt_apis_behind_the_aggregator(kubevirt_plane, vm_namespace):
    status, body = kubevirt_plane.request("GET", "/apis/subresources.kubevirt.io/v1")
    assert status == 200, body
    names = {r["name"] for r in body["resources"]}
    assert {"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart"} <= names, names
    # stopping a Halted VM that has no VMI: KubeVirt's 409 (subresource.go: vmNotRunning)
    assert create_vm(kubevirt_plane, vm(vm_namespace, "halted"))[0] == 201
    status, body = kubevirt_plane.request(
        "PUT", f"/apis/subresources.kubevirt.io/v1/namespaces/{vm_namespace}/virtualmachines/halted/stop", {}
    )
    assert status == 409, body
    assert (
        body["message"] == 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "halted": VM is not running'
    ), body


def container_disk_vm(namespace: str, name: str) -> dict:
    """A VM needing no PVC (virt-controller holds a VMI's Pod back until its PVCs exist)."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}],
                },
            },
        },
    }


async def test_virt_controller_leads_and_makes_a_running_vms_vmi_and_launcher_pod(
    kubevirt_plane, kubectl, vm_namespace
):
    plane = kubevirt_plane
    status, lease = plane.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kubevirt/leases/virt-controller")
    assert status == 200, lease
    assert lease["spec"]["holderIdentity"], lease

    status, vm_obj = create_vm(plane, container_disk_vm(vm_namespace, "runner"))
    assert status == 201, vm_obj
    base = f"/apis/kubevirt.io/v1/namespaces/{vm_namespace}"

    async def vmi():
        status, body = await asyncio.to_thread(plane.request, "GET", f"{base}/virtualmachineinstances/runner")
        return body if status == 200 else None

    made = await eventually(vmi, timeout=60, what="the VM's VMI")
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "VirtualMachine",
        "runner",
        vm_obj["metadata"]["uid"],
        True,
    )
    # the VMI mutating webhook ran on virt-controller's create: machine type and the cluster's defaults
    assert made["spec"]["domain"]["machine"] == {"type": "q35"}, made["spec"]["domain"]

    async def launcher():
        status, body = await asyncio.to_thread(
            plane.request,
            "GET",
            f"/api/v1/namespaces/{vm_namespace}/pods?labelSelector=kubevirt.io/created-by={made['metadata']['uid']}",
        )
        return body["items"] if status == 200 and body["items"] else None

    pods = await eventually(launcher, timeout=60, what="the VMI's virt-launcher Pod")
    assert len(pods) == 1, pods
    pod = pods[0]
    assert pod["metadata"]["name"].startswith("virt-launcher-runner-"), pod["metadata"]
    assert pod["metadata"]["labels"]["kubevirt.io"] == "virt-launcher"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachineInstance"
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    assert compute["image"].startswith("quay.io/kubevirt/virt-launcher:"), compute["image"]
    # no node here runs Pods (no kubelet, no virt-handler): kube-scheduler finds no node for the Pod, and the VMI
    # stays Scheduling
    assert pod["status"].get("phase") == "Pending", pod["status"]

    async def unschedulable():
        status, found = await asyncio.to_thread(
            plane.request, "GET", f"/api/v1/namespaces/{vm_namespace}/pods/{pod['metadata']['name']}"
        )
        conditions = {c["type"]: c for c in (found.get("status") or {}).get("conditions") or []}
        scheduled = conditions.get("PodScheduled") or {}
        return scheduled if (scheduled.get("status"), scheduled.get("reason")) == ("False", "Unschedulable") else None

    scheduled = await eventually(unschedulable, timeout=60, what="kube-scheduler's Unschedulable on the virt-launcher Pod")
    # The plane runs Kubernetes 1.34 with PodObservedGenerationTracking off (realplane/plane.py, KUBEVIRT_SKEW_GATES):
    # KubeVirt v1.4's client-go (k8s.io/api v0.31) drops the conditions' observedGeneration, so virt-controller's JSON
    # Patch of the Pod's conditions, which `test`s them as it decoded them, failed over and over while kube-scheduler
    # wrote that field ("Patching of pod conditions failed", vmi.go in v1.4.0, retried with a backoff of up to 1000 s);
    # virt-controller writes a VMI's status only after that patch, so the VMI stayed Pending for minutes (CI once
    # waited past 180 s).
    assert "observedGeneration" not in scheduled, scheduled

    # virt-controller moves the VMI to Scheduling and the VM to ErrorUnschedulable (a sync after the one that made
    # the Pod: kube-scheduler can be quicker)
    async def scheduling():
        found = await vmi()
        return found if found and (found.get("status") or {}).get("phase") == "Scheduling" else None

    await eventually(scheduling, timeout=60, what="the VMI Scheduling")

    async def unschedulable_vm():
        status, found = await asyncio.to_thread(plane.request, "GET", f"{base}/virtualmachines/runner")
        return found if (found.get("status") or {}).get("printableStatus") == "ErrorUnschedulable" else None

    await eventually(unschedulable_vm, timeout=60, what="the VM's printableStatus ErrorUnschedulable")
    listed = run_kubectl(kubectl, plane.kubeconfig, "get", "vm,vmi,pods", "-n", vm_namespace).stdout
    rows = {line.split()[0]: line.split() for line in listed.splitlines() if line and not line.startswith("NAME")}
    assert rows["virtualmachine.kubevirt.io/runner"][2] == "ErrorUnschedulable", listed
    assert rows["virtualmachine.kubevirt.io/runner"][3] == "False", listed
    assert rows["virtualmachineinstance.kubevirt.io/runner"][2] == "Scheduling", listed
    assert rows[f"pod/{pod['metadata']['name']}"][1:3] == ["0/3", "Pending"], listed

    # stop and start through virt-api's subresources, as the hub does
    subresource = f"/apis/subresources.kubevirt.io/v1/namespaces/{vm_namespace}/virtualmachines/runner"
    assert plane.request("PUT", f"{subresource}/stop", {}) == (202, "")

    async def stopped():
        status, vm_now = await asyncio.to_thread(plane.request, "GET", f"{base}/virtualmachines/runner")
        vmi_status, _ = await asyncio.to_thread(plane.request, "GET", f"{base}/virtualmachineinstances/runner")
        return (
            vm_now if vmi_status == 404 and (vm_now.get("status") or {}).get("printableStatus") == "Stopped" else None
        )

    vm_now = await eventually(stopped, timeout=60, what="the VM stopped, its VMI gone")
    assert vm_now["spec"]["runStrategy"] == "Halted"
    assert plane.request("PUT", f"{subresource}/start", {}) == (202, "")
    restarted = await eventually(vmi, timeout=60, what="a new VMI after start")
    assert restarted["metadata"]["uid"] != made["metadata"]["uid"]


async def test_an_unpermitted_gpu_is_refused_by_virt_controller(kubevirt_plane, vm_namespace):
    """KubeVirt v1.4.0 admits any hostDevices deviceName (virt-api checks only the gate); virt-controller
    refuses to render the virt-launcher Pod of a device not in ``permittedHostDevices``."""
    plane = kubevirt_plane
    manifest = container_disk_vm(vm_namespace, "unpermitted")
    manifest["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"] = [
        {"name": "gpu0", "deviceName": "nvidia.com/TU104GL_Tesla_T4"}
    ]
    status, body = create_vm(plane, manifest)
    assert status == 201, body
    base = f"/apis/kubevirt.io/v1/namespaces/{vm_namespace}"

    async def refusal():
        status, vmi = await asyncio.to_thread(plane.request, "GET", f"{base}/virtualmachineinstances/unpermitted")
        conditions = (vmi.get("status") or {}).get("conditions") or [] if status == 200 else []
        return next((c for c in conditions if c["type"] == "Synchronized" and c["status"] == "False"), None)

    condition = await eventually(refusal, timeout=60, what="virt-controller's refusal on the VMI")
    assert condition["reason"] == "FailedCreate", condition
    assert condition["message"] == (
        "failed to render launch manifest: "
        "HostDevice nvidia.com/TU104GL_Tesla_T4 is not permitted in permittedHostDevices configuration"
    ), condition
    status, pods = plane.request("GET", f"/api/v1/namespaces/{vm_namespace}/pods")
    assert status == 200 and pods["items"] == [], pods


def test_zz_a_restarted_plane_serves_kubevirt_again(kubevirt_plane, vm_namespace):
    """Last in this module (it restarts the session's plane): the same state folder starts again,
    re-applying virt-operator's objects while the previous webhooks are still registered."""
    kubevirt_plane.stop()
    kubevirt_plane.start()
    bad = vm(vm_namespace, "typo-after-restart")
    bad["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = "virtoi"
    status, body = create_vm(kubevirt_plane, bad)
    assert status == 422, body
    assert "is set with an unrecognized bus virtoi" in body["message"], body
    status, body = kubevirt_plane.request(
        "GET", "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes"
    )
    assert status == 200 and len(body["items"]) > 10, body
