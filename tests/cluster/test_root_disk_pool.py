"""The root-disk pool on the local cluster (:mod:`workspacespawner.backends.vm.pool`).

Covers: the keeper clones each pool up to its count (audited, owned by
nobody, in no user's disks, never purged); a first start takes a ready pool
disk instead of cloning (no clone of its own in the cluster's request log,
the VM boots from the pool disk, the claim audited) and the pool refills;
with the pool empty the start clones as before; concurrent claims never
share a disk; a hub that claimed and crashed before making the VM leaves a
disk the next start finds by its slot, not a second claim; a DataSource
pointed at a new source retires the old pool disks and never a claimed one.
"""

from __future__ import annotations

import asyncio
import dataclasses
from functools import partial

import pytest
from localcluster.controllers.refs import DATA_SOURCES, DATA_VOLUMES, PVCS, VMS
from localcluster.goldenimage import make_golden_image

from tests.cluster.test_vm_workspace import (
    COMMAND,
    GOLDEN_FILES,
    GOLDEN_NS,
    NS,
    USER,
    fetch,
    hub_env,
    identity,
    kube,
    stored,
    workspace,
)
from tests.support.invariants import violations
from workspacespawner.backends.vm.manifests import VMIdentity
from workspacespawner.backends.vm.pool import POOL_SELECTOR, RootDiskPoolKeeper, claim_operations, shape_for
from workspacespawner.backends.vm.rootlookup import current_root_disk
from workspacespawner.backends.vm.workspace import cached_vm_and_disks
from workspacespawner.config.rootdiskpool import PoolEntry
from workspacespawner.core import names
from workspacespawner.k8s.cachedkube import CachedKube
from workspacespawner.k8s.kinds import DATA_VOLUME
from workspacespawner.lifecycle.disks import user_disk_bytes
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.lifecycle.retention import Purger
from workspacespawner.vmdisk.rootdisk import root_disk_of

__all__ = ["kube"]  # the fixture, shared with test_vm_workspace


def keeper_for(kube, audit_log, count: int = 2, **settings) -> RootDiskPoolKeeper:
    _thread, custom_api, core_api = kube
    shape = shape_for(workspace(kube, **settings).settings)
    return RootDiskPoolKeeper(CachedKube(core_api, custom_api), NS, [PoolEntry(shape, count)], audit=audit_log, interval=0.5)


async def pool_disks(keeper: RootDiskPoolKeeper) -> list[dict]:
    return await keeper.kube.list(DATA_VOLUME, NS, labels=POOL_SELECTOR, fresh=True)


async def until_ready(keeper: RootDiskPoolKeeper, count: int, timeout: float = 30) -> list[dict]:
    """Refill until the pool holds ``count`` ready disks (and no more); returns them."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await keeper.refill()
        disks = await pool_disks(keeper)
        ready = [d for d in disks if (d.get("status") or {}).get("phase") == "Succeeded" and not d["metadata"].get("deletionTimestamp")]
        if len(ready) == count and len(disks) == count:
            return ready
        assert asyncio.get_running_loop().time() < deadline, [(d["metadata"]["name"], d.get("status")) for d in disks]
        await asyncio.sleep(0.3)


def clone_creates(thread) -> list[str]:
    """Names of the DataVolumes created through the API so far (the cluster's request log)."""
    return [r.body["metadata"]["name"] for r in thread.cluster.requests.records
            if r.method == "POST" and r.path.endswith("/datavolumes") and r.status == 201]


def other(name: str) -> VMIdentity:
    return VMIdentity.for_workspace(namespace=NS, user_name=name, kubespawner_username=name, base_name=f"vm-{name}", home_pvc="")


async def test_the_keeper_fills_the_pool_with_disks_of_nobody(kube, audit_log):
    await workspace(kube).watch()
    keeper = keeper_for(kube, audit_log, count=2)
    disks = await until_ready(keeper, 2)
    for dv in disks:
        meta = dv["metadata"]
        assert names.owner_name(meta) is None and names.OWNER_LABEL not in meta["labels"]
        assert meta["annotations"][names.GOLDEN_IMAGE_ANNOTATION] == f"{GOLDEN_NS}/ubuntu-2404"
        assert stored(kube, PVCS, meta["name"]) is not None  # cloned: CDI filled its PVC
    assert user_disk_bytes([stored(kube, PVCS, d["metadata"]["name"]) for d in disks], disks, USER) == {}
    purge = await Purger(keeper.kube, NS, audit=audit_log).purge(now=keeper_now_plus_years())
    assert purge.purge == [] and len(await pool_disks(keeper)) == 2  # never purged while unassigned
    records = audit_log.query(action="create")
    assert sorted(r.disk for r in records) == sorted(d["metadata"]["name"] for d in disks)
    assert {r.result for r in records} == {"ok: pool disk"} and {r.user for r in records} == {""}
    await keeper.refill()
    assert len(await pool_disks(keeper)) == 2  # full: nothing more


def keeper_now_plus_years():
    from workspacespawner.lifecycle.phases import utcnow

    return utcnow().replace(year=utcnow().year + 5)


async def test_a_first_start_takes_a_pool_disk_instead_of_cloning_and_the_pool_refills(kube, audit_log):
    thread = kube[0]
    ws = workspace(kube)
    await ws.watch()
    keeper = keeper_for(kube, audit_log, count=2)
    oldest = sorted(await until_ready(keeper, 2), key=lambda d: (d["metadata"]["creationTimestamp"], d["metadata"]["name"]))[0]
    name = oldest["metadata"]["name"]
    before = clone_creates(thread)
    told = []
    ws.pool, ws.on_root_disk = keeper, told.append
    steps = []

    url = await ws.start(env=hub_env("t1"), command=COMMAND, recorded=Status(Phase.STOPPED, server=""),
                         progress=lambda m, milestone=None, *, part=1.0: steps.append(m))

    assert told == [name] and ws.ident.root_disk == name
    assert clone_creates(thread) == before  # no clone of its own: the start made no DataVolume
    assert stored(kube, DATA_VOLUMES, identity().root_disk) is None
    assert root_disk_of(stored(kube, VMS, ws.ident.vm)) == name
    assert any("prepared from the system image ubuntu-2404" in m for m in steps)
    assert not any("Copying the system image" in m for m in steps), steps
    assert (await fetch(url))["boots"] == 1  # the guest booted the pool disk's system
    dv = stored(kube, DATA_VOLUMES, name)
    assert names.owned_by(dv["metadata"], USER) and dv["metadata"]["labels"][names.DISK_LABEL] == names.ROOT_DISK
    assert dv["metadata"]["annotations"][names.ROOT_SLOT_ANNOTATION] == ws.ident.vm
    [claim] = audit_log.query(action="claim")
    assert (claim.user, claim.disk, claim.result) == (USER, name, "ok")
    assert claim.after == {"root_disk": name, "vm": ws.ident.vm}
    left = await until_ready(keeper, 2)  # refilled
    assert name not in [d["metadata"]["name"] for d in left]

    assert await ws.stop() is True
    again = workspace(kube)  # a later start (a restarted hub): the VM names its disk
    vm, datavolumes = cached_vm_and_disks(again.ident)
    assert current_root_disk(again.ident, vm, datavolumes) == name


async def test_with_the_pool_empty_the_start_clones(kube, audit_log):
    thread = kube[0]
    ws = workspace(kube)
    await ws.watch()
    ws.pool = keeper_for(kube, audit_log, count=0)
    await ws.start(env=hub_env("t1"), command=COMMAND)
    assert ws.ident.root_disk == identity().root_disk
    assert identity().root_disk in clone_creates(thread)
    assert audit_log.query(action="claim") == []
    await ws.stop()


async def test_concurrent_claims_never_share_a_disk(kube, audit_log):
    await workspace(kube).watch()
    keeper = keeper_for(kube, audit_log, count=3)
    ready = {d["metadata"]["name"] for d in await until_ready(keeper, 3)}
    settings = workspace(kube).settings
    claimants = [other(f"user{i}") for i in range(7)]
    results = await asyncio.gather(*(keeper.claim(ident, settings, recorded=None, annotations={}) for ident in claimants))
    won = [r["metadata"]["name"] for r in results if r is not None]
    assert sorted(won) == sorted(ready)  # each disk once, and only ready pool disks
    for ident, result in zip(claimants, results, strict=True):
        if result is not None:
            assert names.owned_by(stored(kube, DATA_VOLUMES, result["metadata"]["name"])["metadata"], ident.user_name)
    assert len(audit_log.query(action="claim")) == 3


async def test_a_claim_the_hub_did_not_finish_is_found_by_its_slot(kube, audit_log):
    ws = workspace(kube)
    await ws.watch()
    keeper = keeper_for(kube, audit_log, count=1)
    await until_ready(keeper, 1)
    claimed = await keeper.claim(ws.ident, ws.settings, recorded=Status(Phase.STOPPED, server=""), annotations={})
    name = claimed["metadata"]["name"]
    # the hub died here: no VM was made. The next start resolves its root disk from the caches.
    await asyncio.sleep(0.5)
    vm, datavolumes = cached_vm_and_disks(ws.ident)
    assert vm is None and current_root_disk(ws.ident, vm, datavolumes) == name
    again = workspace(kube, ident=dataclasses.replace(ws.ident, root_disk=name))
    again.pool = keeper
    await again.start(env=hub_env("t2"), command=COMMAND)
    assert root_disk_of(stored(kube, VMS, ws.ident.vm)) == name
    assert len(audit_log.query(action="claim")) == 1  # no second claim
    assert stored(kube, DATA_VOLUMES, ws.ident.root_disk) is None  # and no clone
    await again.stop()


async def test_a_new_golden_image_retires_the_old_pool_disks_but_never_a_claimed_one(kube, audit_log):
    thread = kube[0]
    ws = workspace(kube)
    await ws.watch()
    keeper = keeper_for(kube, audit_log, count=2)
    first = {d["metadata"]["name"] for d in await until_ready(keeper, 2)}
    claimed = (await keeper.claim(ws.ident, ws.settings, recorded=None, annotations={}))["metadata"]["name"]
    # the admin refreshes the golden image in place: the DataSource now points at a new PVC
    await thread.acall(partial(make_golden_image, size="1Gi"), GOLDEN_NS, "ubuntu-2404-v2", {**GOLDEN_FILES, "etc/motd": "v2\n"})

    await repoint_datasource(kube, "ubuntu-2404", "ubuntu-2404-v2")
    fresh = {d["metadata"]["name"] for d in await until_ready(keeper, 2)}
    assert not fresh & first
    assert stored(kube, DATA_VOLUMES, claimed) is not None  # the user's disk stays
    retired = audit_log.query(action="delete")
    assert {r.disk for r in retired} == first - {claimed} and {r.result for r in retired} == {"ok: pool disk retired"}
    for name in fresh:
        assert (thread.call(lambda c, n=name: claim_file(c, n)) or "") == "v2\n"
    assert violations(thread.cluster) == []  # retiring nobody's pool disks deletes no one's disk
    _t, custom_api, _c = kube
    group, version, plural = DATA_VOLUMES
    await custom_api.delete_namespaced_custom_object(group, version, NS, plural, claimed)
    assert violations(thread.cluster) == [f"datavolumes {NS}/{claimed} was deleted outside a purge"]  # a claimed one is the user's


async def repoint_datasource(kube, name: str, pvc: str) -> None:
    """Point DataSource ``name`` at PVC ``pvc`` (what an admin does to refresh an unversioned golden image)."""
    _thread, custom_api, _core = kube
    group, version, plural = DATA_SOURCES
    await custom_api.patch_namespaced_custom_object(
        group, version, GOLDEN_NS, plural, name, [{"op": "replace", "path": "/spec/source", "value": {"pvc": {"namespace": GOLDEN_NS, "name": pvc}}}],
    )


def claim_file(cluster, name: str) -> str | None:
    """The root disk ``name``'s ``/etc/motd``, as its volume holds it (None: none)."""
    from localcluster.volumes import claim_path

    root = claim_path(cluster, NS, name)
    motd = root / "etc" / "motd" if root is not None else None
    return motd.read_text() if motd is not None and motd.exists() else None


@pytest.mark.parametrize("meanwhile", ["clone progress", "claim"])
async def test_a_stale_pool_disk_that_changed_since_the_look_is_retired_unless_claimed(kube, audit_log, meanwhile):
    """CDI writes a cloning disk's status while the keeper looks: its DELETE's ``resourceVersion`` precondition then
    answers 409. A disk that is still nobody's is read again and retired in the same look; a claimed one stays."""
    thread, custom_api, _core = kube
    ws = workspace(kube)
    await ws.watch()
    keeper = keeper_for(kube, audit_log, count=1)
    [old] = await until_ready(keeper, 1)
    name = old["metadata"]["name"]
    await thread.acall(partial(make_golden_image, size="1Gi"), GOLDEN_NS, "ubuntu-2404-v2", {**GOLDEN_FILES, "etc/motd": "v2\n"})
    await repoint_datasource(kube, "ubuntu-2404", "ubuntu-2404-v2")
    listed = keeper.kube.list

    async def list_then_change(*args, **kwargs):
        disks = await listed(*args, **kwargs)
        if any(d["metadata"]["name"] == name for d in disks):
            keeper.kube.list = listed
            if meanwhile == "claim":
                fresh = next(d for d in await listed(*args, fresh=True, **kwargs) if d["metadata"]["name"] == name)
                await keeper.kube.patch(DATA_VOLUME, NS, name, claim_operations(fresh, ws.ident, recorded=None, annotations={}))
            else:
                group, version, plural = DATA_VOLUMES
                await custom_api.patch_namespaced_custom_object(
                    group, version, NS, plural, name,
                    [{"op": "add", "path": "/metadata/annotations/example.test~1progress", "value": "50.0%"}])
        return disks

    keeper.kube.list = list_then_change
    await keeper.refill()
    left = [d["metadata"]["name"] for d in await pool_disks(keeper) if not d["metadata"].get("deletionTimestamp")]
    assert name not in left
    if meanwhile == "claim":
        assert stored(kube, DATA_VOLUMES, name) is not None and audit_log.query(action="delete") == []
    else:
        assert [r.disk for r in audit_log.query(action="delete")] == [name]


async def test_a_pool_disk_that_cdi_wrote_after_the_list_is_still_claimed(kube, audit_log):
    """CDI's own controller writes a DataVolume for a while after its clone succeeded (its populator's annotations),
    so the version a start listed may be stale while the disk is still in the pool: the start reads it again and
    claims it at its new version, instead of passing it over as taken and cloning (found on the real plane)."""
    _thread, custom_api, _core = kube
    await workspace(kube).watch()
    keeper = keeper_for(kube, audit_log, count=1)
    [ready] = await until_ready(keeper, 1)
    name = ready["metadata"]["name"]
    listed = keeper.kube.list

    async def list_then_cdi_writes(*args, **kwargs):
        disks = await listed(*args, **kwargs)
        group, version, plural = DATA_VOLUMES
        await custom_api.patch_namespaced_custom_object(group, version, NS, plural, name, [
            {"op": "add", "path": "/metadata/annotations/cdi.kubevirt.io~1storage.usePopulator", "value": "true"}])
        return disks

    keeper.kube.list = list_then_cdi_writes
    claimed = await keeper.claim(other("cleo"), workspace(kube).settings, recorded=None, annotations={})
    assert claimed is not None and claimed["metadata"]["name"] == name
    assert names.owned_by(stored(kube, DATA_VOLUMES, name)["metadata"], "cleo")
