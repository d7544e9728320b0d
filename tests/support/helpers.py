"""Small helpers shared by the local-cluster tests."""

from __future__ import annotations

import asyncio
import time


async def wait_for(predicate, timeout: float = 5, interval: float = 0.02):
    """Await until ``predicate()`` is truthy and return its value; fail after ``timeout`` seconds.

    A wait with a deadline, not a timed assertion: the cluster's controllers
    run on the same event loop, so each step yields to them.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {getattr(predicate, '__name__', predicate)}")
        await asyncio.sleep(interval)


def get_object(cluster, key: tuple[str, str, str], name: str, namespace: str | None = "default") -> dict | None:
    """A copy of the stored object of kind ``key`` (group, version, plural), or None."""
    from workspacespawner.localcluster.errors import ApiError

    try:
        return cluster.store.get(cluster.store.kind(*key), namespace, name)
    except ApiError:
        return None


def create_object(cluster, key: tuple[str, str, str], body: dict, namespace: str | None = "default") -> dict:
    """Create ``body`` as kind ``key`` through the store (validated like a client's write)."""
    return cluster.store.create(cluster.store.kind(*key), namespace, body)


def events_for(cluster, name: str, reason: str | None = None) -> list[dict]:
    """The Events about objects called ``name`` (with ``reason``, if given)."""
    store = cluster.store
    return [
        e for e in store.objects(store.kind("", "v1", "events"))
        if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)
    ]
