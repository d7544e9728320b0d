"""Our reflectors on the local cluster: caches that intern their objects' strings (through a list and through watch events), and how long each watch request lasts."""

from __future__ import annotations

import asyncio

from workspacespawner.core import names
from workspacespawner.k8s import watches
from workspacespawner.k8s.interning import InterningObjects


def create_claim(cluster, name: str, phase: str = "Stopped") -> None:
    store = cluster.store
    store.create(
        store.kind("", "v1", "persistentvolumeclaims"),
        "default",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {**watches.MANAGED_LABELS, f"{names.LABEL_PREFIX}/phase": phase}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )


async def until(predicate, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "not reached"
        await asyncio.sleep(0.05)


async def test_listed_and_watched_claims_share_their_strings(cluster_thread, kube_env):
    from kubespawner.clients import load_config

    load_config()
    await cluster_thread.acall(create_claim, "home-ann")
    reflector = await watches.shared_reflector(watches.PersistentVolumeClaimReflector, "default")
    try:
        listed = reflector.resources["default/home-ann"]
        await cluster_thread.acall(create_claim, "home-bob")
        await until(lambda: "default/home-bob" in reflector.resources)
        watched = reflector.resources["default/home-bob"]
        assert isinstance(reflector.resources, InterningObjects)
        assert watched["metadata"]["name"] == "home-bob" and listed["metadata"]["name"] == "home-ann"
        assert listed["spec"]["accessModes"][0] is watched["spec"]["accessModes"][0]
        label = f"{names.LABEL_PREFIX}/phase"
        assert next(k for k in listed["metadata"]["labels"] if k == label) is next(
            k for k in watched["metadata"]["labels"] if k == label
        )
        api = await cluster_thread.acall(lambda c: c.store.get(c.store.kind("", "v1", "persistentvolumeclaims"), "default", "home-bob"))
        assert watched["metadata"]["uid"] == api["metadata"]["uid"]
    finally:
        await watches.stop_all()


async def test_the_spawner_starts_kubespawners_pod_and_event_reflectors_interning(cluster_thread, kube_env):
    from kubespawner.clients import load_config
    from kubespawner.spawner import EventReflector, PodReflector

    from workspacespawner.spawner import WorkspaceSpawner

    load_config()
    spawner = WorkspaceSpawner.__new__(WorkspaceSpawner)  # only the reflector start is used: no hub, no user
    spawner.namespace = "default"
    try:
        pods = await WorkspaceSpawner._start_reflector(spawner, "pods", PodReflector)
        events = await WorkspaceSpawner._start_reflector(spawner, "events", EventReflector)
        assert isinstance(pods, watches.InterningPodReflector) and isinstance(pods, PodReflector)
        assert isinstance(events, watches.InterningEventReflector)
        assert isinstance(pods.resources, InterningObjects) and watches.pod_reflector("default") is pods
    finally:
        for key in [("pods", "default"), ("events", "default")]:
            reflector = WorkspaceSpawner.reflectors.pop(key, None)
            if reflector is not None:
                await reflector.stop()


async def test_our_watches_ask_the_api_server_for_fifty_seconds_each(cluster_thread, kube_env):
    from kubespawner.clients import load_config

    load_config()
    reflector = await watches.shared_reflector(watches.PersistentVolumeClaimReflector, "default")
    await until(lambda: reflector.watch_task is not None)
    await asyncio.sleep(0.3)  # the watch request is sent
    await watches.stop_all()

    def watch_requests():
        return [r for r in cluster_thread.cluster.requests.records
                if r.path.endswith("/persistentvolumeclaims") and r.query.get("watch") in ("true", "1", "True")]

    await until(lambda: watch_requests())
    assert reflector.timeout_seconds == watches.WATCH_SECONDS == 50
    assert {r.query.get("timeoutSeconds") for r in watch_requests()} == {"50"}
