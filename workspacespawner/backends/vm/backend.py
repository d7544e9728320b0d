"""VM workspaces: a KubeVirt VirtualMachine whose root disk is a DataVolume cloned from a golden image.

:class:`VMBackend` names the workspace's objects (:class:`~.manifests.VMIdentity`,
kept in the spawner state so a restarted hub finds a running VM) and hands
start, stop and poll to :class:`~.workspace.VMWorkspace`, which drives them
from the shared watch caches. API followed: ``kubevirt.io/v1``
VirtualMachine and VirtualMachineInstance, ``cdi.kubevirt.io/v1beta1``
DataVolume, KubeVirt's ``start``/``stop`` subresources.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from jupyterhub.utils import url_path_join
from kubespawner.clients import shared_client

from workspacespawner import upstream
from workspacespawner.backends.base import Backend, StartContext
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, singleuser_command
from workspacespawner.backends.vm.rootlookup import current_root_disk
from workspacespawner.backends.vm.tiers import VMTiers, vm_tiers
from workspacespawner.backends.vm.vmstatus import VMKindStatus
from workspacespawner.backends.vm.workspace import VMWorkspace, cached_vm_and_disks
from workspacespawner.config.rootdiskpool import PoolShape
from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.core.tasks import BackgroundTasks, with_helpers
from workspacespawner.k8s import watches
from workspacespawner.lifecycle.phases import Observed, Status, WorkspaceRef
from workspacespawner.queue import line
from workspacespawner.queue import start as queued
from workspacespawner.queue.config import GPUQueue
from workspacespawner.storage.prepare import PreparedTiers


@dataclass(frozen=True)
class VMNaming:
    """How a workspace's VM objects are named: the expanded ``vm_name_template`` and who it is for."""

    namespace: str
    user_name: str
    kubespawner_username: str
    base_name: str
    server_name: str = ""


class VMBackend(Backend):
    """A VM workspace. ``settings_for(tiers)`` gives the start's frozen :class:`VMSettings` for its VM tiers.

    ``core_api``/``custom_api``: kubernetes_asyncio ``CoreV1Api`` and
    ``CustomObjectsApi``; ``start_timeout`` in seconds and
    ``fail_fast_unschedulable``, each a value or ``()`` giving it at each
    start (a profile's ``kubespawner_override`` may set them); ``tasks``: where a
    stop that outlives a failed start is kept alive; ``root_disk_size``: a
    new root disk's size (a quantity, for the quota's disk check);
    ``unix_user``: the guest user that runs the IDE; ``pool``: ``()`` giving
    the namespace's :class:`~.pool.RootDiskPoolKeeper` (or None), whose
    ready disk a first start takes instead of cloning; ``image()``: the
    golden image as a sentence names it; ``hub_tasks()``: starts the
    namespace's root-disk pools (once per hub process); ``watch_pods()``:
    starts (or joins) the namespace's shared Pod watch, which holds the VMIs'
    virt-launcher Pods (their scheduling, their guests' serial consoles);
    ``queue(groups)``: the GPU queue a start waits in (None: none), and
    ``wait_in_line(queue, say, pod)``: its wait while Kueue holds the
    virt-launcher Pod, as ``pod()`` gives it
    (:func:`~workspacespawner.queue.start.wait`).
    """

    kind = "vm"

    def __init__(
        self,
        *,
        naming: VMNaming,
        settings_for: Callable[[VMTiers], VMSettings],
        root_disk_size: str,
        core_api,
        custom_api,
        start_timeout: float | Callable[[], float],
        fail_fast_unschedulable: bool | Callable[[], bool],
        tasks: BackgroundTasks,
        unix_user: str = "jovyan",
        pool=None,
        image: Callable[[], str] = lambda: "the VM golden image",
        hub_tasks: Callable[[], object] = lambda: None,
        watch_pods: Callable[[], Awaitable[object]] | None = None,
        queue: Callable[[frozenset[str]], GPUQueue | None] = lambda groups: None,
        wait_in_line: Callable[..., Awaitable[None]] | None = None,
    ):
        self.naming = naming
        #: ``pool()``: the namespace's :class:`~.pool.RootDiskPoolKeeper`, or None (no pool)
        self.pool = pool or (lambda: None)
        self.unix_user = unix_user
        self.settings_for = settings_for
        self.root_disk_size = root_disk_size
        self.core_api = core_api
        self.custom_api = custom_api
        self.start_timeout = start_timeout
        self.fail_fast_unschedulable = fail_fast_unschedulable
        self.tasks = tasks
        self.ident: VMIdentity | None = None
        self._status = VMKindStatus()
        self._image = image
        self._hub_tasks = hub_tasks
        self._watch_pods = watch_pods
        self.queue = queue
        self._wait_in_line = wait_in_line

    def _identity(self, home_pvc: str | None, fresh: bool) -> VMIdentity:
        """The workspace's names; ``fresh``: from the current templates, its root disk as the watch caches show it
        (:func:`.rootdisk.current_root_disk`: the VM's, else the one of its slot, else ``<vm>-root``)."""
        if fresh or self.ident is None:
            self.ident, _ = self._cached_identity(home_pvc)
        return self.ident

    def _cached_identity(self, home_pvc: str | None) -> tuple[VMIdentity, list[dict]]:
        """The workspace's names from the current templates, its root disk as the watch caches show it, and the
        namespace's cached DataVolumes."""
        n = self.naming
        ident = VMIdentity.for_workspace(
            namespace=n.namespace,
            user_name=n.user_name,
            kubespawner_username=n.kubespawner_username,
            base_name=n.base_name,
            home_pvc=home_pvc or "",
            server_name=n.server_name,
        )
        vm, datavolumes = cached_vm_and_disks(ident)
        return replace(ident, root_disk=current_root_disk(ident, vm, datavolumes)), datavolumes

    def cached_root_disk(self) -> dict | None:
        """The workspace's root DataVolume (``cdi.kubevirt.io/v1beta1``) as the shared watch caches hold it now; None
        when it has none yet or those watches do not run (:meth:`watch` starts them). Reads only: the names a start
        keeps are left alone."""
        ident, datavolumes = self._cached_identity(None)
        return next((dv for dv in datavolumes if (dv.get("metadata") or {}).get("name") == ident.root_disk
                     and names.owned_by(dv.get("metadata") or {}, ident.user_name)), None)

    async def watched_root_disk(self, log) -> dict | None:
        """:meth:`cached_root_disk` once the VM and DataVolume watches run (:meth:`watch` starts them), for the spawn
        page; None when they cannot start (logged to ``log``)."""
        try:
            await self.watch()
        except Exception as e:
            log.warning("The VM and DataVolume watches of %s cannot start (%s): no root disk shown", self.naming.namespace, e)
            return None
        return self.cached_root_disk()

    def use_root_disk(self, name: str) -> None:
        """From now on the workspace's root disk is DataVolume ``name`` (a pool disk this start claimed)."""
        if self.ident is not None:
            self.ident = replace(self.ident, root_disk=name)

    def ref(self, *, home_pvc: str | None, fresh: bool = False) -> WorkspaceRef:
        ident = self._identity(home_pvc, fresh)
        return WorkspaceRef(
            namespace=ident.namespace,
            user_name=ident.user_name,
            server_name=ident.server_name,
            home_pvc=home_pvc,
            root_disk=ident.root_disk,
            vm=ident.vm,
        )

    def new_disk_bytes(self, existing: set[str]) -> int:
        root = self.ident.root_disk if self.ident else f"{self.naming.base_name}-root"
        return 0 if root in existing else int(parse_quantity(self.root_disk_size))

    def compute_status(self, observed: Observed) -> Status | None:
        return self._status.compute_status(observed)

    def root_disk_status(self, observed: Observed) -> Status | None:
        return self._status.root_disk_status(observed)

    def _workspace(self, settings: VMSettings | None = None) -> VMWorkspace:
        return VMWorkspace(
            ident=self.ident or self._identity(None, False),
            settings=settings,
            custom_api=self.custom_api,
            core_api=self.core_api,
            start_timeout=_now(self.start_timeout),
            fail_fast_unschedulable=_now(self.fail_fast_unschedulable),
            tasks=self.tasks,
            pool=self.pool() if settings is not None else None,
            on_root_disk=self.use_root_disk,
            image=self._image(),
        )

    async def fence(self, say=None) -> None:
        """At most one guest per root disk: see :meth:`.workspace.VMWorkspace.fence`. Called as this server starts,
        which the hub shows stopped: a guest still up is a ghost of a stop that failed, stopped first."""
        await self._workspace().fence(ghost=True, say=say)

    async def start(self, ctx: StartContext) -> str:
        """Ensure the root disk, VM, cloud-init Secret and Service, call ``start``; return ``http://<Service IP>:8888``.

        A start that waits in a GPU queue gives the VMI the queue's labels
        (KubeVirt copies them to the virt-launcher Pod, which Kueue then holds
        at its gate) and follows the Pod in line beside the start, as a
        container's start does."""
        result = vm_tiers(settings=ctx.tiers.settings, groups_of_user=ctx.tiers.groups, unavailable=ctx.tiers.unavailable)
        for message in result.left_out:
            ctx.say(message)
        env = ctx.env()
        settings = replace(self.settings_for(result), ready_path=url_path_join(env["JUPYTERHUB_SERVICE_PREFIX"], "api"))
        if self._watch_pods is not None:
            await self._watch_pods()
        queue = self.queue(ctx.tiers.groups) if self._wait_in_line is not None else None
        workspace = self._workspace(settings)
        start = workspace.start(
            env=env,
            command=singleuser_command(ctx.command(), ctx.args()),
            progress=ctx.say,
            home_mount_path=ctx.home_mount_path,
            unix_user=self.unix_user,
            extra_labels={**dict(ctx.extra_labels or {}), **line.pod_labels(queue)},
            claim_disks=ctx.claim_disks,
            new_disk_annotations=ctx.new_disk_annotations,
            recorded=ctx.recorded,
        )
        if queue is None:
            return await start
        # the wait in line ends before the start does: its run is open once the guest's Pod runs (the gate is gone)
        return await with_helpers(start, [self._wait_in_line(queue, ctx.say, workspace.cached_launcher)], then=0)

    async def watch(self) -> None:
        """Start (or join) the namespace's VM, VMI, DataVolume and VMI Event watches (see :meth:`.VMWorkspace.watch`)."""
        await self._workspace().watch()

    async def stop(self, now: bool = False) -> None:
        await self._workspace().stop()

    async def poll(self) -> int | None:
        return await self._workspace().poll()

    def compute_events(self) -> list[dict]:
        return self._workspace().cached_vmi_events() if self.ident else []

    def event_object(self) -> dict:
        vm = self.ident.vm if self.ident else self.naming.base_name
        return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm}

    def start_hub_tasks(self) -> None:
        self._hub_tasks()

    def tier_env(self, tiers: PreparedTiers) -> dict[str, str]:
        return tiers.env(vm=True)

    def image(self) -> str:
        return self._image()

    def keeps_disks(self) -> bool:
        return self.ident is not None

    def state(self) -> dict:
        return {"vm": self.ident.to_state()} if self.ident else {}

    def load_state(self, state: dict) -> None:
        if state.get("vm"):
            self.ident = VMIdentity.from_state(state["vm"])


def _now(setting):
    """A setting given as a value, or as ``()`` that gives it now."""
    return setting() if callable(setting) else setting


def for_spawner(spawner, *, placement: Callable[[], object]) -> VMBackend:
    """The VM backend of ``spawner`` (a WorkspaceSpawner: its ``vm_*`` settings, applied profile and hub services);
    ``placement()``: where the start's VM may and should run (a :class:`~workspacespawner.gpu.placement.Placement`)."""
    s = spawner
    naming = VMNaming(s.namespace, s.user.name, upstream.expand(s, "{username}"), upstream.expand(s, s.vm_name_template),
                      s.name or "")
    custom_api = shared_client("CustomObjectsApi")

    def start_pool():
        shape = PoolShape("", s.vm_golden_image_namespace, s.vm_root_disk_size, s.vm_storage_class, s.vm_volume_mode)
        s.services.start_root_disk_pool(s.namespace, shape, watch=lambda: watches.shared_reflector(
            watches.DataVolumeReflector, s.namespace, custom_api=shared_client("CustomObjectsApi")))

    return VMBackend(
        naming=naming,
        settings_for=lambda tiers: dataclasses.replace(s.vm_settings(s.profile, tiers), placement=placement()),
        root_disk_size=s.vm_root_disk_size, core_api=s.api, custom_api=custom_api,
        start_timeout=lambda: max(s.start_timeout - 5, 1), fail_fast_unschedulable=lambda: s.fail_fast_unschedulable,
        tasks=s.services.tasks, unix_user=s.vm_unix_user, pool=lambda: s.services.root_disk_pool(s.namespace),
        image=lambda: f"VM golden image {s.vm_golden_image}", hub_tasks=start_pool,
        watch_pods=lambda: upstream.watch_pods(s), queue=lambda groups: queued.queue_of(s, groups),
        wait_in_line=lambda queue, say, pod: queued.wait(s, queue, say, pod=pod),
    )
