"""The compute reconciler's sorting: ghosts (the hub shows the server stopped), orphans (no server of the hub), the rest."""

from __future__ import annotations

import asyncio

from workspacespawner.workspace.reconciler import ComputeReconciler, classify


def pod(user: str | None, server: str = "", uid: str = "u1") -> dict:
    annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server} if user else {}
    return {"kind": "Pod", "metadata": {"namespace": "default", "name": f"jupyter-{user}", "uid": uid, "annotations": annotations}}


BELIEFS = {("ann", ""): True, ("bob", ""): False}


def believed(user, server):
    return BELIEFS.get((user, server))


def test_classify_sorts_by_what_the_hub_believes():
    found = classify([pod("ann"), pod("bob"), pod("cy"), pod(None), pod("ann", "gpu")], believed)
    assert [(f.what, f.user, f.server) for f in found] == [("ghost", "bob", ""), ("orphan", "cy", ""), ("orphan", "ann", "gpu")]


def test_an_orphan_is_reported_from_its_second_pass_and_forgotten_once_gone():
    objects = [pod("cy", uid="c1")]
    reconciler = ComputeReconciler(None, objects=lambda: objects, believed_running=believed)
    asyncio.run(reconciler.tick())
    assert reconciler.orphans == {}  # maybe a server whose spawner the hub builds right now
    asyncio.run(reconciler.tick())
    assert [f.describe() for f in reconciler.orphans.values()] == ["Pod default/jupyter-cy of cy's server ''"]
    objects.clear()
    asyncio.run(reconciler.tick())
    assert reconciler.orphans == {}


def test_no_pass_before_the_caches_load():
    reconciler = ComputeReconciler(None, objects=lambda: None, believed_running=believed)
    assert asyncio.run(reconciler.tick()) == []
