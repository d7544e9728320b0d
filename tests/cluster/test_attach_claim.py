"""The attach claim (:mod:`workspacespawner.lifecycle.attach`) on the local cluster, without a hub.

Covers: two servers of one user sharing a home claiming it at the same
moment: exactly one holds it, the other is refused (409 ``disk-attached``)
naming the holder; a claim whose holder's Pod runs refuses others and is
taken again by its own server; a fresh claim with no compute yet refuses
(a start under way), an old one is stale and taken over (a hub that
crashed); a release removes only a claim that is still ours; the tracker
keeps the claim while its Pod runs and releases it once the Pod is gone;
the admin's disk listing shows the holder; the invariants hold throughout.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from tests.support.invariants import assert_invariants, violations
from tests.support.lifecycleenv import NS, make_home, start_pod, wait_async
from workspacespawner.backends.container.podstatus import ContainerStatus
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import POD, PVC
from workspacespawner.lifecycle import attach
from workspacespawner.lifecycle.disks import DiskOps
from workspacespawner.lifecycle.phases import WorkspaceRef, rfc3339, utcnow
from workspacespawner.lifecycle.tracker import LifecycleSettings, WorkspaceLifecycle

USER = "Cleo.Claim@school.example"
HOME = "home-cleo"
DEFAULT = WorkspaceRef(namespace=NS, user_name=USER, home_pvc=HOME, pod="jupyter-cleo")
GPU = WorkspaceRef(namespace=NS, user_name=USER, server_name="gpu", home_pvc=HOME, pod="jupyter-cleo--gpu")


async def holder(kube) -> attach.Holder | None:
    return attach.holder_of(await kube.get(PVC, NS, HOME))


async def test_two_servers_claiming_one_home_at_once_one_wins(kube_objects, cluster):
    await make_home(kube_objects, USER, HOME)
    results = await asyncio.gather(*(attach.claim(kube_objects, ref, grace=60) for ref in (DEFAULT, GPU)), return_exceptions=True)
    won = [ref for ref, result in zip((DEFAULT, GPU), results, strict=True) if result == [HOME]]
    lost = [result for result in results if isinstance(result, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], WorkspaceError)
    assert (lost[0].reason, lost[0].status_code) == ("disk-attached", 409)
    assert f"server {won[0].label()}" in lost[0].message and HOME in lost[0].message
    assert (await holder(kube_objects)).server == won[0].label()
    other = GPU if won[0] is DEFAULT else DEFAULT
    assert await attach.release(kube_objects, other) == []  # not its claim: left alone
    assert (await holder(kube_objects)).server == won[0].label()
    assert await attach.release(kube_objects, won[0]) == [HOME]
    assert await holder(kube_objects) is None
    assert await attach.claim(kube_objects, other, grace=60) == [HOME]
    assert_invariants(cluster)


async def test_a_running_holder_refuses_others_and_its_own_server_claims_again(kube_objects, cluster):
    await make_home(kube_objects, USER, HOME)
    assert await attach.claim(kube_objects, GPU, grace=60) == [HOME]
    await start_pod(kube_objects, USER, GPU.pod, HOME)
    old = await holder(kube_objects)
    with pytest.raises(WorkspaceError) as refused:
        await attach.claim(kube_objects, DEFAULT, grace=0)  # even with no grace: its Pod runs
    assert "Cleo.Claim@school.example/gpu (Pod jupyter-cleo--gpu) is using it" in refused.value.message
    assert await attach.claim(kube_objects, GPU, grace=60) == [HOME]  # a new start of the same server
    assert (await holder(kube_objects)).server == old.server
    (row,) = await DiskOps(kube_objects, NS).listing(USER)  # what `workspacespawner disk list` shows the admin
    assert row["used_by"] == GPU.pod
    assert row["claimed_by"].startswith(f"{GPU.label()} (Pod {GPU.pod}) since ")
    assert_invariants(cluster)


async def claim_left_behind(kube, since) -> None:
    """A claim of server ``gpu`` whose hub crashed before it created its Pod."""
    value = attach.Holder(GPU.label(), POD.kind, GPU.pod, since).to_json()
    await kube.patch(PVC, NS, HOME, [{"op": "add", "path": f"/metadata/annotations/{names.ATTACH_ANNOTATION.replace('/', '~1')}", "value": value}])


async def test_a_fresh_claim_without_compute_refuses_an_old_one_is_stale(kube_objects):
    await make_home(kube_objects, USER, HOME)
    await claim_left_behind(kube_objects, utcnow())
    with pytest.raises(WorkspaceError) as refused:
        await attach.claim(kube_objects, DEFAULT, grace=300)
    assert "is starting on it" in refused.value.message
    await claim_left_behind(kube_objects, utcnow() - timedelta(seconds=600))
    assert await attach.claim(kube_objects, DEFAULT, grace=300) == [HOME]
    recorded = json.loads((await kube_objects.get(PVC, NS, HOME))["metadata"]["annotations"][names.ATTACH_ANNOTATION])
    assert recorded["server"] == USER and recorded["kind"] == "Pod" and recorded["name"] == DEFAULT.pod
    assert recorded["since"] is not None and recorded["since"] <= rfc3339(utcnow())


async def test_an_operation_holds_a_disk_a_controller_wrote_meanwhile_but_not_one_a_start_claimed(kube_objects):
    # CDI writes a cloning DataVolume's status many times (its progress), the PV controller a PVC's: a rebuild
    # reusing its new disk read one version and met the next. Only a start's claim (or phase) may refuse it.
    await make_home(kube_objects, USER, HOME)
    rebuild = attach.operation_holder(DEFAULT, "rebuild", "root", utcnow())
    read = await kube_objects.get(PVC, NS, HOME, fresh=True)
    await kube_objects.patch(PVC, NS, HOME, [{"op": "add", "path": "/metadata/annotations/progress", "value": "45%"}])
    held = await attach.hold(kube_objects, PVC, NS, USER, read, rebuild)
    assert attach.holder_of(held).server == rebuild.server and held["metadata"]["annotations"]["progress"] == "45%"
    assert await attach.let_go(kube_objects, PVC, NS, USER, HOME, rebuild.server, fresh=True)

    read = await kube_objects.get(PVC, NS, HOME, fresh=True)
    assert await attach.claim(kube_objects, GPU, grace=60) == [HOME]  # a start got in between
    with pytest.raises(NotOurs):
        await attach.hold(kube_objects, PVC, NS, USER, read, rebuild)
    assert (await holder(kube_objects)).server == GPU.label()

    await kube_objects.delete(PVC, NS, HOME)  # gone meanwhile: the operation has nothing to hold
    with pytest.raises(ValueError, match="is gone"):
        await attach.hold(kube_objects, PVC, NS, USER, read, rebuild)


async def test_tracker_keeps_the_claim_while_its_pod_runs_and_releases_it_once_gone(kube_objects, cluster):
    await make_home(kube_objects, USER, HOME)
    lifecycle = WorkspaceLifecycle(kube=kube_objects, audit=None, kind=ContainerStatus(), settings=LifecycleSettings(), label="cleo")
    await lifecycle.claim_disks(GPU)
    pod = await start_pod(kube_objects, USER, GPU.pod, HOME)
    await lifecycle.stopped(GPU)
    assert (await holder(kube_objects)).server == GPU.label()  # its Pod still runs
    await kube_objects.delete(POD, NS, GPU.pod, uid=pod["metadata"]["uid"])
    await wait_async(lambda: _gone(kube_objects, GPU.pod))
    await lifecycle.stopped(GPU)
    assert await holder(kube_objects) is None
    await lifecycle.start_failed(DEFAULT, RuntimeError("nothing claimed"))  # never raises, changes nothing
    assert await holder(kube_objects) is None
    assert_invariants(cluster)


async def _gone(kube, name: str) -> bool:
    return await kube.get(POD, NS, name) is None


async def test_invariants_see_a_disk_deleted_outside_a_purge(kube_objects, cluster):
    await make_home(kube_objects, USER, HOME)
    assert violations(cluster) == []
    await kube_objects.delete(PVC, NS, HOME)
    assert violations(cluster) == [f"persistentvolumeclaims {NS}/{HOME} was deleted outside a purge"]
    assert_invariants(cluster, purged={HOME})


async def test_invariants_see_two_pods_share_a_readwriteonce_home_on_one_node(kube_objects, cluster):
    """Kubernetes lets two Pods on one node mount a ReadWriteOnce claim; the workspace's invariant does not."""
    await make_home(kube_objects, USER, HOME)
    first = await start_pod(kube_objects, USER, "sharer-first", HOME)
    await start_pod(kube_objects, USER, "sharer-second", HOME, node=first["spec"]["nodeName"])
    (found,) = violations(cluster)
    assert f"claim {NS}/{HOME} (ReadWriteOnce) was used by Pod" in found and "at once" in found
    assert violations(cluster, shared={HOME}) == []
    for name in ("sharer-first", "sharer-second"):
        await kube_objects.delete(POD, NS, name)
