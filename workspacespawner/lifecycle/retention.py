"""Retention instead of deletion: a deleted workspace's disks wait in ``Retained``, then the purge deletes them.

**Retain** (:func:`retain`, JupyterHub's ``delete_forever`` of a user or
named server): the workspace's disks (home PVC, root DataVolume) and VM move
to ``Retained`` with a retain-until time (``now + days``), recorded as the
label ``workspacespawner.io/phase=Retained`` and the lifecycle annotation;
nothing is deleted.

**Reclaim** (:func:`reclaim`): ``Retained -> Stopped`` for a workspace's
objects that are Retained, each with an atomic check that it still is
(the purge may be taking it). The spawner calls it at a start under the
``automatic`` reclaim policy, an admin through ``workspacespawner retention
reclaim USER`` under ``admin-only``. A user only ever gets back disks that
carry their own owner labels and exact name.

**Purge** (:class:`Purger`): disks selected by label
(``app.kubernetes.io/managed-by=workspacespawner`` and the phase label
``Retained`` or ``DeletingDisk``), never by name; :func:`select_purgeable`
(pure) keeps those past retain-until, with consistent owner labels, that
no Pod or VMI (anyone's, finished ones aside) uses. Each goes ``Retained ->
DeletingDisk`` (atomic, audited ``purge``), then is deleted (by uid) with
the VirtualMachine that boots from it, that VM's Service and cloud-init
Secret (audited ``delete``). A purge interrupted after the first step
resumes at the next run.

API followed: core/v1 PersistentVolumeClaims, Pods, Services, Secrets;
``cdi.kubevirt.io/v1beta1`` DataVolumes (their PVC goes with them, by owner
reference); ``kubevirt.io/v1`` VirtualMachines and VMIs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.core import names
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.apistatus import one_line
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, SECRET, SERVICE, VIRTUAL_MACHINE, VMI
from workspacespawner.k8s.objects import holders, uses_claim
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import SYSTEM, Phase, Status, WorkspaceRef

log = logging.getLogger("workspacespawner")

RECLAIM_POLICIES = ("automatic", "admin-only")


async def retain(kube, ref: WorkspaceRef, current: Status, *, days: float, audit=None, actor: str = SYSTEM, now: datetime | None = None) -> Status:
    """Move the workspace of ``ref`` to ``Retained`` until ``now + days`` (audited ``retain``); returns the new status.

    A workspace that never got a disk (``Requested``) has nothing to keep
    and stays as it is.
    """
    if current.phase == Phase.REQUESTED or not ref.persistent():
        return current
    now = now or phases.utcnow()
    return await phases.move(
        kube, ref, current, Phase.RETAINED, retain_until=now + timedelta(days=days), audit=audit, actor=actor, now=now
    )


def _single(ref: WorkspaceRef, kind, name: str) -> WorkspaceRef:
    key = {PVC: "home_pvc", DATA_VOLUME: "root_disk", VIRTUAL_MACHINE: "vm"}[kind]
    return WorkspaceRef(namespace=ref.namespace, user_name=ref.user_name, server_name=ref.server_name, **{key: name})


async def reclaim(kube, ref: WorkspaceRef, *, audit=None, actor: str = SYSTEM, now: datetime | None = None) -> Status | None:
    """Give back the workspace's Retained objects (``Retained -> Stopped``, audited ``reclaim``); the new status, or None if none was.

    Raises :class:`~.kube.NotOurs` when an object left ``Retained``
    meanwhile (the purge took it: ``DeletingDisk``).
    """
    moved = None
    for kind, name in ref.persistent():
        obj = await kube.get(kind, ref.namespace, name)
        status = Status.from_object(obj)
        if obj is None or status is None or status.phase != Phase.RETAINED or not names.owned_by(obj["metadata"], ref.user_name):
            continue
        moved = await phases.move(
            kube, _single(ref, kind, name), status, Phase.STOPPED, expect=Phase.RETAINED, audit=audit, actor=actor, now=now
        )
    return moved


async def reclaim_user(kube, namespace: str, user_name: str, *, audit=None, actor: str = SYSTEM) -> list[str]:
    """An admin gives ``user_name`` all their Retained disks and VMs back; returns the names moved."""
    selector = f"{names.owner_selector(user_name)},{names.PHASE_LABEL}={Phase.RETAINED}"
    moved = []
    for kind in (PVC, DATA_VOLUME, VIRTUAL_MACHINE):
        for obj in await kube.list(kind, namespace, labels=selector):
            name = obj["metadata"]["name"]
            ref = _single(WorkspaceRef(namespace=namespace, user_name=user_name), kind, name)
            if await reclaim(kube, ref, audit=audit, actor=actor) is not None:
                moved.append(name)
    return moved


async def give_back(kube, namespace: str, user_name: str, kind, name: str, *, audit=None, actor: str = SYSTEM,
                    now: datetime | None = None) -> Status:
    """The user gives back their Retained disk ``name`` (``kind``: PVC or DATA_VOLUME): its retain-until becomes
    ``now``, so the next purge may delete it (nothing is deleted here); audited ``retain``. Returns the new status.

    Raises ``ValueError`` when it is not ``user_name``'s or not Retained, and
    :class:`~.kube.NotOurs` when it left ``Retained`` meanwhile (reclaimed, or
    the purge took it).
    """
    now = now or phases.utcnow()
    obj = await kube.get(kind, namespace, name)
    status = Status.from_object(obj)
    if obj is None or not names.owned_by(obj["metadata"], user_name):
        raise ValueError(f"{name} is not a disk of {user_name!r}")
    if status is None or status.phase != Phase.RETAINED:
        raise ValueError(f"{name} is {status.phase if status else 'in use'}, not Retained; only a retained disk can be given back")
    ref = _single(WorkspaceRef(namespace=namespace, user_name=user_name, server_name=status.server), kind, name)
    new = await phases.move(kube, ref, status, Phase.RETAINED, observed=True, expect=Phase.RETAINED,
                               retain_until=now, actor=actor, now=now)
    if audit is not None:
        await audit.arecord(actor=actor, user=user_name, server=status.server, namespace=namespace, disk=name,
                            action="retain", before=status.to_state(), after=new.to_state(), result="ok: given back", time=now)
    return new


# -- purge ----------------------------------------------------------------------------------------


@dataclass
class PurgeItem:
    """One disk the purge deletes, with the objects that go with it (its VM, the VM's Service and cloud-init Secret)."""

    disk: dict
    status: Status
    goes_with: list[dict] = field(default_factory=list)
    result: str = ""

    @property
    def owner(self) -> str:
        return self.disk["metadata"]["annotations"][names.OWNER_ANNOTATION]

    @property
    def name(self) -> str:
        return self.disk["metadata"]["name"]


@dataclass
class PurgePlan:
    """What a purge deletes (``purge``) and what it keeps, with why (``kept``: ``(disk, why)``)."""

    purge: list[PurgeItem] = field(default_factory=list)
    kept: list[tuple[dict, str]] = field(default_factory=list)


def _of_kind(objects, kind) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind.kind]


def _owner(obj: dict) -> str | None:
    return names.owner_name(obj.get("metadata") or {})


def _goes_with(dv: dict, owner: str, objects) -> list[dict]:
    """The VMs (of ``owner``) that boot from DataVolume ``dv``, with their Services and cloud-init Secrets."""
    found = []
    for vm in _of_kind(objects, VIRTUAL_MACHINE):
        template = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        if _owner(vm) != owner or not uses_claim({"spec": template}, dv["metadata"]["name"]):
            continue
        found.append(vm)
        vm_name = vm["metadata"]["name"]
        found += [s for s in _of_kind(objects, SERVICE) if _owner(s) == owner and ((s.get("spec") or {}).get("selector") or {}).get(names.DOMAIN_LABEL) == vm_name]
        secrets = {((v.get("cloudInitNoCloud") or {}).get("secretRef") or {}).get("name") for v in template.get("volumes") or []}
        found += [s for s in _of_kind(objects, SECRET) if _owner(s) == owner and s["metadata"]["name"] in secrets]
    return found


def select_purgeable(objects, now: datetime) -> PurgePlan:
    """Which retained disks to delete at ``now`` (pure).

    ``objects``: plain dicts with their ``kind``: the candidate disks
    (PersistentVolumeClaims and DataVolumes), every Pod and
    VirtualMachineInstance of the namespace (anyone's), and our
    VirtualMachines, Services and Secrets. A disk is purged when it carries
    the phase label ``Retained`` and its retain-until has passed (or is
    already ``DeletingDisk``: an interrupted purge), its owner label and
    owner name agree, and no unfinished Pod or VMI uses it. Root disks take
    their VM, its Service and cloud-init Secret along.
    """
    plan = PurgePlan()
    compute = _of_kind(objects, POD) + _of_kind(objects, VMI)
    for disk in _of_kind(objects, PVC) + _of_kind(objects, DATA_VOLUME):
        labels = (disk.get("metadata") or {}).get("labels") or {}
        if labels.get(names.PHASE_LABEL) not in (Phase.RETAINED, Phase.DELETING_DISK):
            continue
        owner, status = _owner(disk), Status.from_object(disk)
        if owner is None:
            plan.kept.append((disk, "owner labels missing or inconsistent"))
        elif status is None or status.phase != labels.get(names.PHASE_LABEL):
            plan.kept.append((disk, "lifecycle record missing or inconsistent"))
        elif status.phase == Phase.RETAINED and status.retain_until is None:
            plan.kept.append((disk, "no retain-until time"))
        elif status.phase == Phase.RETAINED and status.retain_until > now:
            plan.kept.append((disk, f"retained until {phases.rfc3339(status.retain_until)}"))
        elif using := holders(compute, disk["metadata"]["name"]):
            plan.kept.append((disk, "in use by " + ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in using)))
        else:
            extra = _goes_with(disk, owner, objects) if disk["kind"] == DATA_VOLUME.kind else []
            plan.purge.append(PurgeItem(disk, status, extra))
    return plan


_KINDS = {k.kind: k for k in (PVC, DATA_VOLUME, VIRTUAL_MACHINE, SERVICE, SECRET)}


class Purger:
    """Purges retained disks past their time in ``namespace`` (see the module docstring), audited in ``audit`` by ``actor``."""

    def __init__(self, kube, namespace: str, *, audit=None, actor: str = SYSTEM):
        self.kube, self.namespace, self.audit, self.actor = kube, namespace, audit, actor

    async def gather(self) -> list[dict]:
        """The objects :func:`select_purgeable` needs, read from the cluster."""
        ns, ours = self.namespace, f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}"
        parked = f"{ours},{names.PHASE_LABEL} in ({Phase.RETAINED},{Phase.DELETING_DISK})"
        objects = await self.kube.list(PVC, ns, labels=parked) + await self.kube.list(DATA_VOLUME, ns, labels=parked)
        objects += await self.kube.list(POD, ns) + await self.kube.list(VMI, ns)
        for kind in (VIRTUAL_MACHINE, SERVICE, SECRET):
            objects += await self.kube.list(kind, ns, labels=ours)
        return objects

    async def purge(self, *, now: datetime | None = None, dry_run: bool = False) -> PurgePlan:
        """Select and (unless ``dry_run``) delete; each item's ``result`` says what happened (``ok``, ``skipped: ...``, ``error: ...``).

        A failed delete does not stop the others; its disk stays
        ``DeletingDisk``, so the next purge tries it again.
        """
        now = now or phases.utcnow()
        plan = select_purgeable(await self.gather(), now)
        if dry_run:
            for item in plan.purge:
                item.result = "dry run"
            return plan
        for item in plan.purge:
            item.result = await self._purge_one(item, now)
        return plan

    async def _purge_one(self, item: PurgeItem, now: datetime) -> str:
        kind = _KINDS[item.disk["kind"]]
        ref = WorkspaceRef(
            namespace=self.namespace,
            user_name=item.owner,
            server_name=item.status.server,
            **({"home_pvc": item.name} if kind == PVC else {"root_disk": item.name}),
        )
        status = item.status
        if status.phase == Phase.RETAINED:
            try:
                status = await phases.move(
                    self.kube, ref, status, Phase.DELETING_DISK, expect=Phase.RETAINED, audit=self.audit, actor=self.actor, now=now
                )
            except NotOurs:
                return "skipped: it left Retained meanwhile (reclaimed?)"
            except ApiException as e:
                return f"error: marking {kind.kind}/{item.name} DeletingDisk: {one_line(e)}"
        deleted, result = [], "ok"
        try:
            for obj in [*item.goes_with, item.disk]:
                current = f"{obj['kind']}/{obj['metadata']['name']}"
                if await self.kube.delete(_KINDS[obj["kind"]], self.namespace, obj["metadata"]["name"], uid=obj["metadata"]["uid"]):
                    deleted.append(current)
        except ApiException as e:
            result = f"error: deleting {current}: {one_line(e)}"
        log.info("Purged %s %s/%s of %s: %s (%s)", kind.kind, self.namespace, item.name, item.owner, result, ", ".join(deleted))
        if self.audit is not None:
            await self.audit.arecord(
                actor=self.actor, user=item.owner, server=ref.server_name, namespace=self.namespace, disk=item.name,
                action="delete", before=status.to_state(), after={"deleted": deleted}, result=result, time=now,
            )
        return result
