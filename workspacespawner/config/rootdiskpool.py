"""The root-disk pool: ``c.RootDiskPool``, how many ready root disks to keep cloned ahead of time per golden image.

A VM workspace's first start clones its root disk from a golden image
(a CDI DataSource), which takes minutes for a 30-200 GiB image. With a
pool, the hub keeps that many *pool disks* per golden image cloned, ready
and assigned to nobody; a first start takes one instead of cloning
(:mod:`workspacespawner.backends.vm.pool`). This module holds the settings
and their check; the hub reads them once per process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from traitlets import Dict, Float, TraitError, validate
from traitlets.config import Configurable

from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity

#: The keys a pool entry written as a dict may have.
ENTRY_KEYS = {"count", "namespace", "size", "storage_class", "volume_mode"}
VOLUME_MODES = ("Block", "Filesystem")


@dataclass(frozen=True)
class PoolShape:
    """What a pool disk is: cloned from DataSource ``golden_image_namespace/golden_image``, ``size`` (a Kubernetes
    quantity), in StorageClass ``storage_class`` (None: the cluster default), ``volume_mode`` (``Block`` or
    ``Filesystem``). A start takes a pool disk only when its own root disk would have exactly this shape."""

    golden_image: str
    golden_image_namespace: str
    size: str
    storage_class: str | None
    volume_mode: str

    @property
    def image(self) -> str:
        """``namespace/name`` of the golden image (how root disks record it)."""
        return f"{self.golden_image_namespace}/{self.golden_image}"


@dataclass(frozen=True)
class PoolEntry:
    """One golden image's pool: keep ``count`` ready disks of ``shape``."""

    shape: PoolShape
    count: int


def _entry(name, spec, defaults: PoolShape) -> PoolEntry:
    where = f"RootDiskPool.ready_disks[{name!r}]"
    if not names.is_dns_subdomain(name):
        raise TraitError(f"RootDiskPool.ready_disks: {name!r} is not a DataSource name (a DNS subdomain)")
    if isinstance(spec, bool) or not isinstance(spec, (int, Mapping)):
        raise TraitError(f"{where} must be a number of disks or a dict with 'count', not {spec!r}")
    spec = {"count": spec} if isinstance(spec, int) else dict(spec)
    unknown = set(spec) - ENTRY_KEYS
    if unknown:
        raise TraitError(f"{where} has unknown keys {sorted(unknown)} (known: {sorted(ENTRY_KEYS)})")
    count = spec.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TraitError(f"{where}['count'] must be a whole number of disks, 0 or more, not {count!r}")
    namespace = spec.get("namespace", defaults.golden_image_namespace)
    if not names.is_dns_label(namespace):
        raise TraitError(f"{where}['namespace'] must be a namespace name, not {namespace!r}")
    size = spec.get("size", defaults.size)
    try:
        ok = isinstance(size, str) and parse_quantity(size) > 0
    except ValueError:
        ok = False
    if not ok:
        raise TraitError(f"{where}['size'] must be a positive Kubernetes quantity such as '40Gi', not {size!r}")
    storage_class = spec.get("storage_class", defaults.storage_class)
    if storage_class is not None and not names.is_dns_subdomain(storage_class):
        raise TraitError(f"{where}['storage_class'] must be a StorageClass name or None, not {storage_class!r}")
    volume_mode = spec.get("volume_mode", defaults.volume_mode)
    if volume_mode not in VOLUME_MODES:
        raise TraitError(f"{where}['volume_mode'] must be one of {list(VOLUME_MODES)}, not {volume_mode!r}")
    return PoolEntry(PoolShape(name, namespace, size, storage_class, volume_mode), count)


class RootDiskPool(Configurable):
    """How many ready, unassigned root disks the hub keeps per golden image, and how often it looks."""

    ready_disks = Dict(
        {},
        config=True,
        help="""Ready pool disks to keep per golden image: ``{DataSource name: count}`` or
        ``{DataSource name: {"count": N, "namespace": ..., "size": ..., "storage_class": ..., "volume_mode": ...}}``.

        Each pool disk is a root DataVolume cloned from that DataSource
        ahead of time, labelled ``workspacespawner.io/disk: pool`` and
        owned by nobody, so it counts in no user's disk quota and no
        retention purge selects it. A user's first start of a VM profile
        whose golden image, root disk size, StorageClass and volumeMode
        match an entry takes a ready one (an atomic relabel, guarded by the
        disk's resourceVersion, so no disk is handed out twice) and skips
        the clone; the hub then clones a replacement. With the pool empty,
        the start clones as it would without a pool.

        Omitted keys take the VM settings of ``WorkspaceSpawner``
        (``vm_golden_image_namespace``, ``vm_root_disk_size``,
        ``vm_storage_class``, ``vm_volume_mode``); a profile that overrides
        one of them needs an entry that says the same. Pool disks of a
        golden image no longer listed, of another shape, or cloned before
        the DataSource was pointed at a new source are retired (deleted:
        they hold nothing of anyone's), each with an audit record. ``{}``
        (the default): no pool.
        """,
    )

    refill_interval = Float(
        15.0,
        config=True,
        help="""Seconds between two looks at the pools (from the hub's DataVolume watch; API calls only to clone,
        retire or read each listed DataSource).""",
    )

    @validate("ready_disks")
    def _check_ready_disks(self, proposal):
        value = proposal["value"]
        defaults = PoolShape("x", "golden-images", "40Gi", "ceph-rbd", "Block")
        for name, spec in value.items():
            _entry(name, spec, defaults)
        return value

    @validate("refill_interval")
    def _check_refill_interval(self, proposal):
        value = proposal["value"]
        if not value > 0:
            raise TraitError(f"RootDiskPool.refill_interval must be more than 0 seconds, not {value!r}")
        return value

    def entries(self, defaults: PoolShape) -> list[PoolEntry]:
        """The pools, each entry's omitted keys taken from ``defaults`` (the spawner's VM settings; its
        ``golden_image`` is ignored), in the order configured."""
        return [_entry(name, spec, defaults) for name, spec in self.ready_disks.items()]
