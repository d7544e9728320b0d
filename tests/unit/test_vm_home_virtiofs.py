"""A VM's home through virtiofs (``vm_home_via = "virtiofs"``, the default) or as a disk (``"disk"``).

Covers: with virtiofs the VirtualMachine carries a ``filesystems`` entry
tagged ``home`` backed by the home PVC and no home disk, and the cloud-init
user data mounts that tag at the home path (no mkfs: the PVC's files are the
container's); the disk mode keeps the home disk with its serial and the
format-once; both VMs pass the KubeVirt schema the local cluster validates
with, which refuses an unknown field of a filesystem and one without
``virtiofs``; the trait refuses other values naming itself and the value, and its
value reaches the VM settings; virtiofs is the default of the trait and of
the manifests.
"""

from __future__ import annotations

import base64

import pytest
import yaml
from localcluster.kinds import by_kind
from localcluster.validation import Validator
from traitlets import TraitError

from workspacespawner.backends.vm.manifests import (
    HOME_DEVICE,
    HOME_VIRTIOFS_TAG,
    VMIdentity,
    VMSettings,
    make_cloudinit_secret,
    make_virtual_machine,
)
from workspacespawner.backends.vm.settings import VMTraits
from workspacespawner.config.profiles import ResolvedProfile

IDENT = VMIdentity.for_workspace(namespace="jhub", user_name="alice", kubespawner_username="alice", base_name="vm-alice", home_pvc="home-alice")


def vm_and_user_data(home_via: str) -> tuple[dict, dict]:
    settings = VMSettings(golden_image="g", golden_image_namespace="n", home_via=home_via)
    vm = make_virtual_machine(ident=IDENT, settings=settings)
    secret = make_cloudinit_secret(ident=IDENT, env={}, command=["jupyterhub-singleuser"], home_via=home_via)
    return vm, yaml.safe_load(base64.b64decode(secret["data"]["userdata"]))


def test_virtiofs_home_is_a_filesystem_of_the_home_pvc():
    vm, config = vm_and_user_data("virtiofs")
    spec = vm["spec"]["template"]["spec"]
    assert spec["domain"]["devices"]["filesystems"] == [{"name": HOME_VIRTIOFS_TAG, "virtiofs": {}}]
    assert [d["name"] for d in spec["domain"]["devices"]["disks"]] == ["rootdisk", "cloudinitdisk"]
    assert {"name": HOME_VIRTIOFS_TAG, "persistentVolumeClaim": {"claimName": "home-alice"}} in spec["volumes"]
    assert config["mounts"] == [[HOME_VIRTIOFS_TAG, "/home/jovyan", "virtiofs", "defaults,nofail", "0", "0"]]
    assert "fs_setup" not in config  # the PVC's files are the container's: nothing is formatted
    assert Validator().causes(by_kind()[("kubevirt.io/v1", "VirtualMachine")], vm) == []


def test_the_schema_checks_the_filesystems():
    vm, _ = vm_and_user_data("virtiofs")
    vm["spec"]["template"]["spec"]["domain"]["devices"]["filesystems"] = [{"name": HOME_VIRTIOFS_TAG, "virtiofs": {}, "tag": "x"}]
    causes = Validator().causes(by_kind()[("kubevirt.io/v1", "VirtualMachine")], vm)
    assert [c["field"] for c in causes] == ["spec.template.spec.domain.devices.filesystems[0].tag"], causes
    vm["spec"]["template"]["spec"]["domain"]["devices"]["filesystems"] = [{"name": HOME_VIRTIOFS_TAG}]
    assert Validator().causes(by_kind()[("kubevirt.io/v1", "VirtualMachine")], vm) != []  # virtiofs is required


def test_disk_home_stays_a_disk():
    vm, config = vm_and_user_data("disk")
    devices = vm["spec"]["template"]["spec"]["domain"]["devices"]
    assert "filesystems" not in devices
    assert [d.get("serial") for d in devices["disks"] if d["name"] == "homedisk"] == ["home"]
    assert config["mounts"] == [[HOME_DEVICE, "/home/jovyan", "auto", "defaults,nofail"]]
    assert config["fs_setup"][0]["device"] == HOME_DEVICE
    assert Validator().causes(by_kind()[("kubevirt.io/v1", "VirtualMachine")], vm) == []


def test_the_trait_checks_and_passes_its_value():
    with pytest.raises(TraitError, match="vm_home_via.*'nfs'"):
        VMTraits(vm_home_via="nfs")
    traits = VMTraits(vm_home_via="virtiofs")
    profile = ResolvedProfile(slug="vm", display_name="VM", workspace_kind="vm", ide="jupyterlab", gpus=0, gpu_product=None,
                              cpu=None, memory=None, image="", default_url="")
    assert traits.vm_settings(profile, None).home_via == "virtiofs"
    assert VMTraits().vm_home_via == "virtiofs"
    assert VMSettings(golden_image="g", golden_image_namespace="n").home_via == "virtiofs"
