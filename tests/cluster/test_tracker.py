"""A workspace's lifecycle driven by :class:`~workspacespawner.lifecycle.tracker.WorkspaceLifecycle`, without a hub.

Covers: the moves a spawner makes for one container workspace on the local
cluster (before_start → disks_ready → running → stopping → stopped →
delete_forever), each recorded as the phase label on the home PVC; a start
refused by a Retained home under the ``admin-only`` reclaim policy; a home
held by another Pod refused before any compute (``disk-in-use``). The
tracker takes only explicit arguments (a Kube facade, a ref, settings).
"""

from __future__ import annotations

import pytest

from tests.support.lifecycleenv import NS, make_home, phase_label, start_pod
from workspacespawner.backends.container.podstatus import ContainerStatus
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.lifecycle.phases import Phase, WorkspaceRef
from workspacespawner.lifecycle.tracker import LifecycleSettings, WorkspaceLifecycle

USER = "Tia.Track@school.example"
HOME = "home-tia"
REF = WorkspaceRef(namespace=NS, user_name=USER, home_pvc=HOME, pod="jupyter-tia")


def tracker(kube, **settings) -> WorkspaceLifecycle:
    return WorkspaceLifecycle(kube=kube, audit=None, kind=ContainerStatus(), settings=LifecycleSettings(**settings), label="tia")


async def nothing_of_its_own(say=None):
    return None


async def test_start_stop_delete_moves_recorded_on_the_home(kube_objects):
    steps: list[str] = []
    lifecycle = tracker(kube_objects, fence_wait_seconds=5)
    await lifecycle.before_start(REF, fence_own=nothing_of_its_own, say=steps.append)
    assert lifecycle.phase == Phase.PROVISIONING_DISK
    pvc = await make_home(kube_objects, USER, HOME)
    await lifecycle.disks_ready(REF, pvc, home_size="1Gi", limit=None, server="", say=steps.append)
    # Starting, Running and Stopping are what the Pod shows: the home stays recorded Stopped (issue #15)
    assert lifecycle.phase == Phase.STARTING and await phase_label(kube_objects, HOME) == "Stopped"
    await lifecycle.running(REF)
    assert lifecycle.phase == Phase.RUNNING and await phase_label(kube_objects, HOME) == "Stopped"
    await lifecycle.stopping(REF)
    assert lifecycle.phase == Phase.STOPPING and await phase_label(kube_objects, HOME) == "Stopped"
    await lifecycle.stopped(REF)  # no Pod: the cluster says Stopped
    assert lifecycle.phase == Phase.STOPPED and await phase_label(kube_objects, HOME) == "Stopped"
    await lifecycle.delete_forever(REF)
    assert lifecycle.phase == Phase.RETAINED and lifecycle.status.retain_until is not None
    assert await phase_label(kube_objects, HOME) == "Retained"


async def test_admin_only_reclaim_refuses_a_retained_home(kube_objects):
    await make_home(kube_objects, USER, HOME)
    await tracker(kube_objects).delete_forever(REF)
    with pytest.raises(WorkspaceError) as refused:
        await tracker(kube_objects, reclaim_policy="admin-only").before_start(REF, fence_own=nothing_of_its_own, say=print)
    assert (refused.value.reason, refused.value.status_code) == ("disk-retained", 409)
    assert await phase_label(kube_objects, HOME) == "Retained"


async def test_home_held_by_another_pod_is_refused_before_compute(kube_objects):
    await make_home(kube_objects, USER, HOME)
    await start_pod(kube_objects, USER, "jupyter-tia--gpu", HOME)
    with pytest.raises(WorkspaceError) as refused:
        await tracker(kube_objects).before_start(REF, fence_own=nothing_of_its_own, say=print, servers=[""])
    assert (refused.value.reason, refused.value.status_code) == ("leftover-compute", 409)  # kubespawner made no such Pod
