"""Why a container workspace's Pod cannot start, in plain words, from its status.

Pure functions over core/v1 Pod dicts (as kubespawner's Pod reflector caches
them); the Event lines are :mod:`workspacespawner.k8s.events`'.
"""

from __future__ import annotations

#: kube-scheduler's VolumeBinding answers while a claim the Pod uses is still being made or
#: provisioned (a new home PVC): a wait that ends by itself, not a lack of nodes.
VOLUME_BINDING_WAITS = (
    "pod has unbound immediate PersistentVolumeClaims",
    "waiting for ephemeral volume controller to create the persistentvolumeclaim",
)


def unschedulable_reason(pod: dict | None) -> str | None:
    """The scheduler's message if ``pod`` is marked Unschedulable (condition PodScheduled False), else None.

    None too while the scheduler only waits for the Pod's claims to bind
    (:data:`VOLUME_BINDING_WAITS`): the start goes on waiting, within its
    start timeout.
    """
    if not pod:
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = condition.get("message") or ""
            if any(wait in message for wait in VOLUME_BINDING_WAITS):
                return None
            return message or "no node has the resources this server asks for"
    return None


def waits_for_claims(message: str) -> bool:
    """Whether a scheduler refusal is about the Pod's volume claims (missing or unbound), not about nodes.

    kube-scheduler's VolumeBinding reasons all name a
    ``persistentvolumeclaim``; such a Pod is placed once its claims are
    there and bound (:mod:`workspacespawner.storage.binding` times that).
    """
    return "persistentvolumeclaim" in message.lower()


#: Container waiting reasons that will not fix themselves within a start.
FATAL_WAITING = {
    "ErrImagePull": "image-pull",
    "ImagePullBackOff": "image-pull",
    "InvalidImageName": "image-pull",
    "CrashLoopBackOff": "crash-loop",
    "CreateContainerConfigError": "container-config",
    "CreateContainerError": "container-config",
}


def container_failure(pod: dict | None) -> tuple[str, str] | None:
    """(reason word, plain message) if a container of ``pod`` is stuck in a state a start cannot outwait."""
    if not pod:
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        word = FATAL_WAITING.get(waiting.get("reason", ""))
        if word:
            detail = waiting.get("message") or waiting.get("reason")
            return word, f"Container {status.get('name')!r}: {waiting.get('reason')}: {detail}"
    return None
