"""EphemeralVolumeController: kube-controller-manager's ephemeral volume controller.

For every generic ephemeral volume of a Pod (``volumes[].ephemeral``) it
creates the PersistentVolumeClaim ``<pod>-<volume>`` from
``ephemeral.volumeClaimTemplate``: labels and annotations from the
template's metadata, spec from the template's spec, and the Pod as its
controlling owner (``ownerReferences`` with ``controller: true``). The
storage controller then binds the claim like any other (with
``WaitForFirstConsumer`` once the Pod is on a node), the kubelet waits for
it to be Bound before starting the Pod's containers, and the garbage
collector deletes it with the Pod through the owner reference.

A claim of that name that already exists is left alone; if the Pod does not
own it, the kubelet refuses to mount it (``... was not created for pod ...
(pod is not owner)``), as on a real cluster.
"""

from __future__ import annotations

import copy
import logging

from .base import Controller
from .refs import PODS, PVCS, ephemeral_claim_name, get_or_none, owner_reference

log = logging.getLogger("localcluster.ephemeral")


def ephemeral_claim(pod: dict, volume: dict) -> dict:
    """The PersistentVolumeClaim Kubernetes creates for ``pod``'s generic ephemeral ``volume``."""
    template = volume["ephemeral"].get("volumeClaimTemplate") or {}
    template_meta = template.get("metadata") or {}
    meta = {
        "name": ephemeral_claim_name(pod["metadata"]["name"], volume["name"]),
        "namespace": pod["metadata"]["namespace"],
        "ownerReferences": [owner_reference({"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]})],
    }
    for key in ("labels", "annotations"):
        if template_meta.get(key):
            meta[key] = dict(template_meta[key])
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


class EphemeralVolumeController(Controller):
    """Creates the claims of Pods' generic ephemeral volumes (see the module docstring)."""

    name = "ephemeral"
    watches = (PODS,)

    async def reconcile(self, kind, obj, deleted) -> None:
        meta = obj["metadata"]
        if deleted or meta.get("deletionTimestamp"):
            return
        for volume in obj["spec"].get("volumes") or []:
            if "ephemeral" not in volume:
                continue
            claim = ephemeral_claim(obj, volume)
            if get_or_none(self.client, PVCS, meta["namespace"], claim["metadata"]["name"]) is None:
                await self.client.create(self.client.kind(*PVCS), meta["namespace"], claim)
                log.debug("ephemeral: created claim %s/%s for pod %s", meta["namespace"], claim["metadata"]["name"], meta["name"])
