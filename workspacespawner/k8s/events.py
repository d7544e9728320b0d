"""Kubernetes Events in plain words for the spawn page, and the scheduler's refusals; for every workspace kind.

Pure functions over core/v1 Event dicts (as the watch caches hold them).
"""

from __future__ import annotations

import re
from datetime import datetime

from workspacespawner.core.milestones import about_whole_pod
from workspacespawner.core.times import parse_time

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
    "Killing": "Stopping: {message}",
}

#: Event reason -> how the step reads, for the Events KubeVirt records on a VirtualMachineInstance (virt-controller
#: creating its virt-launcher Pod, virt-handler defining and starting the guest): not a container's words.
VMI_EVENT_STEPS = {
    "SuccessfulCreate": "Your virtual machine's Pod was created",
    "Created": "Your virtual machine is defined on its node",
    # virt-handler's Started is QEMU's start: the guest's boot and the server's start follow (a minute or more)
    "Started": "Your virtual machine started: its operating system boots, then it starts your server",
}

#: Event reason -> how the step reads, for the Events Kueue's Pod integration records on a queued workspace's Pod
#: (no ``fieldPath``: about the Pod, not a container): its Workload made, and its admission, whose reason is the
#: kubelet's "Started" too (a container's Started always names the container).
QUEUE_EVENT_STEPS = {
    "CreatedWorkload": "Your workspace joined the GPU queue",
    "Started": "The GPU queue admitted your workspace; finding a node for it",
}

#: The node in kube-scheduler's Scheduled message ("Successfully assigned default/jupyter-ann to cpu-node-1").
_ASSIGNED = re.compile(r" to (\S+)$")

#: How an Event about an init container reads (a kubelet names the container in ``involvedObject.fieldPath``).
INIT_CONTAINER_STEP = "Preparing your server: {message}"


def describe_event(event: dict) -> str:
    """One progress line for a core/v1 Event dict: :data:`EVENT_STEPS` by reason; an init container's Normal
    Events as :data:`INIT_CONTAINER_STEP` (they are not the server's own steps); a VMI's by
    :data:`VMI_EVENT_STEPS`; other reasons as ``[type] message``."""
    reason = event.get("reason") or ""
    message = (event.get("message") or "").strip()
    field_path = (event.get("involvedObject") or {}).get("fieldPath") or ""
    if field_path.startswith("spec.initContainers") and event.get("type", "Normal") == "Normal":
        return INIT_CONTAINER_STEP.format(message=message)
    if (event.get("involvedObject") or {}).get("kind") == "VirtualMachineInstance" and reason in VMI_EVENT_STEPS:
        return VMI_EVENT_STEPS[reason]
    if about_whole_pod(event) and reason in QUEUE_EVENT_STEPS:
        return QUEUE_EVENT_STEPS[reason]
    if reason == "Scheduled" and (placed := _ASSIGNED.search(message)):  # "Successfully assigned ns/pod to NODE"
        return f"Found a node for your server ({placed.group(1)})"
    template = EVENT_STEPS.get(reason)
    if template is None:
        return f"[{event.get('type', 'Normal')}] {message}"
    return template.format(message=message)


def events_involving(cached: dict, name: str) -> list[dict]:
    """The Events in ``cached`` (an Event watch cache, ``{"namespace/name": event}``, of one namespace) about the object
    named ``name`` (``involvedObject.name``), in the cache's order."""
    found = []
    for event in list(cached.values()):
        involved = event.get("involvedObject") if isinstance(event, dict) else None
        if isinstance(involved, dict) and involved.get("name") == name:
            found.append(event)
    return found


def event_time(event: dict) -> datetime | None:
    """When ``event`` last happened (UTC): ``lastTimestamp``, else ``eventTime``, else its creation; None if none."""
    meta = event.get("metadata") or {}
    return parse_time(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp"))


#: The component that reports a Pod's placement (core/v1 ``source.component``, events.k8s.io ``reportingController``).
SCHEDULER = "default-scheduler"


def _reported_by_scheduler(event: dict) -> bool:
    return SCHEDULER in ((event.get("source") or {}).get("component"), event.get("reportingComponent"))


def events_since(events: list[dict], since: datetime) -> list[dict]:
    """The ``events`` that happened at or after ``since`` (whole seconds, as Events record time), oldest first.

    What one start shows: the Events an object of the same name left at an
    earlier start or stop (a Pod's, a VMI's) are older than the start.
    Within one second the scheduler's come first: kube-scheduler stamps its
    Events to the microsecond (``eventTime``) and a kubelet to the second
    (``lastTimestamp``), so a kubelet's ``Pulling`` in the same second would
    otherwise sort before the ``Scheduled`` that caused it.
    """
    floor = since.replace(microsecond=0)
    timed = [(moment, event) for event in events if (moment := event_time(event)) is not None and moment >= floor]
    timed.sort(key=lambda pair: (pair[0].replace(microsecond=0), not _reported_by_scheduler(pair[1]), pair[0]))
    return [event for _moment, event in timed]


def scale_up_triggered(events: list[dict]) -> bool:
    """True if the cluster autoscaler reported a scale-up for this pod (Event reason ``TriggeredScaleUp``)."""
    return any(e.get("reason") == "TriggeredScaleUp" for e in events)


def no_node_message(scheduler_message: str | None, what: str = "server") -> str:
    """What a user reads when no node can run their ``what`` (``server``, ``workspace``), with the scheduler's reason."""
    reason = (scheduler_message or "not enough free resources").strip().rstrip(".")
    return f"No node can run your {what} right now: {reason}. Try a smaller profile or try again later."
