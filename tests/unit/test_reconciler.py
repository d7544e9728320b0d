"""The compute reconciler's sorting: ghosts (the hub shows the server stopped), orphans (no server of the hub), the rest."""

from __future__ import annotations

import asyncio
import logging

from workspacespawner.lifecycle.reconciler import ComputeReconciler, classify


def pod(user: str | None, server: str = "", uid: str = "u1") -> dict:
    annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server} if user else {}
    return {"kind": "Pod", "metadata": {"namespace": "default", "name": f"jupyter-{user}", "uid": uid, "annotations": annotations}}


BELIEFS = {("ann", ""): True, ("bob", ""): False}


def believed(user, server):
    return BELIEFS.get((user, server))


def test_classify_sorts_by_what_the_hub_believes():
    found = classify([pod("ann"), pod("bob"), pod("cy"), pod(None), pod("ann", "gpu")], believed)
    assert [(f.what, f.user, f.server) for f in found] == [("ghost", "bob", ""), ("orphan", "cy", ""), ("orphan", "ann", "gpu")]


def test_an_orphan_is_reported_from_its_first_pass_and_forgotten_once_gone(caplog):
    """Issue #38 item 3: at hub start-up, not two passes later (a server whose spawner the hub has not built yet is
    running in the hub's database: :meth:`HubServices.believed_running` asks it)."""
    objects = [pod("cy", uid="c1")]
    reconciler = ComputeReconciler(None, objects=lambda: objects, believed_running=believed)
    with caplog.at_level(logging.WARNING, logger="workspacespawner"):
        asyncio.run(reconciler.tick())
        assert [f.describe() for f in reconciler.orphans.values()] == ["Pod default/jupyter-cy of cy's server ''"]
        asyncio.run(reconciler.tick())
    assert [r.getMessage() for r in caplog.records] == [
        "Orphan compute: Pod default/jupyter-cy of cy's server '' is not a server of this hub; "
        "`workspacespawner orphans --remove` removes it"]  # once, not at every pass
    objects.clear()
    asyncio.run(reconciler.tick())
    assert reconciler.orphans == {}


def test_no_pass_before_the_caches_load():
    reconciler = ComputeReconciler(None, objects=lambda: None, believed_running=believed)
    assert asyncio.run(reconciler.tick()) == []


def test_the_hub_database_answers_for_servers_whose_spawner_is_not_built():
    """A server running in the hub's database whose spawner this process has not built (JupyterHub builds them one by
    one at start-up) is running, not an orphan; one the database does not have running is no server of this hub."""
    from workspacespawner.services import HubServices

    services = HubServices()
    services.register("ann", "", lambda: False)
    assert services.believed_running("ann", "") is False and services.believed_running("bob", "") is None
    services.hub_database = lambda user, server: True if (user, server) == ("bob", "") else None
    assert services.believed_running("bob", "") is True and services.believed_running("bob", "gpu") is None
    assert services.believed_running("ann", "") is False  # its spawner's own word first


def test_running_in_the_hub_database_reads_jupyterhubs_own_tables():
    from jupyterhub import orm

    from workspacespawner.hubtasks import running_in_database

    db = orm.new_session_factory("sqlite://")()
    ann = orm.User(name="ann")
    db.add(ann)
    db.commit()
    running, stopped = orm.Spawner(user=ann, name=""), orm.Spawner(user=ann, name="gpu")
    running.server = orm.Server()
    db.add_all([running, stopped])
    db.commit()
    assert running_in_database(db, "ann", "") is True
    assert running_in_database(db, "ann", "gpu") is None and running_in_database(db, "bob", "") is None
