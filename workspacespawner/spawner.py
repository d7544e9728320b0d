"""WorkspaceSpawner: kubespawner's KubeSpawner with persistent workspaces. Orchestration only.

What a start does, in order (the one place each step is called from):

1. ``run_pre_spawn_hook`` (JupyterHub calls it before ``start``): apply the
   chosen profile fresh (:mod:`.useroptions`), pick the backend for its
   ``workspace_kind`` (the only kind switch), run the admin's own
   ``pre_spawn_hook``, find the home by owner label, check and reserve the
   quota (:mod:`.quota`);
2. ``start``: the lifecycle's checks and fence (:mod:`.workspace.tracker`),
   the home PersistentVolumeClaim (:mod:`.storage.home`), the storage tiers
   (:mod:`.storage.prepare`), then the backend's compute
   (:mod:`.backends.container`, :mod:`.backends.vm`); the reservation
   becomes a metered run right before compute is created (released if the
   start fails before that);
3. for a code-server profile, once the backend's server runs: code-server
   really runs behind it (:mod:`.backends.codeserver`, see
   :meth:`WorkspaceSpawner._check_code_server`).

``stop`` stops compute only; disks are never deleted here. A run is
closed only once its compute is observed gone in the shared watch caches. Deletion of a
user or server moves its disks to ``Retained``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from functools import partial

from jupyterhub.utils import make_ssl_context, url_path_join
from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from traitlets import default

from workspacespawner import useroptions
from workspacespawner.backends import codeserver
from workspacespawner.backends.base import Backend, StartContext
from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.backends.vm.backend import VMBackend, VMNaming
from workspacespawner.backends.vm.manifests import singleuser_command
from workspacespawner.backends.vm.traits import VMTraits
from workspacespawner.config.check import check_spawner_config, merged_settings
from workspacespawner.config.goldenimages import GoldenImages
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.imagepublish import publish_settings
from workspacespawner.config.placement import PlacementTraits
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.config.rootdiskpool import PoolShape, RootDiskPool
from workspacespawner.config.teampools import TeamGPUPools, check_profile_pools
from workspacespawner.config.workspace import IDE_ENV, KubeSpawnerGuards, WorkspaceTraits
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.milestones import Milestone
from workspacespawner.hubcompat import as_spawn_failure, options_sent
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.k8s import events, watches
from workspacespawner.k8s.kinds import PVC
from workspacespawner.k8s.objects import node_of
from workspacespawner.k8s.owned import forbidden_error, outage_error
from workspacespawner.quota.enforcer import alive_from_objects
from workspacespawner.quota.request import reserve_start
from workspacespawner.quota.service import TrackedWorkspace
from workspacespawner.services import hub_services
from workspacespawner.spawnpage import form as spawnpage_form
from workspacespawner.startprogress import StartSteps
from workspacespawner.storage import home
from workspacespawner.storage.prepare import PreparedTiers, prepare_tiers
from workspacespawner.storage.settings import check_storage_config
from workspacespawner.storage.traits import HomeTraits, StorageTraits
from workspacespawner.workspace import attach, disks, gpus, lifecycle, placement, poolholders
from workspacespawner.workspace.lifecycle import Phase, Status
from workspacespawner.workspace.tracker import LifecycleSettings, WorkspaceLifecycle
from workspacespawner.workspace.traits import LifecycleTraits

#: Bumped when the meaning of get_state() changes; load_state() reads older ones.
STATE_VERSION = 1

#: Seconds of ``start_timeout`` a code-server check leaves for the rest of the start.
CHECK_MARGIN = 5


class WorkspaceSpawner(KubeSpawner, KubeSpawnerGuards, WorkspaceTraits, HomeTraits, StorageTraits, LifecycleTraits, VMTraits,
                       PlacementTraits):
    """A KubeSpawner whose workspaces keep a persistent home volume and run a profile's IDE, as a Pod or a VM.

    Configure it as ``c.JupyterHub.spawner_class = "workspace"``; every
    ``c.KubeSpawner.*`` setting applies unchanged (it is a subclass), and
    its own settings are ``c.WorkspaceSpawner.*`` (the trait classes it
    mixes in have no config section of their own).
    """

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return lambda spawner, options: useroptions.refuse_bad_options(spawner, options, sent=options_sent(spawner))

    @default("options_form")
    def _options_form_default(self):
        if not self.profile_list:
            return ""
        return spawnpage_form.options_form

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage_pvc_ensure = self.delete_pvc = False
        self.services = hub_services(self.config, core_api=self.api, custom_api=shared_client("CustomObjectsApi"))
        self.home_pvc_name = self._expand_user_properties(self.home_pvc_name_template)
        self.profile: ResolvedProfile | None = None
        self.reservation = None
        self._configured: dict = {}
        #: The initialized profile_list the ``apply_user_options`` hook checked for this start, which the start then
        #: applies (:func:`~.useroptions.apply_chosen_profile`, which takes it); None before the hook and after.
        self.checked_profiles: list[dict] | None = None
        self._options_loaded = self._prepared = False
        #: This start asked for compute (its run opened); a failed one that did not leaves nothing for stop() to wait on.
        self._compute_asked = self._refused_before_compute = False
        self._tiers: PreparedTiers | None = None
        self.steps = StartSteps()
        self._container, self._vm = ContainerBackend(self), self._vm_backend()
        self.backend: Backend = self._container
        settings = LifecycleSettings(self.retention_days, self.reclaim_policy, self.fence_wait_seconds, float(self.start_timeout))
        self.lifecycle = WorkspaceLifecycle(
            kube=self.services.kube, audit=self.services.audit, kind=self.backend, settings=settings, label=self._log_name
        )
        self.services.register(self.user.name, self.name or "", lambda: self.active)
        self._start_hub_tasks()

    def _start_hub_tasks(self) -> None:
        """Start the hub's compute reconciler, root-disk pools, quota enforcer and idle-GPU pass on the running loop
        (once per hub process).

        JupyterHub builds spawners on its loop, so they start with the first
        spawner (at hub start-up, with its running servers'), not only at
        the first start.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.services.start_reconciler(watches.compute_objects, interval=self.reconcile_interval)
        self.services.start_root_disk_pool(
            self.namespace,
            PoolShape("", self.vm_golden_image_namespace, self.vm_root_disk_size, self.vm_storage_class, self.vm_volume_mode),
            watch=lambda: watches.shared_reflector(watches.DataVolumeReflector, self.namespace,
                                                   custom_api=shared_client("CustomObjectsApi")),
        )
        if self.hub is not None:
            self.services.quota.start_enforcer(hub_api_url=self.hub.api_url, alive=_alive_workspaces)
            self.services.start_idle_pass(watches.pods_and_vmis, hub_api_url=self.hub.api_url)

    def _vm_backend(self) -> VMBackend:
        naming = VMNaming(
            self.namespace, self.user.name, self._expand_user_properties("{username}"),
            self._expand_user_properties(self.vm_name_template), self.name or "",
        )
        return VMBackend(
            naming=naming,
            settings_for=lambda tiers: dataclasses.replace(self.vm_settings(self.profile, tiers), placement=self.workspace_placement()),
            root_disk_size=self.vm_root_disk_size, core_api=self.api, custom_api=shared_client("CustomObjectsApi"),
            start_timeout=max(self.start_timeout - 5, 1), fail_fast_unschedulable=self.fail_fast_unschedulable,
            tasks=self.services.tasks, unix_user=self.vm_unix_user,
            pool=lambda: self.services.root_disk_pool(self.namespace),
        )

    def _use_backend(self, kind: str) -> None:
        """Pick the backend of ``kind`` (``container`` or ``vm``): the only place the kind is switched on."""
        self.backend = self._vm if kind == "vm" else self._container
        self.lifecycle.kind = self.backend

    def _ref(self, **kwargs):
        return self.backend.ref(home_pvc=self.home_pvc_name, **kwargs)

    def get_state(self):
        """kubespawner's state plus the home PVC name, the resolved profile, the VM's names and the phase (JSON only)."""
        state = super().get_state()
        state.update(workspacespawner_state_version=STATE_VERSION, home_pvc_name=self.home_pvc_name)
        if self.profile is not None:
            state["profile"] = self.profile.to_state()
        state.update(self._vm.state() if self.backend is self._vm else {}, **self.lifecycle.state())
        return state

    def load_state(self, state):
        """Restore what :meth:`get_state` saved, so a restarted hub finds running servers and their disks."""
        super().load_state(state)
        self.home_pvc_name = state.get("home_pvc_name") or self.home_pvc_name
        if state.get("profile"):
            try:
                self.profile = ResolvedProfile.from_state(state["profile"])
            except TypeError:
                self.log.warning("Ignoring saved profile of %s in an unknown shape", self._log_name)
        self._vm.load_state(state)
        self._use_backend(self.profile.workspace_kind if self.profile else "container")
        self.lifecycle.load_state(state)

    async def poll(self):
        """None while the workspace runs or starts; an exit status once it is gone (from the shared caches).

        A Pod cache whose watch gave up is replaced first, never read; while
        the API server cannot be reached no answer is known: None, as
        kubespawner answers before its first load.
        """
        if self.backend is self._container:
            try:
                await self._start_watching_pods()
            except Exception as e:
                self.log.warning("Cannot poll %s while its watch is down: %s", self._log_name, e)
                return None
        return await self.backend.poll()

    async def _start_reflector(self, kind, reflector_class, replace=False, **kwargs):
        """kubespawner's shared reflector of ``kind``, replaced when its watch gave up (kubespawner would hand out the dead one).

        Its Pod and Event reflectors start as their interning subclasses
        (:data:`~workspacespawner.k8s.watches.INTERNING_REFLECTORS`): the same watch, a cache that keeps each repeated
        string once.
        """
        reflector_class = watches.INTERNING_REFLECTORS.get(reflector_class, reflector_class)
        previous = self.__class__.reflectors.get(self._get_reflector_key(kind))
        if previous is not None and not watches.alive(previous):
            self.log.warning("The %s watch of %s gave up; starting a new one", kind, self.namespace)
            replace = True
        return await super()._start_reflector(kind, reflector_class, replace=replace, **kwargs)

    async def stop(self, now=False):
        """Stop compute only: the Pod, or the VM (its VMI). Disks, the VM object and its Service stay.

        Inside a start (kubespawner stops a Pod of the same name when its
        create answers 409 AlreadyExists, then creates it again) only the
        old compute goes: the run and the phase stay the start's. After a
        start that failed before asking for compute (a quota refusal, an API
        outage during the pre-spawn check, a fence refusal: the old Pod stuck
        on a lost node), JupyterHub's cleanup stops nothing, so the refusal
        reaches the user at once. The run closes once the compute is
        observed gone (see :meth:`_close_run_if_gone`).
        """
        if self.lifecycle.starting:
            await self.backend.stop(now)
            return
        if self._refused_before_compute:  # JupyterHub's cleanup of a start refused before it made anything
            self.log.info("The start of %s made no compute; nothing to stop", self._log_name)
            return
        await self.lifecycle.stopping(self._ref())
        await self.backend.stop(now)
        await self._close_run_if_gone()

    async def run_post_stop_hook(self):
        """Close the metered run and record the phase also when JupyterHub found the server gone (it then skips stop()).

        After a start refused before it asked for compute, JupyterHub's
        cleanup records nothing: the refusal changed nothing in the cluster
        (a failed ``start`` already recorded what the cluster shows), and
        the cleanup must not wait on the API server (during an outage its
        retries outlast JupyterHub's ``slow_spawn_timeout``, which then
        answers the spawn with a bare 500 instead of the refusal).
        """
        refused, self._refused_before_compute = self._refused_before_compute, False
        await self._close_run_if_gone(gone=True)
        if not refused:
            await self.lifecycle.stopped(self._ref())
        return await useroptions.maybe_await(super().run_post_stop_hook())

    async def delete_forever(self):
        """The user or named server is deleted: its disks go to Retained (a home the default server shares stays)."""
        if self.backend is not self._vm and self._vm.ident is not None:
            self._use_backend("vm")  # an earlier VM start left a root disk: retain it too
        shared = home.home_is_shared(self.home_pvc_name_template, self.name or "")
        ref = self.backend.ref(home_pvc=None if shared else self.home_pvc_name)
        if not await self.lifecycle.delete_forever(ref):  # the API refused: the reconciler tries again at each pass
            self.services.retry_later(("retain", ref), partial(self.lifecycle.delete_forever, ref))

    async def _close_run_if_gone(self, *, gone: bool = False) -> None:
        """Close the server's run (now, or at its last sighting if ``gone``) unless the watch caches still hold its compute.

        Compute that is still there (a stop whose DELETE kept failing) stays
        metered: the enforcer's reconciliation closes the run once it is gone.
        """
        alive = _alive_workspaces()
        if alive is not None and (self.user.name, self.name or "") in alive:
            self.log.warning("The compute of %s is still there: its run stays open until it is gone", self._log_name)
            return
        await self.services.quota.stopped(self.user.name, self.name, gone=gone)

    def options_from_form(self, formdata):
        """Turn the spawn form into user_options, refusing a tampered form with 400/403 before anything starts."""
        options = self._options_from_form(formdata)
        useroptions.check_form_options(self, options)
        return options

    async def load_user_options(self):
        """Apply the chosen profile fresh and pick its backend (once per start; kubespawner's _start calls it again)."""
        if not self._options_loaded:
            self.profile = await useroptions.apply_chosen_profile(self, self._configured)
            self._use_backend(self.profile.workspace_kind)

    async def run_pre_spawn_hook(self):
        """Before ``start``: resolve the profile, run the admin's ``pre_spawn_hook``, then check and reserve the quota.

        The admin's hook runs after the profile is applied (it sees and may
        adjust the resolved settings) and before the quota check (which
        counts what it left). A refusal shows on the spawn page and does not
        count toward the consecutive-failure limit.
        """
        self.reservation = None
        self._refused_before_compute = True  # until the hook returns: a refusal here makes nothing to clean up
        await self.load_user_options()
        await useroptions.maybe_await(super().run_pre_spawn_hook())
        self.profile = useroptions.resolve_profile(self, {"slug": self.profile.slug, "display_name": self.profile.display_name})
        try:
            await self._reserve()
        except Exception as e:
            self._raise_for_user(e)
        self._prepared = True
        self._refused_before_compute = False

    async def _gpu_pools(self, pool: str = "") -> dict[tuple[str, str], gpus.GPUPool] | None:
        """The GPUs free now by resource and type (:class:`~.workspace.gpus.GPUCapacity`), or None when that cannot be known.

        ``pool``: a team pool's name: its nodes' GPUs only; ``""``: the GPUs
        outside every team pool (what a profile of no pool may use). The
        namespace's Pod and VMI watches start here if no start has started
        them yet (after a hub restart, the first page view), so a running
        VM's GPUs are never missed.
        """
        capacity = self.services.gpu_capacity(watches.compute_objects)
        if capacity is None or not await self._watch_workspaces():
            return None
        pools = useroptions.team_pools(self)
        if pool:
            return await capacity.pools(pools[pool].holds) if pool in pools else None
        return await capacity.pools(lambda node: not any(p.holds(node) for p in pools.values()))

    async def pool_use(self, pool: str, resource: str) -> poolholders.PoolUse | None:
        """Team pool ``pool`` now: its units of GPU ``resource`` free and who holds them
        (:func:`~.workspace.poolholders.pool_use`, from the shared caches), or None when that cannot be known."""
        capacity = self.services.gpu_capacity(watches.compute_objects)
        found = useroptions.team_pools(self).get(pool)
        if found is None or capacity is None or not await self._watch_workspaces():
            return None
        compute, nodes = capacity.compute(), await capacity.nodes()
        if compute is None or nodes is None:
            return None
        return poolholders.pool_use(found, nodes, compute, resource, capacity.declared)

    async def cached_root_disk(self) -> dict | None:
        """This server's VM root DataVolume as the shared watch caches hold it (:meth:`.VMBackend.cached_root_disk`),
        for the spawn page; None when it has none, or when the VM and DataVolume watches cannot start (logged)."""
        try:
            await self._vm.watch()
        except Exception as e:
            self.log.warning("The VM and DataVolume watches of %s cannot start (%s): no root disk shown", self.namespace, e)
            return None
        return self._vm.cached_root_disk()

    def workspace_placement(self) -> placement.Placement:
        """Where this start's compute may and should run (:func:`~.workspace.placement.placement`), from the profile
        applied now: its team pool, ``prefer_cheaper_gpus`` and ``spread_gpu_workspaces``.

        Raises :class:`~.core.errors.WorkspaceError` (500) for a ``team_pool`` that is not a configured pool (a
        callable profile_list the start-up check could not see).
        """
        pools = useroptions.team_pools(self)
        if self.team_pool and self.team_pool not in pools:
            raise WorkspaceError(f"The profile's team pool {self.team_pool!r} is not configured; please tell an "
                                 "administrator (c.TeamGPUPools.pools).", reason="misconfigured", status_code=500)
        profile = self.profile
        gpu_count = profile.gpus if profile else 0
        resource = profile.gpu_resource if profile else gpus.GPU_RESOURCE
        return placement.placement(
            user_name=self.user.name, gpus=gpu_count, pool=pools.get(self.team_pool), pools=pools.values(),
            product=profile.gpu_product if profile else None,
            products_by_cost=self.services.economy.products_by_cost(resource),
            prefer_cheaper=self.prefer_cheaper_gpus, spread=self.spread_gpu_workspaces,
        )

    async def _watch_workspaces(self) -> bool:
        """Start (or join) the namespace's shared Pod, VMI and PVC watches (and a VM start's VM and DataVolume
        watches), which the hot path reads
        (:class:`~.k8s.cachedkube.CachedKube`); False, logged, when they cannot start (API down, no permission):
        reads then go to the API server."""
        try:
            await self._start_watching_pods()
            await watches.shared_reflector(watches.VirtualMachineInstanceReflector, self.namespace,
                                           custom_api=shared_client("CustomObjectsApi"))
            await watches.shared_reflector(watches.PersistentVolumeClaimReflector, self.namespace,
                                           core_api=shared_client("CoreV1Api"))
            if self.backend is self._vm:
                await self._vm.watch()
        except Exception as e:
            self.log.warning("The Pod, VMI and PVC watches of %s cannot start (%s): reading from the API server",
                             self.namespace, e)
            return False
        return True

    async def _with_gpu_numbers(self, error: BaseException) -> BaseException:
        """A refusal for want of a node, for a GPU profile whose GPUs are taken, reworded with the numbers
        (:func:`.workspace.gpus.shortage`; the scheduler's words stay in the log); any other error as it is."""
        profile = self.profile
        if not (isinstance(error, WorkspaceError) and error.reason == "unschedulable" and profile and profile.gpus):
            return error
        pools = await self._gpu_pools(self.team_pool)
        pool = gpus.pool_for(pools, profile.gpu_product, profile.gpu_resource) if pools is not None else None
        sentence = gpus.shortage(pool, profile.gpus) if pool is not None else None
        if sentence is None:
            return error
        self.log.info("%s: %s (the scheduler: %s)", self._log_name, sentence, error.detail)
        advice = "Try a CPU profile or one with fewer GPUs, or try again later."
        if self.team_pool and (use := await self.pool_use(self.team_pool, profile.gpu_resource)) is not None:
            advice = f"{poolholders.describe(use)} Ask them, or try again later."
        return WorkspaceError(f"{sentence} {advice}", reason=error.reason, status_code=error.status_code,
                              log_message=error.detail)

    def _raise_for_user(self, error: BaseException) -> None:
        """Re-raise ``error`` as the spawn page should show it: a refusal, an API outage or the hub's own lack of a
        permission in words, else as it is."""
        in_words = error if isinstance(error, WorkspaceError) else outage_error(error) or forbidden_error(error)
        if in_words is None:
            raise error
        raise as_spawn_failure(in_words, self) from error

    async def _reserve(self) -> None:
        quota = self.services.quota
        await self._watch_workspaces()
        self.home_pvc_name = await home.find_home(
            self.services.kube, namespace=self.namespace, user_name=self.user.name,
            slot=self._expand_user_properties(self.home_pvc_name_template), template=self.home_pvc_name_template,
            server=self.name or "",
        )
        self.backend.ref(home_pvc=self.home_pvc_name, fresh=True)  # names of a new start, from the current templates
        groups = useroptions.group_names(self)
        quota.track(TrackedWorkspace(self.user.name, self.name or "", self.namespace, self.backend.event_object(),
                                     frozenset(groups), self.api))
        self.reservation = await reserve_start(quota, self.services.kube, namespace=self.namespace, user_name=self.user.name,
                                               groups=groups, profile=self.profile, server_name=self.name,
                                               home_pvc=self.home_pvc_name, home_size=self.home_size, backend=self.backend)

    async def _start(self):
        began = time.monotonic()
        self.steps.reset()
        self._start_hub_tasks()
        self._compute_asked = self._refused_before_compute = False
        try:
            if not self._prepared:  # started without JupyterHub's spawn (no pre-spawn hook): do its part here
                await self.run_pre_spawn_hook()
            self._prepared = False
            url = await self._start_workspace()
            await self._price_on_node()
            if self.ide == "code-server":
                await self._check_code_server(url, deadline=began + self.start_timeout - CHECK_MARGIN)
        except BaseException as e:
            self._refused_before_compute = not self._compute_asked
            await self.services.quota.release(self.reservation)
            await self.lifecycle.start_failed(self._ref(), e)
            self._raise_for_user(await self._with_gpu_numbers(e))
        finally:
            self.services.quota.start_done(self.user.name, self.name or "")
        await self.lifecycle.running(self._ref())
        return url

    async def _price_on_node(self) -> None:
        """The compute is placed: price this start's run at its node's GPU type (:meth:`QuotaService.placed`).

        The node is the Pod's ``spec.nodeName`` or the VMI's
        ``status.nodeName`` as the shared watch caches hold them, its type the
        ``nvidia.com/gpu.product`` label in the hub's shared Node list: no API
        call of its own. A profile that names its product was priced when
        reserved; a failure here leaves the provisional weight and never
        fails the start.
        """
        profile = self.profile
        if not (profile and profile.gpus) or profile.gpu_product or not self.services.quota.enabled:
            return
        server = self.name or ""
        try:
            mine = (obj for obj in watches.compute_objects() or () if names.server_of(obj.get("metadata") or {}) == (self.user.name, server))
            node = next(filter(None, map(node_of, mine)), None)
            capacity = self.services.gpu_capacity(watches.compute_objects)
            if node is not None and capacity is not None:
                await self.services.quota.placed(self.user.name, server, await capacity.product_of(node))
        except Exception as e:  # the price stays provisional (the most it may cost); the start goes on
            self.log.warning("Could not price the run of %s at its node's GPU type: %s", self._log_name, e)

    async def _start_workspace(self) -> str:
        """Fence, ensure the home volume and the tiers, then start the backend's compute; return the server URL."""
        ref = self._ref()
        self.steps.say("Start accepted; preparing your workspace", Milestone.ACCEPTED)  # the quota check passed
        await self.lifecycle.before_start(ref, fence_own=self.backend.fence, say=self.steps.say)
        pvc = await self._home_pvc()
        if (phase := (pvc.get("status") or {}).get("phase", "Pending")) == "Bound":
            self.steps.say(f"Home volume {self.home_pvc_name} ready", Milestone.HOME_READY)
        else:
            self.steps.say(f"Home volume {self.home_pvc_name} created ({phase}; it binds when your server is placed on a node)")
        groups = useroptions.group_names(self)
        limit = disks.disk_limit(self.services.quota.settings, self.user.name, groups, self.disk_limit)
        await self.lifecycle.disks_ready(ref, pvc, home_size=self.home_size, limit=limit, server=self.name or "", say=self.steps.say)
        await self.lifecycle.claim_disks(ref)
        self._compute_asked = True
        await self.services.quota.running(self.reservation)  # before any compute can exist
        self._tiers = await prepare_tiers(self.api, namespace=self.namespace, settings=self.storage_settings(),
                                          groups=groups, say=self.steps.say)
        recorded, claim = self._made_now()
        ctx = StartContext(
            env=self.get_env, command=lambda: singleuser_command(self.cmd or ["jupyterhub-singleuser"], self.get_args()),
            tiers=self._tiers, home_mount_path=self.home_mount_path, say=self.steps.say,
            extra_labels=self._build_common_labels(self._expand_all(self.extra_labels)),
            claim_disks=lambda: self.lifecycle.claim_disks(self._ref()),
            new_disk_annotations=claim,
            recorded=recorded,
        )
        return await self.backend.start(ctx)

    async def _check_code_server(self, url: str, *, deadline: float) -> None:
        """A code-server profile's server, at ``url`` (what the backend's start returned), really runs code-server.

        Called by :meth:`_start` once the backend's start returned, so inside
        ``start``: a missing code-server fails the start like any other failure
        of it (the message on the spawn page and in the REST API's progress,
        the server stopped by JupyterHub's cleanup, no disk touched), and the
        user is never sent to a bare 500 at ``/vscode/``. JupyterHub has no
        hook after its own wait for the server, and that wait only asks
        ``/api``. The check asks the server's own address directly (not
        through the proxy, whose route JupyterHub adds later) at its base URL
        plus :attr:`code_server_url`, with the server's API token, until it
        answers (:func:`.backends.codeserver.check`). It waits at most
        :attr:`code_server_check_timeout` and never past ``deadline``, a few
        seconds before ``start_timeout``, so JupyterHub's ``start_timeout``
        keeps its meaning; a server that has not answered by then is left to
        JupyterHub's own wait (``http_timeout``), as for any other profile.
        """
        if self.server is None or not self.api_token:  # started outside JupyterHub's spawn: nothing to ask with
            return
        deadline = min(deadline, time.monotonic() + self.code_server_check_timeout)
        if deadline <= time.monotonic():
            self.log.warning("No time left in start_timeout to check code-server of %s", self._log_name)
            return
        self.steps.say("Starting VS Code (code-server) in your server")
        profile = self.profile.display_name if self.profile else "code-server"
        image = self.image if self.backend is self._container else f"VM golden image {self.vm_golden_image}"
        await codeserver.check(
            url.rstrip("/") + url_path_join(self.server.base_url, self.code_server_url),
            token=self.api_token, deadline=deadline, server_log=self.backend.server_log,
            failure=lambda line: codeserver.missing_error(profile=profile, image=image, log_line=line),
            ssl_options=self._server_ssl_context() if url.startswith("https:") else None, logger=self.log,
        )

    def _server_ssl_context(self):
        """The hub's client context for a server behind JupyterHub's internal SSL (as JupyterHub's own wait uses)."""
        settings = getattr(self.user, "settings", None) or {}
        return make_ssl_context(settings.get("internal_ssl_key"), settings.get("internal_ssl_cert"),
                                cafile=settings.get("internal_ssl_ca"))

    def _made_now(self) -> tuple[Status, dict[str, str]]:
        """What a disk or VM this start makes is created with: the lifecycle status ``Stopped`` (its compute shows
        the rest) and, for a disk, this start's attach claim (:func:`~.workspace.attach.claim_annotation`)."""
        now = lifecycle.utcnow().replace(microsecond=0)
        return Status(Phase.STOPPED, since=now, server=self.name or ""), attach.claim_annotation(self._ref(), now)

    async def _home_pvc(self) -> dict:
        """The home PVC: as the PVC watch holds it when it is the user's, else read, or made (already ``Stopped``)."""
        kube = self.services.kube
        known, pvc = kube.peek(PVC, self.namespace, self.home_pvc_name)
        if known and pvc is not None and names.owned_by(pvc["metadata"], self.user.name):
            return pvc
        recorded, claim = self._made_now()
        manifest = home.make_home_pvc(
            name=self.home_pvc_name, namespace=self.namespace, user_name=self.user.name,
            kubespawner_username=self._expand_user_properties("{username}"), storage_class=self.home_storage_class,
            size=self.home_size, access_modes=self.home_access_modes,
            status=recorded, annotations=claim,
        )
        pvc = await home.ensure_home_pvc(self.api, manifest, self.user.name, create_first=known and pvc is None)
        return kube.remember(PVC, self.namespace, pvc)

    def _current_tiers(self) -> PreparedTiers:
        return self._tiers or PreparedTiers(self.storage_settings(), frozenset(useroptions.group_names(self)))

    async def get_pod_manifest(self):
        """kubespawner's Pod, plus the home volume at ``home_mount_path`` (its working directory), the tiers, and where
        it may and should run (:meth:`workspace_placement`)."""
        pod = await super().get_pod_manifest()
        pod = self._container.add_workspace_volumes(
            pod, home_pvc=self.home_pvc_name, home_mount_path=self.home_mount_path, user_name=self.user.name,
            tiers_now=self._current_tiers(),
        )
        return self._container.place(pod, self.workspace_placement())

    def _expand_env(self, env):
        """kubespawner's expansion of ``environment`` values, with literal braces allowed (a JSON value, ``${HOME}``)."""
        expanded = super()._expand_env({k: v for k, v in env.items() if not isinstance(v, str)})
        for key, value in env.items():
            if isinstance(value, str):
                expanded[key] = names.expand_with_literal_braces(value, self._expand_user_properties)
        return expanded

    def get_env(self):
        """kubespawner's environment plus the storage tiers' (cache locations, ``WORKSPACE_*``) and code-server's
        socket (:data:`~workspacespawner.config.workspace.IDE_ENV`); ``environment`` wins."""
        env = super().get_env()
        for key, value in {**self._current_tiers().env(vm=self.backend is self._vm), **IDE_ENV}.items():
            env.setdefault(key, value)
        return env

    def is_pod_running(self, pod):
        """kubespawner's readiness check, failing fast when the Pod cannot run (no node, bad image, crash loop)."""
        self._container.check_pod(pod, fail_fast_unschedulable=self.fail_fast_unschedulable)
        return super().is_pod_running(pod)

    @property
    def events(self):
        """kubespawner's ``events``: this Pod's Events after the start's marker (``_last_event``), oldest first.

        Read through the Event cache's index by Pod (the container backend's
        :meth:`~.backends.container.backend.ContainerBackend.pod_events`):
        kubespawner's sorts every cached Event of the namespace for it, and a
        start reads it twice. Ordered by when each happened, as our progress
        orders them (kubespawner compares the timestamps as strings).
        """
        found = []
        for event in self._container.pod_events():
            if self._last_event and event["metadata"]["uid"] == self._last_event:
                found = []  # the marker: only what came after it
            else:
                found.append(event)
        return found

    async def progress(self):
        """Spawn-page steps: ours (home volume, tiers, start) and this start's Pod or VMI Events in plain words."""
        await self._start_watching_events()
        def finished():
            return self._start_future is not None and self._start_future.done()

        async for item in self.steps.stream(finished=finished, compute_events=self.backend.compute_events,
                                            describe=events.describe_event):
            yield item


def _alive_workspaces() -> set[tuple[str, str]] | None:
    """(user, server) of every Pod and VMI the shared watch caches hold; None until they have loaded."""
    objects = watches.compute_objects()
    return None if objects is None else alive_from_objects(objects)


def check_hub_config(config) -> None:
    """Validate a hub's WorkspaceSpawner settings at start-up; raise ``traitlets.TraitError`` naming the bad setting.

    ``config`` is the traitlets Config of ``jupyterhub_config.py`` (``c``):
    every ``c.Spawner``/``c.KubeSpawner``/``c.WorkspaceSpawner`` value goes
    through the trait it sets, the profile_list and the storage tiers are
    checked whole, without contacting Kubernetes. The VM profiles' golden
    images are checked against the naming convention
    (:class:`~.config.goldenimages.GoldenImages`: a warning each, or an
    error with ``c.GoldenImages.require_versioned``).
    """
    check_spawner_config(config, WorkspaceSpawner)
    check_storage_config(config)
    GPUEconomy(config=config)
    publish_settings(config)
    profiles = merged_settings(config).get("profile_list")
    check_profile_pools(profiles, TeamGPUPools(config=config).all())
    GPUIdle(config=config)
    RootDiskPool(config=config)
    traits, settings = WorkspaceSpawner.class_traits(), merged_settings(config)
    kind, image = (settings.get(name, traits[name].default_value) for name in ("workspace_kind", "vm_golden_image"))
    GoldenImages(config=config).check_profiles(profiles, default_kind=kind, default_image=image)
