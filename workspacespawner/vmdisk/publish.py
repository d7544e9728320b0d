"""Publish a stopped VM workspace's root disk as a new golden image, audited; the workspace itself is untouched.

API followed: ``snapshot.storage.k8s.io/v1`` VolumeSnapshot
(``spec.source.persistentVolumeClaimName``), ``cdi.kubevirt.io/v1beta1``
DataSource (``spec.source.snapshot`` or ``spec.source.pvc``, each
``{namespace, name}``) and DataVolume (``spec.source.pvc``, a cross-namespace
clone). New root disks clone from the DataSource through ``spec.sourceRef``
as from any golden image.

**What is published.** The user's VirtualMachine of the JupyterHub server
(found by owner labels and the template's ``hub.jupyter.org/servername``
annotation, never by name) names its root DataVolume (its ``rootdisk``
volume, :func:`~workspacespawner.k8s.objects.root_disk_of`); CDI's PVC of the
same name holds the disk. Two modes:

* ``snapshot``: a VolumeSnapshot of that PVC in the users' namespace, and a
  DataSource in the golden-image namespace naming it.
* ``clone``: a DataVolume in the golden-image namespace cloning that PVC,
  and a DataSource naming the DataVolume's PVC (for clusters without
  snapshots).

What a publish makes carries no owner label (the disk label says
``golden-image``), so no quota, retention or purge of the user selects it;
its annotation :data:`~workspacespawner.core.names.PUBLISHED_FROM_ANNOTATION`
says who published it, when, from which user, server and disk, and which
golden image that disk was cloned from. The DataSource is created first: its
create is what claims the name (an existing golden image is never
overwritten: 409 is a refusal); if the snapshot or clone is then refused by
the cluster, that DataSource, made moments ago, is deleted again (by uid).

**Refusals** (:class:`~workspacespawner.lifecycle.disks.DiskOpError`, nothing made): ``bad-name`` (not
a DNS-1123 subdomain of at most 63 characters), ``not-found`` (no such VM of
the user, or no root disk), ``in-use`` (a VMI of the VM exists, the VM's
``runStrategy`` is not ``Halted``, something mounts the disk, or a start
holds its attach claim: see :mod:`workspacespawner.lifecycle.attach`), ``name-taken`` (the golden image
exists). Each leaves an audit record ``publish`` on the root disk: before
``{"disk", "golden_image"}``, after ``{"image": "ns/name", "mode", "snapshot"
| "datavolume"}``, result ``ok``, ``refused: ...`` or ``error: ...``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.config.imagepublish import MODES, check_image_name
from workspacespawner.core import names
from workspacespawner.k8s.apistatus import one_line
from workspacespawner.k8s.kinds import DATA_SOURCE, DATA_VOLUME, POD, PVC, VIRTUAL_MACHINE, VMI, VOLUME_SNAPSHOT
from workspacespawner.k8s.objects import holders
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.attach import ATTACH_GRACE_SECONDS, holder_of, recent
from workspacespawner.lifecycle.disks import DiskOpError
from workspacespawner.lifecycle.phases import SYSTEM
from workspacespawner.vmdisk.rootdisk import root_disk_of, vm_of_server

log = logging.getLogger("workspacespawner")

#: Labels of everything a publish makes (as the golden images an admin imports carry).
GOLDEN_LABELS = {"app.kubernetes.io/component": "golden-image", "app.kubernetes.io/part-of": names.MANAGED_BY}


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


# -- pure ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """Where a golden image came from: published ``by`` whom ``at`` when, from ``user``'s ``server`` (``""``: the
    default), root disk ``disk`` in ``namespace``, itself cloned from ``golden_image`` (``ns/name``, or ``""``)."""

    by: str
    at: datetime
    user: str
    server: str
    namespace: str
    disk: str
    golden_image: str = ""

    def annotations(self) -> dict[str, str]:
        """The :data:`~workspacespawner.core.names.PUBLISHED_FROM_ANNOTATION` of what a publish makes."""
        value = {"by": self.by, "at": phases.rfc3339(self.at), "user": self.user, "server": self.server,
                 "namespace": self.namespace, "disk": self.disk, "golden_image": self.golden_image}
        return {names.PUBLISHED_FROM_ANNOTATION: json.dumps(value, sort_keys=True)}


def published_from(obj: dict) -> dict | None:
    """The provenance recorded on a published golden image (its DataSource, snapshot or DataVolume), or None."""
    text = (_meta(obj).get("annotations") or {}).get(names.PUBLISHED_FROM_ANNOTATION)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _golden_meta(name: str, namespace: str, provenance: Provenance) -> dict:
    return {"name": name, "namespace": namespace, "labels": {**GOLDEN_LABELS, names.DISK_LABEL: names.GOLDEN_IMAGE_DISK},
            "annotations": provenance.annotations()}


def published_name(image: str, now: datetime) -> str:
    """The name of the VolumeSnapshot behind golden image ``image`` published at ``now``: ``golden-<image>-<time>``."""
    return names.dns_label(f"golden-{image[:36]}-{now:%Y%m%d%H%M%S}")


def make_golden_snapshot(*, name: str, pvc: dict, provenance: Provenance, snapshot_class: str | None) -> dict:
    """The VolumeSnapshot ``name`` of root disk PVC ``pvc`` (in its namespace), with no owner label."""
    spec: dict = {"source": {"persistentVolumeClaimName": _meta(pvc)["name"]}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {"apiVersion": VOLUME_SNAPSHOT.api_version, "kind": VOLUME_SNAPSHOT.kind,
            "metadata": _golden_meta(name, _meta(pvc)["namespace"], provenance), "spec": spec}


def make_golden_clone(*, name: str, namespace: str, pvc: dict, provenance: Provenance) -> dict:
    """A DataVolume ``namespace/name`` cloning root disk PVC ``pvc`` (its size, class, access and volume modes)."""
    spec = pvc.get("spec") or {}
    storage: dict = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": ((spec.get("resources") or {}).get("requests") or {})["storage"]}},
    }
    for key in ("storageClassName", "volumeMode"):
        if spec.get(key):
            storage[key] = spec[key]
    return {"apiVersion": DATA_VOLUME.api_version, "kind": DATA_VOLUME.kind,
            "metadata": _golden_meta(name, namespace, provenance),
            "spec": {"source": {"pvc": {"namespace": _meta(pvc)["namespace"], "name": _meta(pvc)["name"]}},
                     "storage": storage}}


def make_golden_datasource(*, name: str, namespace: str, source: str, source_namespace: str, source_name: str,
                           provenance: Provenance) -> dict:
    """The DataSource ``namespace/name`` whose ``spec.source.<source>`` (``snapshot`` or ``pvc``) names
    ``source_namespace/source_name``."""
    return {"apiVersion": DATA_SOURCE.api_version, "kind": DATA_SOURCE.kind,
            "metadata": _golden_meta(name, namespace, provenance),
            "spec": {"source": {source: {"namespace": source_namespace, "name": source_name}}}}


# -- the operation --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """What a publish made: the golden image ``image`` (``ns/name`` of the DataSource), how (``mode``), and the object
    behind it, ``source`` (``ns/name`` of the VolumeSnapshot or DataVolume), from ``user``'s root disk ``disk``."""

    image: str
    mode: str
    source: str
    user: str
    disk: str


@dataclass
class GoldenPublisher:
    """Publishes users' stopped VM workspaces (in ``namespace``) as golden images in ``golden_namespace``.

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``audit``: an
    :class:`~workspacespawner.lifecycle.audit.AuditLog` (None: no records, tests only); ``actor``: who
    publishes, for the audit trail and the provenance; ``mode``: one of
    :data:`~workspacespawner.config.imagepublish.MODES`; ``snapshot_class``:
    the VolumeSnapshotClass (None: the cluster's default); ``grace``: seconds
    an attach claim without compute counts as a start under way.
    """

    kube: object
    namespace: str
    golden_namespace: str
    audit: object = None
    actor: str = SYSTEM
    mode: str = "snapshot"
    snapshot_class: str | None = None
    grace: float = ATTACH_GRACE_SECONDS

    async def _record(self, user: str, server: str, disk: str, before, after, result: str, now: datetime) -> None:
        if self.audit is not None:
            await self.audit.arecord(actor=self.actor, user=user, server=server, namespace=self.namespace, disk=disk,
                                     action="publish", before=before, after=after, result=result, time=now)

    async def publish(self, user: str, server: str, image: str, *, now: datetime | None = None) -> Published:
        """Publish ``user``'s root disk of server ``server`` as golden image ``image``; returns what was made.

        Raises :class:`~workspacespawner.lifecycle.disks.DiskOpError` (see the module docstring for the
        reasons); every outcome after the VM is found is audited.
        """
        if self.mode not in MODES:
            raise ValueError(f"publish mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        now = now or phases.utcnow()
        label = f"{user}'s {'server ' + repr(server) if server else 'default server'}"
        vm = vm_of_server(await self.kube.list(VIRTUAL_MACHINE, self.namespace, labels=names.owner_selector(user)), user, server)
        disk_name = root_disk_of(vm)
        if vm is None or not disk_name:
            raise DiskOpError(f"{label} is not a VM workspace with a root disk in {self.namespace}.", reason="not-found")
        dv = await self.kube.get(DATA_VOLUME, self.namespace, disk_name)
        base = ((_meta(dv).get("annotations") or {}).get(names.GOLDEN_IMAGE_ANNOTATION, "")) if dv else ""
        target = f"{self.golden_namespace}/{image}"
        before, after = {"disk": disk_name, "golden_image": base}, {"image": target, "mode": self.mode}

        async def refuse(message: str, reason: str):
            await self._record(user, server, disk_name, before, after, f"refused: {message}", now)
            raise DiskOpError(message, reason=reason)

        bad = check_image_name(image)
        if bad:
            await refuse(f"{bad}.", "bad-name")
        if dv is None or not names.owned_by(_meta(dv), user):
            await refuse(f"{label}'s root disk {disk_name} is not there, or not {user}'s.", "not-found")
        pvc = await self.kube.get(PVC, self.namespace, disk_name, fresh=True)
        if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
            await refuse(f"{label}'s root disk {disk_name} is not ready (its PVC is not Bound).", "not-ready")
        await self._check_stopped(vm, pvc, dv, label, refuse, now)
        if await self.kube.get(DATA_SOURCE, self.golden_namespace, image, fresh=True) is not None:
            await refuse(f"The golden image {target} exists already; choose another name.", "name-taken")
        if self.mode == "clone" and await self.kube.get(DATA_VOLUME, self.golden_namespace, image, fresh=True) is not None:
            await refuse(f"A DataVolume {target} exists already; choose another name.", "name-taken")
        return await self._make(user, server, image, pvc, Provenance(self.actor, now, user, server, self.namespace,
                                                                      disk_name, base), before, after, refuse, now)

    async def _check_stopped(self, vm: dict, pvc: dict, dv: dict, label: str, refuse, now: datetime) -> None:
        """Refuse unless the workspace is stopped: no VMI, runStrategy Halted, nothing mounts the disk, no live claim."""
        vm_name = _meta(vm)["name"]
        vmis = await self.kube.list(VMI, self.namespace)
        running = [v for v in vmis if _meta(v).get("name") == vm_name]
        strategy = (vm.get("spec") or {}).get("runStrategy", "Halted")
        if running or strategy != "Halted":
            await refuse(f"{label} is running (VirtualMachine {vm_name}: runStrategy {strategy}"
                         f"{', its VMI exists' if running else ''}); stop it first.", "in-use")
        compute = await self.kube.list(POD, self.namespace) + vmis
        using = holders(compute, _meta(pvc)["name"])
        if using:
            await refuse(f"{_meta(pvc)['name']} is in use by {', '.join(_meta(o)['name'] for o in using)}; stop the "
                         "workspace first.", "in-use")
        # the DataVolume's claim: the PVC CDI made for it holds a copy of the annotations the DataVolume had then,
        # so of the start that made it, a claim nobody removes from there
        claim = holder_of(dv if dv is not None else pvc)
        if recent(claim, now, self.grace):
            await refuse(f"{_meta(pvc)['name']} is claimed by {claim.describe()}, which is starting; stop the "
                         "workspace first.", "in-use")

    async def _make(self, user, server, image, pvc, provenance, before, after, refuse, now) -> Published:
        pvc_meta = _meta(pvc)
        if self.mode == "snapshot":
            kind, name, namespace = VOLUME_SNAPSHOT, published_name(image, now), self.namespace
            manifest = make_golden_snapshot(name=name, pvc=pvc, provenance=provenance, snapshot_class=self.snapshot_class)
            after["snapshot"] = name
        else:
            kind, name, namespace = DATA_VOLUME, image, self.golden_namespace
            manifest = make_golden_clone(name=name, namespace=namespace, pvc=pvc, provenance=provenance)
            after["datavolume"] = f"{namespace}/{name}"
        source = make_golden_datasource(name=image, namespace=self.golden_namespace, source="snapshot" if kind is VOLUME_SNAPSHOT else "pvc",
                                        source_namespace=namespace, source_name=name, provenance=provenance)
        try:
            made = await self.kube.create(DATA_SOURCE, self.golden_namespace, source)
        except ApiException as e:
            if e.status == 409:
                await refuse(f"The golden image {self.golden_namespace}/{image} exists already; choose another name.", "name-taken")
            await self._record(user, server, pvc_meta["name"], before, after, f"error: {e.status} {e.reason}", now)
            raise DiskOpError(f"The cluster refused the DataSource {self.golden_namespace}/{image}: {one_line(e)}.",
                              reason="kubernetes-api") from e
        try:
            await self.kube.create(kind, namespace, manifest)
        except ApiException as e:
            await self.kube.delete(DATA_SOURCE, self.golden_namespace, image, uid=_meta(made).get("uid"))
            await self._record(user, server, pvc_meta["name"], before, after, f"error: {e.status} {e.reason}", now)
            raise DiskOpError(f"The cluster refused the {kind.kind} {namespace}/{name}: {one_line(e)}; nothing was "
                              "published.", reason="kubernetes-api") from e
        await self._record(user, server, pvc_meta["name"], before, after, "ok", now)
        log.info("Published %s's root disk %s as golden image %s/%s by %s %s/%s (%s)", user, pvc_meta["name"],
                 self.golden_namespace, image, kind.kind, namespace, name, self.actor)
        return Published(f"{self.golden_namespace}/{image}", self.mode, f"{namespace}/{name}", user, pvc_meta["name"])

