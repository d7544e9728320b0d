"""The milestones of one start and where each one puts the spawn page's progress bar: the ladder (issue #17).

A start tells its steps in plain words (``say(message, milestone)``, see
:class:`Say`); a step that reaches a milestone moves the bar to that
milestone's rung in :data:`LADDER`, and a step without one (a note, a
warning, a wait) leaves the bar where it is. Events of the start's Pod or
VMI reach milestones by their ``reason`` (:data:`EVENT_MILESTONES`). The
bar only moves forward and never reaches 100 from us: JupyterHub sends 100
itself once the server is ready.
"""

from __future__ import annotations

import enum
from typing import Protocol


class Milestone(enum.Enum):
    """A step of a start that moves the progress bar; its percentage is its rung in :data:`LADDER`."""

    ACCEPTED = "accepted"
    HOME_READY = "home-ready"
    ROOT_DISK_READY = "root-disk-ready"
    NODE_FOUND = "node-found"
    IMAGE_PULLED = "image-pulled"
    STARTED = "started"
    ANSWERING = "answering"


#: The ladder: milestone -> the bar's percentage (0-100) once it is reached, in the order a start reaches them.
#: A step part of the way to a milestone (a VM's root disk, cloned N%) puts the bar that part of the way up from
#: the rung below (:func:`percent`). A container start skips ROOT_DISK_READY, a VM start IMAGE_PULLED.
LADDER: dict[Milestone, int] = {
    Milestone.ACCEPTED: 5,  # the start passed the quota check; its disks are next
    Milestone.HOME_READY: 20,  # the home volume is bound
    Milestone.ROOT_DISK_READY: 60,  # a VM's root disk is usable; its clone at N% is 20 + N% of 40
    Milestone.NODE_FOUND: 70,  # a node was found (a Scheduled Event; a VMI Scheduled)
    Milestone.IMAGE_PULLED: 80,  # the container image is on the node (a Pulled Event)
    Milestone.STARTED: 90,  # the container started (a Started Event), or the guest is booting (a VMI Running)
    Milestone.ANSWERING: 95,  # the server answers (a VMI Ready: its readiness probe passed)
}

#: Event ``reason`` -> the milestone it reaches (the Pod's, or the VMI's; other reasons reach none).
EVENT_MILESTONES: dict[str, Milestone] = {
    "Scheduled": Milestone.NODE_FOUND,
    "Pulled": Milestone.IMAGE_PULLED,
    "Started": Milestone.STARTED,
}


#: The Event reasons a kubelet gives about one container (it names it in ``involvedObject.fieldPath``).
CONTAINER_REASONS = ("Pulled", "Started")


def percent(milestone: Milestone, part: float = 1.0) -> float:
    """The bar's percentage (0-100) at ``part`` (0-1, clamped) of the way to ``milestone`` from the rung below it."""
    rungs = list(LADDER)
    index = rungs.index(milestone)
    below = LADDER[rungs[index - 1]] if index else 0
    return below + min(max(part, 0.0), 1.0) * (LADDER[milestone] - below)


def event_milestone(event: dict) -> Milestone | None:
    """The milestone a core/v1 Event dict reaches (by :data:`EVENT_MILESTONES`); None for an init container's Event,
    and for a Pod's ``Pulled`` or ``Started`` that names no container (Kueue's admission of a queued Pod is a
    ``Started`` about the Pod: its containers have not started)."""
    reason = event.get("reason") or ""
    if ((event.get("involvedObject") or {}).get("fieldPath") or "").startswith("spec.initContainers"):
        return None
    if reason in CONTAINER_REASONS and about_whole_pod(event):
        return None
    return EVENT_MILESTONES.get(reason)


def about_whole_pod(event: dict) -> bool:
    """Whether a core/v1 Event dict is about a Pod as a whole, not one of its containers (which a kubelet names in
    ``involvedObject.fieldPath``): Kueue's Events on a queued Pod, not the kubelet's."""
    involved = event.get("involvedObject") or {}
    return involved.get("kind") == "Pod" and not involved.get("fieldPath")


class Say(Protocol):
    """How a start tells a step: ``message`` in plain words for the user; ``milestone`` when the step reaches one,
    ``part`` (0-1) of the way (a root disk cloned 45%: ``part=0.45``)."""

    def __call__(self, message: str, milestone: Milestone | None = None, *, part: float = 1.0) -> None: ...
