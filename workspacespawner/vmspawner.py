"""The VM side of WorkspaceSpawner: its settings (``c.WorkspaceSpawner.vm_*``) and start/stop/poll glue.

A profile with ``workspace_kind: vm`` runs as a KubeVirt VirtualMachine
whose root disk is a CDI DataVolume cloned from a golden-image DataSource
(see :mod:`.vm` and :mod:`.vmmanifests`). This mixin turns the spawner's
resolved profile and settings into a :class:`~.vm.VMWorkspace` and keeps its
identity in the spawner state, so a restarted hub finds a running VM.
"""

from __future__ import annotations

from kubespawner.clients import shared_client
from traitlets import Bool, Int, Unicode
from traitlets.config import LoggingConfigurable

from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, singleuser_command
from workspacespawner.backends.vm.workspace import VMWorkspace


class VMSpawnerMixin(LoggingConfigurable):
    """Settings and glue for VM workspaces; mixed into WorkspaceSpawner (which supplies profile, env and API clients)."""

    vm_name_template = Unicode(
        "ws-{user_server}",
        config=True,
        help="""Name of a workspace's VirtualMachine (and its Service); the root disk is ``<name>-root``.

        Expanded like kubespawner's templates; ``{user_server}`` gives one VM
        per user and named server.
        """,
    )

    vm_golden_image = Unicode(
        "ubuntu-22.04-gpu",
        config=True,
        help="""Name of the CDI DataSource (golden image) a new root disk is cloned from. Usually set per profile.""",
    )

    vm_golden_image_namespace = Unicode(
        "golden-images",
        config=True,
        help="""Namespace of :attr:`vm_golden_image`; the hub needs CDI's clone permission there.""",
    )

    vm_root_disk_size = Unicode(
        "40Gi",
        config=True,
        help="""Size of a new root disk, a Kubernetes quantity. An existing disk is reused as it is.

        With the default home (10Gi) one VM workspace fits the default
        per-user disk quota (``WorkspaceQuota.max_disk``, 50Gi).
        """,
    )

    vm_storage_class = Unicode(
        "ceph-rbd",
        allow_none=True,
        config=True,
        help="""StorageClass of the root disk's DataVolume. ``None`` uses the cluster default.""",
    )

    vm_volume_mode = Unicode(
        "Block",
        config=True,
        help="""volumeMode of the root disk: ``Block`` (RBD's raw device) or ``Filesystem``.""",
    )

    vm_cpu_cores = Int(
        2,
        min=1,
        config=True,
        help="""Virtual CPU cores when the profile sets no ``cpu_limit`` (a profile's limit is rounded up).""",
    )

    vm_memory = Unicode(
        "8Gi",
        config=True,
        help="""Guest memory when the profile sets no ``mem_limit``, a Kubernetes quantity.""",
    )

    vm_gpu_device_name = Unicode(
        "nvidia.com/gpu",
        config=True,
        help="""KubeVirt ``permittedHostDevices`` resource name of the GPUs passed through (e.g. ``nvidia.com/GA100_A100_SXM4_80GB``).""",
    )

    vm_attach_home = Bool(
        True,
        config=True,
        help="""Attach the user's home PVC to the VM as a second disk, mounted at ``home_mount_path``.""",
    )

    vm_termination_grace_seconds = Int(
        180,
        min=0,
        config=True,
        help="""Seconds a stop waits for the guest to shut down before KubeVirt kills it.""",
    )

    vm_unix_user = Unicode(
        "jovyan",
        config=True,
        help="""The guest user that runs the IDE (created by cloud-init, uid 1000 like the container images).""",
    )

    def _vm_identity(self) -> VMIdentity:
        saved = getattr(self, "_vm_ident_state", None)
        if saved:
            return VMIdentity.from_state(saved)
        return VMIdentity.for_workspace(
            namespace=self.namespace,
            user_name=self.user.name,
            kubespawner_username=self._expand_user_properties("{username}"),
            base_name=self._expand_user_properties(self.vm_name_template),
            home_pvc=self.home_pvc_name,
            server_name=self.name or "",
        )

    def _vm_workspace(self, settings: VMSettings | None) -> VMWorkspace:
        ident = self._vm_identity()
        self._vm_ident_state = ident.to_state()
        return VMWorkspace(
            ident=ident,
            settings=settings,
            custom_api=shared_client("CustomObjectsApi"),
            core_api=self.api,
            start_timeout=max(self.start_timeout - 5, 1),
            fail_fast_unschedulable=self.fail_fast_unschedulable,
        )

    async def _start_vm(self) -> str:
        """Start the VM workspace for the resolved profile; return the server URL (the Service's cluster IP)."""
        settings = VMSettings.for_profile(
            self.profile,
            golden_image=self.vm_golden_image,
            golden_image_namespace=self.vm_golden_image_namespace,
            root_disk_size=self.vm_root_disk_size,
            storage_class=self.vm_storage_class,
            volume_mode=self.vm_volume_mode,
            cpu_cores=self.vm_cpu_cores,
            memory=self.vm_memory,
            gpu_device_name=self.vm_gpu_device_name,
            attach_home=self.vm_attach_home,
            termination_grace_seconds=self.vm_termination_grace_seconds,
            storage=self._vm_storage_tiers(),
        )
        self._vm_ident_state = None  # a new start takes names from the current templates
        workspace = self._vm_workspace(settings)
        return await workspace.start(
            env=self.get_env(),
            command=singleuser_command(self.cmd or ["jupyterhub-singleuser"], self.get_args()),
            progress=lambda message, _percent: self._step(message),
            home_mount_path=self.home_mount_path,
            unix_user=self.vm_unix_user,
            # The same extra labels a Pod would carry (z2jh's network-access labels among them).
            extra_labels=self._build_common_labels(self._expand_all(self.extra_labels)),
        )

    async def _stop_vm(self) -> None:
        await self._vm_workspace(None).stop()

    async def _poll_vm(self) -> int | None:
        return await self._vm_workspace(None).poll()
