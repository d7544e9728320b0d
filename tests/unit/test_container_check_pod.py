"""The container start's fail-fast check (ContainerBackend.check_pod), which kubespawner runs over and over while a start
waits: a Pod that cannot run fails the start, and the namespace's Event cache is read only for a Pod that found no node."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.core.errors import WorkspaceError


class CountedEvents(dict):
    """kubespawner's Event cache (``{key: event}``), counting the passes over it."""

    passes = 0

    def values(self):
        self.passes += 1
        return super().values()


def pod(uid: str, *, unschedulable: bool = False, phase: str = "Pending") -> dict:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}] if unschedulable else []
    return {"metadata": {"name": "jupyter-ann", "uid": uid}, "status": {"phase": phase, "conditions": conditions}}


def backend(current: dict, events: CountedEvents) -> ContainerBackend:
    spawner = SimpleNamespace(
        namespace="ns", pod_name="jupyter-ann",
        event_reflector=SimpleNamespace(resources=events),
        pod_reflector=SimpleNamespace(pods={"ns/jupyter-ann": current}),
    )
    return ContainerBackend(spawner)


def event(uid: str, pod_uid: str, reason: str) -> dict:
    return {"metadata": {"uid": uid}, "reason": reason, "lastTimestamp": "2026-12-04T10:00:00Z",
            "involvedObject": {"kind": "Pod", "name": "jupyter-ann", "uid": pod_uid}}


def test_a_pod_that_is_placed_or_running_is_checked_without_reading_events():
    events = CountedEvents({f"e{i}": event(f"e{i}", f"other{i}", "Pulled") for i in range(100)})
    for current in (pod("p1"), pod("p1", phase="Running")):
        backend(current, events).check_pod(current, fail_fast_unschedulable=True)
    assert events.passes == 0


def test_a_pod_no_node_can_take_fails_fast_unless_the_autoscaler_adds_one():
    stuck = pod("p1", unschedulable=True)
    events = CountedEvents({"e1": event("e1", "p1", "FailedScheduling")})
    with pytest.raises(WorkspaceError, match="No node can run your server right now: 0/3 nodes are available"):
        backend(stuck, events).check_pod(stuck, fail_fast_unschedulable=True)
    assert events.passes == 1
    events["e2"] = event("e2", "p1", "TriggeredScaleUp")
    backend(stuck, events).check_pod(stuck, fail_fast_unschedulable=True)  # a node is on its way: keep waiting
    backend(stuck, CountedEvents()).check_pod(stuck, fail_fast_unschedulable=False)
