"""Plain-words progress for the spawn page, from Kubernetes Events and Pod status.

Pure functions: the spawner feeds them core/v1 Event and Pod dicts (as the
reflectors cache them) and shows what they return.
"""

from __future__ import annotations

#: Event reason -> how the step reads on the spawn page ({message} is the Event's message).
EVENT_STEPS = {
    "Scheduled": "Found a node for your server ({message})",
    "FailedScheduling": "Waiting for a node with free resources: {message}",
    "TriggeredScaleUp": "The cluster is adding a node for your server: {message}",
    "Pulling": "Pulling the image: {message}",
    "Pulled": "Image ready: {message}",
    "Created": "Container created",
    "Started": "Server starting",
    "BackOff": "The server keeps failing to start: {message}",
    "Failed": "Start failed: {message}",
    "FailedMount": "Waiting for the home volume to attach: {message}",
    "FailedAttachVolume": "Waiting for the home volume to attach: {message}",
}


def describe_event(event: dict) -> str:
    """One progress line for a core/v1 Event dict."""
    reason = event.get("reason") or ""
    message = (event.get("message") or "").strip()
    template = EVENT_STEPS.get(reason)
    if template is None:
        return f"[{event.get('type', 'Normal')}] {message}"
    return template.format(message=message)


def scale_up_triggered(events: list[dict]) -> bool:
    """True if the cluster autoscaler reported a scale-up for this pod (Event reason ``TriggeredScaleUp``)."""
    return any(e.get("reason") == "TriggeredScaleUp" for e in events)


def no_node_message(scheduler_message: str | None, what: str = "server") -> str:
    """What a user reads when no node can run their ``what`` (``server``, ``workspace``), with the scheduler's reason."""
    reason = (scheduler_message or "not enough free resources").strip().rstrip(".")
    return f"No node can run your {what} right now: {reason}. Try a smaller profile or try again later."


def unschedulable_reason(pod: dict | None) -> str | None:
    """The scheduler's message if ``pod`` is marked Unschedulable (condition PodScheduled False), else None."""
    if not pod:
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return condition.get("message") or "no node has the resources this server asks for"
    return None


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
