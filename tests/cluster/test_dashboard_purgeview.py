"""The dashboard's purge preview (:mod:`workspacespawner.dashboard.purgeview`) against the local cluster.

Covers: on disks retained by the real retention code (one past its time,
one not yet, one past its time but mounted by a Pod, one stopped home), the
preview built from the objects the purge itself reads lists exactly the
retained disks, deletes nothing, and names exactly the disks a purge at the
same moment then deletes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.lifecycleenv import NS, make_home, start_pod
from workspacespawner.dashboard import purgeview
from workspacespawner.k8s.kinds import PVC
from workspacespawner.lifecycle import retention
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


async def test_the_preview_names_what_the_purge_then_deletes(kube_objects, audit_log):
    for user, days in (("ann", 1), ("bob", 30), ("cy", 1), ("dee", None)):
        await make_home(kube_objects, user, size="2Gi")
        if days is not None:
            ref = WorkspaceRef(namespace=NS, user_name=user, home_pvc=f"home-{user}")
            await retention.retain(kube_objects, ref, Status(Phase.STOPPED), days=days, audit=audit_log, now=NOW)
    await start_pod(kube_objects, "cy", "debug-cy", "home-cy")
    purger = retention.Purger(kube_objects, NS, audit=audit_log)
    moment = NOW + 2 * DAY

    preview = purgeview.preview(await purger.gather(), moment)
    assert [(d.owner, d.name, d.size_gib, d.purge_next) for d in preview.disks] == [
        ("ann", "home-ann", 2.0, True), ("cy", "home-cy", 2.0, False), ("bob", "home-bob", 2.0, False),
    ]
    assert next(d for d in preview.disks if d.name == "home-cy").kept_because == "in use by Pod debug-cy"
    for user in ("ann", "bob", "cy", "dee"):
        assert await kube_objects.get(PVC, NS, f"home-{user}") is not None  # the preview deleted nothing
    assert [r.action for r in audit_log.query(action="delete")] == []

    done = await purger.purge(now=moment)
    assert [(item.name, item.result) for item in done.purge] == [(d.name, "ok") for d in preview.to_purge]
    assert await kube_objects.get(PVC, NS, "home-ann") is None
    assert await kube_objects.get(PVC, NS, "home-bob") is not None and await kube_objects.get(PVC, NS, "home-cy") is not None
