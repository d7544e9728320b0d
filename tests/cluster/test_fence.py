"""The one-active invariant before a container start, and the admin's fence (:mod:`workspacespawner.lifecycle.fence`).

Covers, against the local cluster: a leaked Pod of the workspace itself
(deleted gracefully, by its uid, and waited for, never a second Pod on the
disk); a terminating Pod waited for, with progress; another server of the
user using the same home (refused, ``disk-in-use``); another user's running
Pod neither blocking the start nor touched; a Pod on a NotReady node (refused
``node-unreachable`` while the node agent cannot finish its deletion);
``workspacespawner fence USER`` without ``--confirm-node-down`` (shows, deletes
nothing) and with it (force-deletes with grace period 0, audits ``fence``,
moves the Degraded home back to Stopped), also as the command; a VMI on a NotReady node fenced
(VM stopped at once, VMI gone). No timed assertions: waits have deadlines.
"""

from __future__ import annotations

import pytest

from tests.support.lifecycleenv import (
    NS,
    admin_command_args,
    kind_for,
    make_home,
    phase_label,
    pod_manifest,
    start_pod,
    wait_async,
    with_kube,
)
from workspacespawner.admin import fence as fence_command
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.kinds import POD, VIRTUAL_MACHINE, VMI
from workspacespawner.lifecycle import fence, phases
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.phases import Phase, WorkspaceRef

USER = "fay"


async def pods_of(kube_objects, user=USER):
    return await kube_objects.list(POD, NS, labels=names.owner_selector(user))


async def test_leaked_own_pod_is_deleted_gracefully_before_start(kube_objects, cluster):
    await make_home(kube_objects, USER)
    leaked = await start_pod(kube_objects, USER, "jupyter-fay", "home-fay")
    cluster.requests.clear()
    await fence.check_before_start(
        kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay", wait=30, interval=0.1
    )
    # gone, and no Pod of the user is left on the disk when the start goes on
    assert await kube_objects.get(POD, NS, "jupyter-fay") is None
    assert await pods_of(kube_objects) == []
    # one graceful delete of exactly the leaked Pod (its uid as precondition, no gracePeriodSeconds: not forced)
    [delete] = cluster.requests.matching("DELETE", r"/pods/jupyter-fay$")
    assert delete.body == {"propagationPolicy": "Background", "preconditions": {"uid": leaked["metadata"]["uid"]}}


async def test_leaked_own_pod_whose_delete_keeps_failing_is_retried_with_progress(kube_objects, cluster):
    """Issue #13 item 3: the owner's next start while the API refuses the DELETE a while: progress, then the start goes on."""
    await make_home(kube_objects, USER)
    await start_pod(kube_objects, USER, "jupyter-fay", "home-fay")
    cluster.faults.add("DELETE", r"/pods/jupyter-fay$", status=503, reason="ServiceUnavailable", count=6)
    steps = []
    await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay",
                                   wait=60, interval=0.1, progress=steps.append)
    assert await kube_objects.get(POD, NS, "jupyter-fay") is None
    assert steps[0] == "Your previous server jupyter-fay is still being removed; waiting for it before starting"


async def test_terminating_pod_is_waited_for_with_progress(kube_objects):
    await make_home(kube_objects, USER)
    await start_pod(kube_objects, USER, "jupyter-fay--old", "home-fay", grace=3, stubborn=True)
    await kube_objects.delete(POD, NS, "jupyter-fay--old")  # it ignores SIGTERM: gone when its 3 s of grace end
    steps = []
    await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay", wait=30,
                                   interval=0.1, progress=steps.append)
    assert await kube_objects.get(POD, NS, "jupyter-fay--old") is None
    assert steps and steps[0].startswith("Waiting for your previous server jupyter-fay--old to stop")


async def test_other_server_using_the_home_is_refused(kube_objects):
    await make_home(kube_objects, USER)
    pod = pod_manifest(USER, "jupyter-fay--gpu", "home-fay")
    pod["metadata"]["annotations"].update({fence.KUBESPAWNER_USER: USER, names.SERVER_ANNOTATION: "gpu"})  # kubespawner's
    await kube_objects.create(POD, NS, pod)
    with pytest.raises(WorkspaceError) as caught:
        await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay",
                                       server="", servers=["", "gpu"], wait=5)
    assert (caught.value.reason, caught.value.status_code) == ("disk-in-use", 409)
    assert caught.value.message == "Your disk is in use by your server gpu; stop that server first, then start this one."
    assert await kube_objects.get(POD, NS, "jupyter-fay--gpu") is not None


@pytest.mark.parametrize("made_by", ["an older hub", "a server the hub no longer has"])
async def test_a_leftover_the_hub_did_not_start_is_refused_in_words_an_admin_can_act_on(kube_objects, made_by):
    """Issue #38 item 3: a Pod with the user's labels that is no server of the hub (an older hub or name template, a
    hand-made Pod, a server since deleted) holds the home: the user is told what it is and who removes it, and how."""
    await make_home(kube_objects, USER)
    pod = pod_manifest(USER, "jupyter-fay-old-scheme", "home-fay")
    if made_by == "a server the hub no longer has":
        pod["metadata"]["annotations"].update({fence.KUBESPAWNER_USER: USER, names.SERVER_ANNOTATION: "deleted"})
    await kube_objects.create(POD, NS, pod)
    with pytest.raises(WorkspaceError) as caught:
        await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay",
                                       server="", servers=[""], wait=5)
    assert (caught.value.reason, caught.value.status_code) == ("leftover-compute", 409)
    assert caught.value.message == (
        "Your disk is held by jupyter-fay-old-scheme, a leftover that this hub did not start, so nothing was started. "
        "Please ask an administrator to remove it (workspacespawner orphans --remove), then start again.")
    assert await kube_objects.get(POD, NS, "jupyter-fay-old-scheme") is not None  # the hub cannot tell whose it is


async def test_other_users_pod_is_not_a_holder(kube_objects, cluster):
    await make_home(kube_objects, USER)
    await make_home(kube_objects, "gus")
    other = await start_pod(kube_objects, "gus", "jupyter-gus", "home-gus")
    cluster.requests.clear()
    steps = []
    await fence.check_before_start(
        kube_objects,
        namespace=NS,
        user_name=USER,
        claims=["home-fay"],
        own_pod="jupyter-fay",
        wait=5,
        interval=0.1,
        progress=steps.append,
    )
    # not waited for (no progress step), not deleted (no DELETE at all), still running as it was
    assert steps == []
    assert cluster.requests.matching("DELETE") == []
    after = await kube_objects.get(POD, NS, "jupyter-gus")
    assert after is not None
    assert after["metadata"]["uid"] == other["metadata"]["uid"]
    assert "deletionTimestamp" not in after["metadata"]
    assert after["status"]["phase"] == "Running"


async def _pod_on_lost_node(kube_objects, cluster_thread):
    await make_home(kube_objects, USER)
    pod = await start_pod(kube_objects, USER, "jupyter-fay", "home-fay")
    node = pod["spec"]["nodeName"]
    cluster_thread.call(lambda cl: cl.controllers["scheduler"].set_node_ready(node, False))
    await kube_objects.delete(POD, NS, "jupyter-fay")  # the kubelet of a lost node never confirms it
    return node


async def test_pod_on_not_ready_node_refuses_start(kube_objects, cluster_thread):
    node = await _pod_on_lost_node(kube_objects, cluster_thread)
    with pytest.raises(WorkspaceError) as caught:
        await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay", wait=5)
    assert (caught.value.reason, caught.value.status_code) == ("node-unreachable", 409)
    assert node in caught.value.message and f"workspacespawner fence {USER} --confirm-node-down" in caught.value.message
    assert await kube_objects.get(POD, NS, "jupyter-fay") is not None  # still there: nothing was forced

    # what the spawner's hook records, and what the observation says after a hub restart
    ref = WorkspaceRef(namespace=NS, user_name=USER, home_pvc="home-fay", pod="jupyter-fay")
    found = await phases.reconcile(kube_objects, ref, kind_for(ref), None)
    assert (found.phase, found.reason) == (Phase.DEGRADED, "node-unreachable")
    assert await phase_label(kube_objects, "home-fay") == "Degraded"


async def test_fence_command_plans_then_force_deletes_and_audits(kube_objects, cluster_thread, audit_log):
    node = await _pod_on_lost_node(kube_objects, cluster_thread)
    ref = WorkspaceRef(namespace=NS, user_name=USER, home_pvc="home-fay", pod="jupyter-fay")
    await phases.reconcile(kube_objects, ref, kind_for(ref), None)
    fencer = fence.Fencer(kube_objects, NS, audit=audit_log, actor="root")
    targets, kept = await fencer.plan(USER)
    assert [t["metadata"]["name"] for t in targets] == ["jupyter-fay"] and kept == []
    assert audit_log.query() == []

    fenced = await fencer.fence(USER)
    assert [f["metadata"]["name"] for f in fenced] == ["jupyter-fay"]
    assert await kube_objects.get(POD, NS, "jupyter-fay") is None
    [record] = audit_log.query(user=USER)
    assert (record.action, record.actor, record.disk, record.result) == ("fence", "root", "home-fay", "ok")
    assert record.before["node"] == node and record.after["gracePeriodSeconds"] == 0
    assert await phase_label(kube_objects, "home-fay") == "Stopped"
    await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay", wait=5)


async def test_fence_leaves_pods_on_ready_nodes(kube_objects, audit_log):
    await make_home(kube_objects, USER)
    await start_pod(kube_objects, USER, "jupyter-fay", "home-fay")
    fencer = fence.Fencer(kube_objects, NS, audit=audit_log)
    targets, kept = await fencer.plan(USER)
    assert targets == [] and "Ready" in kept[0][1]
    assert await fencer.fence(USER) == []
    assert await kube_objects.get(POD, NS, "jupyter-fay") is not None


async def test_fence_of_a_vmi_on_a_lost_node(kube_objects, cluster_thread, audit_log):
    await make_home(kube_objects, USER)
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "ws-fay", "namespace": NS, "labels": names.owner_labels(USER), "annotations": names.owner_annotations(USER)},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {**names.owner_labels(USER), names.DOMAIN_LABEL: "ws-fay"}},
                "spec": {
                    "domain": {"devices": {"disks": [{"name": "home", "disk": {"bus": "virtio"}}]}, "memory": {"guest": "1Gi"}},
                    "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-fay"}}],
                },
            },
        },
    }
    await kube_objects.create(VIRTUAL_MACHINE, NS, vm)

    async def placed():
        vmi = await kube_objects.get(VMI, NS, "ws-fay")
        return vmi if vmi and (vmi.get("status") or {}).get("nodeName") else None

    vmi = await wait_async(placed)
    cluster_thread.call(lambda cl: cl.controllers["scheduler"].set_node_ready(vmi["status"]["nodeName"], False))
    with pytest.raises(WorkspaceError) as caught:
        await fence.check_before_start(kube_objects, namespace=NS, user_name=USER, claims=["home-fay"], own_pod="jupyter-fay", wait=5)
    assert caught.value.reason == "node-unreachable"

    fenced = await fence.Fencer(kube_objects, NS, audit=audit_log, actor="root").fence(USER)
    assert [f["kind"] for f in fenced] == ["VirtualMachineInstance"]

    async def gone():
        return await kube_objects.get(VMI, NS, "ws-fay") is None

    await wait_async(gone)
    assert (await kube_objects.get(VIRTUAL_MACHINE, NS, "ws-fay"))["spec"]["runStrategy"] == "Halted"
    assert [r.action for r in audit_log.query(user=USER)] == ["fence"]


def test_fence_command(cluster, cluster_thread, tmp_path, capsys):
    common, url = admin_command_args(tmp_path, cluster)

    async def setup(kube):
        await make_home(kube, USER)
        pod = await start_pod(kube, USER, "jupyter-fay", "home-fay")
        await cluster.controllers["scheduler"].set_node_ready(pod["spec"]["nodeName"], False)  # on the cluster's own loop

    cluster_thread.call(lambda cl: with_kube(cl.kubeconfig, setup))
    assert fence_command.main([USER, *common]) == 2
    out = capsys.readouterr().out
    assert "would force-delete" in out and "add --confirm-node-down" in out
    assert fence_command.main([USER, "--confirm-node-down", *common]) == 0
    assert "force-deleted" in capsys.readouterr().out
    [record] = AuditLog.from_url(url).query(user=USER)
    assert (record.action, record.actor, record.disk) == ("fence", "root", "home-fay")
    assert fence_command.main([USER, *common]) == 0
    assert "nothing of fay is running" in capsys.readouterr().out
