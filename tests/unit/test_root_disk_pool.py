"""The root-disk pool's pure parts: settings, the pool disk, the claim's patch, the refill plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import jsonpatch
import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, make_root_datavolume
from workspacespawner.backends.vm.pool import (
    claim_operations,
    claimable,
    image_id,
    make_pool_disk,
    plan,
    pool_disk_name,
    same_shape,
    shape_for,
    source_text,
)
from workspacespawner.config.rootdiskpool import PoolEntry, PoolShape, RootDiskPool
from workspacespawner.core import names
from workspacespawner.lifecycle.phases import Phase, Status

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
DEFAULTS = PoolShape("", "golden-images", "40Gi", "ceph-rbd", "Block")
SHAPE = PoolShape("ubuntu-24.04-gpu-2026-11", "golden-images", "40Gi", "ceph-rbd", "Block")
SOURCE = {"pvc": {"namespace": "golden-images", "name": "ubuntu-24.04-gpu-2026-11"}}
USER = "Ann.O'Brien@school.example"
IDENT = VMIdentity.for_workspace(namespace="jhub", user_name=USER, kubespawner_username="ann", base_name="ws-ann", home_pvc="home-ann")


def pool_disk(name: str, *, shape: PoolShape = SHAPE, source: dict = SOURCE, phase: str | None = "Succeeded",
              created: datetime = NOW, version: str = "7") -> dict:
    dv = make_pool_disk(shape, namespace="jhub", name=name, source=source)
    dv["metadata"].update(resourceVersion=version, uid=f"uid-{name}", creationTimestamp=created.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if phase:
        dv["status"] = {"phase": phase}
    return dv


# -- settings -----------------------------------------------------------------------------------


def test_entries_take_the_spawner_settings_they_leave_out():
    config = Config()
    config.RootDiskPool.ready_disks = {"ubuntu-24.04-gpu-2026-11": 3, "rocky-9-2026-10": {"count": 1, "size": "60Gi"}}
    entries = RootDiskPool(config=config).entries(DEFAULTS)
    assert entries == [
        PoolEntry(SHAPE, 3),
        PoolEntry(PoolShape("rocky-9-2026-10", "golden-images", "60Gi", "ceph-rbd", "Block"), 1),
    ]


@pytest.mark.parametrize(("value", "words"), [
    ({"Ubuntu!": 2}, "is not a DataSource name"),
    ({"ubuntu": -1}, "['count'] must be a whole number"),
    ({"ubuntu": True}, "must be a number of disks"),
    ({"ubuntu": {"count": 2, "sise": "40Gi"}}, "unknown keys ['sise']"),
    ({"ubuntu": {"count": 2, "size": "lots"}}, "['size'] must be a positive Kubernetes quantity"),
    ({"ubuntu": {"count": 2, "volume_mode": "block"}}, "['volume_mode'] must be one of"),
])
def test_a_bad_pool_is_refused_naming_the_setting_and_the_value(value, words):
    config = Config()
    config.RootDiskPool.ready_disks = value
    with pytest.raises(TraitError) as caught:
        RootDiskPool(config=config)
    assert "RootDiskPool.ready_disks" in str(caught.value) and words in str(caught.value)


def test_refill_interval_must_be_positive():
    config = Config()
    config.RootDiskPool.refill_interval = 0
    with pytest.raises(TraitError, match=r"RootDiskPool.refill_interval must be more than 0 seconds, not 0"):
        RootDiskPool(config=config)


# -- the pool disk ------------------------------------------------------------------------------


def test_a_pool_disk_is_a_clone_of_the_golden_image_owned_by_nobody():
    dv = make_pool_disk(SHAPE, namespace="jhub", name=pool_disk_name(SHAPE), source=SOURCE)
    labels, annotations = dv["metadata"]["labels"], dv["metadata"]["annotations"]
    assert names.OWNER_LABEL not in labels and names.OWNER_ANNOTATION not in annotations
    assert labels[names.DISK_LABEL] == names.POOL_DISK
    assert labels[names.POOL_IMAGE_LABEL] == names.golden_image_id("golden-images", "ubuntu-24.04-gpu-2026-11")
    assert annotations[names.GOLDEN_IMAGE_ANNOTATION] == "golden-images/ubuntu-24.04-gpu-2026-11"
    assert json.loads(annotations[names.GOLDEN_IMAGE_SOURCE_ANNOTATION]) == SOURCE
    assert dv["spec"] == {k: v for k, v in make_root_datavolume(ident=IDENT, settings=settings()).items() if k == "spec"}["spec"]
    assert dv["metadata"]["name"].startswith("pool-ubuntu-24-04-gpu-2026-11-") and len(dv["metadata"]["name"]) <= 63


def settings(**changes) -> VMSettings:
    values = dict(golden_image="ubuntu-24.04-gpu-2026-11", golden_image_namespace="golden-images", root_disk_size="40Gi")
    return VMSettings(**{**values, **changes})


def test_a_start_takes_only_a_disk_of_its_own_shape():
    assert shape_for(settings()) == SHAPE
    assert same_shape(pool_disk("a"), shape_for(settings(root_disk_size="40960Mi")))  # the same size, other units
    assert not same_shape(pool_disk("a"), shape_for(settings(root_disk_size="50Gi")))
    assert not same_shape(pool_disk("a"), shape_for(settings(storage_class="ceph-rbd-ssd")))
    assert not same_shape(pool_disk("a"), shape_for(settings(volume_mode="Filesystem")))
    assert not same_shape(pool_disk("a"), shape_for(settings(golden_image="ubuntu-24.04-gpu-2026-12")))


def test_claimable_disks_are_ready_of_the_shape_and_source_oldest_first():
    disks = [
        pool_disk("newer", created=NOW),
        pool_disk("older", created=NOW - timedelta(hours=1)),
        pool_disk("cloning", phase="CloneInProgress"),
        pool_disk("bigger", shape=PoolShape(SHAPE.golden_image, SHAPE.golden_image_namespace, "80Gi", "ceph-rbd", "Block")),
        pool_disk("stale", source={"pvc": {"namespace": "golden-images", "name": "old"}}),
    ]
    found = [d["metadata"]["name"] for d in claimable(disks, SHAPE, source_text(SOURCE))]
    assert found == ["older", "newer"]
    assert "stale" in [d["metadata"]["name"] for d in claimable(disks, SHAPE, None)]  # the source unknown: any


# -- the claim ----------------------------------------------------------------------------------


def test_the_claim_makes_the_pool_disk_the_users_root_disk_in_one_guarded_patch():
    dv = pool_disk("pool-x")
    recorded = Status(Phase.STOPPED, since=NOW, server="")
    operations = claim_operations(dv, IDENT, recorded=recorded, annotations={names.ATTACH_ANNOTATION: '{"server": "ann/"}'})
    assert operations[:2] == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "test", "path": "/metadata/labels/workspacespawner.io~1disk", "value": "pool"},
    ]
    claimed = jsonpatch.apply_patch(dv, operations)
    meta = claimed["metadata"]
    assert names.owned_by(meta, USER)
    assert meta["labels"][names.DISK_LABEL] == names.ROOT_DISK and names.POOL_IMAGE_LABEL not in meta["labels"]
    assert meta["labels"][names.PHASE_LABEL] == "Stopped"
    assert meta["annotations"][names.ROOT_SLOT_ANNOTATION] == IDENT.vm
    assert meta["annotations"][names.ATTACH_ANNOTATION] == '{"server": "ann/"}'
    assert meta["annotations"][names.GOLDEN_IMAGE_ANNOTATION] == SHAPE.image  # kept: which image it came from
    assert claimed["spec"] == dv["spec"]
    with pytest.raises(jsonpatch.JsonPatchTestFailed):  # a disk another start changed meanwhile is not taken
        jsonpatch.apply_patch({**dv, "metadata": {**dv["metadata"], "resourceVersion": "8"}}, operations)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):  # nor one claimed already
        jsonpatch.apply_patch({**claimed, "metadata": {**meta, "resourceVersion": "7"}}, operations)


# -- the refill plan ----------------------------------------------------------------------------


def entry(count: int, shape: PoolShape = SHAPE) -> PoolEntry:
    return PoolEntry(shape, count)


def names_of(disks) -> list[str]:
    return sorted(d["metadata"]["name"] for d in disks)


def test_a_short_pool_is_cloned_up_to_its_count():
    todo = plan([pool_disk("a")], [entry(3)], {image_id(SHAPE): source_text(SOURCE)}, now=NOW, failed_after=150)
    assert todo.retire == [] and todo.clone == {image_id(SHAPE): 2}


def test_nothing_is_cloned_from_a_golden_image_that_is_not_there():
    todo = plan([], [entry(3)], {image_id(SHAPE): None}, now=NOW, failed_after=150)
    assert todo.clone == {} and todo.retire == []


def test_a_full_pool_is_left_alone_and_a_fuller_one_retires_its_newest_and_unready():
    disks = [pool_disk("old", created=NOW - timedelta(hours=2)), pool_disk("new"), pool_disk("cloning", phase="CloneInProgress")]
    sources = {image_id(SHAPE): source_text(SOURCE)}
    assert plan(disks, [entry(3)], sources, now=NOW, failed_after=150).retire == []
    assert names_of(plan(disks, [entry(1)], sources, now=NOW, failed_after=150).retire) == ["cloning", "new"]


def test_a_changed_golden_image_retires_the_old_pool_disks():
    old = pool_disk("old")
    moved = {image_id(SHAPE): source_text({"snapshot": {"namespace": "golden-images", "name": "ubuntu-2026-11b"}})}
    todo = plan([old], [entry(1)], moved, now=NOW, failed_after=150)
    assert names_of(todo.retire) == ["old"] and todo.clone == {image_id(SHAPE): 1}
    next_month = PoolShape("ubuntu-24.04-gpu-2026-12", "golden-images", "40Gi", "ceph-rbd", "Block")
    todo = plan([old], [entry(1, next_month)], {image_id(next_month): source_text(SOURCE)}, now=NOW, failed_after=150)
    assert names_of(todo.retire) == ["old"] and todo.clone == {image_id(next_month): 1}
    resized = PoolShape(SHAPE.golden_image, SHAPE.golden_image_namespace, "60Gi", "ceph-rbd", "Block")
    assert names_of(plan([old], [entry(1, resized)], {image_id(resized): source_text(SOURCE)}, now=NOW, failed_after=150).retire) == ["old"]


def test_a_failed_clone_is_retired_only_once_it_is_old():
    failed = pool_disk("failed", phase="Failed", created=NOW - timedelta(seconds=100))
    sources = {image_id(SHAPE): source_text(SOURCE)}
    assert plan([failed], [entry(1)], sources, now=NOW, failed_after=150).retire == []
    later = NOW + timedelta(seconds=100)
    assert names_of(plan([failed], [entry(1)], sources, now=later, failed_after=150).retire) == ["failed"]


def test_a_claimed_disk_is_no_pool_disk_and_a_deleted_one_is_not_counted():
    claimed = jsonpatch.apply_patch(pool_disk("mine"), claim_operations(pool_disk("mine"), IDENT, recorded=None, annotations={}))
    going = pool_disk("going")
    going["metadata"]["deletionTimestamp"] = "2026-12-04T12:00:00Z"
    todo = plan([going], [entry(1)], {image_id(SHAPE): source_text(SOURCE)}, now=NOW, failed_after=150)
    assert todo.retire == [] and todo.clone == {image_id(SHAPE): 1}
    assert claimable([claimed], SHAPE, None) == []
