"""The pure parts of a VM root disk (:mod:`workspacespawner.vmdisk.rootdisk`): which DataVolume a VM boots from, the
golden image a disk was cloned from, and a rebuilt disk's manifest (like a start's, valid against CDI's schema) and
the guarded patch that points the VM at it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from localcluster.kinds import by_kind
from localcluster.validation import Validator

from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, make_root_datavolume, make_virtual_machine
from workspacespawner.config.goldenimages import cloned_from
from workspacespawner.core import names
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.vmdisk.rootdisk import (
    make_rebuilt_datavolume,
    rebuilt_name,
    repoint_operations,
    root_disk_of,
)

IDENT = VMIdentity.for_workspace(namespace="jhub", user_name="Ann@school.example", kubespawner_username="ann",
                                 base_name="ws-ann", home_pvc="home-ann")
SETTINGS = VMSettings(golden_image="ubuntu", golden_image_namespace="golden-images", root_disk_size="40Gi")
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def test_a_rebuilt_disk_is_the_starts_disk_from_another_image():
    old = make_root_datavolume(ident=IDENT, settings=SETTINGS)
    old["metadata"]["labels"][names.PHASE_LABEL] = "Stopped"
    new = make_rebuilt_datavolume(name="ws-ann-root-20250601120000", old=old, vm_name="ws-ann", image="golden-images/ubuntu-next",
                                  status=Status(Phase.PROVISIONING_DISK, since=T0), annotations={names.ATTACH_ANNOTATION: "{}"})
    assert Validator().causes(by_kind()[(new["apiVersion"], new["kind"])], new) == []
    assert new["spec"] == {**old["spec"], "sourceRef": {"kind": "DataSource", "name": "ubuntu-next", "namespace": "golden-images"}}
    assert new["metadata"]["labels"] == {**old["metadata"]["labels"], names.PHASE_LABEL: "ProvisioningDisk"}
    extra = {names.REBUILT_FROM_ANNOTATION: "ws-ann-root", names.GOLDEN_IMAGE_ANNOTATION: "golden-images/ubuntu-next",
             names.ATTACH_ANNOTATION: "{}", names.LIFECYCLE_ANNOTATION: new["metadata"]["annotations"][names.LIFECYCLE_ANNOTATION]}
    assert new["metadata"]["annotations"] == {**old["metadata"]["annotations"], **extra}
    assert cloned_from(old) == "golden-images/ubuntu" and cloned_from(new) == "golden-images/ubuntu-next"
    del old["metadata"]["annotations"][names.GOLDEN_IMAGE_ANNOTATION]
    assert cloned_from(old) == "golden-images/ubuntu"  # from spec.sourceRef, for a disk made before the annotation
    assert cloned_from({"metadata": {"name": "x"}, "spec": {"source": {"blank": {}}}}) is None


def test_the_vm_is_pointed_at_the_new_disk_only_as_read():
    vm = make_virtual_machine(ident=IDENT, settings=SETTINGS)
    vm["metadata"]["resourceVersion"] = "42"
    assert root_disk_of(vm) == "ws-ann-root"
    assert repoint_operations(vm, "ws-ann-root-2") == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {"op": "test", "path": "/spec/template/spec/volumes/0/dataVolume/name", "value": "ws-ann-root"},
        {"op": "replace", "path": "/spec/template/spec/volumes/0/dataVolume/name", "value": "ws-ann-root-2"},
    ]
    with pytest.raises(ValueError):
        repoint_operations({"metadata": {"name": "x", "resourceVersion": "1"}, "spec": {}}, "y")
    assert rebuilt_name("ws-" + "a" * 60, T0) == "ws-" + "a" * 37 + "-root-20250601120000"


def test_a_restored_disk_comes_from_the_snapshot_and_is_no_smaller_than_it():
    old = make_root_datavolume(ident=IDENT, settings=SETTINGS)
    snapshot = {"metadata": {"name": "ws-ann-root-monday", "namespace": "jhub"}, "status": {"restoreSize": "50Gi", "readyToUse": True}}
    new = make_rebuilt_datavolume(name="ws-ann-root-20250601120000", old=old, vm_name="ws-ann", image="golden-images/ubuntu",
                                  status=Status(Phase.PROVISIONING_DISK, since=T0), snapshot=snapshot)
    assert Validator().causes(by_kind()[(new["apiVersion"], new["kind"])], new) == []
    assert new["spec"]["source"] == {"snapshot": {"namespace": "jhub", "name": "ws-ann-root-monday"}} and "sourceRef" not in new["spec"]
    assert new["spec"]["storage"]["resources"]["requests"]["storage"] == "50Gi"  # the snapshot's restoreSize, over 40Gi
    assert new["metadata"]["annotations"][names.RESTORED_FROM_ANNOTATION] == "ws-ann-root-monday"
    assert cloned_from(new) == "golden-images/ubuntu"  # what a later rebuild defaults to
    smaller = {**snapshot, "status": {"restoreSize": "10Gi"}}
    again = make_rebuilt_datavolume(name="x", old=old, vm_name="ws-ann", image="golden-images/ubuntu",
                                    status=Status(Phase.PROVISIONING_DISK, since=T0), snapshot=smaller)
    assert again["spec"]["storage"]["resources"]["requests"]["storage"] == "40Gi"  # never smaller than the disk it replaces
