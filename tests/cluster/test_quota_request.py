"""The pre-spawn quota step against the local cluster: what it asks of the API server (counts, never times).

Covers: with quotas off, no Kubernetes request at all (no PVC list) and no
reservation; with quotas on, exactly one PVC list (by the user's owner
labels) and a reservation in the ledger counting the new home's size.
"""

from __future__ import annotations

import pytest
from traitlets.config import Config

from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import RESERVED
from workspacespawner.quota.request import reserve_start
from workspacespawner.quota.service import QuotaService

PROFILE = ResolvedProfile(
    slug="gpu1",
    display_name="1 GPU",
    workspace_kind="container",
    ide="jupyterlab",
    gpus=1,
    gpu_product=None,
    cpu=4.0,
    memory="16Gi",
    image="quay.io/jupyter/base-notebook",
    default_url="",
)


@pytest.fixture
def cluster(module_cluster):
    """One local cluster for the module's tests (each clears the request log first)."""
    return module_cluster


async def step(service: QuotaService, kube_objects):
    return await reserve_start(
        service,
        kube_objects,
        namespace="default",
        user_name="ann",
        groups=["students"],
        profile=PROFILE,
        server_name="",
        home_pvc="home-ann",
        home_size="10Gi",
        backend=ContainerBackend(None),
    )


def quota_service(tmp_path, enabled: bool) -> QuotaService:
    config = Config()
    config.WorkspaceQuota.enabled = enabled
    return QuotaService(WorkspaceQuota(config=config), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))


async def test_the_quota_step_asks_nothing_of_the_cluster_when_quotas_are_off(cluster, kube_objects, tmp_path):
    service = quota_service(tmp_path, enabled=False)
    try:
        cluster.requests.clear()
        assert await step(service, kube_objects) is None
        assert [(r.method, r.path) for r in cluster.requests.records] == []
    finally:
        await service.close()


async def test_the_quota_step_lists_the_users_pvcs_once_when_quotas_are_on(cluster, kube_objects, tmp_path):
    service = quota_service(tmp_path, enabled=True)
    try:
        cluster.requests.clear()
        reservation = await step(service, kube_objects)
        calls = [(r.method, r.path) for r in cluster.requests.records]
        assert calls == [("GET", "/api/v1/namespaces/default/persistentvolumeclaims")], calls
        assert service.ledger.get(reservation.id).state == RESERVED
    finally:
        await service.close()
