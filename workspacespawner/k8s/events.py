"""Kubernetes Events in plain words for the spawn page, and the scheduler's refusals; for every workspace kind.

Pure functions over core/v1 Event dicts (as the watch caches hold them).
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
    "FailedMount": "Waiting for a volume to be mounted: {message}",
    "FailedAttachVolume": "Waiting for a volume to attach: {message}",
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
