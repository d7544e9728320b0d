"""The hub-wide services: one per hub process, shared by every spawner in it.

:class:`HubServices` holds what a spawner must not own and must not build
per user: the quota service (settings, ledger, enforcer), the audit log on
the ledger's database, the Kubernetes facade over the hub's shared API
clients, the set that keeps background tasks alive, the compute
reconciler (:mod:`.lifecycle.reconciler`) with what it reads (whether each
server of this hub is active), the view of free GPUs
(:mod:`.gpu.capacity`), and the root-disk pools (:mod:`.backends.vm.pool`). The spawner gets
it with :func:`hub_services` on construction; services take explicit
arguments (refs, statuses, frozen settings) and never read a spawner.

The admin commands build their own (:meth:`HubServices.__init__` with the
clients of their kubeconfig); nothing here imports kubespawner or
JupyterHub.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Gauge

from workspacespawner.backends.vm.pool import RootDiskPoolKeeper
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.rootdiskpool import PoolShape, RootDiskPool
from workspacespawner.config.teampools import TeamGPUPools, TeamPool
from workspacespawner.core.prometheus import PrometheusClient
from workspacespawner.core.tasks import BackgroundTasks
from workspacespawner.db.engine import DatabaseUnavailable
from workspacespawner.gpu.capacity import GPUCapacity
from workspacespawner.idle.activity import HubUsers
from workspacespawner.idle.gpupass import IdlePass
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.k8s.cachedkube import CachedKube
from workspacespawner.k8s.kinds import NODE
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.reconciler import ComputeReconciler
from workspacespawner.queue.config import GPUQueue, GPUQueues
from workspacespawner.queue.line import LineReader
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.hubapi import HubApiStopper
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.service import QuotaService

log = logging.getLogger("workspacespawner")

PENDING = Gauge("workspacespawner_pending_writes", "Writes the hub tries again at each reconciler pass (a deleted user's retention)")


class HubServices:
    """Quota, audit, Kubernetes access and background tasks of one hub process.

    ``config``: the hub's traitlets Config (``c``), read for
    ``c.WorkspaceQuota.*``; ``core_api``/``custom_api``: kubernetes_asyncio
    ``CoreV1Api`` and ``CustomObjectsApi`` (the hub's shared clients).
    """

    def __init__(self, config=None, *, core_api=None, custom_api=None):
        #: The card-hour weights (``c.GPUEconomy``), read once for the process.
        self.economy = GPUEconomy(config=config) if config is not None else GPUEconomy()
        #: The team GPU pools by name (``c.TeamGPUPools.pools``), read once for the process: every start and spawn
        #: page reads them, and building the settings object walks the whole config each time.
        self.team_pools: dict[str, TeamPool] = (TeamGPUPools(config=config) if config is not None else TeamGPUPools()).all()
        #: The GPU queues by name (``c.GPUQueues.queues``), read once for the process, and the reader of their lines.
        self.gpu_queues: dict[str, GPUQueue] = (GPUQueues(config=config) if config is not None else GPUQueues()).all()
        self._line_reader: LineReader | None = None
        self.quota = QuotaService(WorkspaceQuota(config=config) if config is not None else WorkspaceQuota(),
                                  economy=self.economy)
        self.audit = AuditLog(self.quota.ledger)
        self.kube = CachedKube(core_api, custom_api) if core_api is not None else None
        self.tasks = BackgroundTasks()
        self._active: dict[tuple[str, str], Callable[[], bool]] = {}
        #: ``(user, server) -> True | None``: whether the hub's database has that server running (True) or not
        #: (None), for the servers whose spawner this process has not built yet (set by
        #: :func:`~workspacespawner.hubtasks.start_hub_tasks`; None: spawners only).
        self.hub_database: Callable[[str, str], bool | None] | None = None
        self._retries: dict[object, Callable[[], Awaitable[bool]]] = {}
        self.reconciler: ComputeReconciler | None = None
        self._gpus: GPUCapacity | None = None
        #: The idle-GPU settings (``c.GPUIdle``) and their pass, once started.
        self.idle_settings = GPUIdle(config=config) if config is not None else GPUIdle()
        self.idle: IdlePass | None = None
        self._idle_refused = False
        #: The root-disk pool settings (``c.RootDiskPool``) and one keeper per namespace, once started.
        self.pool_settings = RootDiskPool(config=config) if config is not None else RootDiskPool()
        self._pools: dict[str, RootDiskPoolKeeper] = {}

    def retry_later(self, key, attempt: Callable[[], Awaitable[bool]]) -> None:
        """Try ``attempt()`` again at each reconciler pass until it returns True (a deleted user's retention write).

        ``key`` names what it writes: a later call with the same key replaces the earlier one.
        """
        self._retries[key] = attempt
        PENDING.set(len(self._retries))

    async def retry_pending(self) -> None:
        """One try of every :meth:`retry_later` attempt; those that succeed are forgotten."""
        for key, attempt in list(self._retries.items()):
            if await attempt():
                self._retries.pop(key, None)
        PENDING.set(len(self._retries))

    def register(self, user: str, server: str, active: Callable[[], bool]) -> None:
        """A server of this hub: ``active()`` says whether the hub has it running, starting or stopping (the latest call wins)."""
        self._active[(user, server)] = active

    def believed_running(self, user: str, server: str) -> bool | None:
        """Whether the hub has ``(user, server)`` running, starting or stopping; None when it is no server of this hub.

        Its spawner's word when this process built it; else the hub's
        database's (a running server whose spawner JupyterHub has not built
        yet at start-up), so an orphan is told from a server on the first pass.
        """
        active = self._active.get((user, server))
        if active is not None:
            return bool(active())
        return None if self.hub_database is None else self.hub_database(user, server)

    def line_reader(self, api_client) -> LineReader:
        """The process's reader of the GPU queues' lines (:class:`~.queue.line.LineReader`), made on the first call
        with ``api_client`` (kubernetes_asyncio's ``ApiClient``): every waiter of the hub shares its reads."""
        if self._line_reader is None:
            self._line_reader = LineReader(api_client)
        return self._line_reader

    def gpu_capacity(self, compute: Callable[[], list | None]) -> GPUCapacity | None:
        """The process's view of free GPUs (:mod:`.gpu.capacity`), made on the first call with ``compute`` (the watch
        caches' Pods and VMIs); None without the Kube facade."""
        if self.kube is None:
            return None
        if self._gpus is None:
            kube = self.kube
            self._gpus = GPUCapacity(lambda: kube.list(NODE, None), compute, declared=self.economy.declared())
        return self._gpus

    def start_reconciler(self, objects: Callable[[], list | None], *, interval: float) -> ComputeReconciler | None:
        """Start the process's compute reconciler once (needs the Kube facade and a running loop); later calls return it."""
        if self.kube is None:
            return None
        if self.reconciler is None:
            self.reconciler = ComputeReconciler(self.kube, objects=objects, believed_running=self.believed_running,
                                                interval=interval, retry=self.retry_pending)
        self.reconciler.start()
        return self.reconciler

    def start_idle_pass(self, objects: Callable[[], tuple[list, list] | None], *,
                        hub_api_url: str | None = None) -> IdlePass | None:
        """Start the process's idle-GPU pass once (:mod:`.idle.gpupass`; needs a running loop); later calls return it.

        ``objects``: the watch caches' ``(pods, vmis)``
        (:func:`~workspacespawner.k8s.watches.pods_and_vmis`). The hub's API is
        reached as the quota enforcer reaches it (``WorkspaceQuota.hub_api_url``,
        else ``hub_api_url``; ``WorkspaceQuota.hub_api_token``). None when
        ``GPUIdle.gpu_idle_timeout`` is 0 or no token is set (logged).
        """
        settings = self.idle_settings
        if not settings.enabled or self._idle_refused:
            return None
        if self.idle is None:
            url = self.quota.settings.hub_api_url or hub_api_url
            token = self.quota.settings.hub_api_token
            if not (url and token):
                log.warning("WorkspaceQuota.hub_api_token is not set: idle GPU servers are neither warned nor stopped")
                self._idle_refused = True  # said once per process
                return None
            prometheus = settings.prometheus()
            if not settings.stops():
                log.warning("No Prometheus for GPUIdle (GPUIdle.prometheus_url): idle GPU servers are warned, not "
                            "stopped (GPUIdle.stop_without_prometheus)")
            self.idle = IdlePass(
                settings, hub=HubUsers(url, token), objects=objects, stop=HubApiStopper(url, token),
                prometheus=PrometheusClient(prometheus) if prometheus else None, quota=self.quota, audit=self.audit,
                declared=self.economy.declared(),
            )
        self.idle.start()
        return self.idle

    def start_root_disk_pool(self, namespace: str, defaults: PoolShape, *, watch=None) -> RootDiskPoolKeeper | None:
        """Start keeping ``namespace``'s root-disk pools (``c.RootDiskPool``) once (needs a running loop); later calls
        return the keeper. ``defaults``: the VM settings a pool entry leaves out; ``watch``: ``async ()`` starting the
        namespace's DataVolume watch, which the keeper reads. None without pools or without the Kube facade."""
        if self.kube is None or not self.pool_settings.ready_disks:
            return None
        keeper = self._pools.get(namespace)
        if keeper is None:
            keeper = self._pools[namespace] = RootDiskPoolKeeper(
                self.kube, namespace, self.pool_settings.entries(defaults), audit=self.audit,
                interval=self.pool_settings.refill_interval, watch=watch,
            )
        keeper.start()
        return keeper

    def root_disk_pool(self, namespace: str) -> RootDiskPoolKeeper | None:
        """The keeper of ``namespace``'s root-disk pools, once :meth:`start_root_disk_pool` ran; else None."""
        return self._pools.get(namespace)

    async def close(self) -> None:
        """Stop the background tasks, the reconciler, the idle-GPU pass, the root-disk pools, the enforcer and the
        database connections."""
        await self.tasks.close()
        for keeper in self._pools.values():
            await keeper.close()
        if self.reconciler is not None:
            await self.reconciler.close()
        if self.idle is not None:
            await self.idle.close()
        await self.quota.close()


def upgrade_database(config) -> str | None:
    """Bring the ledger's and the audit log's database to the newest schema now, while the hub starts.

    Called from ``jupyterhub_config.d/90-check-config.py`` (before the hub
    serves, so no user's first start runs a migration). With quotas off,
    nothing is done (None). A database that cannot be reached is logged and
    left to the first use, as the quota's ``allow_cpu_when_ledger_down``
    expects; returns the revision otherwise.
    """
    settings = WorkspaceQuota(config=config)
    if not settings.enabled:
        return None
    ledger = Ledger(settings.database_url(), timeout=settings.ledger_timeout)
    try:
        return ledger.upgrade()
    except DatabaseUnavailable as e:
        log.error("Could not bring the quota ledger's database up to date at start-up: %s", e)
        return None
    finally:
        ledger.dispose()


_SERVICES: HubServices | None = None


def hub_services(config=None, *, core_api=None, custom_api=None) -> HubServices:
    """The hub process's :class:`HubServices`, built from ``config`` and the clients on the first call."""
    global _SERVICES
    if _SERVICES is None:
        _SERVICES = HubServices(config, core_api=core_api, custom_api=custom_api)
    elif _SERVICES.kube is None and core_api is not None:
        _SERVICES.kube = CachedKube(core_api, custom_api)
    return _SERVICES


def reset_services() -> None:
    """Forget the process's services (tests; the caller closes them)."""
    global _SERVICES
    _SERVICES = None
