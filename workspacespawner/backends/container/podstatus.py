"""A container workspace's phase as its Pod shows it (the container side of :func:`workspace.lifecycle.derive_phase`)."""

from __future__ import annotations

from workspacespawner.k8s.objects import FINISHED_PHASES, ready_condition, terminating
from workspacespawner.lifecycle.phases import Observed, Phase, Status


def pod_phase(pod: dict) -> Phase | None:
    """``Stopping`` (being deleted), ``Running`` (Running and Ready), ``Starting`` (any other live phase); None once finished."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in FINISHED_PHASES:
        return None
    if terminating(pod):
        return Phase.STOPPING
    return Phase.RUNNING if phase == "Running" and ready_condition(pod) else Phase.STARTING


class ContainerStatus:
    """:class:`~workspacespawner.lifecycle.phases.KindStatus` of a container workspace: its Pod; no root disk."""

    def compute_status(self, observed: Observed) -> Status | None:
        phase = None if observed.pod is None else pod_phase(observed.pod)
        return None if phase is None else Status(phase)

    def root_disk_status(self, observed: Observed) -> Status | None:
        return None
