"""The CSI attacher: which node each claim's volume is attached to, and who uses it.

On a real cluster the attach/detach controller and the CSI driver (ceph-csi
for RBD) attach a PersistentVolume to a node before a kubelet can mount it.
A ``ReadWriteOnce`` volume attaches to one node at a time: a second Pod
needing it on another node waits in ``ContainerCreating`` with the Warning
``FailedAttachVolume`` ("Multi-Attach error for volume ... Volume is already
used by pod(s) ..."), while a second Pod on the same node mounts it (RWO is
per node). ``ReadWriteOncePod`` is per pod. ``ReadWriteMany`` and
``ReadOnlyMany`` attach anywhere.

:class:`Attacher` plays that for the node agent: the kubelet and the
virt-handler call :meth:`Attacher.attach` for every claim a Pod or VMI
mounts before its processes start, and :meth:`Attacher.detach` once they
are gone. It also keeps every attach and detach in order
(:attr:`Attacher.history`), so tests can ask how many consumers used one
claim at the same time (:meth:`Attacher.max_consumers`) whatever the
attacher allowed: two Pods on one node share an RWO volume here as they do
on Kubernetes, and an invariant that wants one consumer per disk must see
that.

A VMI and its own virt-launcher Pod are one consumer (:func:`consumer_of`):
on a real cluster the Pod is what mounts the VMI's claims, here the
virt-handler attaches them for the VMI (the node agent runs nothing for the
Pod); either way one claim has one user, never a Multi-Attach error between
a VM and itself.

Shapes: a claim is ``(namespace, name)``; a consumer is a :class:`Consumer`
``(kind, namespace, name, uid, node)``.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Consumer:
    """A Pod or VMI that mounts a claim: ``kind`` is ``"Pod"`` or ``"VirtualMachineInstance"``."""

    kind: str
    namespace: str
    name: str
    uid: str
    node: str


#: KubeVirt's label (and its value) on a virt-launcher Pod.
_LAUNCHER = ("kubevirt.io", "virt-launcher")


def consumer_of(kind: str, obj: dict, node: str) -> Consumer:
    """The consumer a Pod or VMI (``kind``: ``"Pod"`` or ``"VirtualMachineInstance"``) on ``node`` attaches claims as.

    A virt-launcher Pod (label ``kubevirt.io=virt-launcher``, a VMI as its
    controlling owner) attaches as that VMI: same kind, name and uid.
    """
    meta = obj["metadata"]
    if kind == "Pod" and (meta.get("labels") or {}).get(_LAUNCHER[0]) == _LAUNCHER[1]:
        owner = next((ref for ref in meta.get("ownerReferences") or []
                      if ref.get("kind") == "VirtualMachineInstance" and ref.get("controller")), None)
        if owner is not None:
            return Consumer("VirtualMachineInstance", meta["namespace"], owner["name"], owner["uid"], node)
    return Consumer(kind, meta["namespace"], meta["name"], meta["uid"], node)


@dataclass(frozen=True)
class AttachRecord:
    """One change in :attr:`Attacher.history`: ``action`` is ``"attach"`` or ``"detach"``."""

    time: datetime.datetime
    action: str
    claim: tuple[str, str]
    consumer: Consumer


class MultiAttachError(Exception):
    """The volume is in use where this consumer cannot share it; ``message`` is what the attach/detach controller reports."""

    def __init__(self, message: str, holders: list[Consumer]):
        super().__init__(message)
        self.message = message
        self.holders = holders


def multi_attach_message(volume: str, holders: list[Consumer]) -> str:
    """The attach/detach controller's Multi-Attach Warning for ``volume`` held by ``holders``."""
    pods = ", ".join(sorted({h.name for h in holders}))
    return f'Multi-Attach error for volume "{volume}" Volume is already used by pod(s) {pods}'


def conflicts(access_modes: list[str], holders: list[Consumer], consumer: Consumer) -> list[Consumer]:
    """The holders that keep ``consumer`` from attaching a volume with ``access_modes`` (empty: it may attach).

    ``ReadWriteOncePod``: any other consumer. ``ReadWriteOnce`` (alone):
    any consumer on another node. Otherwise (``ReadWriteMany``,
    ``ReadOnlyMany``): none.
    """
    others = [h for h in holders if h.uid != consumer.uid]
    modes = set(access_modes or [])
    if "ReadWriteOncePod" in modes:
        return others
    if modes == {"ReadWriteOnce"}:
        return [h for h in others if h.node != consumer.node]
    return []


class Attacher:
    """Attach records per claim, and their history (see the module docstring). Thread-safe."""

    def __init__(self, clock: Callable[[], datetime.datetime]):
        self.clock = clock
        self._lock = threading.Lock()
        self._holders: dict[tuple[str, str], list[Consumer]] = {}
        self._history: list[AttachRecord] = []

    def attach(self, claim: tuple[str, str], volume: str, access_modes: list[str], consumer: Consumer) -> None:
        """Record ``consumer`` as a user of ``claim`` (bound to PersistentVolume ``volume``).

        Raises :class:`MultiAttachError` when the access modes forbid it;
        attaching again the same consumer changes nothing.
        """
        with self._lock:
            holders = self._holders.setdefault(claim, [])
            if any(h.uid == consumer.uid for h in holders):
                return
            blocking = conflicts(access_modes, holders, consumer)
            if blocking:
                raise MultiAttachError(multi_attach_message(volume, blocking), blocking)
            holders.append(consumer)
            self._history.append(AttachRecord(self.clock(), "attach", claim, consumer))

    def detach(self, uid: str) -> None:
        """The consumer with ``uid`` is gone: drop it from every claim it held (nothing if it held none)."""
        with self._lock:
            for claim, holders in list(self._holders.items()):
                for holder in [h for h in holders if h.uid == uid]:
                    holders.remove(holder)
                    self._history.append(AttachRecord(self.clock(), "detach", claim, holder))
                if not holders:
                    del self._holders[claim]

    def holders(self, claim: tuple[str, str]) -> list[Consumer]:
        """Who uses ``claim`` now, in attach order."""
        with self._lock:
            return list(self._holders.get(claim, []))

    @property
    def history(self) -> list[AttachRecord]:
        """Every attach and detach so far, oldest first."""
        with self._lock:
            return list(self._history)

    def max_consumers(self) -> dict[tuple[str, str], int]:
        """For every claim ever attached: the most consumers it had at one time."""
        current: dict[tuple[str, str], int] = {}
        most: dict[tuple[str, str], int] = {}
        for record in self.history:
            current[record.claim] = current.get(record.claim, 0) + (1 if record.action == "attach" else -1)
            most[record.claim] = max(most.get(record.claim, 0), current[record.claim])
        return most

    def overlaps(self, claim: tuple[str, str]) -> list[tuple[Consumer, Consumer]]:
        """Pairs of consumers that used ``claim`` at the same time (the one attached first, the other)."""
        live: list[Consumer] = []
        pairs = []
        for record in self.history:
            if record.claim != claim:
                continue
            if record.action == "attach":
                pairs.extend((held, record.consumer) for held in live)
                live.append(record.consumer)
            else:
                live = [c for c in live if c.uid != record.consumer.uid]
        return pairs
