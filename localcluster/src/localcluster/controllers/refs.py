"""Names the local cluster's controllers share: the (group, version, plural) keys of the kinds
they watch, and small lookups every controller needs (get-or-None, owner references).
"""

from __future__ import annotations

from ..errors import ApiError

PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
PVCS = ("", "v1", "persistentvolumeclaims")
PVS = ("", "v1", "persistentvolumes")
STORAGE_CLASSES = ("storage.k8s.io", "v1", "storageclasses")
VOLUME_SNAPSHOTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
VOLUME_SNAPSHOT_CONTENTS = ("snapshot.storage.k8s.io", "v1", "volumesnapshotcontents")
VOLUME_SNAPSHOT_CLASSES = ("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses")
VMS = ("kubevirt.io", "v1", "virtualmachines")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")
DATA_VOLUMES = ("cdi.kubevirt.io", "v1beta1", "datavolumes")
DATA_SOURCES = ("cdi.kubevirt.io", "v1beta1", "datasources")
SECRETS = ("", "v1", "secrets")
CONFIG_MAPS = ("", "v1", "configmaps")
LEASES = ("coordination.k8s.io", "v1", "leases")


def get_or_none(store, key: tuple[str, str, str], namespace: str | None, name: str) -> dict | None:
    """A copy of the object from ``store`` (a Store or a :class:`~..client.Client`), or None when it does not exist."""
    try:
        return store.get(store.kind(*key), namespace, name)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


def owner_reference(owner: dict, *, controller: bool = True) -> dict:
    """An ownerReference naming ``owner`` (as controllers set it: controller, blockOwnerDeletion)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def is_owned_by(obj: dict, owner: dict) -> bool:
    """Whether ``obj`` lists ``owner`` (by uid) among its ownerReferences."""
    uid = owner["metadata"]["uid"]
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def ephemeral_claim_name(pod_name: str, volume_name: str) -> str:
    """The PVC Kubernetes creates for a Pod's generic ephemeral volume: ``<pod>-<volume>``."""
    return f"{pod_name}-{volume_name}"


def volume_claim(volume: dict) -> str | None:
    """The PVC a Pod's or VMI's volume is on: a ``persistentVolumeClaim``'s claim, or a ``dataVolume``'s, which has
    the DataVolume's name (KubeVirt's ``PVCNameFromVirtVolume``); None for volumes of other sources."""
    return (volume.get("persistentVolumeClaim") or {}).get("claimName") or (volume.get("dataVolume") or {}).get("name")


def claim_names(volumes: list | None, pod_name: str | None = None) -> set[str]:
    """The PVC names a Pod's or VMI's volumes use.

    A DataVolume's claim has the DataVolume's name; a Pod's generic
    ``ephemeral`` volume (given the Pod's name) uses ``<pod>-<volume>``.
    """
    names = set()
    for volume in volumes or []:
        claim = volume_claim(volume)
        if claim:
            names.add(claim)
        if pod_name and "ephemeral" in volume:
            names.add(ephemeral_claim_name(pod_name, volume["name"]))
    return names
