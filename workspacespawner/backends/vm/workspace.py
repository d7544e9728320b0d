"""KubeVirt VM workspaces: start, stop and poll one, from the shared watch caches (its objects: :mod:`.effects`).

API followed (kubernetes_asyncio, errors wrapped here and nowhere else):

* ``cdi.kubevirt.io/v1beta1`` DataVolumes and ``kubevirt.io/v1``
  VirtualMachines through ``CustomObjectsApi`` (get, create, replace);
* core/v1 Secrets, Services (``CoreV1Api``) and, for the fence, the VMI's
  Node (``read_node``; RBAC ``nodes: get``, optional: without it a VMI on
  an unreachable node is refused as "already running");
* ``PUT /apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/start``
  (body ``v1.StartOptions``, ``{}``) and ``.../stop`` (body
  ``v1.StopOptions``, ``{}`` or ``{"gracePeriod": 0}``): the calls
  ``virtctl start/stop`` make. kubernetes_asyncio has no typed method for
  KubeVirt's subresources, so they go through ``ApiClient.call_api``.

Waiting reads the shared watch caches of :mod:`.reflectors` (every 0.2 s,
in memory), never one GET per user per poll. Transient API errors (429,
5xx, connection errors) are retried with a bounded backoff; a permanent one
fails the start with reason ``kubernetes-api``.

Invariants kept here: a start never runs a second VMI next to an existing
one (the fence); a failed or timed-out start stops the VM and waits for its
VMI to go; nothing here ever deletes a disk (DataVolume or PVC), a VM or a
Service.

Reason words of :class:`WorkspaceError`, besides those of
:mod:`.vmstatus`: ``root-disk``/``vm``/``cloud-init``/``service`` (an
object of ours exists but belongs to someone else), ``already-running``,
``node-unreachable``, ``still-stopping`` (the fence), ``timeout``,
``kubernetes-api``, and those of what the guest's serial console shows
(:mod:`.guestconsole`, read by :mod:`.consolelog` while the guest boots):
``no-boot``, ``no-cloud-init``, ``no-ide``, ``kernel-panic``, ``disk-full``. A start that times out
says how far the console showed the boot got.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm import guestconsole, vmstatus
from workspacespawner.backends.vm import manifests as vmmanifests
from workspacespawner.backends.vm.consolelog import ConsoleFollower
from workspacespawner.backends.vm.effects import (
    UNKNOWN,
    ensure_root_disk,
    ensure_service,
    ensure_vm,
    withdraw_unmade_root_disk,
    write_cloudinit_secret,
)
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.milestones import Milestone, Say
from workspacespawner.core.tasks import BackgroundTasks
from workspacespawner.k8s.api import node_ready
from workspacespawner.k8s.events import scale_up_triggered
from workspacespawner.k8s.kinds import VMI
from workspacespawner.k8s.kubevirt import start_vm, stop_vm
from workspacespawner.k8s.owned import forbidden_error, until_accepted
from workspacespawner.k8s.watches import (
    DataVolumeReflector,
    VirtualMachineInstanceReflector,
    VirtualMachineReflector,
    VMIEventReflector,
    cached_launcher,
    launcher_of,
    shared_reflector,
    shared_reflectors,
)
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import Status

log = logging.getLogger("workspacespawner")

#: Seconds a start waits while the DataVolume watch shows no root disk before it asks the API server (a create
#: takes milliseconds to reach the watch; a disk deleted as the start read it never comes).
MISSING_SECONDS = 3.0
_MISSING = object()

VMIS = VMI.gvp
#: HTTP status of the start failure for each reason word (default 500).
FAILURE_STATUS = {
    "unschedulable": 503, "already-running": 409, "node-unreachable": 409, "still-stopping": 409, "golden-image": 503,
}


def _with_boot(current: vmstatus.VMStatus, boot: guestconsole.Boot | None, image: str, ide: str) -> vmstatus.VMStatus:
    """``current`` (a guest booting: VMI Running, not Ready) told by how far its console shows the boot got, or
    failed by what it shows ``image`` lacks; ``current`` itself in any other state or before a console line."""
    if boot is None or current.milestone is not Milestone.STARTED:
        return current
    failure = guestconsole.image_failure(boot, image, ide)
    if failure is not None:
        return dataclasses.replace(current, message=failure[1], failure=vmstatus.Failure(*failure))
    return dataclasses.replace(current, message=guestconsole.progress_message(boot, current.node),
                               progress=100 * guestconsole.STAGE_PART[boot.stage], milestone=Milestone.ANSWERING)


def _say_status(say: Say, current: vmstatus.VMStatus) -> None:
    """Tell ``current``'s message with the milestone it reaches (a clone at N%: N% of the way)."""
    say(current.message, current.milestone, part=1.0 if current.progress is None else current.progress / 100)


def _api_failure(e: Exception, what: str) -> WorkspaceError:
    """A permanent API error (or a connection that stayed down) as the start's failure, in words for the user.

    A refusal of the hub itself (403: its role, an admission policy) says what was refused (:func:`forbidden_error`).
    """
    forbidden = forbidden_error(e)
    if forbidden is not None:
        return forbidden
    detail = f"{e.status} {e.reason}" if isinstance(e, ApiException) else type(e).__name__
    return WorkspaceError(
        f"The cluster could not {what} ({detail}). Nothing was deleted; please try again later.",
        reason="kubernetes-api",
        status_code=500,
        log_message=f"{what}: {detail}",  # never the body: it may echo the Secret's data
    )


def cached_vm_and_disks(ident: VMIdentity) -> tuple[dict | None, list[dict]]:
    """``ident``'s VirtualMachine and the namespace's DataVolumes as the shared watch caches hold them now
    (``(None, [])`` before those watches run: a start calls :meth:`VMWorkspace.watch` first)."""
    namespace = ident.namespace
    vms = [r for r in shared_reflectors(VirtualMachineReflector) if r.namespace == namespace]
    dvs = [r for r in shared_reflectors(DataVolumeReflector) if r.namespace == namespace]
    vm = vms[0].resources.get(f"{namespace}/{ident.vm}") if vms else None
    return vm, list(dvs[0].resources.values()) if dvs else []


# -- one workspace ------------------------------------------------------------------------------


class VMWorkspace:
    """One user's VM workspace: start, stop and poll it, driven by the shared watch caches.

    ``ident`` and ``settings`` are resolved for this start (``settings``
    may be None for an object that only polls and stops); ``custom_api``
    and ``core_api`` are kubernetes_asyncio ``CustomObjectsApi`` and
    ``CoreV1Api`` (kubespawner's shared clients). ``start_timeout`` and
    ``stop_timeout`` are seconds. With ``fail_fast_unschedulable`` a VMI no
    node can run fails the start at once, unless the cluster autoscaler
    reported a scale-up for it.
    """

    def __init__(
        self,
        *,
        ident: VMIdentity,
        settings: VMSettings | None,
        custom_api,
        core_api,
        start_timeout: float = 600.0,
        stop_timeout: float = 120.0,
        fail_fast_unschedulable: bool = True,
        interval: float = 0.2,
        tasks: BackgroundTasks | None = None,
        pool=None,
        on_root_disk=None,
        image: str = "VM golden image",
    ):
        self.ident = ident
        #: the golden image as a sentence names it (``VM golden image debian-12``)
        self.image = image
        #: the namespace's :class:`~.pool.RootDiskPoolKeeper` (None: no pool); ``on_root_disk(name)`` is told the
        #: name of a pool disk this start claimed, its root disk from then on
        self.pool = pool
        self.on_root_disk = on_root_disk
        self.tasks = tasks if tasks is not None else BackgroundTasks()
        self.settings = settings
        self.custom_api = custom_api
        self.core_api = core_api
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.fail_fast_unschedulable = fail_fast_unschedulable
        self.interval = interval
        self.url: str | None = None
        self._caches: dict = {}
        self._start_requested = False
        self._remake_disk = None
        #: what this process wrote, kept across the VMWorkspace objects of one server (``"cloudinit"``: the Secret)

    # -- caches --------------------------------------------------------------

    async def watch(self) -> None:
        """Start (or join) the namespace's shared reflectors; returns once each has loaded."""
        namespace = self.ident.namespace
        for name, cls in (("vm", VirtualMachineReflector), ("vmi", VirtualMachineInstanceReflector), ("dv", DataVolumeReflector)):
            self._caches[name] = await shared_reflector(cls, namespace, custom_api=self.custom_api)
        self._caches["events"] = await shared_reflector(VMIEventReflector, namespace, core_api=self.core_api)

    def observe(self) -> tuple[dict | None, dict | None, dict | None]:
        """The cached (VM, VMI, root DataVolume); each None when absent."""
        ns = self.ident.namespace
        return (
            self._caches["vm"].resources.get(f"{ns}/{self.ident.vm}"),
            self._caches["vmi"].resources.get(f"{ns}/{self.ident.vm}"),
            self._caches["dv"].resources.get(f"{ns}/{self.ident.root_disk}"),
        )

    def cached_launcher(self) -> dict | None:
        """The virt-launcher Pod of the VM's current VMI from the shared Pod caches; None before the watches run, without
        a VMI, or while the Pod is not cached."""
        return cached_launcher(self.observe()[1]) if self._caches else None

    def cached_vmi_events(self) -> list[dict]:
        """The Events of the VM's current VMI from the namespace's shared caches ([] before they run or without a VMI)."""
        namespace = self.ident.namespace
        vmis = [r for r in shared_reflectors(VirtualMachineInstanceReflector) if r.namespace == namespace]
        events = [r for r in shared_reflectors(VMIEventReflector) if r.namespace == namespace]
        vmi = vmis[0].resources.get(f"{namespace}/{self.ident.vm}") if vmis else None
        uid = (vmi or {}).get("metadata", {}).get("uid")
        return events[0].events_for(self.ident.vm, uid) if events and uid else []

    def _vmi_events(self, vmi: dict | None) -> list[dict]:
        uid = (vmi or {}).get("metadata", {}).get("uid")
        return self._caches["events"].events_for(self.ident.vm, uid) if uid else []

    def status(self, *, failures_before: int | None = None) -> vmstatus.VMStatus:
        """The workspace's :class:`~.vmstatus.VMStatus` from the caches (call :meth:`watch` first)."""
        vm, vmi, dv = self.observe()
        scale_up = not self.fail_fast_unschedulable or scale_up_triggered(self._vmi_events(vmi))
        return vmstatus.interpret(vm, vmi, dv, failures_before=failures_before, scale_up=scale_up,
                                  launcher=launcher_of(vmi))

    async def _until(self, check, deadline: float):
        """Await until ``check()`` returns something truthy (returned) or the loop time passes ``deadline`` (None)."""
        loop = asyncio.get_running_loop()
        while True:
            value = check()
            if value or loop.time() >= deadline:
                return value or None
            await asyncio.sleep(self.interval)

    async def _vmi_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the VMI to be gone from the VMI watch (as kubespawner waits for a Pod)."""
        deadline = asyncio.get_running_loop().time() + timeout
        return bool(await self._until(lambda: self.observe()[1] is None, deadline))

    # -- fence ---------------------------------------------------------------

    async def _node_ready(self, node: str | None) -> bool | None:
        """Whether the node's Ready condition is True; False for a deleted node; None when unknown (see :func:`.kube.node_ready`)."""
        return await node_ready(self.core_api, node)

    async def fence(self, *, ghost: bool = False, say=None) -> None:
        """Refuse to start next to an existing VMI: at most one guest per root disk (RBD is ReadWriteOnce).

        No VMI: fine. A VMI on a node that is not Ready (or deleted): refused
        (``node-unreachable``) whatever its phase, since its virt-launcher
        may still hold the disk. A VMI whose guest is up (``Ready``): refused
        (``already-running``), unless ``ghost``: the hub shows this server
        stopped (a stop whose ``stop`` call kept failing), so that guest is
        its ghost, stopped like the rest. One still booting (an earlier start of this
        same server, interrupted or retried: the VM is this server's alone),
        one that never reached a node, has finished, or is shutting down:
        the VM is stopped (the ``stop`` tried again while the API answers
        429 or 5xx) and the start waits up to ``stop_timeout`` for it to go
        (else ``still-stopping``, with the API's answer when the stop was
        never accepted), saying so through ``say(message)``, then boots it
        afresh with this start's cloud-init (its API token).
        """
        await self.watch()
        vmi = self.observe()[1]  # the VMI watch: a VMI is made only after a start asks for it, long before this start
        if vmi is None:
            return
        status = vmi.get("status") or {}
        node = status.get("nodeName")
        if await self._node_ready(node) is False:
            raise self._failure(
                "node-unreachable",
                f"Your workspace's previous virtual machine is still registered on node {node}, which is not responding. "
                "Starting another one could damage your root disk, which only one machine may use at a time, so nothing "
                "was started. Please ask an administrator to confirm that the node is down.",
            )
        placed = bool(node) and status.get("phase") not in (None, "", "Pending", "Scheduling")
        up = placed and vmstatus.vmi_active(vmi) and not vmstatus.vmi_terminating(vmi) and vmstatus.vmi_ready(vmi)
        if up and not ghost:
            raise self._failure(
                "already-running",
                f"Your workspace's virtual machine is already running ({status.get('phase') or 'Pending'}"
                f"{' on ' + node if node else ''}); a second one cannot use the same root disk, so nothing was started. "
                "If your server shows as stopped, please ask an administrator.",
            )
        log.info("Waiting for the previous VMI %s/%s to go before starting", self.ident.namespace, self.ident.vm)
        if say is not None:
            say("Your previous virtual machine is still shutting down; waiting for it before starting")
        deadline = asyncio.get_running_loop().time() + self.stop_timeout
        refused = await until_accepted(
            lambda: stop_vm(self.custom_api.api_client, self.ident.namespace, self.ident.vm), deadline,
            on_retry=lambda status: log.warning("Stopping the previous VMI %s/%s: the API answered %s; trying again",
                                                self.ident.namespace, self.ident.vm, status))
        if refused is not None:
            raise self._failure(
                "still-stopping",
                "Your workspace's previous virtual machine is still running and could not be stopped (the cluster "
                f"answered {refused}); nothing was started. Please try again in a few minutes, or ask an administrator.",
            )
        if not await self._vmi_gone(max(0.0, deadline - asyncio.get_running_loop().time())):
            raise self._failure(
                "still-stopping",
                "Your workspace's previous virtual machine is still shutting down; nothing was started. Please try again in a minute.",
            )

    # -- start ---------------------------------------------------------------

    @staticmethod
    def _failure(reason: str, message: str) -> WorkspaceError:
        return WorkspaceError(message, reason=reason, status_code=FAILURE_STATUS.get(reason, 500))

    async def start(
        self,
        *,
        env: Mapping[str, str],
        command: Sequence[str],
        progress: Say | None = None,
        home_mount_path: str = "/home/jovyan",
        unix_user: str = "jovyan",
        extra_labels: Mapping[str, str] | None = None,
        claim_disks=None,
        new_disk_annotations: Mapping[str, str] | None = None,
        recorded: Status | None = None,
    ) -> str:
        """Start the workspace; return the server URL ``http://<Service clusterIP>:8888`` once the guest is Ready.

        ``claim_disks``: ``async ()`` taking the attach claim again once a new
        root disk was created (its first start), before the VM can start;
        ``new_disk_annotations``: annotations a root disk made by this start
        is created with (the start's attach claim, so the claim needs no
        write of its own); ``recorded``: the lifecycle status a root disk or
        VM made by this start is created in.

        ``env`` is the spawner's ``get_env()`` and ``command`` the IDE
        command line (:func:`.vmmanifests.singleuser_command`), both written
        to the cloud-init Secret. ``progress(message, milestone, part=...)``
        (a :class:`~workspacespawner.core.milestones.Say`) is told every
        change worth showing, with the start's milestone it reaches; the
        VMI's Events are not told (the spawner reads them from the watch
        caches, :meth:`cached_vmi_events`). Raises :class:`WorkspaceError`
        on a refusal, a failure or after ``start_timeout``; any failure
        (cancellation included) stops the VM first, keeping every disk.
        """
        say = progress or (lambda message, milestone=None, *, part=1.0: None)
        deadline = asyncio.get_running_loop().time() + self.start_timeout
        await self.fence()  # starts (or joins) the watches the start reads
        ident = self.ident
        self._start_requested = False
        try:
            await self._prepare(env=env, command=command, home_mount_path=home_mount_path, unix_user=unix_user,
                                extra_labels=extra_labels, say=say, claim_disks=claim_disks,
                                new_disk_annotations=new_disk_annotations, recorded=recorded)
            await self._wait_for_disk(deadline, say, remake=self._remake_disk)
            failures_before = vmstatus.start_failures(self.observe()[0])
            self._start_requested = True
            log.info("Starting virtual machine %s/%s for %s", ident.namespace, ident.vm, ident.user_name)
            await start_vm(self.custom_api.api_client, ident.namespace, ident.vm)
            say(vmstatus.STARTING_MESSAGE, Milestone.ROOT_DISK_READY)
            await self._wait_running(deadline, say, failures_before, said=vmstatus.STARTING_MESSAGE, ide=command[0])
        except BaseException as e:
            await self._abort(e)
            if isinstance(e, (ApiException, aiohttp.ClientError)):
                raise _api_failure(e, "start your virtual machine") from e
            raise
        return self.url

    async def _prepare(self, *, env, command, home_mount_path, unix_user, extra_labels, say: Say, claim_disks=None,
                       new_disk_annotations=None, recorded: Status | None = None) -> None:
        """Ensure the disk (a new one made with ``new_disk_annotations``, then claimed), the VM (at the profile), the
        fresh cloud-init Secret and the Service; sets ``url``. The disk and the VM are read from their watches."""
        ident, settings = self.ident, self.settings
        if settings is None:
            raise ValueError("VMWorkspace.start needs the VM settings of the profile")
        vm, _vmi, dv = self.observe()
        pooled = None
        if vm is None and dv is None and self.pool is not None:  # a first start: a disk cloned ahead of time, if any
            pooled = await self.pool.claim(ident, settings, recorded=recorded, annotations=new_disk_annotations or {})
        if pooled is not None:
            ident = self._use_root_disk(pooled["metadata"]["name"])
            if claim_disks is not None:
                await claim_disks()
        disk = phases.made_in(vmmanifests.make_root_datavolume(ident=ident, settings=settings), recorded, new_disk_annotations)
        created = pooled is None and await self._ensure_root_disk(disk, cached=(True, dv), claim_disks=claim_disks)
        self._remake_disk = lambda: self._ensure_root_disk(disk, cached=UNKNOWN, claim_disks=claim_disks)
        if pooled is not None:
            say(f"Using a root disk prepared from the system image {settings.golden_image}")
        else:
            say(f"Creating your root disk from the system image {settings.golden_image}" if created else "Using your root disk")
        vm_manifest = vmmanifests.make_virtual_machine(ident=ident, settings=settings, extra_labels=extra_labels)
        await ensure_vm(self.custom_api, vm_manifest, ident.user_name, cached=(True, vm),
                        created_as=phases.made_in(copy.deepcopy(vm_manifest), recorded))
        secret = vmmanifests.make_cloudinit_secret(
            ident=ident,
            env=env,
            command=command,
            home_mount_path=home_mount_path,
            attach_home=settings.attach_home,
            home_via=settings.home_via,
            unix_user=unix_user,
            storage=settings.storage,
        )
        await write_cloudinit_secret(self.core_api, secret, ident.user_name)
        service = await ensure_service(self.core_api, vmmanifests.make_vm_service(ident=ident), ident.user_name)
        cluster_ip = (service.get("spec") or {}).get("clusterIP")
        if not cluster_ip or cluster_ip == "None":
            raise self._failure("service", f"The service {ident.service!r} of your virtual machine has no cluster IP.")
        self.url = f"http://{cluster_ip}:{vmmanifests.JUPYTER_PORT}"

    def _use_root_disk(self, name: str) -> VMIdentity:
        """From now on the root disk is DataVolume ``name``; the VM made next boots from it."""
        self.ident = dataclasses.replace(self.ident, root_disk=name)
        if self.on_root_disk is not None:
            self.on_root_disk(name)
        return self.ident

    async def _ensure_root_disk(self, manifest: dict, *, cached, claim_disks) -> bool:
        """:func:`.effects.ensure_root_disk`, a new disk claimed (``claim_disks``); True when it was made."""
        _dv, created = await ensure_root_disk(self.custom_api, manifest, self.ident.user_name, cached=cached)
        if created and claim_disks is not None:
            await claim_disks()
        return created

    async def _wait_for_disk(self, deadline: float, say: Say, remake=None) -> None:
        """Wait until the root DataVolume is usable, showing the clone's progress; fail on a Failed clone, a golden
        image not ready or a clone CDI refuses (those two withdraw the DataVolume, which never got a volume).

        ``remake``: ``async ()`` ensuring the disk from the API server, called
        when the watch has shown no root disk for :data:`MISSING_SECONDS` (the
        disk was deleted as this start read it from a watch still holding it).
        """
        last, missing_since = None, None
        loop = asyncio.get_running_loop()

        def check():
            nonlocal last, missing_since
            dv = self.observe()[2]
            if dv is None and remake is not None:
                missing_since = missing_since or loop.time()
                if loop.time() - missing_since >= MISSING_SECONDS:
                    return _MISSING
            else:
                missing_since = None
            failure = vmstatus.datavolume_failure(dv) or vmstatus.golden_image_not_ready(dv) or vmstatus.clone_refused(dv)
            if failure is not None or vmstatus.datavolume_usable(dv):
                return failure or True
            if dv is not None:
                current = self.status()
                if current.message != last:
                    last = current.message
                    _say_status(say, current)
            return None

        outcome = await self._until(check, deadline)
        while outcome is _MISSING:
            log.warning("The root disk %s/%s is gone from its watch; making sure it exists", self.ident.namespace, self.ident.root_disk)
            await remake()
            missing_since = None
            outcome = await self._until(check, deadline)
        if isinstance(outcome, vmstatus.Failure):
            if outcome.reason in ("golden-image", "clone-refused"):
                await withdraw_unmade_root_disk(self.custom_api, self.observe()[2])
            raise self._failure(outcome.reason, outcome.message)
        if outcome is None:
            raise self._timeout("while your root disk was being prepared")

    async def _wait_running(self, deadline: float, say: Say, failures_before: int, *, said: str | None = None,
                            ide: str = "the IDE") -> None:
        """Follow the VM and VMI until the guest is Running and Ready; fail fast on an error status, or on what the
        guest's serial console shows its image lacks (:mod:`.guestconsole`, for the IDE command ``ide``), and tell
        the boot's stages. Each new status message is said once (``said``: the one the start said last, not
        repeated)."""
        last = said
        console = ConsoleFollower(self.core_api, lambda: cached_launcher(self.observe()[1]))
        follower = asyncio.ensure_future(console.run())

        def check():
            nonlocal last
            current = self.status(failures_before=failures_before)
            if current.failure is None and not current.ready:
                current = _with_boot(current, console.boot, self.image, ide)
            if current.failure is not None or current.ready:
                return current
            if current.message != last:
                last = current.message
                _say_status(say, current)
            return None

        try:
            outcome = await self._until(check, deadline)
        finally:
            follower.cancel()
            await asyncio.wait([follower])
        if outcome is None:
            raise self._timeout(f"({last or 'starting'})", guestconsole.timeout_detail(console.boot))
        if outcome.failure is not None:
            raise self._failure(outcome.failure.reason, outcome.failure.message)
        _say_status(say, outcome)

    def _timeout(self, where: str, detail: str = "") -> WorkspaceError:
        return self._failure(
            "timeout",
            f"Your virtual machine did not start within {self.start_timeout:.0f} seconds {where}. "
            + (f"{detail} " if detail else "")
            + "It was stopped; your disks are kept. Please try again.",
        )

    async def _abort(self, error: BaseException) -> None:
        """After a failed start: stop the VM and wait for its VMI to go (never raises, never deletes)."""
        if not self._start_requested:
            return
        log.warning(
            "Start of %s/%s failed (%s); stopping the virtual machine",
            self.ident.namespace, self.ident.vm, getattr(error, "reason", type(error).__name__),
        )
        task = self.tasks.spawn(self.stop(), name=f"stop {self.ident.namespace}/{self.ident.vm} after a failed start")
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # the stop carries on in the background, held by self.tasks
        except Exception:
            log.exception("Could not stop %s/%s after a failed start", self.ident.namespace, self.ident.vm)

    # -- stop and poll -------------------------------------------------------

    async def stop(self) -> bool:
        """Stop the VM and wait for its VMI to go; True once it is gone.

        Waits ``stop_timeout`` seconds for the guest to shut down, then asks
        for an immediate stop (``gracePeriod: 0``) and waits 30 s more. The
        VM, DataVolume, PVCs, Secret and Service are kept. The Secret's API
        token is left as it is: JupyterHub deletes a server's token when the
        server stops (``User.stop``), and the next start writes a new one. A
        VMI that does not go (its node unreachable) is logged and False
        returned.
        """
        await self.watch()
        ident = self.ident
        api_client = self.custom_api.api_client
        await stop_vm(api_client, ident.namespace, ident.vm)
        gone = await self._vmi_gone(self.stop_timeout)
        if not gone:
            log.warning("VMI %s/%s still there after %.0f s; stopping it at once", ident.namespace, ident.vm, self.stop_timeout)
            await stop_vm(api_client, ident.namespace, ident.vm, grace_period=0)
            gone = await self._vmi_gone(30.0)
        if not gone:
            log.error("VMI %s/%s did not go away (is its node unreachable?)", ident.namespace, ident.vm)
        return gone

    async def poll(self) -> int | None:
        """``Spawner.poll()``: None while the guest runs (or KubeVirt is starting it), else an exit code (cache only)."""
        await self.watch()
        vm, vmi, _dv = self.observe()
        return vmstatus.exit_status(vm, vmi)

