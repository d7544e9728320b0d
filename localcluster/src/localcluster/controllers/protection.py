"""ProtectionController: kube-controller-manager's pvc-protection and pv-protection controllers.

The API server's StorageObjectInUseProtection admission gives every new PVC
the finalizer ``kubernetes.io/pvc-protection`` and every new PV
``kubernetes.io/pv-protection`` (see :mod:`..defaults`), so deleting one only
marks it (``deletionTimestamp``, ``kubectl get`` shows ``Terminating``).
This controller lets it go:

* A deleted PVC loses its finalizer once no Pod uses it: a Pod object that
  exists, is placed on a node and names the claim in a
  ``persistentVolumeClaim`` volume (a finished Pod still counts, as on a real
  cluster, until it is deleted). A VirtualMachineInstance placed on a node
  counts the same way for each claim it names, directly or as a DataVolume
  (whose claim has the DataVolume's name), as its virt-launcher Pod does
  (it mounts those claims; before it exists, and once it is gone while the
  VMI still stops, the VMI covers for it).
* A deleted PV loses its finalizer once it is no longer ``Bound``.
* A PVC or PV that is not being deleted and lacks its finalizer (created
  before the admission plugin, or stripped by a client) gets it back.

Without this controller running, deleted claims and volumes stay
Terminating, as on a cluster whose controller manager is down.
"""

from __future__ import annotations

import logging

from ..defaults import PV_PROTECTION, PVC_PROTECTION
from .base import Controller
from .refs import PODS, PVCS, PVS, VMIS, claim_names, get_or_none

log = logging.getLogger("localcluster.protection")


def claim_users(store, namespace: str, claim: str) -> list[str]:
    """``kind/name`` of each Pod and VMI placed on a node that uses PVC ``namespace/claim``."""
    users = []
    for pod in store.objects(store.kind(*PODS)):
        if pod["metadata"]["namespace"] == namespace and (pod.get("spec") or {}).get("nodeName"):
            if claim in claim_names(pod["spec"].get("volumes"), pod["metadata"]["name"]):
                users.append(f"pod/{pod['metadata']['name']}")
    for vmi in store.objects(store.kind(*VMIS)):
        if vmi["metadata"]["namespace"] == namespace and (vmi.get("status") or {}).get("nodeName"):
            if claim in claim_names((vmi.get("spec") or {}).get("volumes")):
                users.append(f"virtualmachineinstance/{vmi['metadata']['name']}")
    return users


class ProtectionController(Controller):
    """Adds and removes the storage protection finalizers (see the module docstring)."""

    name = "protection"
    watches = (PVCS, PVS, PODS, VMIS)

    async def reconcile(self, kind, obj, deleted) -> None:
        meta = obj["metadata"]
        if kind.key == PVCS:
            if not deleted:
                await self._sync(PVCS, meta["namespace"], meta["name"])
        elif kind.key == PVS:
            if not deleted:
                await self._sync(PVS, None, meta["name"])
        else:
            # A user of claims changed or went away: look again at the claims it names.
            for claim in claim_names((obj.get("spec") or {}).get("volumes")):
                await self._sync(PVCS, meta["namespace"], claim)

    async def _sync(self, key, namespace: str | None, name: str) -> None:
        obj = get_or_none(self.client, key, namespace, name)
        if obj is None:
            return
        finalizer = PVC_PROTECTION if key == PVCS else PV_PROTECTION
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if not obj["metadata"].get("deletionTimestamp"):
            if finalizer not in finalizers:
                obj["metadata"]["finalizers"] = [*finalizers, finalizer]
                await self.client.replace(self.client.kind(*key), namespace, name, obj)
            return
        if finalizer not in finalizers or self._in_use(key, obj):
            return
        obj["metadata"]["finalizers"] = [f for f in finalizers if f != finalizer]
        await self.client.replace(self.client.kind(*key), namespace, name, obj)
        log.debug("%s %s: protection finalizer removed", obj["kind"], name)

    def _in_use(self, key, obj: dict) -> bool:
        if key == PVS:
            return (obj.get("status") or {}).get("phase") == "Bound"
        meta = obj["metadata"]
        return bool(claim_users(self.client, meta["namespace"], meta["name"]))
