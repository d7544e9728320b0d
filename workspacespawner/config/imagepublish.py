"""Publishing a workspace's root disk as a golden image: ``c.ImagePublish.*``, checked when loaded.

Who may publish from the dashboard (hub admins, anyone's workspace; members
of :attr:`ImagePublish.teacher_groups`, their own), how (``mode``: a
VolumeSnapshot or a PVC clone), and where the golden images go. The
``workspacespawner image publish`` command, run by an admin, reads the same
settings from the same config file. The operation itself is
:mod:`workspacespawner.vmdisk.publish`.
"""

from __future__ import annotations

from traitlets import Enum, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from workspacespawner.config.goldenimages import golden_image_namespace
from workspacespawner.core import names

#: How a golden image is published: a VolumeSnapshot of the root disk, or a DataVolume cloning it.
MODES = ("snapshot", "clone")



class ImagePublish(Configurable):
    """Settings of publishing a stopped VM workspace's root disk as a golden image (see the module docstring)."""

    mode = Enum(
        MODES,
        "snapshot",
        help="""How a golden image is made: "snapshot" (a VolumeSnapshot of the root disk in the users'
        namespace, which the DataSource names; needs a CSI driver with snapshots, such as ceph-csi RBD) or
        "clone" (a DataVolume in the golden-image namespace cloning the root disk's PVC, which the DataSource
        names; for clusters without VolumeSnapshots). Example: "clone".""",
    ).tag(config=True)

    snapshot_class = Unicode(
        None,
        allow_none=True,
        help="""The VolumeSnapshotClass of a publish by snapshot (a Kubernetes object name). None: the
        cluster's default class. Example: "csi-rbdplugin-snapclass".""",
    ).tag(config=True)

    teacher_groups = List(
        Unicode(),
        help="""JupyterHub groups whose members may publish their own stopped VM workspaces as golden images
        from the dashboard (hub admins may publish anyone's). Empty: admins only.
        Example: ["teachers"].""",
    ).tag(config=True)

    namespace = Unicode(
        None,
        allow_none=True,
        help="""The namespace published golden images (CDI DataSources) go to (a Kubernetes namespace name).
        None: c.WorkspaceSpawner.vm_golden_image_namespace, where VM root disks are cloned from.
        Example: "golden-images".""",
    ).tag(config=True)

    @validate("snapshot_class")
    def _check_snapshot_class(self, proposal):
        value = proposal["value"]
        if value is not None and not names.is_dns_subdomain(value):
            raise TraitError(f"ImagePublish.snapshot_class must be a VolumeSnapshotClass name or None, not {value!r}")
        return value

    @validate("teacher_groups")
    def _check_teacher_groups(self, proposal):
        value = list(proposal["value"])
        if any(not g.strip() for g in value):
            raise TraitError(f"ImagePublish.teacher_groups must list JupyterHub group names, not {value!r}")
        return value

    @validate("namespace")
    def _check_namespace(self, proposal):
        value = proposal["value"]
        if value is not None and not names.is_dns_label(value):
            raise TraitError(f"ImagePublish.namespace must be a Kubernetes namespace name or None, not {value!r}")
        return value

    def may_publish(self, *, viewer: str, admin: bool, groups, owner: str) -> bool:
        """Whether ``viewer`` (a hub admin if ``admin``, a member of ``groups``) may publish ``owner``'s workspaces:
        an admin anyone's, a member of a teacher group their own."""
        return admin or (viewer == owner and bool(set(self.teacher_groups) & set(groups or ())))


def publish_settings(config) -> ImagePublish:
    """The ``ImagePublish`` section of the hub's ``config`` (a traitlets ``Config``), checked; ``TraitError`` names
    the setting and the bad value."""
    return ImagePublish(config=config)


def golden_namespace(config, settings: ImagePublish | None = None) -> str:
    """Where published golden images go: ``c.ImagePublish.namespace``, else the spawner's
    ``vm_golden_image_namespace`` (``c.Spawner``/``c.KubeSpawner``/``c.WorkspaceSpawner``), else its default."""
    settings = settings or publish_settings(config)
    return settings.namespace or golden_image_namespace(config)


def check_image_name(name: str) -> str | None:
    """Why ``name`` cannot name a golden image (a CDI DataSource), or None: it must be a DNS-1123 subdomain of at most
    63 characters (a DataSource name, and a DataVolume name in clone mode), such as ``ubuntu-2404-cuda.v2``."""
    if not name:
        return "a golden image needs a name"
    if len(name) > 63:
        return f"{name!r} is {len(name)} characters long; a golden image's name has at most 63"
    if not names.is_dns_subdomain(name):
        return (f"{name!r} is not a valid name: lower-case letters, digits, '-' and '.', "
                "starting and ending with a letter or digit")
    return None
