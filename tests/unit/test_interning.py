"""Watch caches whose objects share their strings (workspacespawner.k8s.interning)."""

from __future__ import annotations

import json
import sys
import tracemalloc

from workspacespawner.k8s.interning import InterningObjects, interned


def claim(i: int) -> dict:
    """A home PersistentVolumeClaim as the API returns it for user ``i``: bound, labelled, annotated (~1.4 KB of JSON)."""
    user = f"user{i:04d}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": f"home-{user}",
            "namespace": "default",
            "uid": f"2c80bd49-ff59-4746-b7b1-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-12-04T23:41:11Z",
            "finalizers": ["kubernetes.io/pvc-protection"],
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "component": "singleuser-storage",
                "hub.jupyter.org/username": user,
                "workspacespawner.io/disk": "home",
                "workspacespawner.io/phase": "Stopped",
            },
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.kubernetes.io/storage-provisioner": "rbd.csi.ceph.com",
                "workspacespawner.io/owner-name": user,
                "workspacespawner.io/lifecycle": json.dumps({"phase": "Stopped", "since": "2026-12-04T23:41:11Z"}),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": "ceph-rbd",
            "volumeMode": "Filesystem",
            "volumeName": f"pvc-2c80bd49-ff59-4746-b7b1-{i:012d}",
        },
        "status": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}, "phase": "Bound"},
    }


def decoded(i: int) -> dict:
    """``claim(i)`` as a watch cache gets it: one ``json.loads`` of its own document."""
    return json.loads(json.dumps(claim(i)))


def test_an_interned_object_equals_the_decoded_one():
    assert interned(decoded(7)) == claim(7)
    assert interned([1, 2.5, None, True, "x", {"a": []}]) == [1, 2.5, None, True, "x", {"a": []}]


def test_two_objects_share_their_keys_and_repeated_values():
    a, b = interned(decoded(1)), interned(decoded(2))
    key_a = next(k for k in a["spec"] if k == "storageClassName")
    key_b = next(k for k in b["spec"] if k == "storageClassName")
    assert key_a is key_b
    assert a["spec"]["storageClassName"] is b["spec"]["storageClassName"]
    assert a["status"]["phase"] is b["status"]["phase"]
    # as json.loads leaves them, each document has its own copies
    plain_a, plain_b = decoded(1), decoded(2)
    assert plain_a["spec"]["storageClassName"] is not plain_b["spec"]["storageClassName"]


def test_the_cache_interns_what_it_is_given_and_what_is_set_in_it():
    listed = InterningObjects({"default/home-user0001": decoded(1)})
    listed["default/home-user0002"] = decoded(2)
    one, two = listed["default/home-user0001"], listed["default/home-user0002"]
    assert one == claim(1) and two == claim(2)
    assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
    assert isinstance(listed, dict) and len(listed) == 2


def allocated(build) -> int:
    """Bytes still allocated by what ``build()`` returns (tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = build()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert kept
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def test_a_cache_of_claims_takes_less_than_half_the_memory_of_the_decoded_json():
    documents = [json.dumps(claim(i)) for i in range(200)]
    plain = allocated(lambda: {i: json.loads(text) for i, text in enumerate(documents)})
    shared = allocated(lambda: InterningObjects({i: json.loads(text) for i, text in enumerate(documents)}))
    assert shared < plain / 2, (shared, plain)


def test_a_new_list_keeps_the_objects_whose_resource_version_did_not_change():
    cache = InterningObjects({"default/home-user0001": decoded(1), "default/home-user0002": decoded(2)})
    unchanged = cache["default/home-user0001"]
    changed = decoded(2)
    changed["metadata"]["resourceVersion"] = "9999"
    changed["status"]["phase"] = "Lost"
    relisted = InterningObjects(
        {"default/home-user0001": decoded(1), "default/home-user0002": changed, "default/home-user0003": decoded(3)},
        previous=cache,
    )
    assert relisted["default/home-user0001"] is unchanged
    assert relisted["default/home-user0002"]["status"]["phase"] == "Lost" and relisted["default/home-user0002"] == changed
    assert relisted["default/home-user0002"]["spec"] is cache["default/home-user0002"]["spec"]  # its unchanged part kept
    assert relisted["default/home-user0003"] == claim(3)
    assert InterningObjects({"x": {"metadata": {}}}, previous={"x": {"metadata": {}, "stale": True}})["x"] == {"metadata": {}}


def test_a_watch_event_keeps_the_parts_of_the_object_that_did_not_change():
    cache = InterningObjects({"default/home-user0001": decoded(1)})
    before = cache["default/home-user0001"]
    update = decoded(1)
    update["metadata"]["resourceVersion"] = "5000"
    update["status"]["phase"] = "Lost"
    cache["default/home-user0001"] = update
    after = cache["default/home-user0001"]
    assert after == update
    assert after["spec"] is before["spec"]  # unchanged: kept, not rebuilt
    assert after["status"] is not before["status"] and after["status"]["phase"] == "Lost"
    assert after["metadata"]["resourceVersion"] == "5000" and before["metadata"]["resourceVersion"] == "1001"


def test_a_watch_event_keeps_the_unchanged_parts_of_the_parts_that_changed():
    """A status update changes ``metadata`` (its resourceVersion) and ``status``; their unchanged parts (labels,
    annotations, the capacity) and the unchanged items of a changed list are kept, the rest is the update's."""
    cache = InterningObjects({"default/home-user0001": decoded(1)})
    before = cache["default/home-user0001"]
    update = decoded(1)
    update["metadata"]["resourceVersion"] = "5000"
    update["status"]["phase"] = "Lost"
    update["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection", "example.com/hold"]  # a list that grew
    update["spec"]["accessModes"] = ["ReadWriteOnce", "ReadOnlyMany"]
    update["status"]["accessModes"] = ["ReadWriteMany"]  # same length, its one item changed
    cache["default/home-user0001"] = update
    after = cache["default/home-user0001"]
    assert after == update
    assert after["metadata"] is not before["metadata"] and after["status"] is not before["status"]
    assert after["metadata"]["labels"] is before["metadata"]["labels"]
    assert after["metadata"]["annotations"] is before["metadata"]["annotations"]
    assert after["status"]["capacity"] is before["status"]["capacity"]
    assert after["spec"]["resources"] is before["spec"]["resources"]
    assert after["metadata"]["finalizers"][1] == "example.com/hold" and after["status"]["accessModes"] == ["ReadWriteMany"]
    shared = InterningObjects({"default/home-user0002": decoded(2)})["default/home-user0002"]
    assert after["status"]["accessModes"][0] is sys.intern("ReadWriteMany")  # a changed item is interned too
    assert after["metadata"]["finalizers"][0] is shared["metadata"]["finalizers"][0]
