"""``LocalCluster(persist=True)``: the objects outlive the cluster, as etcd's do; running compute does not.

A cluster with a bound claim holding a file, a Pod using it, a Service, a
Service owned by the Pod and Events is stopped, and a new one started on the
same state directory: the claim is back with its uid, resourceVersion and
creationTimestamp, bound to the same PV and directory (the file is there),
the Service keeps its clusterIP, Nodes come back Ready, the Pod, the Pod's
Service and the Events are gone, a watch from resourceVersion 0 lists what is there and one from an
old version answers 410, and new objects get higher resourceVersions. Also:
saves happen while the cluster runs (debounced, atomic), a VM with
``runStrategy: Always`` gets a new VMI after the restart, the golden image
is reused, and a cluster without ``persist`` saves nothing.
"""

from __future__ import annotations

import json

import pytest
from localcluster.goldenimage import make_golden_image
from localcluster.persistence import write_atomically
from localcluster.testing import create_object as create
from localcluster.testing import get_object as get
from localcluster.testing import wait_for
from localcluster.volumes import claim_path
from test_localcluster_protection import pod
from test_localcluster_storage import claim

from localcluster import LocalCluster

PVCS = ("", "v1", "persistentvolumeclaims")
PVS = ("", "v1", "persistentvolumes")
PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
EVENTS = ("", "v1", "events")
NODES = ("", "v1", "nodes")
NAMESPACES = ("", "v1", "namespaces")
VMS = ("kubevirt.io", "v1", "virtualmachines")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")
DATA_SOURCES = ("cdi.kubevirt.io", "v1beta1", "datasources")
CONTROLLERS = ("storage", "protection", "scheduler")


def service(name: str, owner: dict | None = None) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 8888}]},
    }
    if owner is not None:
        meta = owner["metadata"]
        body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]
    return body


def names(cluster, key) -> list[str]:
    return [o["metadata"]["name"] for o in cluster.store.objects(cluster.store.kind(*key))]


async def watch_events(cluster, resource_version: str) -> list[dict]:
    from tornado.httpclient import AsyncHTTPClient

    http = AsyncHTTPClient(force_instance=True)
    try:
        url = f"{cluster.url}/api/v1/namespaces/default/persistentvolumeclaims?watch=true&resourceVersion={resource_version}&timeoutSeconds=1"
        response = await http.fetch(url, request_timeout=10)
    finally:
        http.close()
    return [json.loads(line) for line in response.body.decode().splitlines() if line]


async def test_objects_survive_a_restart_and_running_compute_does_not(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS, persist=True) as cluster:
        create(cluster, PVCS, claim("home-ann"))
        await wait_for(lambda: claim_path(cluster, "default", "home-ann"))
        (claim_path(cluster, "default", "home-ann") / "notes.txt").write_text("keep me")
        running = create(cluster, PODS, pod("jupyter-ann", "home-ann"))
        await wait_for(lambda: get(cluster, PODS, "jupyter-ann")["spec"].get("nodeName"))
        create(cluster, SERVICES, service("web"))
        create(cluster, SERVICES, service("jupyter-ann", owner=running))
        assert names(cluster, EVENTS)
        before = {
            "pvc": get(cluster, PVCS, "home-ann"),
            "web": get(cluster, SERVICES, "web"),
            "node": get(cluster, NODES, "cpu-node-1", None),
            "namespace": get(cluster, NAMESPACES, "default", None),
        }
        await cluster.controllers["scheduler"].set_node_ready("gpu-node-1", False)
        last = cluster.store.resource_version
    assert (tmp_path / "objects.json").exists()

    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS, persist=True) as cluster:
        pvc = get(cluster, PVCS, "home-ann")
        for field in ("uid", "resourceVersion", "creationTimestamp"):
            assert pvc["metadata"][field] == before["pvc"]["metadata"][field]
        assert pvc["spec"]["volumeName"] == before["pvc"]["spec"]["volumeName"]
        assert pvc["status"]["phase"] == "Bound"
        assert get(cluster, PVS, pvc["spec"]["volumeName"], None)["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
        assert (claim_path(cluster, "default", "home-ann") / "notes.txt").read_text() == "keep me"
        assert get(cluster, SERVICES, "web")["spec"]["clusterIP"] == before["web"]["spec"]["clusterIP"]
        assert get(cluster, NODES, "cpu-node-1", None)["metadata"]["uid"] == before["node"]["metadata"]["uid"]
        gpu_node = get(cluster, NODES, "gpu-node-1", None)  # its kubelet reports again
        assert next(c for c in gpu_node["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
        assert [t["key"] for t in gpu_node["spec"]["taints"]] == ["nvidia.com/gpu"]
        assert get(cluster, NAMESPACES, "default", None)["metadata"]["uid"] == before["namespace"]["metadata"]["uid"]
        assert get(cluster, PODS, "jupyter-ann") is None  # gone, as after a node restart
        assert get(cluster, SERVICES, "jupyter-ann") is None  # its owner did not come back
        assert not [e for e in names(cluster, EVENTS) if e.startswith("home-ann") or e.startswith("jupyter-ann")]
        assert cluster.store.resource_version >= last

        listed = await watch_events(cluster, "0")
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in listed] == [("ADDED", "home-ann")]
        expired = await watch_events(cluster, before["pvc"]["metadata"]["resourceVersion"])
        assert expired[0]["type"] == "ERROR" and expired[0]["object"]["code"] == 410

        fresh = create(cluster, PVCS, claim("home-bob"))
        assert int(fresh["metadata"]["resourceVersion"]) > last
        # The claim is still protected, and nothing holds it now.
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "home-ann")
        await wait_for(lambda: get(cluster, PVCS, "home-ann") is None)


async def test_saves_while_running_atomically(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=(), persist=True) as cluster:
        cluster.persistence.interval = 0.05
        create(cluster, PVCS, claim("home-cy"))

        def saved_names():
            path = tmp_path / "objects.json"
            return path.exists() and {o["metadata"]["name"] for o in json.loads(path.read_text())["objects"]}

        await wait_for(lambda: "home-cy" in (saved_names() or ()))
        saves = cluster.persistence.saves
        created = create(cluster, PODS, pod("jupyter-cy", "home-cy"))  # a Pod is not saved: no save for it
        assert created
        cluster.store.delete(cluster.store.kind(*PVCS), "default", "home-cy")
        await wait_for(lambda: cluster.persistence.saves > saves)
        assert "jupyter-cy" not in saved_names()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".objects.json")) == []


def test_an_interrupted_write_keeps_the_last_complete_save(tmp_path, monkeypatch):
    path = tmp_path / "objects.json"
    write_atomically(path, '{"objects": []}')

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", full_disk)
    with pytest.raises(OSError):
        write_atomically(path, '{"objects": [1]}')
    assert path.read_text() == '{"objects": []}'
    assert [p.name for p in tmp_path.iterdir()] == ["objects.json"]


async def test_vms_that_always_run_start_again(tmp_path):
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm-dee"},
        "spec": {
            "runStrategy": "Always",
            "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}},
        },
    }
    async with LocalCluster(state_dir=tmp_path, controllers=("virt",), persist=True) as cluster:
        create(cluster, VMS, vm)
        first = await wait_for(lambda: get(cluster, VMIS, "vm-dee"))
    async with LocalCluster(state_dir=tmp_path, controllers=("virt",), persist=True) as cluster:
        assert get(cluster, VMS, "vm-dee")["metadata"]["uid"]
        again = await wait_for(lambda: get(cluster, VMIS, "vm-dee"))
        assert again["metadata"]["uid"] != first["metadata"]["uid"]


async def test_the_golden_image_is_reused(tmp_path):
    files = {"etc/os-release": 'NAME="Ubuntu"\n'}
    async with LocalCluster(state_dir=tmp_path, controllers=(), persist=True) as cluster:
        made = await make_golden_image(cluster, "golden-images", "ubuntu", files)
        assert (await make_golden_image(cluster, "golden-images", "ubuntu", files))["metadata"]["uid"] == made["metadata"]["uid"]
    async with LocalCluster(state_dir=tmp_path, controllers=(), persist=True) as cluster:
        again = await make_golden_image(cluster, "golden-images", "ubuntu", files)
        assert again["metadata"]["uid"] == made["metadata"]["uid"]
        assert (claim_path(cluster, "golden-images", "ubuntu") / "etc/os-release").read_text() == 'NAME="Ubuntu"\n'
        assert names(cluster, DATA_SOURCES) == ["ubuntu"]


async def test_without_persist_nothing_is_saved(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        create(cluster, PVCS, claim("home-eve"))
    assert not (tmp_path / "objects.json").exists()
    async with LocalCluster(state_dir=tmp_path, controllers=()) as cluster:
        assert get(cluster, PVCS, "home-eve") is None
