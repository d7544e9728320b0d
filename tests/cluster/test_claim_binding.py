"""Starts waiting for their claims to bind, many at once (issue #15).

A burst of 30 simultaneous spawns read ``ceph-rbd`` 13 times: each start
missed the per-process cache while the first read was still in flight. A
burst of 300 failed 35 starts with "not bound within 30 seconds" while the
provisioner, slow but working, was still making the first homes.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.storage import binding


async def test_simultaneous_starts_read_a_storage_class_once(api, cluster, monkeypatch):
    monkeypatch.setattr(binding, "_binding_modes", {})
    core = client.CoreV1Api(api)
    cluster.requests.clear()
    modes = await asyncio.gather(*(binding.binding_mode(core, "ceph-rbd") for _ in range(20)))
    assert set(modes) == {"Immediate"}
    assert cluster.requests.count("GET", r"/storageclasses/ceph-rbd$") == 1
    assert await binding.binding_mode(core, "no-such-class") == ""  # none such: no mode, and asked again next time
    assert await binding.binding_mode(core, "no-such-class") == ""
    assert cluster.requests.count("GET", r"/storageclasses/no-such-class$") == 2


def claim(name: str, storage_class: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                                                 "resources": {"requests": {"storage": "1Gi"}}}}


async def test_a_claim_waits_while_claims_of_its_class_are_being_bound_and_fails_once_none_are(api, monkeypatch):
    """300 new homes at once: the provisioner works through its queue and the last claims bind long after the first.
    A claim's deadline runs from the last claim of its class this hub saw bound, so a busy provisioner fails no start;
    one that stops binding does, ``deadline`` seconds later."""
    monkeypatch.setattr(binding, "_class_bound_at", {})
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    await storage.create_storage_class({"metadata": {"name": "queued"}, "provisioner": "example.com/queue"})
    for name in ("home-ann", "home-bob"):
        await core.create_namespaced_persistent_volume_claim("default", claim(name, "queued"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    ann = asyncio.ensure_future(binding.wait_claim_bound(core, namespace="default", claim="home-ann", deadline=2.0))
    bob = asyncio.ensure_future(binding.wait_claim_bound(core, namespace="default", claim="home-bob", deadline=2.0))
    await asyncio.sleep(1.2)
    bound = await core.read_namespaced_persistent_volume_claim("home-bob", "default")
    bound.status = client.V1PersistentVolumeClaimStatus(phase="Bound", access_modes=["ReadWriteOnce"], capacity={"storage": "1Gi"})
    await core.replace_namespaced_persistent_volume_claim_status("home-bob", "default", bound)  # as the PV controller does
    await asyncio.wait_for(bob, 10)
    await asyncio.sleep(began + 2.6 - loop.time())  # past ann's own deadline (2 s), within bob's bind + 2 s
    assert not ann.done()
    with pytest.raises(WorkspaceError, match="'home-ann' \\(storage class 'queued'\\) was not bound within 2 seconds"):
        await asyncio.wait_for(ann, 10)
    assert loop.time() - began >= 3.2  # bob's bind + 2 s: nothing of its class bound since


async def test_a_claim_the_pvc_watch_holds_is_looked_at_again_when_it_changes_not_on_a_timer(api, kube_env, monkeypatch):
    """A start waits for its home beside the Pod start, for as long as the provisioner takes (half a minute for the
    last of 300 new homes). It sleeps until the PVC watch stores a new version of the claim: a look a second made
    every start of a class wake ~30 times for nothing. Looks are counted with the fallback interval made tiny: a
    timer would look ~100 times before the claim binds."""
    from kubespawner.clients import load_config

    from workspacespawner.k8s import watches
    from workspacespawner.k8s.cachedkube import CachedKube
    from workspacespawner.k8s.kinds import PVC

    load_config()
    monkeypatch.setattr(binding, "CACHE_INTERVAL", 0.01)
    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    await storage.create_storage_class({"metadata": {"name": "queued"}, "provisioner": "example.com/queue"})
    home = claim("home-ann", "queued")
    home["metadata"]["labels"] = dict(watches.MANAGED_LABELS)
    await core.create_namespaced_persistent_volume_claim("default", home)
    await watches.shared_reflector(watches.PersistentVolumeClaimReflector, "default")
    try:
        kube, looks = CachedKube(core, None), []

        def peek(name: str) -> dict | None:
            looks.append(name)
            return kube.peek(PVC, "default", name, copy=False)[1]

        wait = asyncio.ensure_future(binding.wait_claim_bound(
            core, namespace="default", claim="home-ann", deadline=30.0, peek=peek,
            changed=lambda name: kube.next_change(PVC, "default", name)))
        await asyncio.sleep(1.0)
        assert not wait.done()
        waiting = len(looks)
        assert waiting <= 3, looks  # the first read, the read after the class's mode, and one event at most
        bound = await core.read_namespaced_persistent_volume_claim("home-ann", "default")
        bound.status = client.V1PersistentVolumeClaimStatus(phase="Bound", access_modes=["ReadWriteOnce"], capacity={"storage": "1Gi"})
        await core.replace_namespaced_persistent_volume_claim_status("home-ann", "default", bound)
        await asyncio.wait_for(wait, 10)
        assert len(looks) <= waiting + 2, looks
    finally:
        await watches.stop_all()
