"""The lifecycle's rules, without a cluster (:mod:`workspacespawner.lifecycle.phases`).

Covers: every one of the 81 (before, after) pairs of phases, allowed or
forbidden, against the table written here from the design (an illegal move
raises IllegalTransition before anything is written; an allowed one patches
each persistent object once, behind the owner tests, and returns the new
status); the audit action of each move; the status as it round-trips through
state and annotations; ``derive_phase`` for every phase a cluster can show,
containers and VMs, including a node that is not Ready (under the
workspace's own Pod or a leftover one holding its disk) and a recorded
Retained that stays.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest

from workspacespawner.backends.container.podstatus import ContainerStatus
from workspacespawner.backends.vm.vmstatus import VMKindStatus
from workspacespawner.core import names
from workspacespawner.k8s.api import NotOurs
from workspacespawner.lifecycle.phases import (
    IllegalTransition,
    Observed,
    Phase,
    Status,
    WorkspaceRef,
    allowed,
    audit_action,
    derive_phase,
    move,
)
from workspacespawner.lifecycle.stopreasons import StopReasons

P = Phase
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

#: Phases the Pod or VMI shows, never written (issue #15: persist only what the cluster cannot show).
SHOWN_BY_COMPUTE = {P.STARTING, P.RUNNING, P.STOPPING}

#: The design's moves (DESIGN.md "lifecycle phase", issue 6), written out independently of the module's table.
ALLOWED = {
    (P.REQUESTED, P.PROVISIONING_DISK), (P.REQUESTED, P.DEGRADED),
    (P.PROVISIONING_DISK, P.STOPPED), (P.PROVISIONING_DISK, P.RETAINED), (P.PROVISIONING_DISK, P.DEGRADED),
    (P.STOPPED, P.STARTING), (P.STOPPED, P.PROVISIONING_DISK), (P.STOPPED, P.RETAINED), (P.STOPPED, P.DEGRADED),
    (P.STARTING, P.RUNNING), (P.STARTING, P.STOPPING), (P.STARTING, P.STOPPED), (P.STARTING, P.DEGRADED),
    (P.RUNNING, P.STOPPING), (P.RUNNING, P.STOPPED), (P.RUNNING, P.DEGRADED),
    (P.STOPPING, P.STOPPED), (P.STOPPING, P.DEGRADED),
    (P.RETAINED, P.STOPPED), (P.RETAINED, P.DELETING_DISK),
    (P.DEGRADED, P.STOPPED), (P.DEGRADED, P.STARTING), (P.DEGRADED, P.STOPPING), (P.DEGRADED, P.RETAINED),
}
PAIRS = list(itertools.product(Phase, Phase))
REF = WorkspaceRef(namespace="ns", user_name="Ann@school", server_name="gpu", home_pvc="home-ann", root_disk="ws-ann-root", vm="ws-ann")


class FakeKube:
    """Records the guarded patches a move sends; every object exists and is ours."""

    def __init__(self, *, refuse: set[str] = frozenset(), cached: dict | None = None):
        self.patches: list[tuple[str, str, list]] = []
        self.refuse = refuse
        self.cached = cached  # name -> object (None: known absent) a watch cache holds; None: no cache at all

    def peek(self, kind, namespace, name):
        if self.cached is None or name not in self.cached:
            return False, None
        return True, self.cached[name]

    async def patch_owned(self, kind, namespace, name, user_name, operations):
        if name in self.refuse:
            raise NotOurs(name)
        self.patches.append((kind.kind, name, operations))
        return {"metadata": {"name": name}}


class FakeAudit:
    def __init__(self):
        self.records: list[dict] = []

    async def arecord(self, **fields):
        self.records.append(fields)


def status(phase: Phase) -> Status:
    if phase == P.DEGRADED:
        return Status(phase, "node-unreachable", "a message", since=NOW)
    return Status(phase, since=NOW, retain_until=NOW + timedelta(days=30) if phase == P.RETAINED else None)


@pytest.mark.parametrize("before, after", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
async def test_every_transition(before, after):
    kube, audit = FakeKube(), FakeAudit()
    kwargs = {"reason": "root-disk", "message": "clone failed"} if after == P.DEGRADED else {}
    if after == P.RETAINED:
        kwargs["retain_until"] = NOW + timedelta(days=7)
    expected = before == after or (before, after) in ALLOWED
    assert allowed(before, after) is expected
    if not expected:
        with pytest.raises(IllegalTransition):
            await move(kube, REF, status(before), after, audit=audit, now=NOW, **kwargs)
        assert kube.patches == [] and audit.records == []
        return
    new = await move(kube, REF, status(before), after, audit=audit, now=NOW, **kwargs)
    assert new.phase == after
    if status(before).same(new) or after in SHOWN_BY_COMPUTE:
        assert kube.patches == [] and audit.records == []  # idempotent, or shown by the compute: nothing to write
        return
    assert [(kind, name) for kind, name, _ops in kube.patches] == [
        ("PersistentVolumeClaim", "home-ann"), ("DataVolume", "ws-ann-root"), ("VirtualMachine", "ws-ann"),
    ]
    for _kind, _name, operations in kube.patches:
        label, annotation = operations
        assert label == {"op": "add", "path": "/metadata/labels/workspacespawner.io~1phase", "value": str(after)}
        assert Status.from_state(json.loads(annotation["value"])) == new
    action = audit_action(before, after)
    assert [(r["action"], r["disk"]) for r in audit.records] == ([(action, "home-ann"), (action, "ws-ann-root")] if action else [])


def test_audit_actions():
    assert audit_action(P.STOPPED, P.RETAINED) == "retain"
    assert audit_action(P.DEGRADED, P.RETAINED) == "retain"
    assert audit_action(P.RETAINED, P.STOPPED) == "reclaim"
    assert audit_action(P.RETAINED, P.DELETING_DISK) == "purge"
    assert audit_action(P.PROVISIONING_DISK, P.STOPPED) == "create"
    assert audit_action(P.STOPPED, P.STARTING) is None
    assert audit_action(P.RETAINED, P.RETAINED) is None


async def test_degraded_needs_a_reason():
    with pytest.raises(ValueError):
        await move(FakeKube(), REF, status(P.RUNNING), P.DEGRADED)


async def test_move_skips_a_foreign_object_unless_it_must_hold():
    kube = FakeKube(refuse={"home-ann"})
    new = await move(kube, REF, status(P.DEGRADED), P.STOPPED, now=NOW)
    assert new.phase == P.STOPPED and [name for _k, name, _o in kube.patches] == ["ws-ann-root", "ws-ann"]
    with pytest.raises(NotOurs):
        await move(FakeKube(refuse={"home-ann"}), REF, status(P.RETAINED), P.DELETING_DISK, expect=P.RETAINED, now=NOW)


async def test_expect_adds_a_test_of_the_recorded_phase():
    kube = FakeKube()
    await move(kube, WorkspaceRef(namespace="ns", user_name="ann", home_pvc="home-ann"), status(P.RETAINED), P.DELETING_DISK,
               expect=P.RETAINED, now=NOW)
    [(_kind, _name, operations)] = kube.patches
    assert operations[0] == {"op": "test", "path": "/metadata/labels/workspacespawner.io~1phase", "value": "Retained"}


async def test_observed_move_writes_even_the_same_phase():
    kube = FakeKube()
    await move(kube, REF, status(P.STOPPED), P.STOPPED, observed=True, now=NOW)
    assert len(kube.patches) == 3


def test_status_round_trips():
    for phase in Phase:
        original = status(phase)
        assert Status.from_state(json.loads(json.dumps(original.to_state()))) == original
    obj = {"metadata": {"annotations": {names.LIFECYCLE_ANNOTATION: json.dumps(status(P.RETAINED).to_state())}}}
    assert Status.from_object(obj) == status(P.RETAINED)
    for bad in ("{", json.dumps({"phase": "Sleeping"}), json.dumps(["Stopped"])):
        assert Status.from_object({"metadata": {"annotations": {names.LIFECYCLE_ANNOTATION: bad}}}) is None
    assert Status.from_object({"metadata": {}}) is None


# -- derive_phase ------------------------------------------------------------------------------


def pvc(phase="Bound", deleting=False) -> dict:
    meta = {"name": "home-ann"}
    if deleting:
        meta["deletionTimestamp"] = "2025-06-01T11:00:00Z"
    return {"kind": "PersistentVolumeClaim", "metadata": meta, "status": {"phase": phase}}


def compute(kind: str, name: str, phase="Running", *, ready=True, node="node-a", deleting=False) -> dict:
    """A Pod (node in ``spec``) or VMI (node in ``status``) as the cluster shows it."""
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2025-06-01T11:00:00Z"
    status_ = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    obj = {"kind": kind, "metadata": meta, "spec": {}, "status": status_}
    if node:
        (obj["spec"] if kind == "Pod" else status_)["nodeName"] = node
    return obj


def pod(phase="Running", **kwargs) -> dict:
    return compute("Pod", "jupyter-ann", phase, **kwargs)


def vmi(phase="Running", **kwargs) -> dict:
    return compute("VirtualMachineInstance", "ws-ann", phase, **kwargs)


def dv(phase="Succeeded", progress=None) -> dict:
    status_ = {"phase": phase}
    if progress:
        status_["progress"] = progress
    if phase == "Failed":
        status_["conditions"] = [{"type": "Running", "status": "False", "message": "source image unreadable"}]
    return {"kind": "DataVolume", "metadata": {"name": "ws-ann-root"}, "status": status_}


def vm(run="Halted", printable="Stopped") -> dict:
    return {"kind": "VirtualMachine", "metadata": {"name": "ws-ann"}, "spec": {"runStrategy": run}, "status": {"printableStatus": printable}}


RETAINED = Status(P.RETAINED, since=NOW, retain_until=NOW + timedelta(days=30))

DERIVE_CASES = {
    "nothing: requested": (Observed(), P.REQUESTED),
    "disks recorded, now gone": (Observed(recorded=Status(P.STOPPED)), P.DEGRADED),
    "home, no pod: stopped": (Observed(home=pvc(), saved=Status(P.RUNNING)), P.STOPPED),
    "home pending (WaitForFirstConsumer): stopped": (Observed(home=pvc("Pending")), P.STOPPED),
    "pod pending: starting": (Observed(home=pvc(), pod=pod("Pending", ready=False, node=None)), P.STARTING),
    "pod running, not ready: starting": (Observed(home=pvc(), pod=pod(ready=False), node_ready={"node-a": True}), P.STARTING),
    "pod running and ready: running": (Observed(home=pvc(), pod=pod(), node_ready={"node-a": True}), P.RUNNING),
    "pod terminating: stopping": (Observed(home=pvc(), pod=pod(deleting=True), node_ready={"node-a": True}), P.STOPPING),
    "pod finished: stopped": (Observed(home=pvc(), pod=pod("Succeeded")), P.STOPPED),
    "pod on a lost node: degraded": (Observed(home=pvc(), pod=pod(), node_ready={"node-a": False}), P.DEGRADED),
    "pod, node unknown: running": (Observed(home=pvc(), pod=pod(), node_ready={"node-a": None}), P.RUNNING),
    "user's leftover pod on a lost node: degraded": (Observed(home=pvc(), holders=(compute("Pod", "jupyter-ann-old"),),
                                                              node_ready={"node-a": False}), P.DEGRADED),
    "another server holds the home: this one is stopped": (Observed(home=pvc(), holders=(compute("Pod", "jupyter-ann--gpu"),),
                                                                    node_ready={"node-a": True}), P.STOPPED),
    "recorded retained stays": (Observed(home=pvc(), recorded=RETAINED), P.RETAINED),
    "retained but a pod runs: running": (Observed(home=pvc(), recorded=RETAINED, pod=pod(), node_ready={"node-a": True}), P.RUNNING),
    "disk being deleted": (Observed(home=pvc(deleting=True), recorded=RETAINED), P.DELETING_DISK),
    "recorded deleting, disk gone: requested": (Observed(recorded=Status(P.DELETING_DISK)), P.REQUESTED),
    "home lost": (Observed(home=pvc("Lost")), P.DEGRADED),
    "vm cloning: provisioning": (Observed(home=pvc(), root=dv("CloneInProgress", "40.00%"), vm=vm(), vm_workspace=True), P.PROVISIONING_DISK),
    "vm clone failed: degraded": (Observed(home=pvc(), root=dv("Failed"), vm=vm(), vm_workspace=True), P.DEGRADED),
    "vm halted: stopped": (Observed(home=pvc(), root=dv(), vm=vm(), vm_workspace=True), P.STOPPED),
    "vm asked to run, no vmi yet: starting": (Observed(home=pvc(), root=dv(), vm=vm("Always", "Starting"), vm_workspace=True), P.STARTING),
    "vmi scheduled: starting": (Observed(home=pvc(), root=dv(), vm=vm("Always", "Starting"), vmi=vmi("Scheduled", ready=False), vm_workspace=True,
                                         node_ready={"node-a": True}), P.STARTING),
    "vmi ready: running": (Observed(home=pvc(), root=dv(), vm=vm("Always", "Running"), vmi=vmi(), vm_workspace=True,
                                    node_ready={"node-a": True}), P.RUNNING),
    "vmi shutting down: stopping": (Observed(home=pvc(), root=dv(), vm=vm("Halted", "Stopping"), vmi=vmi(deleting=True), vm_workspace=True,
                                             node_ready={"node-a": True}), P.STOPPING),
    "vmi on a lost node: degraded": (Observed(home=pvc(), root=dv(), vm=vm("Always", "Running"), vmi=vmi(), vm_workspace=True,
                                              node_ready={"node-a": False}), P.DEGRADED),
    "vm retained: stays": (Observed(home=pvc(), root=dv(), vm=vm(), vm_workspace=True, recorded=RETAINED), P.RETAINED),
}


def kind_of(observed: Observed):
    """The backend's status of the kind the case is about."""
    return VMKindStatus() if observed.vm_workspace else ContainerStatus()


@pytest.mark.parametrize("observed, expected", DERIVE_CASES.values(), ids=DERIVE_CASES.keys())
def test_derive_phase(observed, expected):
    derived = derive_phase(observed, kind_of(observed))
    assert derived.phase == expected
    if expected == P.DEGRADED:
        assert derived.reason and derived.message
    if expected == P.RETAINED:
        assert derived is observed.recorded  # kept as recorded, retain-until and all


def test_derive_keeps_since_of_the_same_phase():
    recorded = Status(P.STOPPED, since=NOW)
    assert derive_phase(Observed(home=pvc(), recorded=recorded), ContainerStatus()) is recorded


async def test_a_start_and_a_stop_write_no_phase():
    """Starting, Running and Stopping are what the compute shows (DERIVED_PHASES): the objects keep Stopped."""
    kube = FakeKube()
    current = status(P.STOPPED)
    for target in (P.STARTING, P.RUNNING, P.STOPPING):
        current = await move(kube, REF, current, target, now=NOW)
        assert current.phase == target
    assert kube.patches == []


async def test_a_move_writes_nothing_the_watch_cache_shows_recorded_or_absent():
    recorded = status(P.STOPPED)
    home = {"metadata": {"name": "home-ann", "labels": {**names.owner_labels(REF.user_name), names.PHASE_LABEL: "Stopped"},
                         "annotations": {**names.owner_annotations(REF.user_name),
                                         names.LIFECYCLE_ANNOTATION: json.dumps(recorded.to_state())}}}
    kube, audit = FakeKube(cached={"home-ann": home, "ws-ann-root": None}), FakeAudit()
    await move(kube, REF, status(P.PROVISIONING_DISK), P.STOPPED, audit=audit, now=NOW)
    assert [name for _kind, name, _ops in kube.patches] == ["ws-ann"]  # the one object no cache knows
    assert [(r["action"], r["disk"]) for r in audit.records] == [("create", "home-ann")]  # made Stopped: still audited
    foreign = {**home, "metadata": {**home["metadata"], "annotations": {names.LIFECYCLE_ANNOTATION: home["metadata"]["annotations"][names.LIFECYCLE_ANNOTATION]}}}
    kube = FakeKube(cached={"home-ann": foreign, "ws-ann-root": None})
    await move(kube, REF, status(P.PROVISIONING_DISK), P.STOPPED, now=NOW)
    assert [name for _kind, name, _ops in kube.patches] == ["home-ann", "ws-ann"]  # not provably ours: the guarded write decides


async def test_a_stop_the_hub_decided_keeps_its_reason_with_the_stopped_phase():
    """The idle-GPU pass says why before it stops; the Stopped phase records it and the cluster's view keeps it."""
    kube = FakeKube()
    stopped = await move(kube, REF, status(P.STOPPED), P.STOPPED, reason="idle-gpu", message="Its GPU was idle.",
                         observed=True, now=NOW)
    assert (stopped.reason, stopped.message) == ("idle-gpu", "Its GPU was idle.")
    [(_, _, operations)] = kube.patches[:1]
    written = [json.loads(op["value"]) for op in operations if op.get("path", "").endswith("lifecycle")]
    assert written and written[0]["reason"] == "idle-gpu"
    assert derive_phase(Observed(home=pvc(), recorded=stopped), ContainerStatus()) is stopped
    starting = await move(kube, REF, stopped, P.STARTING, now=NOW)  # the next start and stop leave it behind
    assert (starting.reason, (await move(kube, REF, starting, P.STOPPING, now=NOW)).reason) == ("", "")


def test_a_stop_reason_is_taken_once_and_only_while_fresh():
    clock = [0.0]
    reasons = StopReasons(ttl=600, clock=lambda: clock[0])
    reasons.say("ann", "", "idle-gpu", "Its GPU was idle.")
    assert reasons.take("ann", "gpu") is None  # another server of hers
    assert reasons.take("ann", "").reason == "idle-gpu"
    assert reasons.take("ann", "") is None  # taken: a later ordinary stop has no reason
    reasons.say("bo", "", "idle-gpu", "Its GPU was idle.")
    clock[0] = 601.0
    assert reasons.take("bo", "") is None  # the stop never came within the TTL
