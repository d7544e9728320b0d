"""Watch caches that wake waiters (workspacespawner.k8s.changes): every change kubespawner's reflector makes to a key
wakes that key's waiters and no other's, a list replacing the cache wakes all, and a waiter that gives up is forgotten."""

from __future__ import annotations

import asyncio

from workspacespawner.k8s import watches
from workspacespawner.k8s.changes import ChangeNotifyingObjects


def obj(name: str, rv: str = "1") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


async def settled() -> None:
    await asyncio.sleep(0)  # done callbacks run on the loop's next turn


async def test_a_set_pop_or_del_of_a_key_wakes_its_waiters_only():
    cache = ChangeNotifyingObjects({"ns/a": obj("a"), "ns/b": obj("b")})
    a1, a2, b = cache.next_change("ns/a"), cache.next_change("ns/a"), cache.next_change("ns/b")
    cache["ns/a"] = obj("a", rv="2")  # MODIFIED
    await settled()
    assert a1.done() and a2.done() and not b.done()
    assert cache["ns/a"]["metadata"]["resourceVersion"] == "2"
    cache.pop("ns/b", None)  # DELETED, as kubespawner's reflector removes a key
    assert b.done()
    c = cache.next_change("ns/c")
    cache["ns/c"] = obj("c")  # ADDED
    assert c.done()
    again = cache.next_change("ns/c")
    del cache["ns/c"]
    assert again.done()
    await settled()
    assert cache._waiters == {}


async def test_a_new_list_wakes_every_waiter_of_the_cache_it_replaces():
    reflector = watches.PersistentVolumeClaimReflector.__new__(watches.PersistentVolumeClaimReflector)
    reflector.resources = {"ns/home-ann": obj("home-ann")}  # the first list
    old = reflector.resources
    assert isinstance(old, ChangeNotifyingObjects)
    ann, bob = old.next_change("ns/home-ann"), old.next_change("ns/home-bob")
    reflector.resources = {"ns/home-ann": obj("home-ann")}  # a relist: nothing changed, the waiters read again all the same
    assert ann.done() and bob.done()
    assert reflector.resources is not old


async def test_a_waiter_that_gives_up_is_forgotten_and_a_later_change_wakes_nobody_else():
    cache = ChangeNotifyingObjects({"ns/a": obj("a")})
    gave_up, waiting = cache.next_change("ns/a"), cache.next_change("ns/a")
    gave_up.cancel()
    await settled()
    assert cache._waiters == {"ns/a": {waiting}}
    waiting.cancel()
    await settled()
    assert cache._waiters == {}
    cache["ns/a"] = obj("a", rv="2")  # no waiter: nothing to wake, nothing kept
    assert cache._waiters == {}
