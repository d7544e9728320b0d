"""The My workspaces model (workspacespawner.dashboard.workspaces) from plain dicts and ledger runs: which compute is
whose (by owner labels and kubespawner's annotations), what each server holds, its disks and how full, card-hours per
server from the runs, retained disks and snapshots, and the card-hours header."""

import json
from datetime import UTC, datetime, timedelta

from workspacespawner.core import names
from workspacespawner.dashboard.workspaces import balance_line, compute_of, my_workspaces, snapshot_rows
from workspacespawner.quota.policy import Limits, Run, month_bounds, usage_from_runs
from workspacespawner.quota.service import MonthBalance

NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


def meta(user, name, **annotations):
    return {"name": name, "namespace": "default", "labels": names.owner_labels(user),
            "annotations": {**names.owner_annotations(user), **annotations}}


def pod(user, server, name, *, gpus=0, node="gpu-node-1", claims=()):
    m = meta(user, name, **{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server})
    resources = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}
    return {"kind": "Pod", "metadata": m,
            "spec": {"nodeName": node, "containers": [{"name": "notebook", "resources": resources}],
                     "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]},
            "status": {"phase": "Running", "startTime": "2026-03-15T10:00:00Z"}}


def pvc(user, name, size="10Gi", role="home", phase="Stopped", server="", retain_until=None):
    m = meta(user, name)
    m["labels"][names.DISK_LABEL] = role
    m["labels"][names.PHASE_LABEL] = phase
    state = {"phase": phase, "since": "2026-03-01T00:00:00Z", "server": server}
    if retain_until:
        state["retainUntil"] = retain_until
    m["annotations"][names.LIFECYCLE_ANNOTATION] = json.dumps(state)
    return {"kind": "PersistentVolumeClaim", "metadata": m, "spec": {"resources": {"requests": {"storage": size}}}}


NODE = {"kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}


def month(runs, limit=50.0):
    period = month_bounds(NOW, "UTC")
    return MonthBalance(runs, usage_from_runs(runs, period, NOW), Limits(card_hours_per_month=limit), NOW)


def hub_user(**servers):
    return {"name": "alice", "servers": servers}


def test_compute_is_found_by_labels_and_annotations_not_by_name():
    mine = pod("alice", "", "jupyter-alice")
    lookalike = pod("bob", "", "jupyter-alice-2")  # a name that starts like alice's, but bob's labels
    foreign = {**pod("alice", "", "x"), "metadata": {**pod("alice", "", "x")["metadata"], "labels": {}}}
    assert compute_of([mine, lookalike, foreign], "alice") == {"": mine}


def test_a_vm_server_is_its_vmi_not_its_virt_launcher_pod():
    """KubeVirt copies the VMI's labels and annotations onto its virt-launcher Pod: the server is still one VM."""
    vmi = {"kind": "VirtualMachineInstance", "metadata": {**meta("alice", "vm-alice", **{
        "hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "gpu"}), "uid": "vmi-uid-1"},
        "spec": {"domain": {"devices": {}}}, "status": {"phase": "Running", "nodeName": "gpu-node-1"}}
    launcher = pod("alice", "gpu", "virt-launcher-vm-alice-abcde", gpus=1)
    launcher["metadata"]["labels"].update({names.VIRT_LAUNCHER_LABEL: names.VIRT_LAUNCHER, names.CREATED_BY_LABEL: "vmi-uid-1"})
    assert compute_of([launcher, vmi], "alice") == {"gpu": vmi}
    assert compute_of([vmi, launcher], "alice") == {"gpu": vmi}


def test_a_running_gpu_server_shows_what_it_holds_and_its_card_hours():
    runs = [Run(gpus=2, started=NOW - timedelta(hours=3), stopped=NOW - timedelta(hours=1), user="alice", server_name="train"),
            Run(gpus=1, started=NOW - timedelta(hours=2), user="alice", server_name="train", state="open"),
            Run(gpus=1, started=NOW - timedelta(hours=5), stopped=NOW - timedelta(hours=4), user="alice", server_name="")]
    objects = [NODE, pod("alice", "train", "jupyter-alice--train", gpus=2, claims=["home-alice"]),
               pvc("alice", "home-alice", "20Gi"), pvc("bob", "home-bob")]
    servers = {"train": {"ready": True, "pending": None, "user_options": {"profile": "a100-2"}},
               "": {"ready": False, "pending": None, "stopped": True}}
    data = my_workspaces("alice", hub_user(**servers), objects, month(runs), used={"home-alice": 5 * 2**30}, now=NOW)
    default, train = data["servers"]
    assert (train["phase"], train["profile"], train["node"], train["gpus"]) == ("Running", "a100-2", "gpu-node-1", 2)
    assert train["gpu_type"] == "NVIDIA-A100-SXM4-80GB"
    assert (train["cpu"], train["memory"]) == (2.0, 8 * 2**30)
    assert train["card_hours"] == 6.0  # 2 GPUs for 2 h, then 1 GPU for 2 h up to now
    assert train["running_since"] == "2026-03-15T10:00:00Z"
    assert [(d["name"], d["size"], d["used_share"]) for d in train["disks"]] == [("home-alice", "20 GiB", 0.25)]
    assert (default["phase"], default["gpus"], default["card_hours"], default["node"]) == ("Stopped", 0, 1.0, "")
    assert data["balance"]["used"] == 7.0 and data["balance"]["left"] == 43.0
    assert balance_line(None) == ""


def test_without_prometheus_fullness_is_unknown_and_quotas_off_give_no_card_hours():
    objects = [pod("alice", "", "jupyter-alice", claims=["home-alice"]), pvc("alice", "home-alice")]
    data = my_workspaces("alice", hub_user(**{"": {"ready": True}}), objects, None, used=None, now=NOW)
    (server,) = data["servers"]
    assert server["disks"][0]["used_share"] is None and server["card_hours"] is None
    assert server["gpus"] == 0 and server["gpu_type"] == ""
    assert data["balance"] is None


def test_retained_disks_and_snapshots_are_the_users_own():
    retained = pvc("alice", "home-alice-old", phase="Retained", server="old", retain_until="2026-04-01T00:00:00Z")
    snap = {"kind": "VolumeSnapshot", "metadata": {**meta("alice", "home-alice-1", **{names.HOME_SLOT_ANNOTATION: "home"}),
                                                   "creationTimestamp": "2026-03-10T00:00:00Z"},
            "spec": {"source": {"persistentVolumeClaimName": "home-alice"}}, "status": {"readyToUse": True, "restoreSize": "10Gi"}}
    bobs = {**snap, "metadata": {**meta("bob", "home-bob-1"), "creationTimestamp": "2026-03-11T00:00:00Z"}}
    data = my_workspaces("alice", hub_user(), [retained, pvc("bob", "home-bob-old", phase="Retained"), snap, bobs], None, now=NOW)
    assert [(r["name"], r["retain_until"]) for r in data["retained"]] == [("home-alice-old", "2026-04-01T00:00:00Z")]
    assert [(s["name"], s["home"], s["ready"], s["size"]) for s in data["snapshots"]] == [("home-alice-1", True, True, "10 GiB")]
    assert snapshot_rows([bobs], "alice") == []


def test_a_stopped_servers_disks_are_those_that_last_served_it():
    objects = [pvc("alice", "home-alice", server=""), pvc("alice", "home-alice-train", server="train"),
               pvc("alice", "gone", phase="Retained", server="train")]
    data = my_workspaces("alice", hub_user(train={"stopped": True}), objects, None, now=NOW)
    assert [d["name"] for d in data["servers"][0]["disks"]] == ["home-alice-train"]


def datavolume(user, name, server, **annotations):
    """A root DataVolume (and the PVC CDI made of it, listed first as the caches may) that last served ``server``."""
    claim = pvc(user, name, "40Gi", role="root", server=server)
    dv = {**claim, "kind": "DataVolume", "metadata": {**claim["metadata"], "annotations": {
        **claim["metadata"]["annotations"], **annotations}},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "ubuntu-24.04-gpu-2026-11", "namespace": "golden-images"}}}
    return [claim, dv]


def test_a_vm_server_shows_the_golden_image_its_root_disk_was_cloned_from():
    objects = [*datavolume("alice", "ws-alice-root", "", **{names.GOLDEN_IMAGE_ANNOTATION: "golden-images/ubuntu-24.04-gpu-2026-09"}),
               *datavolume("alice", "ws-alice-lab-root", "lab"), pvc("alice", "home-alice", server="")]
    servers = {"": {"stopped": True}, "lab": {"stopped": True}, "cpu": {"stopped": True}}
    data = my_workspaces("alice", hub_user(**servers), objects, None, now=NOW)
    default, cpu, lab = data["servers"]
    assert (default["kind"], default["system_image"], default["system_image_version"]) == \
        ("vm", "ubuntu-24.04-gpu-2026-09", "2026-09")  # the annotation: what it was cloned from, as named then
    assert (lab["system_image"], lab["system_image_version"]) == ("ubuntu-24.04-gpu-2026-11", "2026-11")  # its sourceRef
    assert (cpu["kind"], cpu["system_image"]) == ("container", "")


def test_a_disk_is_shown_as_what_it_is_to_its_workspace_with_its_name_beside():
    """#38 item 15: a root disk taken from the pool keeps the pool's name; the user reads which workspace's it is."""
    objects = [*datavolume("alice", "pool-ubuntu-24-04-gpu-2026-11-b7921e93-c64784", "lab"),
               pvc("alice", "home-alice", server=""),
               pvc("alice", "pool-ubuntu-24-04-gpu-2026-11-0c1d2e3f-a1b2c3", "40Gi", role="root", phase="Retained",
                   server="old", retain_until="2026-04-01T00:00:00Z")]
    data = my_workspaces("alice", hub_user(lab={"stopped": True}, **{"": {"stopped": True}}), objects, None, now=NOW)
    by_server = {s["server"]: s for s in data["servers"]}
    assert [(d["title"], d["name"]) for d in by_server["lab"]["disks"]] == [
        ("System disk of server 'lab'", "pool-ubuntu-24-04-gpu-2026-11-b7921e93-c64784")]
    assert [d["title"] for d in by_server[""]["disks"]] == ["Home folder"]
    assert [r["title"] for r in data["retained"]] == ["System disk of server 'old'"]
    assert names.disk_title("root", "") == "System disk of the default server"


def test_a_system_disk_snapshot_is_restorable_whether_it_names_its_vm_or_its_datavolume_does():
    def snapshot(name: str, source: str, **annotations) -> dict:
        return {"kind": "VolumeSnapshot", "metadata": {**meta("alice", name, **annotations), "creationTimestamp": f"2026-03-1{len(name) % 10}T00:00:00Z"},
                "spec": {"source": {"persistentVolumeClaimName": source}}, "status": {"readyToUse": True}}

    named = snapshot("ws-alice-root-1", "ws-alice-root", **{names.ROOT_SLOT_ANNOTATION: "ws-alice"})
    older = snapshot("ws-alice-root-old", "ws-alice-root")  # taken before snapshots named their VM
    scratch = snapshot("scratch-alice-1", "scratch-alice")
    root_dv = {"kind": "DataVolume", "metadata": meta("alice", "ws-alice-root", **{names.ROOT_SLOT_ANNOTATION: "ws-alice"})}
    rows = {r.name: (r.home, r.system) for r in snapshot_rows([named, older, scratch, root_dv], "alice")}
    assert rows == {"ws-alice-root-1": (False, True), "ws-alice-root-old": (False, True), "scratch-alice-1": (False, False)}
    assert {r.name: r.system for r in snapshot_rows([older], "alice")} == {"ws-alice-root-old": False}  # its DataVolume gone
