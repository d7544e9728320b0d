"""Shared reflectors across an API server's bad moments: every watch dropped and the history compacted.

Covers kubespawner's ResourceReflector (the base of its Pod and Event
reflectors and of ours, :mod:`workspacespawner.k8s.watches`): when the API
server drops every watch and its history no longer reaches back to the
reflector's last resourceVersion (a watch resumed from there would get 410
Gone), the reflector lists again from that resourceVersion and watches from
the list's, so a Pod created in the gap is in the cache and the watch stays
alive.
"""

from __future__ import annotations

import asyncio

from kubespawner.spawner import PodReflector

from workspacespawner.k8s import watches

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {"containers": [{"name": "c", "image": "quay.io/jupyter/base-notebook:2025-01-01"}]},
}


def create_pod(cluster, name: str) -> None:
    store = cluster.store
    store.create(store.kind("", "v1", "pods"), "default", dict(POD, metadata={"name": name, "labels": {"app": "x"}}))


def gap(cluster) -> None:
    """A Pod made while every watch is dropped and the history compacted (the resume is then too old)."""
    cluster.store.close_watches()
    create_pod(cluster, "in-the-gap")
    cluster.store.compact()


async def until(predicate, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "not reached"
        await asyncio.sleep(0.05)


def lists(cluster) -> int:
    """How many times the Pods were listed (not watched) so far."""
    return sum(1 for r in cluster.requests.records if r.path.endswith("/pods") and r.method == "GET" and not r.query.get("watch"))


async def test_pod_reflector_lists_again_after_a_dropped_watch_and_compaction(cluster_thread, kube_env):
    from kubespawner.clients import load_config

    load_config()
    reflector = PodReflector(namespace="default", labels={"app": "x"})
    await reflector.start()
    try:
        await cluster_thread.acall(create_pod, "before")
        await until(lambda: "default/before" in reflector.pods)
        listed = lists(cluster_thread.cluster)
        await cluster_thread.acall(gap)
        await until(lambda: "default/in-the-gap" in reflector.pods)
        assert watches.alive(reflector)
        assert lists(cluster_thread.cluster) == listed + 1  # one list, then the watch again
    finally:
        await reflector.stop()
