"""The VM settings of WorkspaceSpawner (``c.WorkspaceSpawner.vm_*``), and their resolution for one start.

A trait-only class (``HasTraits``) mixed into WorkspaceSpawner. A profile
with ``workspace_kind: vm`` usually overrides some of them in
``kubespawner_override``; :meth:`VMTraits.vm_settings` freezes them, with
the resolved profile and the storage tiers, into the
:class:`~workspacespawner.backends.vm.manifests.VMSettings` of one start.
"""

from __future__ import annotations

from traitlets import Bool, Enum, HasTraits, Int, Unicode

from workspacespawner.backends.vm.manifests import HOME_VIA, VMSettings
from workspacespawner.backends.vm.tiers import VMTiers
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.config.traittypes import DeprecatedAlias
from workspacespawner.core import names


class VMTraits(HasTraits):
    """Names, golden image, root disk, size and guest settings of VM workspaces."""

    vm_name_template = Unicode(
        "ws-{user_server}",
        config=True,
        help="""Name of a workspace's VirtualMachine (and its Service); the root disk is ``<name>-root``.

        Expanded like kubespawner's templates; ``{user_server}`` gives one VM
        per user and named server.
        """,
    )

    vm_golden_image = Unicode(
        "ubuntu-22.04-gpu-2026-11",
        config=True,
        help="""Name of the CDI DataSource (golden image) a new root disk is cloned from. Usually set per profile.""",
    )

    vm_golden_image_namespace = Unicode(
        names.GOLDEN_IMAGE_NAMESPACE,
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
        help="""Give the VM the user's home PVC, mounted at ``home_mount_path`` (how: :attr:`vm_home_via`).""",
    )

    vm_home_via = Enum(
        list(HOME_VIA),
        default_value="virtiofs",
        config=True,
        help="""How a VM gets the home PVC (with ``vm_attach_home``): ``"virtiofs"`` (the default) or ``"disk"``.

        ``"virtiofs"`` shares the PVC's own files with the guest
        (``domain.devices.filesystems``, KubeVirt's ``virtiofs``), so the
        container and VM workspaces of one user see one home. It needs
        KubeVirt's ``EnableVirtioFsStorageVolumes`` feature gate (older
        releases named it ``ExperimentalVirtiofsSupport``, discontinued in
        KubeVirt 1.7), and the VM cannot live-migrate (GPU VMs never do).

        ``"disk"`` is for sites without virtiofs: the PVC is attached as a
        second disk (virtio serial ``home``), formatted once inside the
        guest. Its files are not the container's: on a Filesystem-mode PVC
        (the home's) KubeVirt keeps the disk as a ``disk.img`` file in the
        PVC, so a container workspace of the same user sees that image
        file, not the VM's files, and the VM does not see the container's.
        """,
    )

    vm_termination_grace_period = Int(
        180,
        min=0,
        config=True,
        help="""Seconds a stop waits for the guest to shut down before KubeVirt kills it.""",
    )

    vm_termination_grace_seconds = DeprecatedAlias("vm_termination_grace_period", section="WorkspaceSpawner",
                                                   help="Deprecated: use ``c.WorkspaceSpawner.vm_termination_grace_period`` (seconds too).")

    vm_unix_user = Unicode(
        "jovyan",
        config=True,
        help="""The guest user that runs the IDE (created by cloud-init, uid 1000 like the container images).""",
    )

    def vm_settings(self, profile: ResolvedProfile, storage: VMTiers) -> VMSettings:
        """This start's frozen VM settings: ``profile`` (CPU, memory, GPUs) over these traits, with the VM's storage tiers."""
        return VMSettings.for_profile(
            profile,
            golden_image=self.vm_golden_image,
            golden_image_namespace=self.vm_golden_image_namespace,
            root_disk_size=self.vm_root_disk_size,
            storage_class=self.vm_storage_class,
            volume_mode=self.vm_volume_mode,
            cpu_cores=self.vm_cpu_cores,
            memory=self.vm_memory,
            gpu_device_name=self.vm_gpu_device_name,
            attach_home=self.vm_attach_home,
            home_via=self.vm_home_via,
            termination_grace_seconds=self.vm_termination_grace_period,
            storage=storage,
        )
