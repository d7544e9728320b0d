"""Event caches indexed by involved object (workspacespawner.k8s.eventindex): the index follows every change
kubespawner's reflector makes (a list replacing the cache, a watch event setting or popping a key), keeps the cache's
order, and our Event reflectors build their caches with it."""

from __future__ import annotations

from workspacespawner.k8s import watches
from workspacespawner.k8s.eventindex import EventIndexedObjects, events_involving


def event(name: str, about: str | None, rv: str = "1") -> dict:
    found = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "reason": "Pulled"}
    if about is not None:
        found["involvedObject"] = {"kind": "Pod", "name": about, "namespace": "ns"}
    return found


def names(events: list[dict]) -> list[str]:
    return [e["metadata"]["name"] for e in events]


def test_the_index_follows_lists_and_watch_events_in_the_caches_order():
    listed = {f"ns/{n}": event(n, about) for n, about in (("b1", "pod-b"), ("a1", "pod-a"), ("b2", "pod-b"), ("x", None))}
    cache = EventIndexedObjects(listed)
    assert names(cache.involving("pod-b")) == ["b1", "b2"] and names(cache.involving("pod-a")) == ["a1"]
    cache["ns/a2"] = event("a2", "pod-a")  # ADDED: last
    cache["ns/b1"] = event("b1", "pod-b", rv="2")  # MODIFIED (its count went up): keeps its place
    cache["ns/a1"] = event("a1", "pod-b", rv="3")  # about another object now: moves to it, last
    assert names(cache.involving("pod-a")) == ["a2"] and names(cache.involving("pod-b")) == ["b1", "b2", "a1"]
    cache.pop("ns/b2", None)  # DELETED, as kubespawner's reflector removes a key
    cache.pop("ns/never", None)
    del cache["ns/a2"]
    cache["ns/x"] = event("x", None, rv="2")  # an Event about nothing stays out of the index
    assert names(cache.involving("pod-b")) == ["b1", "a1"] and cache.involving("pod-a") == []
    assert cache._keys_of.keys() == {"pod-b"}


def test_events_involving_reads_the_index_and_passes_over_a_plain_cache():
    listed = {f"ns/{n}": event(n, about) for n, about in (("b1", "pod-b"), ("a1", "pod-a"), ("b2", "pod-b"))}
    assert names(events_involving(EventIndexedObjects(listed), "pod-b")) == ["b1", "b2"]
    assert names(events_involving(listed, "pod-b")) == ["b1", "b2"]  # a reflector kubespawner started
    assert events_involving(listed, "pod-c") == []


def test_our_event_reflectors_keep_an_indexed_cache_across_lists():
    for cls in (watches.InterningEventReflector, watches.VMIEventReflector):
        assert cls.objects_class is EventIndexedObjects, cls
    reflector = watches.VMIEventReflector.__new__(watches.VMIEventReflector)
    reflector.resources = {"ns/e1": {**event("e1", "vm-ann"), "lastTimestamp": "2026-12-05T10:00:02Z"}}  # the first list
    reflector.resources = {  # a relist
        "ns/e1": {**event("e1", "vm-ann"), "lastTimestamp": "2026-12-05T10:00:02Z"},
        "ns/e0": {**event("e0", "vm-ann"), "lastTimestamp": "2026-12-05T10:00:01Z"},
        "ns/e2": {**event("e2", "vm-bob"), "lastTimestamp": "2026-12-05T10:00:00Z"},
    }
    assert isinstance(reflector.resources, EventIndexedObjects)
    assert names(reflector.events_for("vm-ann")) == ["e0", "e1"] and names(reflector.events_for("vm-bob")) == ["e2"]
