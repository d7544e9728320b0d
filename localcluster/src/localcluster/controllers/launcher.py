"""The virt-launcher Pod of a VirtualMachineInstance, as KubeVirt's virt-controller makes it.

On a real cluster every running VMI has a Pod, ``virt-launcher-<vmi>-<suffix>``,
which runs the guest's QEMU and holds the VMI's resources: node agents such
as NVIDIA's dcgm-exporter name that Pod, never the VMI. KubeVirt renders it
(``pkg/virt-controller/services/template.go``, ``renderLaunchManifest``;
read there, not copied) with:

* labels: every label of the VMI as it was before placement (so of the VirtualMachine's
  ``spec.template.metadata.labels``; that is how a Service selecting
  ``kubevirt.io/domain: <vm>`` reaches the guest), then KubeVirt's own
  ``kubevirt.io=virt-launcher``, ``kubevirt.io/created-by=<VMI uid>`` and
  ``vm.kubevirt.io/name=<VMI name>`` (``podLabels``);
* annotations: the VMI's, except ``kubectl.kubernetes.io/*`` and
  ``kubevirt.io/{storage,latest}-observed-api-version``, plus
  ``kubevirt.io/domain=<VMI name>`` and
  ``kubectl.kubernetes.io/default-container=compute``;
* the VMI as its controlling owner;
* volumes: each ``persistentVolumeClaim`` and ``dataVolume`` volume of the
  VMI as a ``persistentVolumeClaim`` volume of the same name, a DataVolume
  as the claim of its own name (``PVCNameFromVirtVolume``), mounted in the
  ``compute`` container under ``/var/run/kubevirt-private/vmi-disks/<name>``;
* the ``guest-console-log`` container, unless the VMI turns its serial
  console log off: its log is the guest's serial console (the node agent
  serves it, :meth:`~.nodeagent.NodeAgent.container_output`);
* the ``compute`` container's resources: the VMI's requests (else one core
  per vCPU and the guest memory), its limits, and one of each
  ``devices.gpus``/``devices.hostDevices`` entry's ``deviceName`` as a limit
  (and request) of that extended resource (``WithGPUs``/``WithHostDevices``).

So a reader selecting Pods by our labels (kubespawner's reflector selects
``component=singleuser-server``) finds the VMI's launcher Pod too, holding
the same GPUs and claims: the product counts it once
(``workspacespawner.k8s.objects.counted_once``).

Here the VMI's guest is run by the node agent's guest runtime, so the Pod is
a stand-in: :class:`~.virt.VirtController` creates it once the VMI is placed
(``spec.nodeName`` set, so no scheduler places it, neither ours nor the real
kube-scheduler), shows it Running, every container started, once the VMI
runs (KubeVirt's runs from the VMI's ``Scheduled`` on, before the guest
boots; the guest's console log keeps the lines written before anyone
reads it), and deletes it when the VMI finishes or goes. The local cluster keeps one count of it and
its VMI: the scheduler counts the VMI, not the Pod; the node agent runs
nothing for it (it only confirms its deletion), so only the VMI attaches the
claims, and the attacher would take the Pod for its VMI anyway
(:func:`~..attacher.consumer_of`). Left out: KubeVirt's resource overheads,
container disks, hotplug, sidecars, cloud-init and Secret volumes, probes.
"""

from __future__ import annotations

import datetime
import hashlib
from decimal import Decimal

from ..store import rfc3339
from .refs import owner_reference, volume_claim

LAUNCHER_LABEL = "kubevirt.io"
LAUNCHER_VALUE = "virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VM_NAME_LABEL = "vm.kubevirt.io/name"
#: The label the scheduler puts on a placed VMI (after KubeVirt rendered its Pod: not copied).
NODE_NAME_LABEL = "kubevirt.io/nodeName"
DOMAIN_ANNOTATION = "kubevirt.io/domain"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
#: Where KubeVirt mounts a filesystem-mode claim in the compute container: ``<this>/<volume name>``.
DISKS_DIR = "/var/run/kubevirt-private/vmi-disks"
#: Annotations of a VMI that KubeVirt does not copy onto its launcher Pod (prefixes).
_NOT_COPIED = ("kubectl.kubernetes.io", "kubevirt.io/storage-observed-api-version", "kubevirt.io/latest-observed-api-version")


#: The container KubeVirt (v1.1 and later) adds to stream the guest's first serial port to the Pod's log
#: (``pkg/virt-controller/services/serialconsolelog.go``: ``virt-tail`` of the port's log file).
CONSOLE_LOG_CONTAINER = {
    "name": "guest-console-log",
    "image": "quay.io/kubevirt/virt-launcher",
    "command": ["/usr/bin/virt-tail"],
    "resources": {"requests": {"cpu": "5m", "memory": "35M"}, "limits": {"cpu": "15m", "memory": "60M"}},
}


def logs_serial_console(vmi: dict) -> bool:
    """Whether KubeVirt logs ``vmi``'s serial console (``isSerialConsoleLogEnabled``): unless the VMI turns its
    serial console or its log off (this cluster has no ``disableSerialConsoleLog`` of its own)."""
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return devices.get("autoattachSerialConsole") is not False and devices.get("logSerialConsole") is not False


def is_launcher(pod: dict) -> bool:
    """Whether ``pod`` is a virt-launcher Pod (label ``kubevirt.io=virt-launcher`` and a VMI owner)."""
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(LAUNCHER_LABEL) == LAUNCHER_VALUE and any(
        ref.get("kind") == "VirtualMachineInstance" for ref in meta.get("ownerReferences") or []
    )


def launched_vmi(pod: dict) -> str:
    """The uid of the VMI a virt-launcher Pod runs (its ``kubevirt.io/created-by`` label)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(CREATED_BY_LABEL, "")


def is_console_log(pod: dict, container: str | None) -> bool:
    """Whether ``container`` of ``pod`` is a virt-launcher Pod's ``guest-console-log``."""
    return container == CONSOLE_LOG_CONTAINER["name"] and is_launcher(pod)


def launcher_name(vmi: dict) -> str:
    """``virt-launcher-<vmi name>-<5 characters>``: the suffix from the VMI's uid (a new VMI gets a new Pod)."""
    suffix = hashlib.sha256(vmi["metadata"]["uid"].encode()).hexdigest()[:5]
    return f"virt-launcher-{vmi['metadata']['name'][:40]}-{suffix}"


def claim_volumes(vmi: dict) -> list[dict]:
    """The launcher Pod's volumes for the VMI's claims: ``[{"name", "persistentVolumeClaim": {"claimName"}}]``, in the VMI's order.

    A ``dataVolume`` volume becomes the claim of the DataVolume's name;
    volumes of other sources (cloud-init, container disks, ...) are left out.
    """
    found = []
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        claim = volume_claim(volume)
        if claim:
            found.append({"name": volume["name"], "persistentVolumeClaim": {"claimName": claim}})
    return found


def _quantity(amount: Decimal) -> str:
    """A Decimal amount as a quantity string, without an exponent (``2``, ``0.5``, ``1073741824``)."""
    text = f"{amount:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def compute_resources(vmi: dict, requests: dict[str, Decimal]) -> dict:
    """The ``compute`` container's ``{"requests", "limits"}`` from ``requests`` (what the VMI asks of its node).

    ``requests``: ``{resource: amount}`` as the scheduler reckons a VMI
    (``pods`` is dropped: no container asks for it). Extended resources
    (names with a ``/``, the GPUs) are limits too, as Kubernetes wants
    them; CPU and memory limits are the VMI's ``resources.limits``.
    """
    asked = {name: amount for name, amount in requests.items() if name != "pods"}
    own_limits = ((((vmi.get("spec") or {}).get("domain") or {}).get("resources") or {}).get("limits")) or {}
    limits = {name: str(value) for name, value in own_limits.items() if name in ("cpu", "memory")}
    limits.update({name: _quantity(amount) for name, amount in asked.items() if "/" in name})
    return {"requests": {name: _quantity(amount) for name, amount in asked.items()}, "limits": limits}


def make_launcher_pod(vmi: dict, node: str, requests: dict[str, Decimal]) -> dict:
    """The virt-launcher Pod of ``vmi``, bound to ``node`` (see the module docstring).

    ``requests``: ``{resource: amount}`` the VMI asks of its node
    (:func:`~.scheduler.vmi_requests`).
    """
    meta = vmi["metadata"]
    # KubeVirt renders the Pod before the VMI is placed, so never with the VMI's later kubevirt.io/nodeName label.
    labels = {key: value for key, value in (meta.get("labels") or {}).items() if key != NODE_NAME_LABEL}
    labels.update({LAUNCHER_LABEL: LAUNCHER_VALUE, CREATED_BY_LABEL: meta["uid"], VM_NAME_LABEL: meta["name"]})
    annotations = {key: value for key, value in (meta.get("annotations") or {}).items() if not key.startswith(_NOT_COPIED)}
    annotations.update({DOMAIN_ANNOTATION: meta["name"], DEFAULT_CONTAINER_ANNOTATION: "compute"})
    volumes = claim_volumes(vmi)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": launcher_name(vmi),
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(vmi)],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher",
                "resources": compute_resources(vmi, requests),
                "volumeMounts": [{"name": v["name"], "mountPath": f"{DISKS_DIR}/{v['name']}"} for v in volumes],
            }, *([CONSOLE_LOG_CONTAINER] if logs_serial_console(vmi) else [])],
            "volumes": volumes,
        },
    }


def launcher_container_statuses(pod: dict, *, running: bool, now: datetime.datetime) -> list[dict]:
    """The launcher Pod's ``containerStatuses`` as its VMI's phase mirrors into it: each container running while
    the guest runs (since ``now``), else waiting in ``ContainerCreating``."""
    state = {"running": {"startedAt": rfc3339(now)}} if running else {"waiting": {"reason": "ContainerCreating"}}
    return [{"name": c["name"], "image": c["image"], "imageID": "", "ready": running, "restartCount": 0,
             "started": running, "state": state} for c in pod["spec"]["containers"]]
