"""kube-scheduler's VolumeBinding plugin for Pods: no node for a Pod whose claims are missing or unbound.

What the scheduler checks of a Pod's claims (``persistentVolumeClaim``
volumes, and the ``<pod>-<volume>`` claim of each generic ``ephemeral``
volume) before placing it (PreFilter, the reasons worded as kube-scheduler's):

- a claim that does not exist: ``persistentvolumeclaim "x" not found``
  (an ephemeral one: ``waiting for ephemeral volume controller to create the
  persistentvolumeclaim "x"``); one being deleted: ``persistentvolumeclaim
  "x" is being deleted``;
- a Pending claim of a class that binds ``Immediate`` (or of no or an
  unknown class): ``pod has unbound immediate PersistentVolumeClaims``;
- a Pending claim of a ``WaitForFirstConsumer`` class does not stop the
  Pod: the scheduler picks a node, annotates the claim
  ``volume.kubernetes.io/selected-node`` with it for the provisioner, and
  binds the Pod only once the claim is Bound (PreBind).
"""

from __future__ import annotations

from .refs import PVCS, ephemeral_claim_name, get_or_none
from .storage import SELECTED_NODE_ANNOTATION, storage_class_for


def pod_claims(pod: dict) -> list[tuple[str, bool]]:
    """``(claim name, ephemeral)`` for each claim a Pod's volumes use, in volume order."""
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append((claim, False))
        elif "ephemeral" in volume:
            out.append((ephemeral_claim_name(pod["metadata"]["name"], volume["name"]), True))
    return out


def claims_problem(client, pod: dict) -> tuple[str | None, list[dict]]:
    """Why no node can take ``pod`` for its claims (None: the claims allow it), and its unbound WaitForFirstConsumer claims.

    ``client`` is the scheduler's :class:`~..client.Client` (its cached reads).
    """
    namespace = pod["metadata"]["namespace"]
    waiting: list[dict] = []
    unbound_immediate = False
    for name, ephemeral in pod_claims(pod):
        pvc = get_or_none(client, PVCS, namespace, name)
        if pvc is None:
            if ephemeral:
                return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"', []
            return f'persistentvolumeclaim "{name}" not found', []
        if pvc["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted', []
        if (pvc.get("status") or {}).get("phase") == "Bound":
            continue
        _class_name, storage_class = storage_class_for(client, pvc)
        if (storage_class or {}).get("volumeBindingMode") == "WaitForFirstConsumer":
            waiting.append(pvc)
        else:
            unbound_immediate = True
    if unbound_immediate:
        return "pod has unbound immediate PersistentVolumeClaims", []
    return None, waiting


async def select_node(client, claims: list[dict], node: str) -> None:
    """Annotate each WaitForFirstConsumer claim with the node chosen for its Pod (once; the provisioner reads it)."""
    kind = client.kind(*PVCS)
    for pvc in claims:
        annotations = pvc["metadata"].setdefault("annotations", {})
        if annotations.get(SELECTED_NODE_ANNOTATION):
            continue
        annotations[SELECTED_NODE_ANNOTATION] = node
        await client.replace(kind, pvc["metadata"]["namespace"], pvc["metadata"]["name"], pvc)
