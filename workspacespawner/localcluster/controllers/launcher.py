"""The virt-launcher Pod of a VirtualMachineInstance, as KubeVirt's virt-controller makes it.

On a real cluster every running VMI has a Pod, ``virt-launcher-<vmi>-<suffix>``,
which runs the guest's QEMU and holds the VMI's resources (its GPUs too):
node agents such as NVIDIA's dcgm-exporter name that Pod, never the VMI. It
carries KubeVirt's labels ``kubevirt.io=virt-launcher``,
``kubevirt.io/created-by=<VMI uid>`` and ``vm.kubevirt.io/name=<VMI name>``,
and the VMI is its controlling owner; that label is how a reader joins the
Pod to its VMI (never the name).

Here the VMI's guest is run by the node agent's guest runtime, so the Pod is
a stand-in: :class:`~.virt.VirtController` creates it once the VMI is placed
(bound to the VMI's node, with the VMI's requests as its compute container's
requests), mirrors the VMI's phase into its status, and deletes it when the
VMI finishes or goes. The scheduler does not count it (the VMI is counted
instead), the node agent runs nothing for it (it only confirms its
deletion). Unlike KubeVirt it does not copy the VMI's own labels: the
product's caches select Pods by the labels of its templates, and a copy
would show the same workspace twice to the hub's readers.
"""

from __future__ import annotations

import hashlib

from .refs import owner_reference

LAUNCHER_LABEL = "kubevirt.io"
LAUNCHER_VALUE = "virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VM_NAME_LABEL = "vm.kubevirt.io/name"


def is_launcher(pod: dict) -> bool:
    """Whether ``pod`` is a virt-launcher Pod (label ``kubevirt.io=virt-launcher`` and a VMI owner)."""
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(LAUNCHER_LABEL) == LAUNCHER_VALUE and any(
        ref.get("kind") == "VirtualMachineInstance" for ref in meta.get("ownerReferences") or []
    )


def launcher_name(vmi: dict) -> str:
    """``virt-launcher-<vmi name>-<5 characters>``: the suffix from the VMI's uid (a new VMI gets a new Pod)."""
    suffix = hashlib.sha256(vmi["metadata"]["uid"].encode()).hexdigest()[:5]
    return f"virt-launcher-{vmi['metadata']['name'][:40]}-{suffix}"


def make_launcher_pod(vmi: dict, node: str, requests: dict[str, str]) -> dict:
    """The virt-launcher Pod of ``vmi``, bound to ``node``; ``requests``: ``{resource: quantity}`` of its compute container."""
    meta = vmi["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": launcher_name(vmi),
            "namespace": meta["namespace"],
            "labels": {LAUNCHER_LABEL: LAUNCHER_VALUE, CREATED_BY_LABEL: meta["uid"], VM_NAME_LABEL: meta["name"]},
            "ownerReferences": [owner_reference(vmi)],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher",
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }],
        },
    }
