"""A local-cluster controller whose reconcile fails with an API error tries again by itself.

client-go's controllers put a failed item back on a rate-limited work queue
(``AddRateLimited``) instead of waiting for the object's next change, which
may never come; ours do the same (``controllers/base.py``).
"""

from __future__ import annotations

import pytest
from localcluster.controllers.base import Controller
from localcluster.errors import ApiError
from localcluster.testing import create_object as create
from localcluster.testing import wait_for

from localcluster import LocalCluster

CONFIG_MAPS = ("", "v1", "configmaps")


class FlakyWriter(Controller):
    """Labels every ConfigMap ``done``, losing its first ``losses`` writes to a 409."""

    name = "flaky"
    watches = (CONFIG_MAPS,)
    retry_first_seconds = 0.01

    def __init__(self, cluster, losses: int):
        super().__init__(cluster)
        self.losses = losses
        self.attempts = 0

    async def reconcile(self, kind, obj, deleted):
        self.attempts += 1
        if self.attempts <= self.losses:
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
        current = self.client.get(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
        current["metadata"].setdefault("labels", {})["done"] = "yes"
        await self.client.replace(kind, current["metadata"]["namespace"], current["metadata"]["name"], current)


@pytest.fixture
async def cluster(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        yield cluster


async def test_a_reconcile_lost_to_a_conflict_is_tried_again_without_a_new_event(cluster):
    create(cluster, CONFIG_MAPS, {"metadata": {"name": "only-one-event"}})
    controller = FlakyWriter(cluster, losses=3)
    await controller.start()
    try:
        kind = cluster.store.kind(*CONFIG_MAPS)
        await wait_for(lambda: (cluster.store.get(kind, "default", "only-one-event")["metadata"].get("labels") or {}).get("done"), timeout=10)
        assert controller.attempts >= 4
        assert controller._failures == {}  # forgotten once it reconciled
    finally:
        await controller.stop()
