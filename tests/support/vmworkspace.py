"""A stopped VM workspace made directly on the local cluster with the VM backend's own builders (no hub, no start).

For the tests of what admins do to a VM workspace at rest (publishing it as
a golden image): the root DataVolume cloned from a small golden image, the
Halted VirtualMachine naming it, and files written onto the root disk as a
guest would have left them. Also: a new root disk cloned from a golden
image, and the files on it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from localcluster.goldenimage import make_golden_image
from localcluster.volumes import claim_path, disk_image_path

from tests.support.lifecycleenv import NS, wait_async
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings, make_root_datavolume, make_virtual_machine
from workspacespawner.core import names
from workspacespawner.k8s.kinds import DATA_VOLUME, VIRTUAL_MACHINE, VMI
from workspacespawner.lifecycle.attach import Holder, let_go
from workspacespawner.lifecycle.phases import made_in

GOLDEN_NS = names.GOLDEN_IMAGE_NAMESPACE
BASE_IMAGE = "ubuntu"
BASE_FILES = {"etc/os-release": "ID=ubuntu\n"}
SETTINGS = VMSettings(golden_image=BASE_IMAGE, golden_image_namespace=GOLDEN_NS, root_disk_size="2Gi", cpu_cores=1,
                      memory="1Gi", termination_grace_seconds=5)


def base_image(thread) -> None:
    """Seed the golden image the workspaces are cloned from, on the ClusterThread ``thread`` (quick clones)."""
    thread.cluster.controllers["cdi"].clone_seconds = 0.2
    thread.call(partial(make_golden_image, size="1Gi"), GOLDEN_NS, BASE_IMAGE, BASE_FILES)


def vm_identity(user: str, server: str = "") -> VMIdentity:
    """The names of ``user``'s VM workspace of ``server`` (``ws-<user>[-<server>]``)."""
    slug = names.dns_label(user)
    return VMIdentity.for_workspace(namespace=NS, user_name=user, kubespawner_username=slug,
                                    base_name=f"ws-{slug}{'-' + server if server else ''}", home_pvc=f"home-{slug}",
                                    server_name=server)


async def succeeded(kube, namespace: str, name: str, timeout: float = 60) -> None:
    """Wait until DataVolume ``namespace/name`` is Succeeded (CDI filled it); fail after ``timeout`` seconds, with its status."""

    async def done():
        dv = await kube.get(DATA_VOLUME, namespace, name)
        return dv is not None and (dv.get("status") or {}).get("phase") == "Succeeded"

    try:
        await wait_async(done, timeout)
    except AssertionError:
        dv = await kube.get(DATA_VOLUME, namespace, name)
        raise AssertionError(f"DataVolume {namespace}/{name} did not succeed: {(dv or {}).get('status')}") from None


async def make_stopped_vm(kube, cluster, user: str, server: str = "", files: dict[str, str] | None = None,
                          settings: VMSettings = SETTINGS) -> VMIdentity:
    """``user``'s stopped VM workspace of ``server``: root disk cloned (waited for), Halted VM, ``files`` written on the
    root disk (paths inside the guest -> text). :func:`base_image` must have run, unless ``settings`` name another
    golden image (and a root disk no smaller than it).

    As a first start leaves it: the disk was made with that start's attach claim (so CDI copied the claim onto the
    PVC it made, where nobody removes it), which the stop then removed from the DataVolume."""
    ident = vm_identity(user, server)
    claim = Holder(f"{user}/{server}" if server else user, VMI.kind, ident.vm, datetime.now(UTC))
    await kube.create(DATA_VOLUME, NS, made_in(make_root_datavolume(ident=ident, settings=settings), None,
                                               {names.ATTACH_ANNOTATION: claim.to_json()}))
    await kube.create(VIRTUAL_MACHINE, NS, make_virtual_machine(ident=ident, settings=settings))
    await succeeded(kube, NS, ident.root_disk)
    assert await let_go(kube, DATA_VOLUME, NS, user, ident.root_disk, claim.server, fresh=True)
    root = root_files(cluster, NS, ident.root_disk)
    for path, text in (files or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return ident


def root_files(cluster, namespace: str, disk: str) -> Path:
    """Where the files of root disk ``disk`` (a ``Block`` PVC) are on the local cluster."""
    return disk_image_path(claim_path(cluster, namespace, disk), SETTINGS.volume_mode)


async def clone_from(kube, cluster, image: str, name: str, *, image_namespace: str = GOLDEN_NS,
                     size: str = SETTINGS.root_disk_size) -> Path:
    """A new root DataVolume ``name`` of ``size`` cloned from golden image ``image_namespace/image`` (waited for);
    its files."""
    await kube.create(DATA_VOLUME, NS, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": name, "namespace": NS},
        "spec": {"sourceRef": {"kind": "DataSource", "name": image, "namespace": image_namespace},
                 "storage": {"accessModes": ["ReadWriteOnce"], "volumeMode": SETTINGS.volume_mode, "storageClassName": "ceph-rbd",
                             "resources": {"requests": {"storage": size}}}},
    })
    await succeeded(kube, NS, name)
    return root_files(cluster, NS, name)
