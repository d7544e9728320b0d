"""Which disks a start's quota request counts (:func:`workspacespawner.quota.request.quota_request`).

A VM's root disk is a DataVolume whose PVC CDI labels as its own (``managed-by: cdi-controller``), so the request
counts it from the DataVolume watch: an existing root disk is existing disk (a restart adds none), a retained one
counts too, and each disk is counted once. Without a DataVolume watch (a hub that shows no VM profile) no API call is
made for DataVolumes.
"""

from __future__ import annotations

from workspacespawner.backends.vm.backend import VMBackend, VMNaming
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core import names
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC
from workspacespawner.quota.request import quota_request

GI = 1 << 30
USER = "ann"
PROFILE = ResolvedProfile(slug="vm", display_name="VM", workspace_kind="vm", ide="jupyterlab", gpus=0, gpu_product=None,
                          cpu=2.0, memory="4Gi", image="", default_url="")


def disk(kind: str, name: str, gib: int, *, owner: bool = True, managed_by: str = names.MANAGED_BY, phase: str = "") -> dict:
    labels = {**names.owner_labels(USER), names.MANAGED_BY_LABEL: managed_by} if owner else {}
    if phase:
        labels[names.PHASE_LABEL] = phase
    size = {"resources": {"requests": {"storage": f"{gib}Gi"}}}
    return {"kind": kind, "metadata": {"name": name, "labels": labels, "annotations": names.owner_annotations(USER)},
            "spec": {"storage": size} if kind == "DataVolume" else size}


class Cluster:
    """What the hub's Kube facade answers: the PVC list, and the DataVolume watch's objects (None: no such watch)."""

    def __init__(self, pvcs: list[dict], datavolumes: list[dict] | None):
        self.pvcs, self.datavolumes, self.calls = pvcs, datavolumes, []

    async def list(self, kind, namespace, *, labels=None, fresh=False):
        self.calls.append(("list", kind.kind))
        return list(self.pvcs) if kind is PVC else []

    def cached(self, kind, namespace, *, labels=None):
        return self.datavolumes if kind is DATA_VOLUME else None


def backend() -> VMBackend:
    vm = VMBackend(naming=VMNaming("default", USER, USER, "ws-ann"), settings_for=None, root_disk_size="40Gi", core_api=None,
                   custom_api=None, start_timeout=60, fail_fast_unschedulable=True, tasks=None)
    vm.ref(home_pvc="home-ann", fresh=True)
    return vm


async def request(cluster: Cluster):
    return await quota_request(cluster, namespace="default", user_name=USER, profile=PROFILE, server_name="",
                               home_pvc="home-ann", home_size="10Gi", backend=backend())


HOME = disk("PersistentVolumeClaim", "home-ann", 10)
ROOT_PVC = disk("PersistentVolumeClaim", "ws-ann-root", 40, managed_by="cdi-controller")  # CDI's: not ours by its labels


async def test_an_existing_root_disk_is_existing_disk_counted_once():
    cluster = Cluster([HOME, ROOT_PVC], [disk("DataVolume", "ws-ann-root", 40)])
    asked = await request(cluster)
    assert (asked.disk_existing, asked.disk_new) == (50 * GI, 0)  # a restart adds no disk
    assert cluster.calls == [("list", "PersistentVolumeClaim")]  # the DataVolumes from the watch, no call


async def test_a_retained_root_disk_counts_and_a_first_start_adds_its_root_disk():
    retained = disk("DataVolume", "ws-ann-root-old", 40, phase="Retained")
    asked = await request(Cluster([HOME], [retained]))
    assert (asked.disk_existing, asked.disk_new) == (50 * GI, 40 * GI)


async def test_without_a_datavolume_watch_the_root_disk_counts_as_new_as_before():
    asked = await request(Cluster([HOME, ROOT_PVC], None))
    assert (asked.disk_existing, asked.disk_new) == (10 * GI, 40 * GI)
