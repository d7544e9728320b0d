"""Watches on the local API server, as Kubernetes streams them.

Covers: ADDED/MODIFIED/DELETED in order; resuming from a resourceVersion;
a resourceVersion older than the kept history answered with an ERROR event
carrying a 410 Expired Status (and kubernetes_asyncio raising 410 from it);
timeoutSeconds ending the stream; BOOKMARK events (periodic and just before
the timeout); label and field selectors, with an object that moves out of the
selector reported DELETED and one that moves in reported ADDED; the legacy
``/watch/`` prefix and single-object watches; ``as=Table`` watches for
``kubectl get -w``; and a client that disconnects closing the store's watch.
No controllers run. (kubespawner's reflector on these watches is the product's
test: tests/cluster/test_kubespawner_reflector.py.)
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException
from localcluster.testing import wait_for

NS = "default"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}


def cluster_options(**options):
    """Run the test against a controller-less cluster with these extra options."""
    return pytest.mark.parametrize("cluster_thread", [{"controllers": (), **options}], indirect=True)


api_only = cluster_options()


def configmap(name: str, labels: dict | None = None, data: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


async def watch_events(cluster, func, *args, stop_after: int, **kwargs) -> tuple[asyncio.Task, list]:
    """Start a kubernetes_asyncio watch in a task collecting ``(type, name)`` until ``stop_after`` events.

    Returns once the server has the watch open, so writes made after it are seen.
    """
    events: list = []
    opened = cluster.store.open_watches

    async def run():
        async with watch.Watch().stream(func, *args, timeout_seconds=10, **kwargs) as stream:
            async for event in stream:
                events.append((event["type"], event["raw_object"]["metadata"]["name"]))
                if len(events) >= stop_after:
                    return

    task = asyncio.create_task(run())
    await wait_for(lambda: cluster.store.open_watches > opened or task.done())
    return task, events


@api_only
async def test_added_modified_deleted(api, cluster):
    v1 = client.CoreV1Api(api)
    task, events = await watch_events(cluster, v1.list_namespaced_config_map, NS, stop_after=3)
    await v1.create_namespaced_config_map(NS, configmap("c1"))
    await v1.patch_namespaced_config_map("c1", NS, {"data": {"a": "1"}})
    await v1.delete_namespaced_config_map("c1", NS)
    await asyncio.wait_for(task, 10)
    assert events == [("ADDED", "c1"), ("MODIFIED", "c1"), ("DELETED", "c1")]
    await wait_for(lambda: cluster.store.open_watches == 0)


@api_only
async def test_resume_from_resource_version(api):
    v1 = client.CoreV1Api(api)
    created = await v1.create_namespaced_config_map(NS, configmap("c1"))
    await v1.patch_namespaced_config_map("c1", NS, {"data": {"a": "1"}})
    await v1.patch_namespaced_config_map("c1", NS, {"data": {"a": "2"}})
    seen = []
    async with watch.Watch().stream(
        v1.list_namespaced_config_map, NS, resource_version=created.metadata.resource_version, timeout_seconds=1
    ) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].data))
    assert seen == [("MODIFIED", {"a": "1"}), ("MODIFIED", {"a": "2"})]


@api_only
async def test_watch_without_resource_version_starts_with_current_state(raw):
    await raw.request("POST", CONFIGMAPS, configmap("c1"))
    status, events, _ = await raw.watch(f"{CONFIGMAPS}?watch=true&timeoutSeconds=1")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "c1")]


@cluster_options(history=3)
async def test_too_old_resource_version_is_410_expired(api, raw):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_config_map(NS, configmap("c1"))
    for i in range(6):
        await v1.patch_namespaced_config_map("c1", NS, {"data": {"n": str(i)}})
    status, events, headers = await raw.watch(f"{CONFIGMAPS}?watch=1&resourceVersion=1")
    assert status == 200 and headers["Content-Type"] == "application/json"
    (event,) = events
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status" and (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    with pytest.raises(ApiException) as info:
        async with watch.Watch().stream(
            v1.list_namespaced_config_map, NS, resource_version="1", timeout_seconds=1
        ) as stream:
            async for _ in stream:
                pass
    assert info.value.status == 410


@api_only
async def test_timeout_seconds_ends_the_stream(raw, cluster):
    _, listed, _ = await raw.request("GET", CONFIGMAPS)
    rv = listed["metadata"]["resourceVersion"]
    started = time.monotonic()
    status, events, _ = await raw.watch(f"{CONFIGMAPS}?watch=true&timeoutSeconds=1&resourceVersion={rv}")
    elapsed = time.monotonic() - started
    assert status == 200 and events == []
    assert 0.9 <= elapsed < 3
    await wait_for(lambda: cluster.store.open_watches == 0)


@cluster_options(bookmark_interval=0.2)
async def test_bookmarks(raw):
    _, listed, _ = await raw.request("GET", CONFIGMAPS)
    rv = listed["metadata"]["resourceVersion"]
    query = f"watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={rv}"
    (_, events, _), (_, plain, _) = await asyncio.gather(
        raw.watch(f"{CONFIGMAPS}?{query}"),
        raw.watch(f"{CONFIGMAPS}?watch=true&timeoutSeconds=1&resourceVersion={rv}"),
    )
    assert len(events) >= 3 and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["object"] == {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
    assert plain == []  # no bookmarks unless asked for


@api_only
async def test_label_selector_moves_in_and_out(api, cluster):
    v1 = client.CoreV1Api(api)
    task, events = await watch_events(cluster, v1.list_namespaced_config_map, NS, stop_after=4, label_selector="app=a")
    await v1.create_namespaced_config_map(NS, configmap("first", {"app": "a"}))
    await v1.create_namespaced_config_map(NS, configmap("second", {"app": "b"}))
    await v1.patch_namespaced_config_map("first", NS, {"metadata": {"labels": {"app": "b"}}})
    await v1.patch_namespaced_config_map("second", NS, {"metadata": {"labels": {"app": "a"}}})
    await v1.delete_namespaced_config_map("second", NS)
    await asyncio.wait_for(task, 10)
    assert events == [("ADDED", "first"), ("DELETED", "first"), ("ADDED", "second"), ("DELETED", "second")]


@api_only
async def test_field_selector_and_all_namespaces(api, cluster):
    v1 = client.CoreV1Api(api)
    await v1.create_namespace({"metadata": {"name": "other"}})
    task, events = await watch_events(
        cluster, v1.list_config_map_for_all_namespaces, stop_after=2, field_selector="metadata.name=wanted"
    )
    await v1.create_namespaced_config_map(NS, configmap("unwanted"))
    await v1.create_namespaced_config_map("other", configmap("wanted"))
    await v1.create_namespaced_config_map(NS, configmap("wanted"))
    await asyncio.wait_for(task, 10)
    assert events == [("ADDED", "wanted"), ("ADDED", "wanted")]


@api_only
async def test_legacy_watch_prefix_and_single_object(raw):
    for name in ("c1", "c2"):
        await raw.request("POST", CONFIGMAPS, configmap(name))
    paths = {
        "/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1": ["c1", "c2"],
        "/api/v1/watch/namespaces/default/configmaps/c2?timeoutSeconds=1": ["c2"],
        f"{CONFIGMAPS}/c1?watch=true&timeoutSeconds=1": ["c1"],
    }
    answers = await asyncio.gather(*(raw.watch(path) for path in paths))
    assert [[e["object"]["metadata"]["name"] for e in events] for _, events, _ in answers] == list(paths.values())


@api_only
async def test_table_watch(raw):
    for name in ("c1", "c2"):
        await raw.request("POST", CONFIGMAPS, configmap(name, data={"k": "v"}))
    _, events, _ = await raw.watch(f"{CONFIGMAPS}?watch=true&timeoutSeconds=1", headers=TABLE)
    first, second = events
    assert first["type"] == "ADDED" and first["object"]["kind"] == "Table"
    assert [c["name"] for c in first["object"]["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert second["object"]["columnDefinitions"] == []
    assert [e["object"]["rows"][0]["cells"][:2] for e in (first, second)] == [["c1", 1], ["c2", 1]]


@api_only
async def test_client_disconnect_closes_the_store_watch(cluster):
    reader, writer = await asyncio.open_connection(cluster.host, cluster.port)
    writer.write(f"GET {CONFIGMAPS}?watch=true HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    assert b" 200 " in status_line
    await wait_for(lambda: cluster.store.open_watches == 1)
    writer.close()
    await writer.wait_closed()
    await wait_for(lambda: cluster.store.open_watches == 0)
