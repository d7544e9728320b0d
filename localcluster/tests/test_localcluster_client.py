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
from localcluster.client import ApiServerClient
from localcluster.errors import ApiError
from localcluster.testing import create_object as create
from localcluster.testing import wait_for

from localcluster import LocalCluster

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


VMS = ("kubevirt.io", "v1", "virtualmachines")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")


async def test_virt_api_start_reads_afresh_not_from_a_stale_cache(cluster, client):
    # The real plane's virt-api (realplane/virtapi.py) answers start through this client. KubeVirt's
    # handler GETs the VM and VMI for each call; a VMI the cache still holds after it was deleted
    # (its watch behind, here cut off) must not refuse the start with "VM is already running".
    from localcluster.vmactions import vm_action_through

    create(cluster, VMS, {"metadata": {"name": "vm"}, "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}})
    create(cluster, VMIS, {"metadata": {"name": "vm"}, "spec": {"domain": {"devices": {}}}})
    store = cluster.store
    vmi = store.get(store.kind(*VMIS), "default", "vm")
    vmi["status"] = {"phase": "Running"}
    store.replace(store.kind(*VMIS), "default", "vm", vmi, subresource="status")
    await client.watch([VMS, VMIS])
    assert client.get(client.kind(*VMIS), "default", "vm")["status"]["phase"] == "Running"

    cluster.faults.add("GET", r"/virtualmachineinstances$", status=500, count=10_000)  # its list and watch fail
    store.close_watches()
    store.delete(store.kind(*VMIS), "default", "vm")
    assert client.get(client.kind(*VMIS), "default", "vm")["status"]["phase"] == "Running"  # stale

    await vm_action_through(client, "default", "vm", "start", None)
    assert store.get(store.kind(*VMS), "default", "vm")["spec"]["runStrategy"] == "Always"
    cluster.faults.clear()


async def test_virt_api_start_is_made_again_when_its_write_loses_a_race(cluster, client):
    # virt-controller's status write between virt-api's read and its update moves the resourceVersion:
    # the update answers 409 Conflict, and the start is read, planned and made again (KubeVirt patches).
    from localcluster.vmactions import vm_action_through

    create(cluster, VMS, {"metadata": {"name": "vm"}, "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}})
    await client.watch([VMS, VMIS])
    cluster.faults.add("PUT", r"/virtualmachines/vm$", status=409, reason="Conflict", count=1)
    await vm_action_through(client, "default", "vm", "start", None)
    assert cluster.store.get(cluster.store.kind(*VMS), "default", "vm")["spec"]["runStrategy"] == "Always"


async def test_a_late_write_answer_does_not_bring_back_a_deleted_object(cluster, client):
    """The answer to a write can reach the client after the watch reported the object deleted (two
    connections): that answer is older than the deletion and must not put the object back in the cache,
    where nothing would ever remove it (a VMI ghost held a VM's restart for good on the real plane)."""
    seen = []
    client.on_change(lambda kind, k, obj, old: seen.append((kind, obj["metadata"]["name"])))
    await client.watch([CONFIG_MAPS])
    kind = client.kind(*CONFIG_MAPS)
    held = await client.create(kind, "default", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    cluster.store.delete(cluster.store.kind(*CONFIG_MAPS), "default", "held")  # terminating: the finalizer holds it
    await wait_for(lambda: client.get(kind, "default", "held")["metadata"].get("deletionTimestamp"))
    released = client.get(kind, "default", "held")
    released["metadata"]["finalizers"] = []
    answer = await client.replace(kind, "default", "held", released)  # the API server deletes it now
    await wait_for(lambda: ("DELETED", "held") in seen)
    assert held["metadata"]["uid"] == answer["metadata"]["uid"]

    client._cache(kind, answer)  # the same answer, arriving after the watch's DELETED event

    with pytest.raises(ApiError) as missing:
        client.get(kind, "default", "held")
    assert missing.value.code == 404
    assert client.objects(kind) == []
