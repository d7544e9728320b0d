"""The lifecycle against the local cluster: where the phase is kept, and what a restarted hub derives.

Covers: a move written as the phase label and the lifecycle annotation on
the home PVC, DataVolume and VM through a JSON Patch that tests the owner
(a foreign PVC of the same name is left untouched; a stale ``expect`` is
refused atomically); and, for each phase, a hub restarted with stale spawner
state (it thinks the workspace is Running, or remembers nothing) deriving
the phase from what the cluster holds (nothing: Requested, or Degraded
``disk-missing`` if the hub remembers a workspace; a root disk being cloned; a
home at rest; a Pod that cannot be placed; a Pod running; a Pod shutting
down; a Pod on a node that stopped responding; a Retained home; a disk being
deleted) and recording it on the objects for admins.
"""

from __future__ import annotations

import json

import pytest

from tests.support.lifecycleenv import (
    NS,
    kind_for,
    make_home,
    make_root_and_vm,
    phase_label,
    pod_manifest,
    start_pod,
    wait_async,
)
from workspacespawner.core import names
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VIRTUAL_MACHINE
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef

USER = "Rae.Start@school.example"
HOME = "home-rae"
CONTAINER = WorkspaceRef(namespace=NS, user_name=USER, home_pvc=HOME, pod="jupyter-rae")
VM = WorkspaceRef(namespace=NS, user_name=USER, server_name="vm", home_pvc=HOME, root_disk="ws-rae-vm-root", vm="ws-rae-vm")
STALE = Status(Phase.RUNNING)

def annotation(obj: dict) -> dict:
    return json.loads(obj["metadata"]["annotations"][names.LIFECYCLE_ANNOTATION])


async def test_move_records_phase_on_every_persistent_object(kube_objects, cluster_thread):
    await make_home(kube_objects, USER, HOME)
    await make_root_and_vm(kube_objects, cluster_thread, USER, VM.vm)
    new = await phases.move(kube_objects, VM, Status(Phase.STOPPED), Phase.RETAINED, retain_until=phases.utcnow())
    for kind, name in ((PVC, HOME), (DATA_VOLUME, VM.root_disk), (VIRTUAL_MACHINE, VM.vm)):
        obj = await kube_objects.get(kind, NS, name)
        assert obj["metadata"]["labels"][names.PHASE_LABEL] == "Retained"
        assert Status.from_state(annotation(obj)) == new
        assert annotation(obj)["server"] == "vm"


async def test_foreign_pvc_is_never_written(kube_objects):
    await kube_objects.create(PVC, NS, {
        "metadata": {"name": HOME},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
    await phases.move(kube_objects, CONTAINER, Status(Phase.REQUESTED), Phase.PROVISIONING_DISK)
    foreign = await kube_objects.get(PVC, NS, HOME)
    assert not (foreign["metadata"].get("labels") or {}) and names.LIFECYCLE_ANNOTATION not in (foreign["metadata"].get("annotations") or {})


async def test_expect_refuses_a_changed_phase(kube_objects):
    await make_home(kube_objects, USER, HOME)
    retained = await phases.move(kube_objects, CONTAINER, Status(Phase.STOPPED), Phase.RETAINED, retain_until=phases.utcnow())
    await phases.move(kube_objects, CONTAINER, retained, Phase.STOPPED)  # reclaimed meanwhile
    with pytest.raises(NotOurs):
        await phases.move(kube_objects, CONTAINER, retained, Phase.DELETING_DISK, expect=Phase.RETAINED)
    assert await phase_label(kube_objects, HOME) == "Stopped"


# -- a restarted hub, in each phase --------------------------------------------------------------


def _ready(kube):
    async def ready():
        pod = await kube.get(POD, NS, "jupyter-rae")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])

    return ready


async def nothing(kube, cluster_thread):
    return CONTAINER


async def cloning(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    await make_root_and_vm(kube, cluster_thread, USER, VM.vm, clone_seconds=120)
    return VM


async def at_rest(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    return CONTAINER


async def unplaceable(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    manifest = pod_manifest(USER, "jupyter-rae", HOME)
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "16"}}
    await kube.create(POD, NS, manifest)
    return CONTAINER


async def running(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    await start_pod(kube, USER, "jupyter-rae", HOME)
    await wait_async(_ready(kube))
    return CONTAINER


async def shutting_down(kube, cluster_thread):
    cluster_thread.call(lambda cl: setattr(cl.controllers["nodeagent"], "max_grace_seconds", 300))
    await make_home(kube, USER, HOME)
    await start_pod(kube, USER, "jupyter-rae", HOME, grace=120, stubborn=True)
    await kube.delete(POD, NS, "jupyter-rae")
    return CONTAINER


async def node_lost(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    pod = await start_pod(kube, USER, "jupyter-rae", HOME)
    cluster_thread.call(lambda cl: cl.controllers["scheduler"].set_node_ready(pod["spec"]["nodeName"], False))
    return CONTAINER


async def retained(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    await phases.move(kube, CONTAINER, Status(Phase.STOPPED), Phase.RETAINED, retain_until=phases.utcnow())
    return CONTAINER


async def deleting(kube, cluster_thread):
    await make_home(kube, USER, HOME)
    await kube.patch(PVC, NS, HOME, [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}])
    await kube.delete(PVC, NS, HOME)
    return CONTAINER


RESTARTS = [
    (nothing, Phase.REQUESTED),
    (cloning, Phase.PROVISIONING_DISK),
    (at_rest, Phase.STOPPED),
    (unplaceable, Phase.STARTING),
    (running, Phase.RUNNING),
    (shutting_down, Phase.STOPPING),
    (node_lost, Phase.DEGRADED),
    (retained, Phase.RETAINED),
    (deleting, Phase.DELETING_DISK),
]


@pytest.mark.parametrize("saved", [STALE, None], ids=["state-says-running", "no-state"])
@pytest.mark.parametrize("build, expected", RESTARTS, ids=[b.__name__ for b, _p in RESTARTS])
async def test_restarted_hub_derives_the_phase(kube_objects, cluster_thread, build, expected, saved):
    ref = await build(kube_objects, cluster_thread)
    derived = await phases.reconcile(kube_objects, ref, kind_for(ref), saved)
    if build is nothing:  # no object to record on; a hub that remembers a workspace whose disks vanished says so
        assert (derived.phase, derived.reason) == ((Phase.REQUESTED, "") if saved is None else (Phase.DEGRADED, "disk-missing"))
        return
    assert derived.phase == expected, derived
    if expected == Phase.DEGRADED:
        assert derived.reason == "node-unreachable" and "fence" in derived.message
    home = await kube_objects.get(PVC, NS, HOME)
    again = await phases.reconcile(kube_objects, ref, kind_for(ref), None)  # a second restart agrees
    assert again.phase == expected
    if expected in (Phase.STARTING, Phase.RUNNING, Phase.STOPPING):  # the compute shows it: never written
        assert (home["metadata"].get("labels") or {}).get(names.PHASE_LABEL) not in ("Starting", "Running", "Stopping")
        return
    assert home["metadata"]["labels"][names.PHASE_LABEL] == str(expected)
    assert Status.from_object(home).phase == expected
    assert again.since == Status.from_object(home).since  # and keeps the record's time
