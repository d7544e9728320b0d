"""A VM workspace with its home shared through virtiofs (``home_via="virtiofs"``) on the local cluster.

Covers: the guest boots with the home PVC as the virtiofs filesystem
``home`` (no home disk), cloud-init mounts it at the home path, and the IDE
runs in the home PVC's own directory, where a container workspace of the
same user finds the same files; with ``home_via="disk"`` the guest's home
is the disk image ``disk.img`` in the home PVC instead (the home is a
Filesystem-mode claim), apart from the files a container sees there.
"""

from __future__ import annotations

from localcluster.controllers.refs import VMIS
from localcluster.volumes import DISK_IMAGE, claim_path

from tests.cluster import test_vm_workspace
from tests.cluster.test_vm_workspace import COMMAND, NS, fetch, guest_path, hub_env, stored, workspace

#: The fixture of test_vm_workspace: (cluster thread, CustomObjectsApi, CoreV1Api), a golden image, the home PVC.
kube = test_vm_workspace.kube


async def test_the_guest_runs_in_the_home_pvcs_own_files(kube):
    thread = kube[0]
    ws = workspace(kube, home_via="virtiofs")
    url = await ws.start(env=hub_env("token"), command=COMMAND)
    vmi = stored(kube, VMIS, ws.ident.vm)
    devices = vmi["spec"]["domain"]["devices"]
    assert devices["filesystems"] == [{"name": "home", "virtiofs": {}}]
    assert "homedisk" not in [d["name"] for d in devices["disks"]]
    assert (await fetch(url))["cwd"] == guest_path(thread, "/home/jovyan", claim_path(thread.cluster, NS, "home-ann"))
    assert await ws.stop() is True


async def test_a_home_disk_is_an_image_in_the_home_pvc(kube):
    thread = kube[0]
    ws = workspace(kube, home_via="disk")
    url = await ws.start(env=hub_env("token"), command=COMMAND)
    home_dir = claim_path(thread.cluster, NS, "home-ann")
    assert (await fetch(url))["cwd"] == guest_path(thread, "/home/jovyan", home_dir / DISK_IMAGE)
    assert await ws.stop() is True
