"""The controllers' client over an API server (``ApiServerClient``), here the embedded one's HTTP API.

Reads come from informer caches kept by list + watch: objects written by
anyone reach the cache and the change hooks (ADDED, MODIFIED, DELETED); the
client's own writes are in its cache at once (read-your-writes); a repeated
Event bumps ``count``, as client-go's recorder does. The same client runs
every controller against the real control plane (tests/cluster/realplane).
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import config

from tests.support.helpers import create_object as create
from tests.support.helpers import wait_for
from workspacespawner.localcluster import LocalCluster
from workspacespawner.localcluster.client import ApiServerClient
from workspacespawner.localcluster.errors import ApiError

CONFIG_MAPS = ("", "v1", "configmaps")


@pytest.fixture
async def cluster(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        yield cluster


@pytest.fixture
async def client(cluster):
    api = await config.new_client_from_config(config_file=str(cluster.kubeconfig))
    client = ApiServerClient(api)
    try:
        yield client
    finally:
        await client.close()
        await api.close()


async def test_cache_follows_everyone_and_reads_own_writes(cluster, client):
    create(cluster, CONFIG_MAPS, {"metadata": {"name": "before"}, "data": {"a": "1"}})
    seen = []
    client.on_change(lambda kind, k, obj, old: seen.append((kind, obj["metadata"]["name"])))
    await client.watch([CONFIG_MAPS])
    kind = client.kind(*CONFIG_MAPS)
    assert client.get(kind, "default", "before")["data"] == {"a": "1"}  # listed

    create(cluster, CONFIG_MAPS, {"metadata": {"name": "later"}, "data": {"b": "2"}})
    await wait_for(lambda: ("ADDED", "later") in seen)  # watched

    mine = client.get(kind, "default", "later")
    mine["data"]["b"] = "3"
    stored = await client.replace(kind, "default", "later", mine)
    assert client.get(kind, "default", "later")["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert client.get(kind, "default", "later")["data"] == {"b": "3"}  # at once, before its watch event

    stale = dict(mine)  # the resourceVersion it was read at
    with pytest.raises(ApiError) as conflict:
        await client.replace(kind, "default", "later", stale)
    assert conflict.value.code == 409

    cluster.store.delete(cluster.store.kind(*CONFIG_MAPS), "default", "before")
    await wait_for(lambda: ("DELETED", "before") in seen)
    with pytest.raises(ApiError) as missing:
        client.get(kind, "default", "before")
    assert missing.value.code == 404


async def test_repeated_event_bumps_count(cluster, client):
    await client.watch([CONFIG_MAPS])
    owner = await client.create(client.kind(*CONFIG_MAPS), "default", {"metadata": {"name": "cm"}})
    first = await client.record_event(owner, "Checked", "all good", component="tester")
    again = await client.record_event(owner, "Checked", "all good", component="tester")
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert (first["count"], again["count"]) == (1, 2)
    events = cluster.store.objects(cluster.store.kind("", "v1", "events"))
    assert [e["count"] for e in events if e["reason"] == "Checked"] == [2]
