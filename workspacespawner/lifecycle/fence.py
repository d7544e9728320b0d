"""At most one Pod or VMI per disk: the check before a start, and the admin's fence for a node that is down.

Ceph RBD volumes are ReadWriteOnce: two machines mounting one would corrupt
it, and a Pod left on a node that stopped responding may still hold it.
Before a workspace starts, :func:`check_before_start` looks for every Pod
and VMI of the user (by owner label) that uses one of the workspace's disks
and has not finished, and decides as :meth:`.vm.VMWorkspace.fence` does for
a VM's own VMI:

* on a node that is not Ready (or deleted): refused, ``node-unreachable``
  (409), whatever its phase; the workspace goes ``Degraded`` and an admin
  must fence the node first;
* terminating: waited for, with progress, up to ``wait`` seconds (then
  ``still-stopping``, 409);
* this workspace's own Pod, still there (leaked by a stop that failed, or
  never placed): deleted gracefully and waited for, so that kubespawner
  never force-deletes a Pod that may still hold the disk; while the API
  refuses the DELETE (5xx, 429) it is tried again for up to ``wait``
  seconds, the user reading that it is still being removed;
* another server of the user using the same home (kubespawner made it for
  a server the hub has): refused, ``disk-in-use`` (409): stop that one first;
* anything else (an older hub's or name template's, made by hand, of a
  server since deleted): refused, ``leftover-compute`` (409), saying that
  an administrator removes it with ``workspacespawner orphans --remove``;
  never removed here: the hub cannot tell whose it is.

The workspace's own VMI is left to :meth:`.vm.VMWorkspace.fence`.

:class:`Fencer` is ``workspacespawner fence USER --confirm-node-down``: it
force-deletes (grace period 0) the user's Pods and VMIs on nodes that are
not Ready, as an admin does once the node is known to be down (a VMI: its
VM stopped at once, its virt-launcher Pods force-deleted, the VMI deleted
and its finalizer lifted), audits each (``fence``), and moves the user's
``Degraded`` objects back to ``Stopped``.

API followed: core/v1 Pods and Nodes (``nodes: get``); ``kubevirt.io/v1``
VirtualMachineInstances, the ``stop`` subresource of VirtualMachines
(``gracePeriod: 0``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable

from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.api import NotOurs
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VIRTUAL_MACHINE, VMI
from workspacespawner.k8s.kubevirt import stop_vm
from workspacespawner.k8s.objects import counted_once, holders, node_of, pointer, terminating
from workspacespawner.k8s.owned import until_accepted
from workspacespawner.lifecycle import phases
from workspacespawner.lifecycle.phases import SYSTEM, Phase, Status, WorkspaceRef

log = logging.getLogger("workspacespawner")

#: kubespawner's annotation with the exact user name, on what a spawner made (our VM template carries it too).
KUBESPAWNER_USER = names.USER_ANNOTATIONS[0]
#: KubeVirt's label on a virt-launcher Pod naming its VMI's uid.
CREATED_BY_LABEL = names.CREATED_BY_LABEL

Progress = Callable[[str], None]


def _what(obj: dict) -> str:
    return f"{'virtual machine' if obj['kind'] == VMI.kind else 'server'} {obj['metadata']['name']}"


def refusal(reason: str, message: str) -> WorkspaceError:
    """The 409 :class:`WorkspaceError` of a fence refusal."""
    return WorkspaceError(message, reason=reason, status_code=409)


def node_unreachable(obj: dict, user_name: str) -> WorkspaceError:
    """The refusal for ``obj`` (a Pod or VMI) on a node that is not Ready, in words for the user and the admin."""
    node = node_of(obj)
    return refusal(
        "node-unreachable",
        f"Your workspace's previous {_what(obj)} is still registered on node {node}, which is not responding. "
        "Starting another one could damage your disk, which only one machine may use at a time, so nothing was started. "
        f"An administrator must confirm the node is down and run: workspacespawner fence {user_name} --confirm-node-down",
    )


async def _user_compute(kube, namespace: str, user_name: str) -> list[dict]:
    """``user_name``'s Pods and VMIs by owner labels; a VMI's virt-launcher Pod (which carries them too) counts as its VMI."""
    selector = names.owner_selector(user_name)
    found = await kube.list(POD, namespace, labels=selector) + await kube.list(VMI, namespace, labels=selector)
    return counted_once([o for o in found if names.labelled_for(o["metadata"], user_name)])


async def _wait_gone(kube, obj: dict, wait: float, interval: float, progress: Progress) -> bool:
    """Wait up to ``wait`` seconds for ``obj`` (same uid) to be gone, saying so every few seconds."""
    kind = POD if obj["kind"] == POD.kind else VMI
    loop = asyncio.get_running_loop()
    deadline, said = loop.time() + wait, -1.0
    while True:
        current = await kube.get(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            return True
        now = loop.time()
        if now >= deadline:
            return False
        if now - said >= 5:
            progress(f"Waiting for your previous {_what(obj)} to stop before starting ({deadline - now:.0f} s left)")
            said = now
        await asyncio.sleep(interval)


def _spawned_for(obj: dict, user_name: str, server: str) -> bool:
    """Whether a spawner made ``obj`` for this server: kubespawner's user annotation (ours on a VMI) names it."""
    annotations = obj["metadata"].get("annotations") or {}
    return KUBESPAWNER_USER in annotations and names.server_of(obj["metadata"]) == (user_name, server)


def _held_by(obj: dict, user_name: str, servers: Collection[str]) -> WorkspaceError:
    """The refusal for a start whose disk ``obj`` holds: another of the user's servers, or a leftover of nobody's."""
    meta = obj["metadata"]
    owner = names.server_of(meta)
    if KUBESPAWNER_USER in (meta.get("annotations") or {}) and owner is not None and owner[0] == user_name \
            and owner[1] in servers:
        which = f"server {owner[1]}" if owner[1] else "default server"
        return refusal("disk-in-use", f"Your disk is in use by your {which}; stop that server first, then start this one.")
    return refusal(
        "leftover-compute",
        f"Your disk is held by {meta['name']}, a leftover that this hub did not start, so nothing was started. "
        f"Please ask an administrator to remove it (workspacespawner orphans --remove), then start again.",
    )


async def _delete_leftover(kube, obj: dict, wait: float, interval: float, progress: Progress) -> bool:
    """Remove the server's leftover Pod (by uid) or VMI (its VM stopped), trying again for ``wait`` s while the API refuses.

    True once the removal was asked for, False if the API refused it all along.
    """
    meta = obj["metadata"]
    said: list[int] = []

    async def remove() -> None:
        if obj["kind"] == VMI.kind:
            await stop_vm(kube.custom_api.api_client, meta["namespace"], meta["name"])
        else:
            await kube.delete(POD, meta["namespace"], meta["name"], uid=meta["uid"])

    def retrying(status: int) -> None:
        log.warning("Removing leftover %s %s/%s: the API answered %s; trying again", obj["kind"], meta["namespace"], meta["name"],
                    status)
        if not said:
            progress(f"Your previous {_what(obj)} is still being removed; waiting for it before starting")
            said.append(status)

    deadline = asyncio.get_running_loop().time() + wait
    return await until_accepted(remove, deadline, interval=interval, on_retry=retrying) is None


async def check_before_start(
    kube,
    *,
    namespace: str,
    user_name: str,
    claims: Iterable[str],
    own_pod: str | None = None,
    own_vmi: str | None = None,
    server: str | None = None,
    servers: Collection[str] = (),
    wait: float = 120.0,
    interval: float = 1.0,
    progress: Progress | None = None,
) -> None:
    """Make sure no Pod or VMI of ``user_name`` holds any of the PVCs ``claims``; wait, clean up or refuse (see the module docstring).

    ``own_pod``: this workspace's Pod name (deleted gracefully and waited for
    when found); ``own_vmi``: this workspace's VMI name (left to the VM's own
    fence); ``server``: this server's name (``""`` for the default one): any
    other Pod or VMI that kubespawner's annotations give to this same server
    (left by its earlier start of another kind, whose stop failed) is
    removed and waited for like a leftover Pod. ``servers``: the names of
    the user's servers the hub has (its database's): a holder that
    kubespawner made for one of them is another server of the user
    (``disk-in-use``: stop it first); any other holder is a leftover the hub
    did not start (``leftover-compute``: an administrator removes it).
    ``wait`` and ``interval`` are seconds; ``progress(message)``
    shows a waiting step. Raises a 409 :class:`WorkspaceError`
    (``node-unreachable``, ``still-stopping``, ``disk-in-use``, ``leftover-compute``).
    """
    say = progress or (lambda message: None)
    compute = await _user_compute(kube, namespace, user_name)
    found: dict[str, dict] = {}
    for claim in claims:
        for obj in holders(compute, claim):
            found.setdefault(obj["metadata"]["uid"], obj)
    for obj in found.values():
        name = obj["metadata"]["name"]
        if obj["kind"] == VMI.kind and name == own_vmi:
            continue
        if await kube.node_ready(node_of(obj)) is False:
            raise node_unreachable(obj, user_name)
        own = (obj["kind"] == POD.kind and name == own_pod) or (
            server is not None and _spawned_for(obj, user_name, server)
        )
        if not (own or terminating(obj)):
            raise _held_by(obj, user_name, servers)
        if own and not terminating(obj):
            log.warning("Removing leftover %s %s/%s of %s before its workspace starts again", obj["kind"], namespace, name, user_name)
            if not await _delete_leftover(kube, obj, wait, interval, say):
                raise refusal(
                    "still-stopping",
                    f"Your previous {_what(obj)} is still being removed; nothing was started. Please try again in a minute.",
                )
        if not await _wait_gone(kube, obj, wait, interval, say):
            raise refusal(
                "still-stopping",
                f"Your previous {_what(obj)} is still shutting down; nothing was started. Please try again in a minute.",
            )


class Fencer:
    """``fence USER --confirm-node-down``: force-delete ``user``'s compute on nodes that are down, audited (see the module docstring)."""

    def __init__(self, kube, namespace: str, *, audit=None, actor: str = SYSTEM):
        self.kube, self.namespace, self.audit, self.actor = kube, namespace, audit, actor

    async def plan(self, user_name: str) -> tuple[list[dict], list[tuple[dict, str]]]:
        """``(to fence, kept with why)``: the user's unfinished Pods and VMIs, split by whether their node is down."""
        fence, kept = [], []
        for obj in await _user_compute(self.kube, self.namespace, user_name):
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            ready = await self.kube.node_ready(node_of(obj))
            if ready is False:
                fence.append(obj)
            else:
                kept.append((obj, "its node is Ready: stop it through the hub" if ready else "its node is unknown (not placed, or Nodes not readable)"))
        return fence, kept

    async def fence(self, user_name: str) -> list[dict]:
        """Force-delete what :meth:`plan` selects, record each (``fence``), and move ``Degraded`` objects to ``Stopped``; returns what was fenced."""
        targets, _kept = await self.plan(user_name)
        for obj in targets:
            result = "ok"
            try:
                await (self._fence_vmi(obj) if obj["kind"] == VMI.kind else self._fence_pod(obj))
            except Exception as e:
                result = f"error: {e}"
                raise
            finally:
                await self._record(user_name, obj, result)
        if targets:
            await self._recover(user_name)
        return targets

    async def _fence_pod(self, pod: dict) -> None:
        log.warning("Fencing: force-deleting Pod %s/%s on node %s (%s)", self.namespace, pod["metadata"]["name"], node_of(pod), self.actor)
        await self.kube.delete(POD, self.namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"], grace=0)

    async def _fence_vmi(self, vmi: dict) -> None:
        name, uid = vmi["metadata"]["name"], vmi["metadata"]["uid"]
        log.warning("Fencing: force-stopping VMI %s/%s on node %s (%s)", self.namespace, name, node_of(vmi), self.actor)
        await stop_vm(self.kube.custom_api.api_client, self.namespace, name, grace_period=0)
        for pod in await self.kube.list(POD, self.namespace, labels=f"{CREATED_BY_LABEL}={uid}"):
            await self.kube.delete(POD, self.namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"], grace=0)
        await self.kube.delete(VMI, self.namespace, name, uid=uid, grace=0)
        operations = [
            {"op": "test", "path": pointer("metadata", "uid"), "value": uid},
            {"op": "replace", "path": pointer("metadata", "finalizers"), "value": []},
        ]
        current = await self.kube.get(VMI, self.namespace, name)
        if current is not None and current["metadata"].get("finalizers"):
            await self.kube.patch(VMI, self.namespace, name, operations)

    async def _record(self, user_name: str, obj: dict, result: str) -> None:
        if self.audit is None:
            return
        claims = sorted({(v.get("persistentVolumeClaim") or {}).get("claimName") or (v.get("dataVolume") or {}).get("name")
                         for v in (obj.get("spec") or {}).get("volumes") or []} - {None})
        before = {"kind": obj["kind"], "name": obj["metadata"]["name"], "node": node_of(obj), "phase": (obj.get("status") or {}).get("phase")}
        for disk in claims or [""]:
            await self.audit.arecord(
                actor=self.actor, user=user_name, namespace=self.namespace, disk=disk, action="fence",
                before=before, after={"deleted": True, "gracePeriodSeconds": 0}, result=result,
            )

    async def _recover(self, user_name: str) -> None:
        """The user's ``Degraded`` disks and VMs go back to ``Stopped`` (their compute is gone now)."""
        selector = f"{names.owner_selector(user_name)},{names.PHASE_LABEL}={Phase.DEGRADED}"
        for kind, key in ((PVC, "home_pvc"), (DATA_VOLUME, "root_disk"), (VIRTUAL_MACHINE, "vm")):
            for obj in await self.kube.list(kind, self.namespace, labels=selector):
                ref = WorkspaceRef(namespace=self.namespace, user_name=user_name, **{key: obj["metadata"]["name"]})
                current = Status.from_object(obj) or phases.degraded("node-unreachable", "")
                try:
                    await phases.move(self.kube, ref, current, Phase.STOPPED, expect=Phase.DEGRADED, actor=self.actor)
                except NotOurs:
                    log.info("%s %s left Degraded meanwhile; not moving it", kind.kind, obj["metadata"]["name"])
