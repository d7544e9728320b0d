"""A VM workspace's root disk as data (pure): which DataVolume the VM boots from, and a rebuilt one's manifest.

The VirtualMachine is the authority on which DataVolume is a workspace's
root disk: its volume named :data:`ROOT_VOLUME` names it
(``dataVolume.name``), whatever that DataVolume is called (``<vm>-root``
from a start's clone, a pool disk's own name, a rebuilt disk's
``<vm>-root-<time>``). A rebuild (:mod:`.rebuild`) makes a new root
DataVolume like the one a start makes (same labels, owner, slot, storage)
cloned from a golden image, or restored from a VolumeSnapshot of one of
the workspace's root disks (:func:`.rebuild.restore_root_disk`), and points the VM at it
with one JSON Patch (:func:`repoint_operations`).

API followed: ``kubevirt.io/v1`` VirtualMachine (``spec.template.spec.volumes``),
``cdi.kubevirt.io/v1beta1`` DataVolume (``spec.sourceRef`` of kind
``DataSource``, or ``spec.source.snapshot``; ``spec.storage`` or ``spec.pvc``).
"""

from __future__ import annotations

import copy
from datetime import datetime

from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.kinds import DATA_VOLUME
from workspacespawner.k8s.objects import pointer
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import Status

#: The name of the VM's volume (and disk) it boots from.
ROOT_VOLUME = "rootdisk"
#: The only annotations a root DataVolume gets besides ours: constants CDI reads.
#: ``allowClaimAdoption`` lets a recreated DataVolume take over its surviving PVC instead of failing.
DATAVOLUME_ANNOTATIONS = {"cdi.kubevirt.io/allowClaimAdoption": "true"}


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _volumes(vm: dict | None) -> list[dict]:
    return ((((vm or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []


def root_disk_of(vm: dict | None) -> str | None:
    """The name of the DataVolume a VirtualMachine boots from (its :data:`ROOT_VOLUME` volume's ``dataVolume.name``), or None.

    The VM is the authority on which root disk a workspace has: a first
    start may give it a pool disk, a rebuild a new clone, each under a name
    of its own.
    """
    found = next((v for v in _volumes(vm) if v.get("name") == ROOT_VOLUME), None)
    return ((found or {}).get("dataVolume") or {}).get("name")


def vm_of_server(vms: list[dict], user: str, server: str) -> dict | None:
    """``user``'s VirtualMachine of JupyterHub server ``server`` (``""``: the default) among ``vms``: owned by the user
    (owner labels and exact name), its template annotated with that server name
    (:data:`~.names.SERVER_ANNOTATION`, as kubespawner annotates Pods); None if there is none."""
    for vm in sorted(vms, key=lambda v: _meta(v).get("name", "")):
        template = (((vm.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
        if names.owned_by(_meta(vm), user) and template.get(names.SERVER_ANNOTATION, "") == server:
            return vm
    return None


def rebuilt_name(vm_name: str, now: datetime) -> str:
    """The name of ``vm_name``'s root disk rebuilt at ``now``: ``<vm>-root-<YYYYmmddHHMMSS>`` (a valid DNS label)."""
    return names.dns_label(f"{vm_name[:40]}-root-{now:%Y%m%d%H%M%S}")


def make_rebuilt_datavolume(*, name: str, old: dict, vm_name: str, image: str, status: Status,
                            annotations: dict[str, str] | None = None, snapshot: dict | None = None) -> dict:
    """A root DataVolume ``name`` replacing ``old`` (plain dict): cloned from golden image ``image`` (``namespace/name``
    of a DataSource), or restored from the VolumeSnapshot ``snapshot`` (one of the workspace's root disks, itself
    descended from ``image``); recorded in ``status``, with ``annotations`` (an attach claim) besides ours.

    Like the start's (:func:`~workspacespawner.backends.vm.manifests.make_root_datavolume`): ``old``'s labels
    (without its phase, which ``status`` gives), the owner's name, the VM it serves (its slot,
    :data:`~.names.ROOT_SLOT_ANNOTATION`), the image (:data:`~.names.GOLDEN_IMAGE_ANNOTATION`), the disk it replaces
    (:data:`~.names.REBUILT_FROM_ANNOTATION`), the snapshot (:data:`~.names.RESTORED_FROM_ANNOTATION`) and
    :data:`DATAVOLUME_ANNOTATIONS`; ``old``'s storage (class, access modes, volume mode, size: never smaller, nor
    smaller than the snapshot's ``restoreSize``) under the same key (``spec.storage`` or ``spec.pvc``).
    """
    meta, spec = _meta(old), old.get("spec") or {}
    image_namespace, _, image_name = image.partition("/")
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in (names.PHASE_LABEL, names.POOL_IMAGE_LABEL)}
    labels[names.DISK_LABEL] = names.ROOT_DISK
    owner = (meta.get("annotations") or {})[names.OWNER_ANNOTATION]
    new_annotations = {
        names.OWNER_ANNOTATION: owner,
        **DATAVOLUME_ANNOTATIONS,
        names.ROOT_SLOT_ANNOTATION: vm_name,
        names.GOLDEN_IMAGE_ANNOTATION: image,
        names.REBUILT_FROM_ANNOTATION: meta["name"],
    }
    key = "pvc" if "pvc" in spec and "storage" not in spec else "storage"
    storage = copy.deepcopy(spec.get(key) or {})
    storage.pop("dataSource", None)
    storage.pop("dataSourceRef", None)
    source: dict = {"sourceRef": {"kind": "DataSource", "name": image_name, "namespace": image_namespace}}
    if snapshot is not None:
        new_annotations[names.RESTORED_FROM_ANNOTATION] = _meta(snapshot)["name"]
        source = {"source": {"snapshot": {"namespace": meta["namespace"], "name": _meta(snapshot)["name"]}}}
        restore_size = (snapshot.get("status") or {}).get("restoreSize")
        requests = storage.setdefault("resources", {}).setdefault("requests", {})
        if restore_size and parse_quantity(restore_size) > parse_quantity(requests.get("storage") or "0"):
            requests["storage"] = restore_size
    return phases.made_in({
        "apiVersion": DATA_VOLUME.api_version,
        "kind": DATA_VOLUME.kind,
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels, "annotations": new_annotations},
        "spec": {**source, key: storage},
    }, status, annotations)


def repoint_operations(vm: dict, new: str) -> list[dict]:
    """The JSON Patch pointing ``vm``'s :data:`ROOT_VOLUME` volume at DataVolume ``new``, guarded: it applies only to
    the VM as read (its ``resourceVersion``) still naming the disk it names now. Raises ValueError for a VM without
    a root volume."""
    index = next((i for i, v in enumerate(_volumes(vm)) if v.get("name") == ROOT_VOLUME), None)
    if index is None or root_disk_of(vm) is None:
        raise ValueError(f"VirtualMachine {_meta(vm).get('name')} has no {ROOT_VOLUME} DataVolume")
    path = pointer("spec", "template", "spec", "volumes", str(index), "dataVolume", "name")
    return [
        {"op": "test", "path": pointer("metadata", "resourceVersion"), "value": _meta(vm)["resourceVersion"]},
        {"op": "test", "path": path, "value": root_disk_of(vm)},
        {"op": "replace", "path": path, "value": new},
    ]
