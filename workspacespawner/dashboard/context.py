"""What every view of the dashboard reads and writes through, built once per process from the hub's config."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

from traitlets.config import Config

from workspacespawner.admin import common
from workspacespawner.config.goldenimages import golden_image_namespace
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.imagepublish import ImagePublish, golden_namespace, publish_settings
from workspacespawner.core import names
from workspacespawner.dashboard.hubapi import HubApi
from workspacespawner.dashboard.settings import WorkspacesDashboard, dashboard_settings
from workspacespawner.dashboard.watchcache import WatchCache
from workspacespawner.k8s.cachedkube import CachedKube
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.disks import DiskOps
from workspacespawner.lifecycle.settings import LifecycleTraits
from workspacespawner.queue.config import GPUQueue, GPUQueues
from workspacespawner.quota import policy
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger, LedgerUnavailable
from workspacespawner.quota.service import MonthBalance
from workspacespawner.vmdisk.publish import GoldenPublisher

log = logging.getLogger("workspacespawner.dashboard")


@dataclass
class DashboardContext:
    """The service's settings and connections; a handler reaches it as ``self.ctx``.

    ``settings``: the dashboard's; ``quota``: the hub's ``WorkspaceQuota``
    (limits, timezone, ledger URL); ``lifecycle``: the spawner's lifecycle
    traits (``retention_days``, ``disk_limit``); ``namespace``: the
    workspaces'; ``ledger`` (None: quotas off) and ``audit`` share one
    database thread (:meth:`call`); ``caches``: the watch caches views
    read; ``kube``: writes (and reads an action needs, from the caches);
    ``hub``: the hub's REST API; ``now``: the clock (aware UTC datetimes);
    ``publish``: the hub's ``c.ImagePublish`` (who may publish golden images,
    how) and ``golden_namespace`` where they go.
    ``golden_image_namespace``: where the golden images (CDI DataSources) a rebuild clones are; ``economy``: the
    hub's ``c.GPUEconomy`` (the GPU types' names for people); ``gpu_queues``: the hub's ``c.GPUQueues.queues`` by
    name (the Cluster view's queues).
    """

    settings: WorkspacesDashboard
    quota: WorkspaceQuota
    lifecycle: LifecycleTraits
    namespace: str
    ledger: Ledger | None
    audit: AuditLog
    caches: WatchCache
    kube: object
    hub: HubApi
    now: Callable[[], datetime] = field(default=policy.utcnow)
    publish: ImagePublish = field(default_factory=ImagePublish)
    golden_namespace: str = names.GOLDEN_IMAGE_NAMESPACE
    golden_image_namespace: str = names.GOLDEN_IMAGE_NAMESPACE
    economy: GPUEconomy = field(default_factory=GPUEconomy)
    gpu_queues: dict[str, GPUQueue] = field(default_factory=dict)

    async def call(self, fn, *args, **kwargs):
        """Run the blocking ``fn(*args, **kwargs)`` (a Ledger or AuditLog method) on the database thread."""
        return await self.audit.executor.run(fn, *args, **kwargs)

    def period(self, now: datetime | None = None) -> tuple[datetime, datetime]:
        """This month's bounds in the quota's timezone (card-hours reset at the end)."""
        return policy.month_bounds(now or self.now(), self.quota.timezone)

    async def month(self, user: str, groups, now: datetime | None = None) -> MonthBalance | None:
        """``user``'s month (runs, usage, limits) from one ledger read; None when quotas are off or the ledger is
        unreadable (logged). ``groups``: the user's JupyterHub group names (their limits)."""
        if self.ledger is None:
            return None
        now = now or self.now()
        period = self.period(now)
        try:
            runs = await self.call(self.ledger.runs_of, user, period)
        except LedgerUnavailable as e:
            log.error("Could not read %s's card-hours: %s", user, e)
            return None
        return MonthBalance(runs, policy.usage_from_runs(runs, period, now), self.quota.limits_for(user, groups), now)

    def disk_ops(self, actor: str) -> DiskOps:
        """Audited disk operations in the workspaces' namespace, by ``actor`` (the viewer's name)."""
        return DiskOps(self.kube, self.namespace, audit=self.audit, actor=actor, retention_days=self.lifecycle.retention_days)

    def publisher(self, actor: str) -> GoldenPublisher:
        """Audited golden-image publishing from the workspaces' namespace into :attr:`golden_namespace`, by ``actor``."""
        return GoldenPublisher(self.kube, self.namespace, self.golden_namespace, audit=self.audit, actor=actor,
                               mode=self.publish.mode, snapshot_class=self.publish.snapshot_class)


@asynccontextmanager
async def open_context(config: Config, *, kubeconfig: str | None = None, namespace: str | None = None,
                       hub: HubApi | None = None):
    """A started :class:`DashboardContext` for the hub's ``config`` (caches loaded), closed afterwards.

    Kubernetes and the namespace as the admin commands find them
    (:mod:`workspacespawner.admin.common`). Raises ``TraitError`` for a bad
    setting, the API's error when a first list fails.
    """
    settings = dashboard_settings(config)
    publish = publish_settings(config)
    quota = common.quota_settings(config)
    lifecycle = common.lifecycle_settings(config)
    ns = common.namespace_of(config, namespace)
    audit = common.audit_log(config)
    ledger = Ledger(quota.database_url(), timeout=quota.ledger_timeout, executor=audit.executor) if quota.enabled else None
    async with common.kube_client(kubeconfig) as plain:
        kube = CachedKube(plain.core_api, plain.custom_api)
        caches = WatchCache(ns, plain.core_api, plain.custom_api)
        await caches.start()
        ctx = DashboardContext(settings, quota, lifecycle, ns, ledger, audit, caches, kube, hub or HubApi(),
                               publish=publish, golden_namespace=golden_namespace(config, publish),
                               golden_image_namespace=golden_image_namespace(config), economy=GPUEconomy(config=config),
                               gpu_queues=GPUQueues(config=config).all())
        try:
            yield ctx
        finally:
            await caches.stop()
            if ledger is not None:
                ledger.dispose()
            audit.dispose()
