"""Every label key, owner label and object-name rule of workspacespawner, in one place.

Objects we create carry owner labels under one prefix (:data:`LABEL_PREFIX`)
so that usage, quota, retention and purge select them by label and owner,
never by a name pattern (a name pattern bills user ``ann`` for ``anna``).

The owner label value is a hash of the JupyterHub user name: user names may
hold capitals, ``@``, dots or unicode and be longer than a label value may
be (63 characters), while a hash is always a valid, fixed-length label value
and two different names never share one. The exact user name rides along in
an annotation (:data:`OWNER_ANNOTATION`), which is what ownership checks
compare.
"""

from __future__ import annotations

import hashlib
import re

#: Our label and annotation prefix (a DNS subdomain, as Kubernetes requires of prefixes).
LABEL_PREFIX = "workspacespawner.io"

#: ``app.kubernetes.io/managed-by`` value on everything we create.
MANAGED_BY = "workspacespawner"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: sha256 of the JupyterHub user name, first 40 hex digits: selects a user's objects.
OWNER_LABEL = f"{LABEL_PREFIX}/owner"
#: kubespawner's readable (slugged, possibly truncated) user-name label, kept for tooling that reads it.
KUBESPAWNER_USERNAME_LABEL = "hub.jupyter.org/username"
#: kubespawner's component label (``singleuser-storage`` on PVCs, ``singleuser-server`` on pods).
COMPONENT_LABEL = "component"
#: which disk of a workspace an object is: ``home`` or ``root``.
DISK_LABEL = f"{LABEL_PREFIX}/disk"
#: the exact JupyterHub user name (annotation: any string is allowed there).
OWNER_ANNOTATION = f"{LABEL_PREFIX}/owner-name"

HOME_DISK = "home"
ROOT_DISK = "root"
STORAGE_COMPONENT = "singleuser-storage"

#: The workspace's lifecycle phase (``Stopped``, ``Retained``, ...) on its disks and VM, for selection
#: (``workspacespawner.io/phase=Retained``); the full record is in :data:`LIFECYCLE_ANNOTATION`.
PHASE_LABEL = f"{LABEL_PREFIX}/phase"
#: JSON: phase, reason, message, since, retainUntil, server (see :mod:`workspacespawner.lifecycle.phases`).
LIFECYCLE_ANNOTATION = f"{LABEL_PREFIX}/lifecycle"
#: JSON on a ReadWriteOnce disk (home PVC, root DataVolume): the attach claim of the server whose compute
#: uses it: server, kind, name, since (see :mod:`workspacespawner.lifecycle.attach`).
ATTACH_ANNOTATION = f"{LABEL_PREFIX}/attached-to"
#: On a home PVC: the name the workspace's home template gives (its "slot"); a restored home keeps
#: its slot under a new name, so the workspace finds it by owner label and slot, not by name.
HOME_SLOT_ANNOTATION = f"{LABEL_PREFIX}/home-slot"
#: On a PVC restored from a VolumeSnapshot: the snapshot's name.
RESTORED_FROM_ANNOTATION = f"{LABEL_PREFIX}/restored-from"
#: On a VolumeSnapshot: the PVC it was taken of.
SNAPSHOT_SOURCE_ANNOTATION = f"{LABEL_PREFIX}/source-pvc"
#: On a root DataVolume: the VirtualMachine it is (or was) the root disk of, its *slot*. The VM's own
#: ``rootdisk`` volume says which DataVolume is its root disk now; the slot finds a user's root disk
#: before the VM exists (a pool disk claimed by a start the hub did not finish).
ROOT_SLOT_ANNOTATION = f"{LABEL_PREFIX}/root-slot"
#: On a root DataVolume (and a pool disk): the golden image it was cloned from, ``namespace/name`` of the
#: CDI DataSource, as it was named then (a versioned name says which version, see ``config/goldenimages``).
GOLDEN_IMAGE_ANNOTATION = f"{LABEL_PREFIX}/golden-image"
#: The namespace golden-image DataSources live in unless configured (``c.WorkspaceSpawner.vm_golden_image_namespace``).
GOLDEN_IMAGE_NAMESPACE = "golden-images"
#: On a golden image published from a workspace (its DataSource and the VolumeSnapshot or DataVolume behind it):
#: where it came from, JSON ``{"by", "at", "user", "server", "namespace", "disk", "golden_image"}``.
PUBLISHED_FROM_ANNOTATION = f"{LABEL_PREFIX}/published-from"
#: :data:`DISK_LABEL` value of what a publish makes (the VolumeSnapshot or DataVolume behind a golden image). It
#: carries no owner label, so no quota, retention or purge of the user it came from ever selects it.
GOLDEN_IMAGE_DISK = "golden-image"
#: On a root DataVolume made by a rebuild: the root DataVolume it replaces (retained once the VM names the new one).
REBUILT_FROM_ANNOTATION = f"{LABEL_PREFIX}/rebuilt-from"
#: :data:`DISK_LABEL` value of a pool disk: a root DataVolume cloned ahead of time, assigned to nobody yet.
#: It carries no owner label, so no quota, retention or purge ever selects it.
POOL_DISK = "pool"
#: On a pool disk: which golden image it holds, :func:`golden_image_id` of ``namespace/name``.
POOL_IMAGE_LABEL = f"{LABEL_PREFIX}/pool-image"
#: On a pool disk: JSON of the DataSource's ``spec.source`` when the disk was cloned (the PVC or VolumeSnapshot the
#: golden image was then), so a DataSource pointed at a new source retires the disks cloned from the old one.
GOLDEN_IMAGE_SOURCE_ANNOTATION = f"{LABEL_PREFIX}/golden-image-source"


def owner_id(user_name: str) -> str:
    """The owner label value for a JupyterHub user name: 40 hex digits of its sha256.

    Stable across hub restarts and releases, distinct for distinct names
    (``ann`` and ``anna`` differ), and always a valid label value.
    """
    return hashlib.sha256(user_name.encode("utf-8")).hexdigest()[:40]


def disk_title(role: str, server: str) -> str:
    """What a disk is to the people who use it, by its :data:`DISK_LABEL` ``role`` and the ``server`` it serves
    (``""``: the default server): ``System disk of server 'gpu'``, ``Home folder`` (a user's servers share one by
    default). A disk's Kubernetes name (a pool disk's ``pool-ubuntu-…-c64784``) says nothing of whose it is."""
    which = f"server {server!r}" if server else "the default server"
    if role == ROOT_DISK:
        return f"System disk of {which}"
    if role == HOME_DISK:
        return "Home folder"
    return f"Disk of {which}"


def owner_labels(user_name: str) -> dict[str, str]:
    """The labels that mark an object as ours and owned by ``user_name``."""
    return {MANAGED_BY_LABEL: MANAGED_BY, OWNER_LABEL: owner_id(user_name)}


def owner_selector(user_name: str) -> str:
    """A labelSelector string matching exactly the objects owned by ``user_name``."""
    return ",".join(f"{k}={v}" for k, v in sorted(owner_labels(user_name).items()))


def owned_by(obj_meta: dict, user_name: str) -> bool:
    """True if object metadata (a dict with ``labels`` and ``annotations``) is ours and ``user_name``'s.

    Both the owner label and the exact-name annotation must match: a label
    alone could have been copied onto a foreign object.
    """
    labels = obj_meta.get("labels") or {}
    annotations = obj_meta.get("annotations") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        and labels.get(OWNER_LABEL) == owner_id(user_name)
        and annotations.get(OWNER_ANNOTATION) == user_name
    )


def owner_name(obj_meta: dict) -> str | None:
    """The exact owner name of object metadata whose owner label and owner annotation agree, else None."""
    owner = (obj_meta.get("annotations") or {}).get(OWNER_ANNOTATION)
    return owner if owner is not None and owned_by(obj_meta, owner) else None


#: kubespawner's annotations on a server's Pod (our VM template carries them too): the exact user and server names.
USER_ANNOTATIONS = ("hub.jupyter.org/username", OWNER_ANNOTATION)
SERVER_ANNOTATION = "hub.jupyter.org/servername"


def server_of(obj_meta: dict) -> tuple[str, str] | None:
    """``(user, server name)`` a Pod or VMI's metadata names in kubespawner's annotations (ours for the user), or None.

    The server name is ``""`` for a user's default server.
    """
    annotations = obj_meta.get("annotations") or {}
    user = next((annotations[key] for key in USER_ANNOTATIONS if annotations.get(key)), None)
    return None if not user else (user, annotations.get(SERVER_ANNOTATION, ""))


def labelled_for(obj_meta: dict, user_name: str) -> bool:
    """True if object metadata carries our owner labels for ``user_name`` (no name annotation needed).

    For what KubeVirt and kubespawner make from our templates (VMIs carry
    the template's labels only): enough to find a user's compute, never
    enough to adopt a disk (that is :func:`owned_by`).
    """
    labels = obj_meta.get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(OWNER_LABEL) == owner_id(user_name)


def disk_labels(user_name: str, kubespawner_username: str, disk: str) -> dict[str, str]:
    """Labels of a workspace disk (PVC or DataVolume): owner labels plus kubespawner's and the disk role.

    ``kubespawner_username`` is kubespawner's safe slug of the user name (a
    valid label value by construction); ``disk`` is :data:`HOME_DISK` or
    :data:`ROOT_DISK`.
    """
    labels = owner_labels(user_name)
    labels[KUBESPAWNER_USERNAME_LABEL] = kubespawner_username
    labels[COMPONENT_LABEL] = STORAGE_COMPONENT
    labels[DISK_LABEL] = disk
    return labels


def owner_annotations(user_name: str) -> dict[str, str]:
    """The annotation carrying the exact user name (what ownership checks compare)."""
    return {OWNER_ANNOTATION: user_name}


#: KubeVirt's ``kubevirt.io/domain`` label: virt-controller copies the template's labels onto the VMI
#: and its virt-launcher Pod, so a Service selecting it reaches the VM's guest.
DOMAIN_LABEL = "kubevirt.io/domain"
#: KubeVirt's ``kubevirt.io`` label; on a VMI's virt-launcher Pod its value is :data:`VIRT_LAUNCHER`.
VIRT_LAUNCHER_LABEL = "kubevirt.io"
#: The value of :data:`VIRT_LAUNCHER_LABEL` on a virt-launcher Pod (the Pod that runs a VMI's QEMU).
VIRT_LAUNCHER = "virt-launcher"
#: KubeVirt's label on a virt-launcher Pod naming its VMI's uid: how a reader joins the Pod to its VMI (never the name).
CREATED_BY_LABEL = "kubevirt.io/created-by"
#: The component label value kubespawner puts on singleuser servers (our VMs carry it too).
SERVER_COMPONENT = "singleuser-server"


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_label(value) -> bool:
    """Whether ``value`` is an RFC 1123 label (a string of at most 63 characters): what a namespace name must be."""
    return isinstance(value, str) and len(value) <= 63 and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value) -> bool:
    """Whether ``value`` is an RFC 1123 subdomain (a string of at most 253 characters): what most object names
    (DataSource, StorageClass, VolumeSnapshotClass) and label-key prefixes must be."""
    return isinstance(value, str) and len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None


def dns_label(text: str, max_length: int = 63) -> str:
    """``text`` as an RFC 1035 label of at most ``max_length`` characters (Service names need one).

    A valid label comes back unchanged. Otherwise letters are lowercased,
    other characters become ``-``, a leading non-letter gets ``w-`` in front,
    and a name that is too long is cut and ends in 8 hex digits of the sha256
    of ``text``, so two different inputs stay two different names.
    """
    if re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", text) and len(text) <= max_length:
        return text
    safe = re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")
    if not safe or not safe[0].isalpha():
        safe = f"w-{safe}".rstrip("-")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{safe[: max_length - 9].rstrip('-')}-{digest}"


# -- storage tiers: team folders and scratch ----------------------------------------------------

#: Which JupyterHub group a team-folder claim serves: sha256 of the group name (like :data:`OWNER_LABEL`).
#: Team claims never carry :data:`OWNER_LABEL`: they are nobody's disk, so no retention purge,
#: user deletion or per-user disk quota ever selects them.
TEAM_LABEL = f"{LABEL_PREFIX}/team"
#: The exact JupyterHub group names a team claim serves, as a JSON list (annotation).
TEAM_ANNOTATION = f"{LABEL_PREFIX}/team-names"
#: :data:`DISK_LABEL` values of the storage tiers: a team folder, and a pod's scratch volume claim.
TEAM_DISK = "team"
SCRATCH_DISK = "scratch"


def golden_image_id(namespace: str, name: str) -> str:
    """The :data:`POOL_IMAGE_LABEL` value of golden image ``namespace/name``: 40 hex digits of its sha256."""
    return owner_id(f"{namespace}/{name}")


def team_id(group_name: str) -> str:
    """The :data:`TEAM_LABEL` value of a JupyterHub group: 40 hex digits of its sha256, always a valid label value."""
    return owner_id(group_name)


def team_labels(group_name: str) -> dict[str, str]:
    """Labels of a team-folder claim: ours, a ``team`` disk, for ``group_name``; no owner label."""
    return {MANAGED_BY_LABEL: MANAGED_BY, DISK_LABEL: TEAM_DISK, TEAM_LABEL: team_id(group_name)}


def team_selector() -> str:
    """A labelSelector string matching every team-folder claim we created."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY},{DISK_LABEL}={TEAM_DISK}"


def scratch_labels() -> dict[str, str]:
    """Labels of a scratch volume's claim (a generic ephemeral volume, deleted with its Pod): no owner label."""
    return {MANAGED_BY_LABEL: MANAGED_BY, DISK_LABEL: SCRATCH_DISK}


#: A ``{field}`` placeholder of kubespawner's templates (str.format fields with no format spec).
_PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def expand_with_literal_braces(template: str, expand) -> str:
    """``template`` expanded by ``expand`` (kubespawner's ``_expand_user_properties``), literal braces kept.

    ``expand`` is ``str.format`` over kubespawner's fields, which raises
    KeyError/ValueError/IndexError on a brace that is not a field (a JSON
    value, ``${HOME}``). Such a template is expanded piece by piece instead:
    each ``{field}`` that ``expand`` knows is replaced, everything else
    (unknown fields, lone and doubled braces) stays as written. Returns str.
    """
    try:
        return expand(template)
    except (KeyError, ValueError, IndexError, AttributeError):
        pass

    def one(match: re.Match) -> str:
        try:
            return expand(match.group(0))
        except (KeyError, ValueError, IndexError, AttributeError):
            return match.group(0)

    return _PLACEHOLDER.sub(one, template)
