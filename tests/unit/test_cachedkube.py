"""CachedKube: reads from the shared watch caches, the API server only where no cache can answer (issue #15).

The reflectors here are stand-ins registered where the real ones are
(kubespawner's registry): a loaded cache (``resources``) and a live watch.
The API server is a stand-in that records every call and answers from a
dict, so a test sees which reads went to it.
"""

from __future__ import annotations

import asyncio

import pytest
from kubespawner.spawner import PodReflector

from workspacespawner.core import names
from workspacespawner.k8s import cachedkube, watches
from workspacespawner.k8s.cachedkube import CachedKube, parse_equality_selector
from workspacespawner.k8s.kinds import NODE, POD, PVC

NS = "default"
PVCS = watches.PersistentVolumeClaimReflector


def reflector(cls, resources: dict, loop, *, alive: bool = True, loaded: bool = True):
    """A stand-in of a started ``cls`` reflector: its cache ``resources``, its first list done, its watch running."""
    found = cls.__new__(cls)
    found.resources, found._loop = resources, loop
    found.first_load_future = loop.create_future()
    if loaded:
        found.first_load_future.set_result(None)
    found.watch_task = None
    if not alive:
        found.watch_task = loop.create_future()
        found.watch_task.set_result(None)
    return found


def pvc(name: str, rv: str, user: str = "ann", **labels) -> dict:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": rv,
                         "labels": {**names.owner_labels(user), **labels}, "annotations": names.owner_annotations(user)}}


@pytest.fixture
def registry(monkeypatch):
    table: dict = {}
    monkeypatch.setattr(watches, "_reflectors", table)
    return table


@pytest.fixture
def kube(monkeypatch):
    api: dict[str, dict] = {}
    sent: list[tuple[str, str]] = []

    async def get(self, kind, namespace, name, *, fresh=False):
        sent.append(("GET", name))
        return api.get(name)

    async def listing(self, kind, namespace, *, labels=None, fresh=False):
        sent.append(("LIST", labels or ""))
        return list(api.values())

    monkeypatch.setattr(cachedkube.Kube, "get", get)
    monkeypatch.setattr(cachedkube.Kube, "list", listing)
    created = CachedKube.__new__(CachedKube)
    created._written = {}
    created.api, created.sent = api, sent
    return created


def test_only_equality_selectors_are_answered_from_a_cache():
    assert parse_equality_selector("a=b,c=d") == {"a": "b", "c": "d"}
    for selector in ("a!=b", "a in (b)", "a", "", None, "a==b"):
        assert parse_equality_selector(selector) is None, selector


async def test_reads_come_from_a_loaded_cache_and_never_from_the_api(kube, registry):
    loop = asyncio.get_running_loop()
    registry[("persistentvolumeclaims", NS)] = reflector(PVCS, {f"{NS}/home-ann": pvc("home-ann", "5")}, loop)
    assert (await kube.get(PVC, NS, "home-ann"))["metadata"]["resourceVersion"] == "5"
    assert await kube.get(PVC, NS, "home-bob") is None  # none of ours by that name
    assert [o["metadata"]["name"] for o in await kube.list(PVC, NS, labels=names.owner_selector("ann"))] == ["home-ann"]
    assert await kube.list(PVC, NS, labels=names.owner_selector("bob")) == []
    assert kube.sent == []
    await kube.get(PVC, NS, "home-ann", fresh=True)
    await kube.list(PVC, NS, labels="team=physics")  # not a selector of ours: the cache may not hold all it matches
    await kube.get(NODE, None, "gpu-1")  # nobody watches Nodes
    assert kube.sent == [("GET", "home-ann"), ("LIST", "team=physics"), ("GET", "gpu-1")]


async def test_a_cache_that_gave_up_or_never_loaded_is_not_read(kube, registry):
    loop = asyncio.get_running_loop()
    registry[("pods", NS)] = reflector(PodReflector, {}, loop, alive=False)
    await kube.get(POD, NS, "jupyter-ann")
    registry[("pods", NS)] = reflector(PodReflector, {}, loop, loaded=False)
    await kube.get(POD, NS, "jupyter-ann")
    assert kube.sent == [("GET", "jupyter-ann"), ("GET", "jupyter-ann")]


async def test_a_write_is_read_back_until_the_cache_has_it(kube, registry, monkeypatch):
    loop = asyncio.get_running_loop()
    claims = registry[("persistentvolumeclaims", NS)] = reflector(PVCS, {f"{NS}/home-ann": pvc("home-ann", "5")}, loop)
    kube.remember(PVC, NS, pvc("home-ann", "7"))
    assert (await kube.get(PVC, NS, "home-ann"))["metadata"]["resourceVersion"] == "7"  # the cache is behind
    claims.resources[f"{NS}/home-ann"] = pvc("home-ann", "9")  # someone wrote after us, and the watch brought it
    assert (await kube.get(PVC, NS, "home-ann"))["metadata"]["resourceVersion"] == "9"
    kube.remember(PVC, NS, pvc("home-new", "11"))
    assert (await kube.get(PVC, NS, "home-new"))["metadata"]["name"] == "home-new"
    clock = [0.0]
    monkeypatch.setattr(cachedkube.time, "monotonic", lambda: clock[0])
    kube.remember(PVC, NS, pvc("home-gone", "12"))
    clock[0] = cachedkube.WRITE_MEMORY_SECONDS + 1  # the watch never showed it: deleted meanwhile, the cache is right
    assert await kube.get(PVC, NS, "home-gone") is None
    assert kube.sent == []


async def test_a_cached_object_is_a_copy(kube, registry):
    loop = asyncio.get_running_loop()
    claims = registry[("persistentvolumeclaims", NS)] = reflector(PVCS, {f"{NS}/home-ann": pvc("home-ann", "5")}, loop)
    found = await kube.get(PVC, NS, "home-ann")
    found["metadata"]["labels"]["x"] = "y"
    assert found["kind"] == "PersistentVolumeClaim" and "x" not in claims.resources[f"{NS}/home-ann"]["metadata"]["labels"]


async def test_a_read_by_owner_takes_that_owners_objects_from_the_cache(kube, registry):
    loop = asyncio.get_running_loop()
    claims = {f"{NS}/home-u{i}": pvc(f"home-u{i}", "5", user=f"u{i}") for i in range(500)}
    claims[f"{NS}/scratch-u7"] = pvc("scratch-u7", "6", user="u7", tier="scratch")
    registry[("persistentvolumeclaims", NS)] = found = reflector(PVCS, {}, loop)
    found.resources = claims
    listed = await kube.list(PVC, NS, labels=names.owner_selector("u7"))
    assert [o["metadata"]["name"] for o in listed] == ["home-u7", "scratch-u7"]
    assert [o["metadata"]["name"] for o in await kube.list(PVC, NS, labels=names.owner_selector("u7") + ",tier=scratch")] == [
        "scratch-u7"
    ]
    assert await kube.list(PVC, NS, labels=names.owner_selector("nobody")) == [] and kube.sent == []
