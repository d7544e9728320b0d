"""The node agent's volume types, as the storage tiers use them.

Covers: ``hostPath`` as the node's own directory that outlives pods
(``DirectoryOrCreate`` creates it, a missing ``Directory`` keeps the
container in ``ContainerCreating`` with the kubelet's ``FailedMount``
Warning until it appears); generic ``ephemeral`` volumes (the claim
``<pod>-<volume>`` made from the template, owned by the Pod, bound, mounted
and deleted with the Pod; a claim the Pod does not own is refused);
``readOnly`` mounts accepted (not enforced, see :mod:`.nodeagent`); a VM's
virtiofs ``filesystems`` mounted by tag and an ``emptyDisk`` mounted by
virtio serial, gone with the VMI; cloud-init's init-stage module order.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from localcluster.controllers.guest import GuestBoot
from localcluster.testing import wait_for
from localcluster.volumes import DISK_IMAGE, claim_path, copy_tree, host_path_dir
from test_localcluster_nodeagent import (  # noqa: F401 (no_orphans: an autouse fixture)
    NS,
    create,
    get,
    is_ready,
    kind,
    log_of,
    make_pod,
    make_pvc,
    make_vmi,
    no_orphans,
    phase_of,
    schedule,
)

from localcluster import LocalCluster

CONTROLLERS = ("storage", "ephemeral", "protection", "scheduler", "nodeagent")


def warnings(store, name: str) -> list[tuple[str, str]]:
    events, _ = store.list(kind(store, "events"), NS)
    return [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == name and e["type"] == "Warning"]


def waiting_reason(store, name: str) -> str | None:
    statuses = ((get(store, "pods", name) or {}).get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting", {}).get("reason")


async def test_host_path_is_the_nodes_directory_and_type_directory_must_exist(tmp_path):
    read = "import os; print(open(os.path.join(os.environ['MODELS'], 'weights.txt')).read()); open(os.path.join(os.environ['CACHE'], 'c'), 'w').write('x')"
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        pod = make_pod(
            "reader",
            ["python", "-c", read],
            restart="Never",
            env=[{"name": "MODELS", "value": "/models"}, {"name": "CACHE", "value": "/cache"}],
            volumeMounts=[{"name": "models", "mountPath": "/models", "readOnly": True}, {"name": "cache", "mountPath": "/cache"}],
        )
        pod["spec"]["volumes"] = [
            {"name": "models", "hostPath": {"path": "/srv/models", "type": "Directory"}},
            {"name": "cache", "hostPath": {"path": "/var/cache/ws", "type": "DirectoryOrCreate"}},
        ]
        create(store, pod)
        message = 'MountVolume.SetUp failed for volume "models" : hostPath type check failed: /srv/models is not a directory'
        await wait_for(lambda: ("FailedMount", message) in warnings(store, "reader"))
        assert waiting_reason(store, "reader") == "ContainerCreating"
        node = get(store, "pods", "reader")["spec"]["nodeName"]
        models = host_path_dir(cluster, node, "/srv/models")
        assert models == tmp_path / "nodes" / node / "hostpath" / "srv" / "models"
        models.mkdir(parents=True)
        (models / "weights.txt").write_text("w1")
        await wait_for(lambda: phase_of(store, "reader") == "Succeeded")
        assert log_of(cluster, get(store, "pods", "reader")).strip() == "w1"
        store.delete(kind(store, "pods"), NS, "reader")
        await wait_for(lambda: get(store, "pods", "reader") is None)
        assert (host_path_dir(cluster, node, "/var/cache/ws") / "c").read_text() == "x"  # outlives the pod
        assert (models / "weights.txt").exists()


def ephemeral_volume() -> dict:
    return {
        "name": "scratch",
        "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": {"tier": "scratch"}, "annotations": {"note": "nvme"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
            }
        },
    }


async def test_generic_ephemeral_volume_is_a_claim_owned_by_the_pod(tmp_path):
    write = "import os; open(os.path.join(os.environ['SCRATCH'], 'f'), 'w').write('scratch')"
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        pod = make_pod("eph", ["python", "-c", write], restart="Never", env=[{"name": "SCRATCH", "value": "/scratch"}],
                       volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
        pod["spec"]["volumes"] = [ephemeral_volume()]
        pod = create(store, pod)
        await wait_for(lambda: phase_of(store, "eph") == "Succeeded")
        claim = get(store, "persistentvolumeclaims", "eph-scratch")
        assert claim["status"]["phase"] == "Bound"
        assert claim["metadata"]["labels"] == {"tier": "scratch"} and claim["metadata"]["annotations"]["note"] == "nvme"
        assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
        [owner] = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Pod", "eph", pod["metadata"]["uid"], True)
        assert (claim_path(cluster, NS, "eph-scratch") / "f").read_text() == "scratch"
        store.delete(kind(store, "pods"), NS, "eph")
        await wait_for(lambda: get(store, "pods", "eph") is None and get(store, "persistentvolumeclaims", "eph-scratch") is None)


async def test_ephemeral_claim_not_owned_by_the_pod_is_refused(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        create(store, make_pvc("squat-scratch"))
        pod = make_pod("squat", ["python", "-c", "pass"], restart="Never", volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
        pod["spec"]["volumes"] = [ephemeral_volume()]
        create(store, pod)
        message = f"PVC {NS}/squat-scratch was not created for pod {NS}/squat (pod is not owner)"
        await wait_for(lambda: ("FailedMount", message) in warnings(store, "squat"))
        assert waiting_reason(store, "squat") == "ContainerCreating"


PROBE_MOUNTS = """
import errno, os
for path in ("/shared/team/new.txt", "/models/new.bin", "/scratch/new.txt", "/home/jovyan/new.txt", "/opt/new.txt"):
    try:
        open(path, "w").write("x")
        print(path, "written")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
print("team", open("/shared/team/readme.txt").read())
print("cwd", os.getcwd(), "home", os.environ["HOME"])
"""


async def test_read_only_mounts_are_enforced_at_their_real_paths(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        if not cluster.controllers["nodeagent"].isolation:
            pytest.skip("this host cannot sandbox (needs Linux, and root or user namespaces): paths are mapped, readOnly is not enforced")
        store = cluster.store
        for claim in ("team", "models", "home"):
            create(store, make_pvc(claim))
        team = await wait_for(lambda: claim_path(cluster, NS, "team"))
        (team / "readme.txt").write_text("course notes")
        mounts = [
            {"name": "team", "mountPath": "/shared/team", "readOnly": True},
            {"name": "models", "mountPath": "/models"},
            {"name": "home", "mountPath": "/home/jovyan", "subPath": "ann"},
            {"name": "scratch", "mountPath": "/scratch"},
        ]
        pod = make_pod("ro", ["python", "-c", PROBE_MOUNTS], restart="Never", volumeMounts=mounts,
                       env=[{"name": "HOME", "value": "/home/jovyan"}])
        pod["spec"]["volumes"] = [
            {"name": "team", "persistentVolumeClaim": {"claimName": "team"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            {"name": "home", "persistentVolumeClaim": {"claimName": "home"}},
            {"name": "scratch", "emptyDir": {}},
        ]
        create(store, pod)
        await wait_for(lambda: phase_of(store, "ro") == "Succeeded")
        lines = log_of(cluster, get(store, "pods", "ro")).strip().splitlines()
        assert lines == [
            "/shared/team/new.txt EROFS",  # volumeMounts[].readOnly
            "/models/new.bin EROFS",  # persistentVolumeClaim.readOnly
            "/scratch/new.txt written",
            "/home/jovyan/new.txt written",
            "/opt/new.txt written",  # the container's own writable layer, not the host's /opt
            "team course notes",
            "cwd /home/jovyan home /home/jovyan",
        ]
        assert not (claim_path(cluster, NS, "team") / "new.txt").exists()
        assert (claim_path(cluster, NS, "home") / "ann" / "new.txt").read_text() == "x"  # subPath
        assert not Path("/opt/new.txt").exists()


def tiered_vmi(name: str) -> dict:
    """A VMI with the tiers' devices: a team claim as a virtiofs filesystem, scratch as an emptyDisk, cloud-init mounts for both."""
    vmi = make_vmi(name, firmware_uuid="0b0c6a52-58a4-4a43-9c2b-5a0a2f9d2d11")
    spec = vmi["spec"]
    del spec["readinessProbe"]  # no units here: Ready once booted
    devices = spec["domain"]["devices"]
    devices["disks"][2] = {"name": "scratch", "disk": {"bus": "virtio"}, "serial": "scratch"}
    devices["filesystems"] = [{"name": "shared-team-a", "virtiofs": {}}]
    mounts = [
        ["shared-team-a", "/shared/team", "virtiofs", "defaults,nofail"],
        ["/dev/disk/by-id/virtio-scratch", "/scratch", "ext4", "defaults,nofail"],
    ]
    spec["volumes"][1:] = [
        {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n" + json.dumps({"mounts": mounts})}},
        {"name": "shared-team-a", "persistentVolumeClaim": {"claimName": "team-a", "readOnly": True}},
        {"name": "scratch", "emptyDisk": {"capacity": "3Gi"}},
    ]
    return vmi


async def test_vm_virtiofs_filesystem_and_empty_disk(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        store = cluster.store
        for claim in ("rootdisk", "team-a"):
            create(store, make_pvc(claim))
        schedule(store, tiered_vmi("vm-1"))
        vmi = await wait_for(lambda: is_ready(v := get(store, "virtualmachineinstances", "vm-1", "kubevirt.io")) and v)
        rootfs, team = claim_path(cluster, NS, "rootdisk") / DISK_IMAGE, claim_path(cluster, NS, "team-a")  # a disk, a share
        scratch = tmp_path / "vmis" / vmi["metadata"]["uid"] / "disks" / "scratch"
        if cluster.controllers["nodeagent"].isolation:  # bind-mounted in the guest's sandbox: mount points on its disk
            assert (rootfs / "shared/team").is_dir() and not (rootfs / "shared/team").is_symlink()
            assert (rootfs / "scratch").is_dir() and scratch.is_dir()
        else:  # paths mapped: mount points are symlinks to the volumes
            assert (rootfs / "shared/team").resolve() == team.resolve()
            assert (rootfs / "scratch").resolve() == scratch.resolve() and scratch.is_dir()
        fstab = (rootfs / "etc/fstab").read_text()
        assert fstab.startswith("shared-team-a\t/shared/team\tvirtiofs\t")
        store.delete(kind(store, "virtualmachineinstances", "kubevirt.io"), NS, "vm-1")
        await wait_for(lambda: get(store, "virtualmachineinstances", "vm-1", "kubevirt.io") is None)
        assert not scratch.exists() and team.is_dir()


def test_init_stage_runs_in_cloud_inits_module_order(tmp_path):
    """bootcmd, write_files, mounts, users_groups: users are added to an /etc/passwd that write_files wrote."""
    rootfs, home = tmp_path / "root", tmp_path / "home"
    rootfs.mkdir()
    home.mkdir()
    config = "#cloud-config\n" + json.dumps({
        "bootcmd": ["systemctl disable web"],
        "write_files": [{"path": "/etc/passwd", "content": "root:x:0:0::/root:/bin/sh\n"}],
        "mounts": [["vdb", "/home"]],
        "users": [{"name": "ann", "homedir": "/home/ann"}],
    })
    console: list[str] = []
    boot = GuestBoot(rootfs, config, "i-1", {"/dev/vdb": home}, console.append).run()
    assert (rootfs / "etc/passwd").read_text() == "root:x:0:0::/root:/bin/sh\nann:x:1000:1000::/home/ann:/bin/sh\n"
    assert boot.mounts == {"/home": home}
    assert (rootfs / "etc/fstab").read_text().startswith("/dev/vdb\t/home\t")
    steps = [next(i for i, line in enumerate(console) if word in line) for word in ("bootcmd", "write_files", "mount:", "users_groups")]
    assert steps == sorted(steps)


async def test_a_disk_copy_keeps_the_overlays_whiteouts(tmp_path):
    """A root disk whose guest deleted a file of its golden image holds a whiteout (a 0/0 character device): clones keep it."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    disk = tmp_path / "disk"
    (disk / "etc").mkdir(parents=True)
    (disk / "etc" / "kept.conf").write_text("x")
    os.mknod(disk / "etc" / "motd", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    await copy_tree(disk, tmp_path / "clone")
    whiteout = os.lstat(tmp_path / "clone" / "etc" / "motd")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == os.makedev(0, 0)
    assert (tmp_path / "clone" / "etc" / "kept.conf").read_text() == "x"


async def test_a_disk_copy_keeps_a_raw_images_holes_and_bytes(tmp_path):
    """A real disk image (a 3 GiB golden image holds 860 MB of data) is copied as data only: the copy has the same
    bytes and size, and no more blocks than the source (a clone would otherwise write the whole image)."""
    src = tmp_path / "src" / "block.img"
    src.parent.mkdir()
    with open(src, "wb") as f:
        f.write(b"head" * 4096)
        f.seek(64 << 20)
        f.write(b"tail" * 4096)
        f.truncate(128 << 20)
    if src.stat().st_blocks * 512 >= 64 << 20:
        pytest.skip("this filesystem keeps no holes")
    await copy_tree(src.parent, tmp_path / "dst")  # a Block claim's directory, raw device inside
    await copy_tree(src, tmp_path / "one.img")  # a file on its own (a raw image into another claim's mode)
    for copy in (tmp_path / "dst" / "block.img", tmp_path / "one.img"):
        assert copy.stat().st_size == src.stat().st_size
        assert copy.read_bytes() == src.read_bytes()
        assert copy.stat().st_blocks <= src.stat().st_blocks
