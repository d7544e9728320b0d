"""A VirtualMachineInstance and its virt-launcher Pod are one workspace to every reader (workspacespawner.k8s.objects).

On a real cluster KubeVirt's virt-controller copies a VMI's labels onto its
virt-launcher Pod, mounts the VMI's claims in it and gives its compute
container the VMI's GPUs, so the hub's Pod cache (``component=
singleuser-server``) and a LIST by owner labels hold both. Covers
:func:`counted_once` (a launcher Pod whose VMI is among the objects is left
out; one whose VMI is gone, still terminating, stands for itself; a Pod
that only looks like one is kept), and the readers built on it: the free
GPUs of the spawn form (:func:`gpu_pools`: a VM holding 1 of 8 GPUs leaves
7 free, not 6), the holders of a disk (:func:`holders`: the VMI, once),
the workspaces alive for the quota enforcer.
"""

from __future__ import annotations

from workspacespawner.core import names
from workspacespawner.gpu.capacity import gpu_pools
from workspacespawner.k8s.objects import counted_once, holders, is_virt_launcher
from workspacespawner.quota.enforcer import alive_from_objects

A100 = "NVIDIA-A100-SXM4-80GB"


def node(name: str = "gpu-1", gpus: int = 8) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": A100}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}}


def owner_meta(name: str, uid: str) -> dict:
    return {"name": name, "namespace": "default", "uid": uid,
            "labels": {**names.owner_labels("bob"), "component": "singleuser-server", names.DOMAIN_LABEL: name},
            "annotations": {"hub.jupyter.org/username": "bob", names.SERVER_ANNOTATION: "gpu"}}


def vmi(uid: str = "vmi-1", gpus: int = 1) -> dict:
    return {"kind": "VirtualMachineInstance", "metadata": owner_meta("bob-gpu", uid),
            "spec": {"domain": {"devices": {"gpus": [{"name": f"g{i}", "deviceName": "nvidia.com/gpu"} for i in range(gpus)]}},
                     "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}},
                                 {"name": "root", "dataVolume": {"name": "bob-gpu-root"}}]},
            "status": {"phase": "Running", "nodeName": "gpu-1"}}


def launcher(vmi_uid: str = "vmi-1", gpus: int = 1, *, deleting: bool = False) -> dict:
    """The virt-launcher Pod as KubeVirt makes it: the VMI's labels and annotations, its claims, its GPUs."""
    meta = owner_meta("virt-launcher-bob-gpu-x7k2p", "pod-1")
    meta["labels"].update({names.VIRT_LAUNCHER_LABEL: names.VIRT_LAUNCHER, names.CREATED_BY_LABEL: vmi_uid,
                           "vm.kubevirt.io/name": "bob-gpu"})
    if deleting:
        meta["deletionTimestamp"] = "2026-06-01T10:00:00Z"
    return {"kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "gpu-1",
                     "containers": [{"name": "compute", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                                      "requests": {"nvidia.com/gpu": str(gpus)}}}],
                     "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}},
                                 {"name": "root", "persistentVolumeClaim": {"claimName": "bob-gpu-root"}}]},
            "status": {"phase": "Running"}}


def test_a_launcher_is_recognised_by_its_label_only_on_a_pod():
    assert is_virt_launcher(launcher())
    assert not is_virt_launcher(vmi())
    lookalike = launcher()
    del lookalike["metadata"]["labels"][names.VIRT_LAUNCHER_LABEL]
    assert not is_virt_launcher(lookalike)  # the name alone says nothing


def test_a_launcher_whose_vmi_is_there_is_left_out():
    vm, pod = vmi(), launcher()
    assert counted_once([pod, vm]) == [vm]
    assert counted_once([vm, pod]) == [vm]


def test_a_launcher_whose_vmi_is_gone_stands_for_itself():
    lingering = launcher(deleting=True)
    assert counted_once([lingering]) == [lingering]
    other_vmi = vmi(uid="vmi-2")
    assert counted_once([launcher(), other_vmi]) == [launcher(), other_vmi]


def test_a_vm_holding_one_of_eight_gpus_leaves_seven_free():
    pools = gpu_pools([node()], [vmi(), launcher()])
    assert pools[("nvidia.com/gpu", A100)].free == 7
    assert pools[("nvidia.com/gpu", A100)].largest_free == 7


def test_a_vms_disks_are_held_by_its_vmi_once():
    vm = vmi()
    assert holders([vm, launcher()], "home-bob") == [vm]
    assert holders([launcher(), vm], "bob-gpu-root") == [vm]  # the launcher mounts the DataVolume's claim
    assert holders([launcher(deleting=True)], "home-bob") == [launcher(deleting=True)]  # still mounted while it goes


def test_the_vm_workspace_is_alive_once():
    assert alive_from_objects(counted_once([vmi(), launcher()])) == {("bob", "gpu")}
