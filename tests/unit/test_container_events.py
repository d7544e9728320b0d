"""The Events a container start's progress shows: those of its own Pod, whatever kubespawner's marker hides.

kubespawner marks the newest Event at a start (``_last_event``) and keeps
only the Events sorted after it, sorting by ``lastTimestamp or eventTime``
as strings. A kubelet Event has a whole-second ``lastTimestamp``
("…:05Z"), a scheduler Event only a precise ``eventTime`` ("…:05.5Z"),
and "." sorts before "Z": a new Pod's "Scheduled" in the same second as
the old Pod's last Event sorts before the marker and was dropped. A start
right after a stop met it on the real control plane (no "Found a node" on
the spawn page).
"""

from __future__ import annotations

from types import SimpleNamespace

from kubespawner import KubeSpawner

from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.k8s.interning import InterningObjects
from workspacespawner.spawner import WorkspaceSpawner


class Spawner(SimpleNamespace):
    events = KubeSpawner.events  # kubespawner's own filter, on these attributes


def event(uid: str, pod_uid: str, reason: str, *, last: str | None = None, time: str | None = None) -> dict:
    return {"metadata": {"uid": uid}, "reason": reason, "lastTimestamp": last, "eventTime": time,
            "involvedObject": {"kind": "Pod", "name": "jupyter-ann", "uid": pod_uid}}


def test_a_new_pods_events_in_the_second_of_the_old_pods_last_one_are_shown():
    killing = event("e1", "old-pod", "Killing", last="2026-12-03T23:40:05Z")
    scheduled = event("e2", "new-pod", "Scheduled", time="2026-12-03T23:40:05.500000Z")
    pulled = event("e3", "new-pod", "Pulled", last="2026-12-03T23:40:06Z")
    spawner = Spawner(
        namespace="ns", pod_name="jupyter-ann", _last_event="e1",
        event_reflector=SimpleNamespace(resources={e["metadata"]["uid"]: e for e in (pulled, killing, scheduled)},
                                        events=sorted([killing, scheduled, pulled], key=lambda e: e["lastTimestamp"] or e["eventTime"])),
        pod_reflector=SimpleNamespace(pods={"ns/jupyter-ann": {"metadata": {"uid": "new-pod"}}}),
    )
    assert [e["reason"] for e in spawner.events] == ["Pulled"]  # kubespawner's view: "Scheduled" is lost
    assert [e["reason"] for e in ContainerBackend(spawner).compute_events()] == ["Scheduled", "Pulled"]


class OurSpawner(SimpleNamespace):
    events = WorkspaceSpawner.events  # ours, from the Event cache, on these attributes


def test_workspacespawners_events_after_the_marker_read_its_pods_events_from_the_cache():
    killing = event("e1", "old-pod", "Killing", last="2026-12-03T23:40:05Z")
    scheduled = event("e2", "new-pod", "Scheduled", time="2026-12-03T23:40:05.500000Z")
    pulled = event("e3", "new-pod", "Pulled", last="2026-12-03T23:40:06Z")
    others = [{**event(f"x{i}", f"pod-{i}", "Pulled", last="2026-12-03T23:40:07Z"),
               "involvedObject": {"kind": "Pod", "name": f"jupyter-user{i}", "uid": f"pod-{i}"}} for i in range(50)]
    cache = InterningObjects({f"ns/{e['metadata']['uid']}": e for e in (pulled, *others, killing, scheduled)})
    spawner = OurSpawner(pod_name="jupyter-ann", _last_event=None, event_reflector=SimpleNamespace(resources=cache))
    spawner._container = ContainerBackend(spawner)
    assert [e["reason"] for e in spawner.events] == ["Killing", "Scheduled", "Pulled"]  # oldest first, its own only
    spawner._last_event = "e1"  # the marker the start set: what came after it, by time ("Scheduled" kept)
    assert [e["reason"] for e in spawner.events] == ["Scheduled", "Pulled"]
    without = OurSpawner(pod_name="jupyter-ann", _last_event=None, event_reflector=None)
    without._container = ContainerBackend(without)
    assert without.events == []
