"""Watch caches indexed by owner (workspacespawner.k8s.ownerindex): the index follows every change kubespawner's
reflector makes (a list replacing the cache, a watch event setting or popping a key), and a reflector of ours
builds its cache with it."""

from __future__ import annotations

from workspacespawner.core import names
from workspacespawner.k8s import watches
from workspacespawner.k8s.ownerindex import OwnerIndexedObjects


def obj(name: str, user: str | None, rv: str = "1") -> dict:
    labels = names.owner_labels(user) if user else {"app": "other"}
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": labels}}


def owned(cache: OwnerIndexedObjects, user: str) -> list[str]:
    return [o["metadata"]["name"] for o in cache.owned_by(names.owner_id(user))]


def test_the_index_follows_lists_and_watch_events():
    cache = OwnerIndexedObjects({"ns/b": obj("b", "ann"), "ns/a": obj("a", "ann"), "ns/c": obj("c", "bob"),
                                 "ns/x": obj("x", None)})
    assert owned(cache, "ann") == ["a", "b"] and owned(cache, "bob") == ["c"] and owned(cache, "eve") == []
    cache["ns/d"] = obj("d", "eve")  # ADDED
    cache["ns/a"] = obj("a", "bob", rv="2")  # MODIFIED: its owner label changed
    assert owned(cache, "ann") == ["b"] and owned(cache, "bob") == ["a", "c"] and owned(cache, "eve") == ["d"]
    cache.pop("ns/c", None)  # DELETED, as kubespawner's reflector removes a key
    cache.pop("ns/never", None)
    del cache["ns/d"]
    cache["ns/x"] = obj("x", None, rv="3")  # an object with no owner stays out of the index
    assert owned(cache, "bob") == ["a"] and owned(cache, "eve") == [] and cache._keys_of.keys() == {
        names.owner_id("ann"), names.owner_id("bob")}


def test_a_reflector_of_ours_keeps_an_indexed_cache_across_lists():
    reflector = watches.PersistentVolumeClaimReflector.__new__(watches.PersistentVolumeClaimReflector)
    reflector.resources = {"ns/home-ann": obj("home-ann", "ann")}  # the first list
    assert isinstance(reflector.resources, OwnerIndexedObjects)
    reflector.resources = {"ns/home-ann": obj("home-ann", "ann"), "ns/home-bob": obj("home-bob", "bob")}  # a relist
    assert owned(reflector.resources, "bob") == ["home-bob"] and owned(reflector.resources, "ann") == ["home-ann"]
    for cls in (watches.VirtualMachineReflector, watches.VirtualMachineInstanceReflector, watches.DataVolumeReflector,
                watches.InterningPodReflector):
        assert cls.objects_class is OwnerIndexedObjects, cls
