"""WorkspaceSpawner: kubespawner's KubeSpawner with persistent workspaces. Orchestration only.

What a start does, in order (the one place each step is called from):

1. ``run_pre_spawn_hook`` (JupyterHub calls it before ``start``): apply the chosen profile fresh (:mod:`.useroptions`),
   pick the backend for its ``workspace_kind`` (the only kind switch, :meth:`WorkspaceSpawner._use_backend`), run the
   admin's own ``pre_spawn_hook``, find the home by owner label, check and reserve the quota (:mod:`.quota`);
2. ``start``: the lifecycle's checks and fence (:mod:`.lifecycle.tracker`), the home PersistentVolumeClaim
   (:mod:`.storage.home`), the storage tiers (:mod:`.storage.prepare`), then the backend's compute
   (:mod:`.backends.container`, :mod:`.backends.vm`); the reservation becomes a metered run right before compute is
   created (released if the start fails before that), priced at its node's GPU type (:mod:`.gpu.view`);
3. for a code-server profile, once the backend's server runs: code-server really runs behind it
   (:func:`.backends.codeserver.check_started`).

``stop`` stops compute only; disks are never deleted here. A run is closed only once its compute is observed gone in
the shared watch caches. Deletion of a user or server moves its disks to ``Retained``. Everything kind-specific is in
the backends, the hub-wide tasks and watches in :mod:`.hubtasks`, every use of a private kubespawner or JupyterHub
member in :mod:`.upstream`.
"""

from __future__ import annotations

import time
from functools import partial

from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from traitlets import default

from workspacespawner import hubconfig, hubtasks, upstream, useroptions
from workspacespawner.backends import codeserver, kinds
from workspacespawner.backends.base import Backend, StartContext
from workspacespawner.backends.container.hooks import PodHooks
from workspacespawner.backends.vm.settings import VMTraits
from workspacespawner.config.placement import PlacementTraits
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.config.workspace import IDE_ENV, KubeSpawnerGuards, WorkspaceTraits
from workspacespawner.core.milestones import Milestone
from workspacespawner.gpu.view import GPUView
from workspacespawner.hubcompat import options_sent, raise_for_user, stop_compute_first
from workspacespawner.k8s import events
from workspacespawner.lifecycle import disks
from workspacespawner.lifecycle.settings import LifecycleTraits
from workspacespawner.lifecycle.tracker import LifecycleSettings, WorkspaceLifecycle
from workspacespawner.quota.request import reserve_for
from workspacespawner.services import hub_services
from workspacespawner.spawnpage import form as spawnpage_form
from workspacespawner.startprogress import StartSteps
from workspacespawner.storage import home
from workspacespawner.storage.prepare import PreparedTiers, prepare_tiers
from workspacespawner.storage.settings import HomeTraits, StorageTraits

#: Bumped when the meaning of get_state() changes; load_state() reads older ones.
STATE_VERSION = 1


class WorkspaceSpawner(upstream.KubeSpawnerOverrides, PodHooks, KubeSpawner, KubeSpawnerGuards, WorkspaceTraits,
                       HomeTraits, StorageTraits, LifecycleTraits, VMTraits, PlacementTraits):
    """A KubeSpawner whose workspaces keep a persistent home volume and run a profile's IDE, as a Pod or a VM.

    Configure it as ``c.JupyterHub.spawner_class = "workspace"``; every ``c.KubeSpawner.*`` setting applies unchanged
    (it is a subclass), and its own settings are ``c.WorkspaceSpawner.*`` (the trait classes it mixes in have no
    config section of their own).
    """

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return lambda spawner, options: useroptions.refuse_bad_options(spawner, options, sent=options_sent(spawner))

    @default("options_form")
    def _workspace_options_form_default(self):  # kubespawner's default replaced under a name of ours
        return spawnpage_form.options_form if self.profile_list else ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage_pvc_ensure = self.delete_pvc = False
        self.services = hub_services(self.config, core_api=self.api, custom_api=shared_client("CustomObjectsApi"))
        self.home_pvc_name = upstream.expand(self, self.pvc_name_template)
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
        #: The GPUs as this server sees them: free, by team pool, where its start may run, its run's price.
        self.gpu_view = GPUView(self, watch=partial(hubtasks.watch_workspaces, self), label=partial(upstream.log_name, self))
        #: The backend of each ``workspace_kind``; :meth:`_use_backend` picks this start's.
        self.backends: dict[str, Backend] = kinds.backends_for(self, placement=self.gpu_view.placement)
        self._container = self.backend = self.backends[kinds.DEFAULT_KIND]  # also kubespawner's Pod hooks' backend
        settings = LifecycleSettings(self.retention_days, self.reclaim_policy, self.fence_wait_seconds, float(self.start_timeout))
        self.lifecycle = WorkspaceLifecycle(kube=self.services.kube, audit=self.services.audit, kind=self.backend,
                                            settings=settings, label=upstream.log_name(self))
        self.services.register(self.user.name, self.name or "", lambda: self.active)
        hubtasks.start_hub_tasks(self)

    def _use_backend(self, kind: str) -> None:
        """Pick the backend of ``kind`` (:mod:`.backends.kinds`): the only place the kind is switched on."""
        self.backend = self.backends.get(kind, self._container)
        self.lifecycle.kind = self.backend

    def _ref(self, **kwargs):
        return self.backend.ref(home_pvc=self.home_pvc_name, **kwargs)

    def get_state(self):
        """kubespawner's state plus the home PVC name, the resolved profile, the backend's (a VM's names) and the phase (JSON only)."""
        state = super().get_state()
        state.update(workspacespawner_state_version=STATE_VERSION, home_pvc_name=self.home_pvc_name)
        if self.profile is not None:
            state["profile"] = self.profile.to_state()
        state.update(self.backend.state(), **self.lifecycle.state())
        return state

    def load_state(self, state):
        """Restore what :meth:`get_state` saved, so a restarted hub finds running servers and their disks."""
        super().load_state(state)
        self.home_pvc_name = state.get("home_pvc_name") or self.home_pvc_name
        if state.get("profile"):
            try:
                self.profile = ResolvedProfile.from_state(state["profile"])
            except TypeError:
                self.log.warning("Ignoring saved profile of %s in an unknown shape", upstream.log_name(self))
        for backend in self.backends.values():
            backend.load_state(state)
        self._use_backend(self.profile.workspace_kind if self.profile else kinds.DEFAULT_KIND)
        self.lifecycle.load_state(state)

    async def poll(self):
        """None while the workspace runs or starts; an exit status once it is gone (from the shared caches)."""
        return await self.backend.poll()

    async def stop(self, now=False):
        """Stop compute only: the Pod, or the VM (its VMI). Disks, the VM object and its Service stay.

        Inside a start (kubespawner stops a Pod of the same name when its create answers 409 AlreadyExists, then
        creates it again) only the old compute goes: the run and the phase stay the start's. After a start that failed
        before asking for compute (a quota refusal, an API outage during the pre-spawn check, a fence refusal: the old
        Pod stuck on a lost node), JupyterHub's cleanup stops nothing, so the refusal reaches the user at once. The
        run closes once the compute is observed gone (:func:`.hubtasks.close_run_if_gone`; :meth:`.QuotaService.stopping`).
        """
        if self.lifecycle.starting:
            await self.backend.stop(now)
            return
        if self._refused_before_compute:  # JupyterHub's cleanup of a start refused before it made anything
            self.log.info("The start of %s made no compute; nothing to stop", upstream.log_name(self))
            return
        await self.lifecycle.stopping(self._ref())
        with self.services.quota.stopping(self.user.name, self.name or ""):  # the enforcer leaves the run to this stop
            await self.backend.stop(now)
            await hubtasks.close_run_if_gone(self)

    async def run_post_stop_hook(self):
        """Close the metered run and record the phase also when JupyterHub found the server gone (it then skips stop()).

        After a start refused before it asked for compute, JupyterHub's cleanup records nothing: the refusal changed
        nothing in the cluster (a failed ``start`` already recorded what the cluster shows), and the cleanup must not
        wait on the API server (during an outage its retries outlast JupyterHub's ``slow_spawn_timeout``, which then
        answers the spawn with a bare 500 instead of the refusal).
        """
        refused, self._refused_before_compute = self._refused_before_compute, False
        await hubtasks.close_run_if_gone(self, gone=True)
        if not refused:
            await self.lifecycle.stopped(self._ref())
        return await useroptions.maybe_await(super().run_post_stop_hook())

    async def delete_forever(self):
        """The user or named server is deleted: its disks go to Retained (a home the default server shares stays)."""
        if not self.backend.keeps_disks():  # an earlier start of another kind (a VM's) left a disk: retain it too
            self._use_backend(next((kind for kind, b in self.backends.items() if b.keeps_disks()), self.backend.kind))
        shared = home.home_is_shared(self.home_pvc_name_template, self.name or "")
        ref = self.backend.ref(home_pvc=None if shared else self.home_pvc_name)
        if not await self.lifecycle.delete_forever(ref):  # the API refused: the reconciler tries again at each pass
            self.services.retry_later(("retain", ref), partial(self.lifecycle.delete_forever, ref))

    def options_from_form(self, formdata):
        """Turn the spawn form into user_options, refusing a tampered form with 400/403 before anything starts."""
        options = upstream.form_options(self, formdata)
        useroptions.check_form_options(self, options)
        return options

    async def load_user_options(self):
        """Apply the chosen profile fresh and pick its backend (once per start; kubespawner's _start calls it again)."""
        if not self._options_loaded:
            self.profile = await useroptions.apply_chosen_profile(self, self._configured)
            self._use_backend(self.profile.workspace_kind)

    async def run_pre_spawn_hook(self):
        """Before ``start``: resolve the profile, run the admin's ``pre_spawn_hook``, then check and reserve the quota.

        The admin's hook runs after the profile is applied (it sees and may adjust the resolved settings) and before
        the quota check (which counts what it left). A refusal shows on the spawn page and does not count toward the
        consecutive-failure limit.
        """
        self.reservation = None
        self._refused_before_compute = True  # until the hook returns: a refusal here makes nothing to clean up
        await self.load_user_options()
        await useroptions.maybe_await(super().run_pre_spawn_hook())
        self.profile = useroptions.resolve_profile(self, {"slug": self.profile.slug, "display_name": self.profile.display_name})
        try:
            await self._reserve()
        except Exception as e:
            raise_for_user(e, self)
        self._prepared = True
        self._refused_before_compute = False

    async def cached_root_disk(self) -> dict | None:
        """This server's VM root DataVolume in the shared watch caches, for the spawn page
        (:meth:`.VMBackend.watched_root_disk`)."""
        return await self.backends["vm"].watched_root_disk(self.log)

    async def _reserve(self) -> None:
        await hubtasks.watch_workspaces(self)
        self.home_pvc_name = await home.find_home(self.services.kube, namespace=self.namespace, user_name=self.user.name,
                                                  slot=upstream.expand(self, self.home_pvc_name_template),
                                                  template=self.home_pvc_name_template, server=self.name or "")
        self.backend.ref(home_pvc=self.home_pvc_name, fresh=True)  # names of a new start, from the current templates
        self.reservation = await reserve_for(self, useroptions.group_names(self))

    async def workspace_start(self):
        """The start kubespawner's ``start()`` runs (:class:`~.upstream.KubeSpawnerOverrides`); returns the server URL."""
        began = time.monotonic()
        self.steps.reset()
        hubtasks.start_hub_tasks(self)
        upstream.when_spawn_ends(self, self.lifecycle.spawn_ended)
        self._compute_asked = self._refused_before_compute = False
        try:
            if not self._prepared:  # started without JupyterHub's spawn (no pre-spawn hook): do its part here
                await self.run_pre_spawn_hook()
            self._prepared = False
            url = await self._start_workspace()
            await self.gpu_view.price_on_node()
            if self.ide == "code-server":
                await codeserver.check_started(self, url, began=began, label=upstream.log_name(self))
        except BaseException as e:
            self._refused_before_compute = not self._compute_asked
            if self._compute_asked:
                await stop_compute_first(self, e)
            await self.services.quota.release(self.reservation)
            await self.lifecycle.start_failed(self._ref(), e)
            raise_for_user(await self.gpu_view.in_numbers(e), self)
        finally:
            self.services.quota.start_done(self.user.name, self.name or "")
        await self.lifecycle.running(self._ref())
        return url

    async def _start_workspace(self) -> str:
        """Fence, ensure the home volume and the tiers, then start the backend's compute; return the server URL."""
        ref = self._ref()
        self.steps.say("Start accepted; preparing your workspace", Milestone.ACCEPTED)  # the quota check passed
        await self.lifecycle.before_start(ref, fence_own=self.backend.fence, say=self.steps.say,
                                          servers=list(self.user.orm_user.orm_spawners))
        labels = {key: upstream.expand(self, value) for key, value in self.storage_extra_labels.items()}  # z2jh extraLabels
        pvc = await home.home_pvc(self, self._ref(), kubespawner_username=upstream.expand(self, "{username}"), extra_labels=labels)
        home.say_home_ready(pvc, self.home_pvc_name, self.steps.say)
        groups = useroptions.group_names(self)
        limit = disks.disk_limit(self.services.quota.settings, self.user.name, groups, self.disk_limit)
        await self.lifecycle.disks_ready(ref, pvc, home_size=self.home_size, limit=limit, server=self.name or "", say=self.steps.say)
        await self.lifecycle.claim_disks(ref)
        self._compute_asked = True
        await self.services.quota.running(self.reservation)  # before any compute can exist
        self._tiers = await prepare_tiers(self.api, namespace=self.namespace, settings=self.storage_settings(),
                                          groups=groups, say=self.steps.say)
        recorded, claim = home.made_now(self._ref())
        ctx = StartContext(
            env=self.get_env, command=lambda: self.cmd or ["jupyterhub-singleuser"], args=self.get_args,
            tiers=self._tiers, home_mount_path=self.home_mount_path, say=self.steps.say,
            extra_labels=upstream.common_labels(self, self.extra_labels),
            claim_disks=lambda: self.lifecycle.claim_disks(self._ref()),
            new_disk_annotations=claim,
            recorded=recorded,
        )
        return await self.backend.start(ctx)

    def _current_tiers(self) -> PreparedTiers:
        return self._tiers or PreparedTiers(self.storage_settings(), frozenset(useroptions.group_names(self)))

    def get_env(self):
        """kubespawner's environment plus the storage tiers' (cache locations, ``WORKSPACE_*``) and code-server's
        socket (:data:`~workspacespawner.config.workspace.IDE_ENV`); ``environment`` wins."""
        env = super().get_env()
        for key, value in {**self.backend.tier_env(self._current_tiers()), **IDE_ENV}.items():
            env.setdefault(key, value)
        return env

    async def progress(self):
        """Spawn-page steps: ours (home volume, tiers, start) and this start's Pod or VMI Events in plain words."""
        await upstream.watch_events(self)
        async for item in self.steps.stream(finished=lambda: upstream.start_finished(self),
                                            compute_events=self.backend.compute_events, describe=events.describe_event):
            yield item


def check_hub_config(config) -> None:
    """Validate a hub's WorkspaceSpawner settings at start-up (:func:`.hubconfig.check_hub_config`); raise
    ``traitlets.TraitError`` naming the bad setting."""
    hubconfig.check_hub_config(config, WorkspaceSpawner)
