"""Small parts the spawner stands on: background tasks kept alive, refusals handed to JupyterHub, dicts as models.

Covers: :class:`~workspacespawner.core.tasks.BackgroundTasks` holds a task
until it is done (asyncio keeps only a weak reference) and logs a failure;
:func:`~workspacespawner.hubcompat.as_spawn_failure` gives JupyterHub 6 a
SpawnException with the same message, reason and status;
:func:`~workspacespawner.k8s.models.to_model` turns nested camelCase dicts
into kubernetes_asyncio models and refuses an unknown field.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from workspacespawner import hubcompat
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.tasks import BackgroundTasks, with_helpers
from workspacespawner.k8s.models import to_model


async def test_background_tasks_are_held_until_done(caplog):
    tasks = BackgroundTasks()
    release = asyncio.Event()
    finished = []

    async def work():
        await release.wait()
        finished.append(True)

    tasks.spawn(work(), name="work")
    gc.collect()  # nothing else holds the task
    assert len(tasks) == 1
    release.set()
    await asyncio.sleep(0.01)
    assert finished == [True] and len(tasks) == 0

    async def fail():
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="workspacespawner"):
        tasks.spawn(fail(), name="failing")
        await asyncio.sleep(0.01)
    assert "Background task failing failed: boom" in caplog.text


async def test_background_tasks_close_cancels_what_runs():
    tasks = BackgroundTasks()
    task = tasks.spawn(asyncio.sleep(60), name="long")
    await tasks.close()
    assert task.cancelled()


@pytest.mark.skipif(hubcompat.SpawnException is None, reason="JupyterHub 5.5 has no SpawnException")
async def test_a_start_with_helpers_ends_with_a_helpers_failure_waits_for_the_one_it_needs_and_cancels_the_rest():
    """What both backends' starts run: a helper's failure ends the start at once; a helper that ends well leaves it
    going; once the start returned, the helper it needs (a GPU queue's wait, which opens the run) is awaited; what
    still runs then is cancelled."""
    ran = []

    async def main(after: float, value: str = "url"):
        await asyncio.sleep(after)
        return value

    async def helper(after: float, name: str, fail: bool = False):
        try:
            await asyncio.sleep(after)
        except asyncio.CancelledError:
            ran.append(f"{name} cancelled")
            raise
        if fail:
            raise WorkspaceError(f"{name} failed", reason="test")
        ran.append(f"{name} done")

    with pytest.raises(WorkspaceError, match="claims failed"):
        await with_helpers(main(10), [helper(0.01, "claims", fail=True), helper(10, "line")])
    await asyncio.sleep(0)
    assert ran == ["line cancelled"]
    ran.clear()
    assert await with_helpers(main(0.02), [helper(0.01, "quick"), helper(0.05, "line"), helper(10, "other")],
                              then=1) == "url"
    await asyncio.sleep(0)
    assert ran == ["quick done", "line done", "other cancelled"]  # the start ended only once its line's wait did


def test_refusal_is_a_spawn_exception_for_jupyterhub_6():
    error = WorkspaceError("No GPU is free.", reason="unschedulable", status_code=503)
    handed = hubcompat.as_spawn_failure(error)
    assert isinstance(handed, hubcompat.SpawnException) and isinstance(handed, WorkspaceError)
    assert (handed.jupyterhub_message, handed.reason, handed.status_code) == ("No GPU is free.", "unschedulable", 503)
    assert hubcompat.as_spawn_failure(handed) is handed


def test_dicts_become_models_nested():
    volume = to_model("V1Volume", {"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}})
    assert volume.persistent_volume_claim.claim_name == "home-ann"
    container = to_model("V1Container", {"name": "n", "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]})
    assert container.volume_mounts[0].mount_path == "/home/jovyan"
    with pytest.raises(ValueError, match="'claimNme' is not a field of V1PersistentVolumeClaimVolumeSource"):
        to_model("V1Volume", {"name": "x", "persistentVolumeClaim": {"claimNme": "typo"}})
