"""The local cluster's CSI attacher (:mod:`localcluster.attacher`).

Covers: a second Pod of a ReadWriteOnce claim on another node waits in
``ContainerCreating`` with the ``FailedAttachVolume`` Multi-Attach Warning
naming the Pod that holds it, and runs once that Pod is gone; a second Pod
on the same node mounts it (RWO is per node), which the attach history
shows as two consumers at once; the access-mode rules without a cluster
(ReadWriteOncePod per pod, ReadWriteMany anywhere).
"""

from __future__ import annotations

import datetime

from localcluster.attacher import Attacher, Consumer, MultiAttachError, conflicts
from localcluster.testing import wait_for
from test_localcluster_nodeagent import (  # noqa: F401 (no_orphans: an autouse fixture)
    NS,
    create,
    get,
    kind,
    make_pod,
    make_pvc,
    no_orphans,
    phase_of,
)

from localcluster import LocalCluster

CONTROLLERS = ("storage", "scheduler", "nodeagent")
SLEEP = ["python", "-c", "import time; time.sleep(120)"]


def home_pod(name: str, node: str) -> dict:
    pod = make_pod(name, SLEEP, restart="Never", volumeMounts=[{"name": "home", "mountPath": "/home/jovyan"}])
    pod["spec"]["nodeName"] = node
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    pod["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": "home-u"}}]
    return pod


def warnings(store, name: str) -> list[tuple[str, str]]:
    events, _ = store.list(kind(store, "events"), NS)
    return [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"]


def waiting_reason(store, name: str) -> str | None:
    statuses = ((get(store, "pods", name) or {}).get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting", {}).get("reason")


async def test_rwo_claim_on_another_node_is_a_multi_attach_error_until_the_holder_is_gone(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        create(store, make_pvc("home-u"))
        create(store, home_pod("first", "cpu-node-1"))
        await wait_for(lambda: phase_of(store, "first") == "Running")
        create(store, home_pod("second", "gpu-node-1"))
        await wait_for(lambda: any(reason == "FailedAttachVolume" for reason, _ in warnings(store, "second")))
        volume = get(store, "persistentvolumeclaims", "home-u")["spec"]["volumeName"]
        assert ("FailedAttachVolume", f'Multi-Attach error for volume "{volume}" Volume is already used by pod(s) first') in warnings(
            store, "second"
        )
        assert waiting_reason(store, "second") == "ContainerCreating"
        assert phase_of(store, "second") == "Pending"
        assert [h.name for h in cluster.attacher.holders((NS, "home-u"))] == ["first"]

        store.delete(kind(store, "pods"), NS, "first")
        await wait_for(lambda: phase_of(store, "second") == "Running", timeout=15)
        assert [h.name for h in cluster.attacher.holders((NS, "home-u"))] == ["second"]
        assert cluster.attacher.max_consumers() == {(NS, "home-u"): 1}
        assert cluster.attacher.overlaps((NS, "home-u")) == []
        store.delete(kind(store, "pods"), NS, "second")
        await wait_for(lambda: get(store, "pods", "second") is None, timeout=15)
        assert cluster.attacher.holders((NS, "home-u")) == []
        assert [(r.action, r.consumer.name) for r in cluster.attacher.history] == [
            ("attach", "first"),
            ("detach", "first"),
            ("attach", "second"),
            ("detach", "second"),
        ]


async def test_rwo_claim_on_the_same_node_is_shared_and_the_history_shows_it(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        create(store, make_pvc("home-u"))
        for name in ("first", "second"):
            create(store, home_pod(name, "cpu-node-1"))
        await wait_for(lambda: phase_of(store, "first") == phase_of(store, "second") == "Running")
        assert not [w for w in warnings(store, "second") if w[0] == "FailedAttachVolume"]
        assert cluster.attacher.max_consumers() == {(NS, "home-u"): 2}
        pairs = cluster.attacher.overlaps((NS, "home-u"))
        assert [(a.name, b.name) for a, b in pairs] in ([("first", "second")], [("second", "first")])
        for name in ("first", "second"):
            store.delete(kind(store, "pods"), NS, name)
        await wait_for(lambda: get(store, "pods", "first") is None and get(store, "pods", "second") is None, timeout=15)


def consumer(name: str, node: str) -> Consumer:
    return Consumer("Pod", NS, name, f"uid-{name}", node)


def test_access_modes_decide_who_may_share():
    held = [consumer("a", "n1")]
    assert conflicts(["ReadWriteOnce"], held, consumer("b", "n1")) == []
    assert conflicts(["ReadWriteOnce"], held, consumer("b", "n2")) == held
    assert conflicts(["ReadWriteOncePod"], held, consumer("b", "n1")) == held
    assert conflicts(["ReadWriteMany"], held, consumer("b", "n2")) == []
    assert conflicts(["ReadOnlyMany"], held, consumer("b", "n2")) == []
    assert conflicts(["ReadWriteOnce"], held, consumer("a", "n1")) == []  # the holder itself


def test_attacher_refuses_then_records_in_order():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    attacher = Attacher(lambda: now)
    claim = (NS, "home-u")
    attacher.attach(claim, "pv-1", ["ReadWriteOnce"], consumer("a", "n1"))
    attacher.attach(claim, "pv-1", ["ReadWriteOnce"], consumer("a", "n1"))  # again: nothing changes
    try:
        attacher.attach(claim, "pv-1", ["ReadWriteOnce"], consumer("b", "n2"))
    except MultiAttachError as e:
        assert e.message == 'Multi-Attach error for volume "pv-1" Volume is already used by pod(s) a'
        assert e.holders == [consumer("a", "n1")]
    else:
        raise AssertionError("a second node attached a ReadWriteOnce volume")
    attacher.detach("uid-a")
    attacher.attach(claim, "pv-1", ["ReadWriteOnce"], consumer("b", "n2"))
    assert [(r.action, r.consumer.name) for r in attacher.history] == [("attach", "a"), ("detach", "a"), ("attach", "b")]
    assert attacher.max_consumers() == {claim: 1}
