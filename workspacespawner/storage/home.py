"""The user's home PersistentVolumeClaim: build it, and make sure it exists and is ours.

The home PVC is created by the spawner, owned by no Pod (no ownerReferences),
and never deleted by a stop or a failed start. It is reused as it is found:
Bound, Pending under ``WaitForFirstConsumer``, or being expanded are all fine.
A PVC of that name that does not carry our owner labels and the user's exact
name is refused, never adopted.

API followed: core/v1 PersistentVolumeClaim (``read``/``create`` namespaced).
"""

from __future__ import annotations

import logging
import string

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.milestones import Milestone, Say
from workspacespawner.k8s.admission import exceeded_quota
from workspacespawner.k8s.kinds import PVC
from workspacespawner.k8s.owned import core_accessors, ensure_owned
from workspacespawner.lifecycle import attach, phases
from workspacespawner.lifecycle.disks import home_candidates
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef, made_in

log = logging.getLogger("workspacespawner")


def make_home_pvc(
    *,
    name: str,
    namespace: str,
    user_name: str,
    kubespawner_username: str,
    storage_class: str | None,
    size: str,
    access_modes: list[str],
    status: Status | None = None,
    annotations: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict:
    """The home PVC manifest (a plain dict, core/v1 PersistentVolumeClaim).

    ``size`` is a Kubernetes quantity (``"10Gi"``); ``storage_class`` None
    leaves the cluster default; ``access_modes`` e.g. ``["ReadWriteOnce"]``;
    ``status``: the lifecycle status it is made in (a new home is
    ``Stopped`` at once: nothing provisions it before a Pod uses it), so no
    write has to record it after the create; ``annotations``: more of them
    (the start's attach claim); ``extra_labels``: the admin's
    (``KubeSpawner.storage_extra_labels``, expanded), under ours: an extra
    label never changes whose disk it is.
    """
    spec = {
        "accessModes": list(access_modes),
        "resources": {"requests": {"storage": size}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(extra_labels or {}), **names.disk_labels(user_name, kubespawner_username, names.HOME_DISK)},
            "annotations": {**(annotations or {}), **names.owner_annotations(user_name)},
        },
        "spec": spec,
    }
    return made_in(manifest, status)


def home_volume(pvc_name: str) -> dict:
    """The Pod volume that mounts the home PVC (name ``home``)."""
    return {"name": "home", "persistentVolumeClaim": {"claimName": pvc_name}}


def home_volume_mount(mount_path: str) -> dict:
    """The container volumeMount for :func:`home_volume` at ``mount_path``."""
    return {"name": "home", "mountPath": mount_path}


async def ensure_home_pvc(core_api, manifest: dict, user_name: str, *, create_first: bool = False) -> dict:
    """Make sure the home PVC of ``manifest`` exists and belongs to ``user_name``; return it as a dict.

    ``core_api`` is a kubernetes_asyncio ``CoreV1Api``. Reads first (one
    call when the PVC exists), creates on 404, and re-reads on a 409 from a
    concurrent create; transient API errors are retried. ``create_first``:
    the hub's PVC watch holds none of ours by that name, so the create comes
    first (a foreign PVC of that name answers 409, and is read and refused).
    Raises :class:`WorkspaceError` (``reason="home-volume"``) when the PVC
    exists but is not ours or is another user's, and (403,
    ``reason="storage-quota"``) when the namespace's ResourceQuota refuses
    the create, naming the quota and its numbers (an existing home is only
    read, never re-created, so a full quota never blocks its owner); other
    API errors propagate.
    """
    read, create = core_accessors(core_api, "persistent_volume_claim", manifest)
    try:
        pvc, created = await ensure_owned(read=read, create=create, user_name=user_name, what="home volume", reason="home-volume",
                                          create_first=create_first)
    except ApiException as e:
        refused = exceeded_quota(e)
        if refused is None:
            raise
        namespace = manifest["metadata"]["namespace"]
        log.warning("Home PVC %s/%s for %s refused by ResourceQuota %s", namespace, manifest["metadata"]["name"], user_name,
                    refused.quota)
        raise WorkspaceError(refused.sentence(namespace, "your new home volume"), reason="storage-quota", status_code=403) from None
    if created:
        log.info("Created home PVC %s/%s for %s", manifest["metadata"]["namespace"], manifest["metadata"]["name"], user_name)
    return pvc


def made_now(ref: WorkspaceRef) -> tuple[Status, dict[str, str]]:
    """What a disk or VM a start of ``ref`` makes is created with: the lifecycle status ``Stopped`` (its compute shows
    the rest) and, for a disk, this start's attach claim (:func:`~workspacespawner.lifecycle.attach.claim_annotation`)."""
    now = phases.utcnow().replace(microsecond=0)
    return Status(Phase.STOPPED, since=now, server=ref.server_name), attach.claim_annotation(ref, now)


async def home_pvc(spawner, ref: WorkspaceRef, *, kubespawner_username: str, extra_labels: dict[str, str] | None = None) -> dict:
    """The home PVC of ``spawner`` (a WorkspaceSpawner: kubespawner's storage settings, the hub's Kube facade): as the PVC
    watch holds it when it is the user's, else read, or made (already ``Stopped``, claimed for the start of ``ref``:
    :func:`made_now`, with ``extra_labels``: z2jh's ``singleuser.storage.extraLabels``, expanded)."""
    kube, namespace, name, user = spawner.services.kube, spawner.namespace, spawner.home_pvc_name, spawner.user.name
    known, pvc = kube.peek(PVC, namespace, name)
    if known and pvc is not None and names.owned_by(pvc["metadata"], user):
        return pvc
    recorded, claim = made_now(ref)
    manifest = make_home_pvc(
        name=name, namespace=namespace, user_name=user, kubespawner_username=kubespawner_username,
        storage_class=spawner.storage_class, size=spawner.storage_capacity, access_modes=spawner.storage_access_modes,
        status=recorded, annotations=claim, extra_labels=extra_labels,
    )
    pvc = await ensure_home_pvc(spawner.api, manifest, user, create_first=known and pvc is None)
    return kube.remember(PVC, namespace, pvc)


def say_home_ready(pvc: dict, name: str, say: Say) -> None:
    """Tell the start's progress (``say``) how home PVC ``pvc`` (named ``name``) is: ready (Bound), or made and unbound."""
    if (phase := (pvc.get("status") or {}).get("phase", "Pending")) == "Bound":
        say(f"Home volume {name} ready", Milestone.HOME_READY)
    else:
        say(f"Home volume {name} created ({phase}; it binds when your server is placed on a node)")


#: Fields of kubespawner's name templates that differ between a user's servers.
SERVER_FIELDS = frozenset({
    "servername", "user_server", "safe_servername", "safe_user_server", "escaped_servername",
    "escaped_user_server", "unescaped_servername", "pod_name",
})


def home_is_shared(template: str, server_name: str) -> bool:
    """Whether named server ``server_name``'s home is the default server's too: ``template`` names no server field."""
    if not server_name:
        return False
    return not template_fields(template) & SERVER_FIELDS


def template_fields(template: str) -> set[str]:
    """The field names of a kubespawner name template (``"home-{username}"``: ``{"username"}``)."""
    return {name for _text, name, _spec, _conv in string.Formatter().parse(template) if name}


async def find_home(kube, *, namespace: str, user_name: str, slot: str, template: str, server: str) -> str:
    """The name of ``user_name``'s home PVC for ``slot`` (the template's name for it), found by owner and slot.

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``template``: the
    ``home_pvc_name_template`` that gave ``slot``; ``server``: the JupyterHub
    server name (``""`` default). Lists the user's PVCs by owner label and
    picks with :func:`~workspacespawner.lifecycle.disks.home_candidates`: a
    home made under an older template, or under another name with the
    user's owner labels, is kept (z2jh#3536); ``slot`` itself when the user
    has none, so a template change names only new disks. Raises
    :class:`WorkspaceError` (409, ``reason="home-volume"``) naming both
    PVCs when two could serve the slot: that is for an admin to settle.
    """
    shared = not template_fields(template) & SERVER_FIELDS
    pvcs = await kube.list(PVC, namespace, labels=names.owner_selector(user_name))
    found = home_candidates(pvcs, user_name, slot, server=None if shared else server)
    if len(found) > 1:
        both = " and ".join(p["metadata"]["name"] for p in found)
        raise WorkspaceError(
            f"More than one home volume could be yours: {both}. Nothing was started and no disk was changed; "
            "please ask an administrator to retire the one you do not use.",
            reason="home-volume",
            status_code=409,
        )
    if found and found[0]["metadata"]["name"] != slot:
        log.info("Home of %s for %s is %s (made under another name)", user_name, slot, found[0]["metadata"]["name"])
    return found[0]["metadata"]["name"] if found else slot
