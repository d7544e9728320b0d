"""The local cluster's virt-launcher Pod as KubeVirt renders it, and the attacher taking it for its VMI.

Covers :func:`make_launcher_pod` for a GPU VMI with a home PVC, a
DataVolume root disk and a cloud-init disk (the VMI's labels and
annotations copied but for the ones KubeVirt leaves out, KubeVirt's own
labels and annotations, the VMI as controlling owner, the claims as
``persistentVolumeClaim`` volumes with a DataVolume as the claim of its
name, cloud-init left out, the compute container's requests, limits and
GPU), the whole Pod passing the local cluster's validator
(kubernetes-validate strict); and :func:`consumer_of`: a launcher Pod
attaches as its VMI, so a ReadWriteOncePod claim of a VM has one consumer,
while a Pod that only carries the label (no VMI owner) is itself.
"""

from __future__ import annotations

import datetime
from decimal import Decimal

from localcluster.attacher import Attacher, Consumer, consumer_of
from localcluster.controllers.launcher import is_launcher, make_launcher_pod
from localcluster.controllers.scheduler import vmi_requests
from localcluster.kinds import by_kind
from localcluster.validation import Validator

LABELS = {"app.kubernetes.io/managed-by": "workspacespawner", "component": "singleuser-server", "kubevirt.io/domain": "bob-gpu"}


def vmi() -> dict:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "bob-gpu", "namespace": "default", "uid": "0b0e6a52-1c1d-4d3e-9f00-5a6b7c8d9e0f",
                     "labels": dict(LABELS),
                     "annotations": {"hub.jupyter.org/username": "bob", "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                     "kubevirt.io/latest-observed-api-version": "v1"}},
        "spec": {
            "domain": {"cpu": {"cores": 4}, "memory": {"guest": "16Gi"},
                       "resources": {"requests": {"memory": "16Gi"}, "limits": {"memory": "18Gi"}},
                       "devices": {"gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}]}},
            "volumes": [{"name": "root", "dataVolume": {"name": "bob-gpu-root"}},
                        {"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": "bob-gpu-cloudinit"}}}],
        },
    }


def test_the_launcher_pod_carries_the_vmis_labels_claims_and_gpus():
    pod = make_launcher_pod(vmi(), "gpu-node-1", vmi_requests(vmi()))
    meta = pod["metadata"]
    assert meta["labels"] == {**LABELS, "kubevirt.io": "virt-launcher",
                              "kubevirt.io/created-by": "0b0e6a52-1c1d-4d3e-9f00-5a6b7c8d9e0f", "vm.kubevirt.io/name": "bob-gpu"}
    assert meta["annotations"] == {"hub.jupyter.org/username": "bob", "kubevirt.io/domain": "bob-gpu",
                                   "kubectl.kubernetes.io/default-container": "compute"}
    assert [(ref["kind"], ref["uid"], ref["controller"]) for ref in meta["ownerReferences"]] == [
        ("VirtualMachineInstance", "0b0e6a52-1c1d-4d3e-9f00-5a6b7c8d9e0f", True)]
    assert meta["name"].startswith("virt-launcher-bob-gpu-") and is_launcher(pod)
    assert pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["spec"]["volumes"] == [{"name": "root", "persistentVolumeClaim": {"claimName": "bob-gpu-root"}},
                                      {"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}}]
    compute, console = pod["spec"]["containers"]
    assert compute["name"] == "compute"
    assert console["name"] == "guest-console-log" and console["command"] == ["/usr/bin/virt-tail"]
    assert [m["name"] for m in compute["volumeMounts"]] == ["root", "home"]
    assert compute["resources"] == {"requests": {"cpu": "4", "memory": str(16 * 2**30), "nvidia.com/gpu": "1"},
                                    "limits": {"memory": "18Gi", "nvidia.com/gpu": "1"}}
    assert Validator().causes(by_kind()[("v1", "Pod")], pod) == []


def test_a_vmi_without_a_serial_console_log_has_no_console_container():
    for devices in ({"logSerialConsole": False}, {"autoattachSerialConsole": False}):
        quiet = vmi()
        quiet["spec"]["domain"].setdefault("devices", {}).update(devices)
        pod = make_launcher_pod(quiet, "gpu-node-1", vmi_requests(quiet))
        assert [c["name"] for c in pod["spec"]["containers"]] == ["compute"]


def test_fractional_requests_are_written_without_an_exponent():
    pod = make_launcher_pod(vmi(), "gpu-node-1", {"cpu": Decimal("0.5"), "memory": Decimal(10) ** 9, "pods": Decimal(1)})
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "0.5", "memory": "1000000000"}


def test_a_launcher_pod_attaches_as_its_vmi():
    pod = make_launcher_pod(vmi(), "gpu-node-1", vmi_requests(vmi()))
    pod["metadata"]["uid"] = "pod-uid"
    as_vmi = consumer_of("VirtualMachineInstance", vmi(), "gpu-node-1")
    assert consumer_of("Pod", pod, "gpu-node-1") == as_vmi == Consumer(
        "VirtualMachineInstance", "default", "bob-gpu", "0b0e6a52-1c1d-4d3e-9f00-5a6b7c8d9e0f", "gpu-node-1")
    attacher = Attacher(lambda: datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC))
    claim = ("default", "home-bob")
    attacher.attach(claim, "pv-1", ["ReadWriteOncePod"], as_vmi)
    attacher.attach(claim, "pv-1", ["ReadWriteOncePod"], consumer_of("Pod", pod, "gpu-node-1"))  # no Multi-Attach error
    assert attacher.holders(claim) == [as_vmi]
    assert attacher.max_consumers() == {claim: 1}


def test_a_pod_with_only_the_label_is_itself():
    stray = {"metadata": {"name": "virt-launcher-fake", "namespace": "default", "uid": "u1", "labels": {"kubevirt.io": "virt-launcher"}}}
    assert consumer_of("Pod", stray, "n") == Consumer("Pod", "default", "virt-launcher-fake", "u1", "n")
