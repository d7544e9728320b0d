"""Seeding golden images: a Bound PVC with a root filesystem's files plus a CDI DataSource naming it.

On a real cluster an admin imports a cloud image once (a DataVolume or a
DataImportCron) and publishes it as a ``DataSource``; users' root disks are
cloned from it through ``spec.sourceRef``. The demo and the tests seed the
same shape directly: :func:`make_golden_image` writes ``files`` (for the
emulated guest) or a real disk image (``disk_image``, which QEMU boots) into
a fresh volume (the disk image of a ``Block``-mode PVC, as an image imported
onto RBD: see :func:`~.volumes.disk_image_path`), binds a PVC to it and creates the DataSource with ``Ready`` status,
whether or not the storage and CDI controllers are running (on the real
control plane, ``cluster.real_control_plane``, its provisioner and
kube-controller-manager provision and bind the PVC, and this waits for
them). It works through ``cluster.client`` (see :mod:`.client`). On a cluster
restored from a saved state (``LocalCluster(persist=True)``) the image is
there already: an existing DataSource whose PVC is bound is used as it is,
and a PVC left without its DataSource is reused.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from .controllers.cdi import datasource_status
from .controllers.refs import DATA_SOURCES, PVCS, STORAGE_CLASSES, get_or_none
from .controllers.storage import ensure_storage_classes, provision_volume, storage_class_for
from .errors import ApiError
from .volumes import claim_path, copy_sparse, disk_image_path, raw_image_path


def _write_files(root: Path, files: dict[str, str]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


NAMESPACES = ("", "v1", "namespaces")


async def _ensure_namespace(store, namespace: str) -> None:
    kind = store.kind(*NAMESPACES)
    if not any(ns["metadata"]["name"] == namespace for ns in store.objects(kind)):
        try:
            await store.create(kind, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiError as e:
            if e.code != 409:
                raise


async def _bound(cluster, namespace: str, name: str, timeout: float) -> None:
    """Wait until the PVC is Bound (by the real plane's provisioner and PV binder)."""
    deadline = time.monotonic() + timeout
    while claim_path(cluster, namespace, name) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"golden image PVC {namespace}/{name} not Bound after {timeout:.0f}s")
        await asyncio.sleep(0.1)


async def make_golden_image(
    cluster,
    namespace: str,
    name: str,
    files: dict[str, str],
    *,
    size: str = "10Gi",
    storage_class: str = "ceph-rbd",
    disk_image: Path | None = None,
) -> dict:
    """Create golden image ``namespace/name``: a Bound PVC holding ``files`` and a Ready DataSource.

    ``files`` maps paths inside the image to their text, e.g.
    ``{"etc/os-release": 'NAME="Ubuntu"\\n'}``; ``disk_image``, instead, a
    raw disk image file (tools/golden-image's ``disk.img``) copied in as the
    volume's raw device, its holes kept (``size`` no smaller than it); ``size`` is the PVC's
    request (a Kubernetes quantity). ``cluster`` is a started
    :class:`~.cluster.LocalCluster` (or the real plane's
    :class:`~.realplane.agents.PlaneAgents`). Returns the DataSource: the
    existing one, untouched, when the image is already there.
    """
    store = cluster.client
    await store.watch((DATA_SOURCES, PVCS, NAMESPACES, STORAGE_CLASSES))
    existing = get_or_none(store, DATA_SOURCES, namespace, name)
    if existing is not None and claim_path(cluster, namespace, name) is not None:
        return existing
    await ensure_storage_classes(cluster)
    await _ensure_namespace(store, namespace)
    labels = {"app.kubernetes.io/component": "golden-image", "app.kubernetes.io/part-of": "workspacespawner"}
    pvc = get_or_none(store, PVCS, namespace, name) or await store.create(
        store.kind(*PVCS),
        namespace,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
                "storageClassName": storage_class,
                "volumeMode": "Block",  # the image is the device, as an imported image on RBD
            },
        },
    )
    if getattr(cluster, "real_control_plane", False):
        await _bound(cluster, namespace, name, 60)
    else:
        _, klass = storage_class_for(store, pvc)
        if await provision_volume(cluster, pvc, klass) is None:
            raise RuntimeError(f"golden image PVC {namespace}/{name} went away while it was provisioned")
    folder, mode = claim_path(cluster, namespace, name), pvc["spec"].get("volumeMode") or "Filesystem"
    if disk_image is not None:
        await asyncio.to_thread(copy_sparse, disk_image, raw_image_path(folder, mode))
    else:
        await asyncio.to_thread(_write_files, disk_image_path(folder, mode), files)
    ds = existing or await store.create(
        store.kind(*DATA_SOURCES),
        namespace,
        {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataSource",
            "metadata": {"name": name, "labels": labels},
            "spec": {"source": {"pvc": {"namespace": namespace, "name": name}}},
        },
    )
    for _ in range(50):
        ds["status"] = datasource_status(store, ds)
        try:
            return await store.replace(store.kind(*DATA_SOURCES), namespace, name, ds, subresource="status")
        except ApiError as e:
            if e.code != 409:
                raise
        await asyncio.sleep(0.1)  # CDI wrote it meanwhile (the real plane's agent): read again
        ds = store.get(store.kind(*DATA_SOURCES), namespace, name)
    raise RuntimeError(f"golden image DataSource {namespace}/{name}: status kept conflicting")

