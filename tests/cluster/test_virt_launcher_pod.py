"""A GPU VM's virt-launcher Pod on the local cluster, as KubeVirt makes it, and the hub's readers counting the VM once.

Covers, with the local cluster's storage, scheduler, node agent and
virt-controller: the launcher Pod of a VMI holding 1 GPU, a home PVC and a
DataVolume's claim carries the VMI's labels (so a Pod LIST by
``component=singleuser-server``, kubespawner's selector, and by our owner
labels finds it), KubeVirt's own labels, the claims as volumes and the GPU
in its compute container, and is Running while the VMI runs, bound to its
node; the attacher has the VMI alone as the user of each claim; the
scheduler counts the VM's GPU once (7 one-GPU Pods still fit on the 8-GPU
node, an eighth does not); and the product's readers over what that LIST
returns (:func:`gpu_pools`, :func:`holders`) say 7 GPUs free and the VMI
as the one holder of each disk. When the VMI goes, so does its Pod.
"""

from __future__ import annotations

from localcluster.testing import create_object as create
from localcluster.testing import get_object as get
from localcluster.testing import wait_for

from localcluster import LocalCluster
from workspacespawner.core import names
from workspacespawner.gpu.capacity import gpu_pools
from workspacespawner.k8s.objects import holders

PODS = ("", "v1", "pods")
PVCS = ("", "v1", "persistentvolumeclaims")
NODES = ("", "v1", "nodes")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")
CONTROLLERS = ("storage", "scheduler", "nodeagent", "virt")
A100 = "NVIDIA-A100-SXM4-80GB"
GPU_NODE = "gpu-node-1"


def claim(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


def gpu_vmi() -> dict:
    labels = {**names.owner_labels("bob"), "component": names.SERVER_COMPONENT, names.DOMAIN_LABEL: "bob-gpu"}
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "bob-gpu", "labels": labels,
                     "annotations": {"hub.jupyter.org/username": "bob", names.SERVER_ANNOTATION: "gpu"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "domain": {"resources": {"requests": {"memory": "1Gi", "cpu": "2"}},
                       "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "home", "disk": {"bus": "virtio"}}],
                                   "gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}]}},
            "volumes": [{"name": "root", "dataVolume": {"name": "bob-gpu-root"}},
                        {"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}}],
        },
    }


def gpu_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def listed(cluster, key, selector: str, kind: str) -> list[dict]:
    store = cluster.store
    found, _ = store.list(store.kind(*key), "default", label_selector=selector)
    return [{**obj, "kind": kind} for obj in found]


def launchers(cluster) -> list[dict]:
    return listed(cluster, PODS, f"{names.VIRT_LAUNCHER_LABEL}={names.VIRT_LAUNCHER}", "Pod")


async def test_a_gpu_vms_launcher_pod_is_kubevirts_and_the_vm_counts_once(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=CONTROLLERS) as cluster:
        for name in ("home-bob", "bob-gpu-root"):
            create(cluster, PVCS, claim(name))
        vmi = create(cluster, VMIS, gpu_vmi())
        await wait_for(lambda: (get(cluster, VMIS, "bob-gpu").get("status") or {}).get("phase") == "Running", 30)
        launcher = (await wait_for(lambda: [p for p in launchers(cluster) if (p.get("status") or {}).get("phase") == "Running"], 10))[0]

        labels = launcher["metadata"]["labels"]
        assert labels == {**vmi["metadata"]["labels"], "kubevirt.io": "virt-launcher",
                          "kubevirt.io/created-by": vmi["metadata"]["uid"], "vm.kubevirt.io/name": "bob-gpu"}
        assert launcher["metadata"]["annotations"]["hub.jupyter.org/username"] == "bob"
        assert launcher["spec"]["nodeName"] == GPU_NODE
        assert launcher["spec"]["volumes"] == [{"name": "root", "persistentVolumeClaim": {"claimName": "bob-gpu-root"}},
                                               {"name": "home", "persistentVolumeClaim": {"claimName": "home-bob"}}]
        resources = launcher["spec"]["containers"][0]["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == "1" and resources["requests"]["cpu"] == "2"

        # What kubespawner's Pod reflector and a LIST by our owner labels hold: the launcher Pod too.
        servers = listed(cluster, PODS, f"component={names.SERVER_COMPONENT}", "Pod")
        assert [p["metadata"]["name"] for p in servers] == [launcher["metadata"]["name"]]
        assert [p["metadata"]["name"] for p in listed(cluster, PODS, names.owner_selector("bob"), "Pod")] == [launcher["metadata"]["name"]]
        compute = servers + listed(cluster, VMIS, f"component={names.SERVER_COMPONENT}", "VirtualMachineInstance")
        nodes, _ = cluster.store.list(cluster.store.kind(*NODES))
        assert gpu_pools(nodes, compute)[("nvidia.com/gpu", A100)].free == 7
        for disk in ("home-bob", "bob-gpu-root"):
            assert [o["metadata"]["name"] for o in holders(compute, disk)] == ["bob-gpu"]
            assert [(c.kind, c.name) for c in cluster.attacher.holders(("default", disk))] == [("VirtualMachineInstance", "bob-gpu")]

        # The scheduler counts the VM's GPU once: seven more fit, the eighth does not.
        for i in range(8):
            create(cluster, PODS, gpu_pod(f"gpu-{i}"))

        def placed():
            pods = [get(cluster, PODS, f"gpu-{i}") for i in range(8)]
            done = [p for p in pods if p["spec"].get("nodeName") or any(
                c.get("reason") == "Unschedulable" for c in (p.get("status") or {}).get("conditions") or [])]
            return pods if len(done) == 8 else None

        pods = await wait_for(placed, 30)
        assert sum(1 for p in pods if p["spec"].get("nodeName") == GPU_NODE) == 7

        cluster.store.delete(cluster.store.kind(*VMIS), "default", "bob-gpu")
        await wait_for(lambda: not launchers(cluster), 30)
