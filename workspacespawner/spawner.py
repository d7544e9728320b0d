"""WorkspaceSpawner: kubespawner's KubeSpawner with persistent workspaces.

What it adds to KubeSpawner (JupyterHub ``Spawner`` API: start, stop, poll,
progress, get_state, load_state):

- a per-user home PersistentVolumeClaim ensured before the Pod exists, owned
  by no Pod, never deleted by stop, a failed start or user deletion
  (``delete_pvc`` and kubespawner's own ``storage_pvc_ensure`` are forced off);
- profile_list checked whole at start-up, profiles limited to JupyterHub
  groups (``allowed_groups``), tampered options refused with 400/403;
- profile overrides applied fresh on every start from the configured values,
  so no setting of yesterday's profile leaks into today's spawn;
- JupyterLab or code-server per profile (``ide``);
- plain-words progress and a fast, clear failure for a Pod no node can run.
"""

from __future__ import annotations

import asyncio
import copy

from kubernetes_asyncio.client import (
    V1PersistentVolumeClaimVolumeSource,
    V1Volume,
    V1VolumeMount,
)
from kubespawner import KubeSpawner
from traitlets import Bool, Enum, HasTraits, List, TraitError, Unicode, default, validate

from workspacespawner.backends.container import progress
from workspacespawner.config.profiles import (
    GPU_RESOURCE,
    IDES,
    WORKSPACE_KINDS,
    ResolvedProfile,
    profile_allowed,
    profiles_for_user,
    validate_profile_list,
)
from workspacespawner.config.traittypes import Quantity
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.lifecyclespawner import LifecycleSpawnerMixin
from workspacespawner.quotaspawner import QuotaSpawnerMixin
from workspacespawner.storage import home
from workspacespawner.storage.spawnerglue import StorageTiersMixin, check_storage_config
from workspacespawner.vmspawner import VMSpawnerMixin

#: Bumped when the meaning of get_state() changes; load_state() reads older ones.
STATE_VERSION = 1

#: Traits every start resets to their configured values before a profile applies its overrides.
ALWAYS_RESET = (
    "workspace_kind",
    "ide",
    "default_url",
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_selector",
    "cpu_limit",
    "cpu_guarantee",
    "mem_limit",
    "mem_guarantee",
    "image",
    "environment",
)


class WorkspaceSpawner(KubeSpawner, VMSpawnerMixin, QuotaSpawnerMixin, StorageTiersMixin, LifecycleSpawnerMixin):
    """A KubeSpawner whose workspaces keep a persistent home volume and run a profile's IDE.

    Configure it as ``c.JupyterHub.spawner_class = "workspace"``; every
    ``c.KubeSpawner.*`` setting applies unchanged (it is a subclass), and the
    settings below are ``c.WorkspaceSpawner.*``.
    """

    workspace_kind = Enum(
        WORKSPACE_KINDS,
        "container",
        config=True,
        help="""How a workspace runs: ``container`` (a Pod) or ``vm`` (a KubeVirt VirtualMachine).

        Usually set per profile in ``kubespawner_override``.
        """,
    )

    ide = Enum(
        IDES,
        "jupyterlab",
        config=True,
        help="""The IDE a workspace opens: ``jupyterlab`` (``/lab``) or ``code-server``.

        code-server is served through jupyter-server-proxy at
        :attr:`code_server_url`, behind JupyterHub's login, with the same
        identity and access policy as JupyterLab. Usually set per profile.
        """,
    )

    code_server_url = Unicode(
        "/vscode/",
        config=True,
        help="""Path (under the server's URL) where jupyter-server-proxy serves code-server.

        ``/vscode/`` is where the ``jupyter-vscode-proxy`` package mounts it.
        A code-server profile opens this path instead of ``/lab``.
        """,
    )

    home_pvc_name_template = Unicode(
        "home-{username}",
        config=True,
        help="""Name of the user's home PersistentVolumeClaim, expanded like ``pvc_name_template``.

        ``{username}`` is kubespawner's safe slug of the user name, so odd
        names (capitals, ``@``, unicode, 60+ characters) still give a valid,
        stable, distinct name. The default gives one home per user, shared by
        the default and named servers (mounted by one at a time: RBD is
        ReadWriteOnce). Use ``home-{user_server}`` for one per server.
        """,
    )

    home_storage_class = Unicode(
        "ceph-rbd",
        allow_none=True,
        config=True,
        help="""StorageClass of the home PVC. ``None`` uses the cluster's default StorageClass.""",
    )

    home_size = Quantity(
        "10Gi",
        positive=True,
        config=True,
        help="""Requested size of the home PVC, a Kubernetes quantity such as ``"10Gi"``.""",
    )

    home_access_modes = List(
        ["ReadWriteOnce"],
        config=True,
        help="""accessModes of the home PVC; Ceph RBD filesystems are ``["ReadWriteOnce"]``.""",
    )

    home_mount_path = Unicode(
        "/home/jovyan",
        config=True,
        help="""Where the home PVC is mounted in the server's container (also its working directory).""",
    )

    fail_fast_unschedulable = Bool(
        True,
        config=True,
        help="""Fail a start as soon as the scheduler says no node can run the Pod.

        While the cluster autoscaler reports a scale-up (Event
        ``TriggeredScaleUp``), the start keeps waiting within
        ``start_timeout`` instead. ``False`` waits out ``start_timeout``
        as kubespawner does.
        """,
    )

    # -- configuration checks -------------------------------------------

    @validate("profile_list")
    def _check_profile_list(self, proposal):
        try:
            validate_profile_list(proposal.value, self.trait_names())
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    @default("storage_pvc_ensure")
    def _storage_pvc_ensure_default(self):
        return False

    @validate("storage_pvc_ensure")
    def _keep_storage_pvc_ensure_off(self, proposal):
        if proposal.value:
            self.log.warning(
                "KubeSpawner.storage_pvc_ensure=True ignored: WorkspaceSpawner manages the home PVC itself (home_*)."
            )
        return False

    @validate("delete_pvc")
    def _keep_delete_pvc_off(self, proposal):
        if proposal.value:
            self.log.warning(
                "KubeSpawner.delete_pvc=True ignored: WorkspaceSpawner never deletes a home volume on user or server deletion."
            )
        return False

    # -- construction and state -----------------------------------------

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage_pvc_ensure = False
        self.delete_pvc = False
        self.home_pvc_name = self._expand_user_properties(self.home_pvc_name_template)
        self.profile: ResolvedProfile | None = None
        self._configured: dict = {}
        self._options_loaded = False
        self._vm_ident_state: dict | None = None
        self._quota_setup()
        self._steps: list[str] = []
        self._steps_changed = asyncio.Event() if _has_loop() else None

    def get_state(self):
        """kubespawner's state plus the home PVC name and the resolved profile (JSON only)."""
        state = super().get_state()
        state["workspacespawner_state_version"] = STATE_VERSION
        state["home_pvc_name"] = self.home_pvc_name
        if self.profile is not None:
            state["profile"] = self.profile.to_state()
        if self._runs_vm() and self._vm_ident_state:
            state["vm"] = self._vm_ident_state
        state.update(self.lifecycle_state())
        return state

    def load_state(self, state):
        """Restore what :meth:`get_state` saved, so a restarted hub finds running servers and their disks."""
        super().load_state(state)
        if state.get("home_pvc_name"):
            self.home_pvc_name = state["home_pvc_name"]
        if state.get("profile"):
            try:
                self.profile = ResolvedProfile(**state["profile"])
            except TypeError:
                self.log.warning("Ignoring saved profile of %s in an unknown shape", self._log_name)
        if state.get("vm"):
            self._vm_ident_state = state["vm"]
        self.lifecycle_load_state(state)

    def _runs_vm(self) -> bool:
        """True when the current (or last started) workspace is a VM."""
        return self.profile is not None and self.profile.workspace_kind == "vm"

    async def poll(self):
        """None while the workspace runs or starts; an exit status once it is gone (VMs: from the shared caches)."""
        if self._runs_vm():
            return await self._poll_vm()
        return await super().poll()

    async def stop(self, now=False):
        """Stop compute only: the Pod, or the VM (its VMI). Disks, the VM object and its Service stay."""
        await self.lifecycle_stopping()
        if self._runs_vm():
            await self._stop_vm()
        else:
            await super().stop(now=now)
        await self.quota.stopped(self.user.name, self.name)

    async def run_post_stop_hook(self):
        """Close the metered run also when JupyterHub found the server already gone (it then skips stop())."""
        await self.quota.stopped(self.user.name, self.name, gone=True)
        await self.lifecycle_stopped()  # after every stop, also when the hub found the server gone
        return await _maybe_await(super().run_post_stop_hook())

    # -- profiles -------------------------------------------------------

    def _group_names(self) -> set[str]:
        return {g.name for g in getattr(self.user, "groups", None) or []}

    def _is_admin(self) -> bool:
        return bool(getattr(self.user, "admin", False))

    async def _profile_list(self) -> list[dict]:
        profile_list = self._sorted_dict_values(self.profile_list)
        if callable(profile_list):
            profile_list = await _maybe_await(profile_list(self))
            validate_profile_list(profile_list, self.trait_names())
        return self._get_initialized_profile_list(profile_list)

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return _refuse_bad_options

    @default("options_form")
    def _options_form_default(self):
        if not self.profile_list:
            return ""
        return self._render_form_for_user

    async def _render_form_for_user(self, spawner):
        """The spawn form, listing only the profiles this user may start."""
        profile_list = await self._profile_list()
        visible = profiles_for_user(profile_list, self._group_names(), self._is_admin())
        visible = await self.quota.annotated_profiles(visible, user=self.user.name, groups=self._group_names())
        if not visible:
            return "<p>No server profile is available to you. Please ask an administrator.</p>"
        if not any(p.get("default") for p in visible):
            visible[0] = dict(visible[0], default=True)
        return self._render_options_form(visible)

    def _check_user_options(self, profile_list: list[dict]) -> dict:
        """The chosen profile, or a 400/403 WorkspaceError for a missing, forbidden or tampered choice."""
        options = self.user_options or {}
        slug = options.get("profile")
        if slug is not None and not isinstance(slug, str):
            raise WorkspaceError("The profile must be given by its name.", reason="invalid-options")
        visible = profiles_for_user(profile_list, self._group_names(), self._is_admin())
        if not slug:
            profile = next((p for p in visible if p.get("default")), visible[0] if visible else None)
            if profile is None:
                raise WorkspaceError(
                    "No server profile is available to you. Please ask an administrator.",
                    reason="forbidden",
                    status_code=403,
                )
            return profile
        profile = next((p for p in profile_list if p["slug"] == slug), None)
        if profile is None:
            raise WorkspaceError(f"There is no profile {slug!r}.", reason="invalid-options")
        if not profile_allowed(profile, self._group_names(), self._is_admin()):
            raise WorkspaceError(
                f"You may not start the profile {profile.get('display_name', slug)!r}: it is limited to other groups.",
                reason="forbidden",
                status_code=403,
            )
        for option_name, option in (profile.get("profile_options") or {}).items():
            choice = options.get(option_name)
            if choice is not None and choice not in (option.get("choices") or {}):
                raise WorkspaceError(
                    f"{choice!r} is not a choice of {option.get('display_name', option_name)!r}.",
                    reason="invalid-options",
                )
        try:
            self._validate_user_options(profile_list)
        except ValueError as e:
            raise WorkspaceError(str(e), reason="invalid-options") from None
        return profile

    def options_from_form(self, formdata):
        """Turn the spawn form into user_options, refusing a tampered form with 400/403 before anything starts."""
        options = self._options_from_form(formdata)
        if self.profile_list and not callable(self.profile_list):
            saved, self.user_options = self.user_options, options
            try:
                self._check_user_options(self._get_initialized_profile_list(self._sorted_dict_values(self.profile_list)))
            finally:
                self.user_options = saved
        return options

    def _reset_to_configured(self, profile_list: list[dict]) -> None:
        """Put every trait a profile may override back to its configured value (resolve, don't mutate)."""
        keys = set(ALWAYS_RESET)
        for profile in profile_list:
            keys.update((profile.get("kubespawner_override") or {}).keys())
            for option in (profile.get("profile_options") or {}).values():
                for choice in (option.get("choices") or {}).values():
                    keys.update((choice.get("kubespawner_override") or {}).keys())
                keys.update(((option.get("unlisted_choice") or {}).get("kubespawner_override") or {}).keys())
        for key in keys:
            if key not in self._configured:
                self._configured[key] = copy.deepcopy(getattr(self, key))
            elif getattr(self, key) != self._configured[key]:
                setattr(self, key, copy.deepcopy(self._configured[key]))

    async def load_user_options(self):
        """Check the user's choice, reset overridable settings, apply the chosen profile, resolve it."""
        if self._options_loaded:
            return
        profile_list = await self._profile_list()
        if not profile_list:
            self._reset_to_configured([])
            self.profile = self._resolve_profile({"slug": "", "display_name": "Default"})
            return
        profile = self._check_user_options(profile_list)
        self._reset_to_configured(profile_list)
        options = dict(self.user_options or {})
        options["profile"] = profile["slug"]
        saved, self.user_options = self.user_options, options
        try:
            self._load_profile(profile["slug"], profile_list)
        finally:
            self.user_options = saved
        if self.ide == "code-server" and "default_url" not in (profile.get("kubespawner_override") or {}):
            self.default_url = self.code_server_url
        self.profile = self._resolve_profile(profile)

    def _resolve_profile(self, profile: dict) -> ResolvedProfile:
        gpus = int(str((self.extra_resource_limits or {}).get(GPU_RESOURCE, 0) or 0))
        return ResolvedProfile(
            slug=profile.get("slug", ""),
            display_name=profile.get("display_name", ""),
            workspace_kind=self.workspace_kind,
            ide=self.ide,
            gpus=gpus,
            gpu_product=(self.node_selector or {}).get("nvidia.com/gpu.product"),
            cpu=self.cpu_limit,
            memory=str(self.mem_limit) if self.mem_limit else None,
            image=self.image,
            default_url=self.default_url or "",
        )

    # -- start ----------------------------------------------------------

    def _step(self, message: str) -> None:
        self._steps.append(message)
        if self._steps_changed is not None:
            self._steps_changed.set()

    async def _start(self):
        self._steps = []
        self._steps_changed = asyncio.Event()
        await self.load_user_options()
        try:
            await self.lifecycle_before_start()  # finds the home, reconciles the phase, reclaims retained disks, fences
            await self._quota_reserve()
        except BaseException as e:
            await self.lifecycle_start_failed(e)
            raise
        try:
            url = await self._start_workspace()
        except BaseException as e:
            await self.quota.release(self._quota_reservation)
            await self.lifecycle_start_failed(e)
            raise
        await self.quota.running(self._quota_reservation)
        await self.lifecycle_running()
        return url

    async def _start_workspace(self) -> str:
        """Ensure the home volume, then start the Pod (kubespawner) or the VM; return the server URL."""
        pvc = await self._ensure_home()
        await self.lifecycle_disks_ready(pvc)  # grows home to the profile's home_size (within the limit)
        await self._ensure_storage_tiers()
        if self.profile.workspace_kind == "vm":
            return await self._start_vm()
        self._step("Starting your server")
        self._options_loaded = True  # kubespawner's _start loads them again: keep this resolution
        try:
            return await super()._start()
        finally:
            self._options_loaded = False

    async def _ensure_home(self) -> dict:
        manifest = home.make_home_pvc(
            name=self.home_pvc_name,
            namespace=self.namespace,
            user_name=self.user.name,
            kubespawner_username=self._expand_user_properties("{username}"),
            storage_class=self.home_storage_class,
            size=self.home_size,
            access_modes=self.home_access_modes,
        )
        pvc = await home.ensure_home_pvc(self.api, manifest, self.user.name)
        phase = (pvc.get("status") or {}).get("phase", "Pending")
        if phase == "Bound":
            self._step(f"Home volume {self.home_pvc_name} ready")
        else:
            self._step(f"Home volume {self.home_pvc_name} created ({phase}; it binds when your server is placed on a node)")
        return pvc

    async def get_pod_manifest(self):
        """kubespawner's Pod, plus the home volume mounted at ``home_mount_path`` (its working directory)."""
        pod = await super().get_pod_manifest()
        pod.spec.volumes = [v for v in (pod.spec.volumes or []) if _name(v) != "home"]
        pod.spec.volumes.append(
            V1Volume(name="home", persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name=self.home_pvc_name))
        )
        notebook = pod.spec.containers[0]
        notebook.volume_mounts = [m for m in (notebook.volume_mounts or []) if _name(m) != "home"]
        notebook.volume_mounts.append(V1VolumeMount(name="home", mount_path=self.home_mount_path))
        if not notebook.working_dir:
            notebook.working_dir = self.home_mount_path
        pod.metadata.labels = {**(pod.metadata.labels or {}), **names.owner_labels(self.user.name)}
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), **names.owner_annotations(self.user.name)}
        return self._add_storage_tiers_to_pod(pod)

    def get_env(self):
        """kubespawner's environment plus the storage tiers' (cache locations, ``WORKSPACE_*``); ``environment`` wins."""
        env = super().get_env()
        for key, value in self._storage_env().items():
            env.setdefault(key, value)
        return env

    def is_pod_running(self, pod):
        """kubespawner's readiness check, failing fast when the Pod cannot run (no node, bad image, crash loop)."""
        if pod is not None and "deletionTimestamp" not in pod["metadata"]:
            unschedulable = progress.unschedulable_reason(pod)
            if unschedulable and self.fail_fast_unschedulable and not progress.scale_up_triggered(self.events):
                raise WorkspaceError(
                    progress.no_node_message(unschedulable),
                    reason="unschedulable",
                    status_code=503,
                )
            failure = progress.container_failure(pod)
            if failure:
                word, message = failure
                raise WorkspaceError(f"Your server could not start. {message}", reason=word, status_code=500)
        return super().is_pod_running(pod)

    async def progress(self):
        """Spawn-page steps: ours (home volume, start) and the Pod's Events in plain words."""
        await self._start_watching_events()
        sent_steps = sent_events = 0
        percent = 0
        while True:
            start_future = self._start_future
            finished = start_future is not None and start_future.done()
            new = [{"message": m} for m in self._steps[sent_steps:]]
            sent_steps += len(new)
            events = self.events
            new += [{"message": progress.describe_event(e), "raw_event": e} for e in events[sent_events:]]
            sent_events = len(events)
            for item in new:
                percent += (90 - percent) / 3
                yield {"progress": int(percent), **item}
            if finished:
                return
            self._steps_changed.clear()
            try:
                await asyncio.wait_for(self._steps_changed.wait(), timeout=1)
            except TimeoutError:
                pass

    # -- deletion -------------------------------------------------------

    async def delete_forever(self):
        """Called when the user or a named server is deleted: its disks go to Retained (never deleted here)."""
        await self.lifecycle_delete_forever()


async def _refuse_bad_options(spawner: WorkspaceSpawner, user_options: dict) -> None:
    """JupyterHub's ``apply_user_options`` hook (JupyterHub 5.3+): refuse a forbidden or tampered choice before start().

    Raises :class:`WorkspaceError` (400/403), which JupyterHub passes to the
    client. The chosen profile itself is applied in ``load_user_options``,
    fresh on every start.
    """
    profile_list = await spawner._profile_list()
    if profile_list:
        spawner._check_user_options(profile_list)


def _name(obj) -> str | None:
    return obj.get("name") if isinstance(obj, dict) else getattr(obj, "name", None)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _maybe_await(value):
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def check_hub_config(config) -> None:
    """Validate a hub's WorkspaceSpawner settings at start-up; raise ``traitlets.TraitError`` naming the bad setting.

    ``config`` is the traitlets Config of ``jupyterhub_config.py`` (``c``).
    Every ``c.KubeSpawner.*`` and ``c.WorkspaceSpawner.*`` value goes through
    the same trait validation a spawner applies, and the whole profile_list
    is checked, without contacting Kubernetes.
    """
    merged = {}
    for section in ("Spawner", "KubeSpawner", "WorkspaceSpawner"):
        if section in config:
            merged.update(config[section])
    for name, value in merged.items():
        trait = WorkspaceSpawner.class_traits().get(name)
        if trait is None:
            continue
        if name == "profile_list":
            try:
                validate_profile_list(value, WorkspaceSpawner.class_trait_names())
            except ValueError as e:
                raise TraitError(str(e)) from None
            continue
        if value is None and trait.allow_none:
            continue
        try:
            trait.validate(_PROBE, value)
        except TraitError as e:
            raise TraitError(f"{_section_of(config, name)}.{name} = {value!r} is invalid: {e}") from None
    check_storage_config(config)


#: What trait checks at start-up run against (no spawner exists yet); its class name reads right in their messages.
_PROBE = type("WorkspaceSpawner", (HasTraits,), {})()


def _section_of(config, name: str) -> str:
    for section in ("WorkspaceSpawner", "KubeSpawner", "Spawner"):
        if section in config and name in config[section]:
            return f"c.{section}"
    return "c.WorkspaceSpawner"
