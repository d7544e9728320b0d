"""The local cluster's scheduler: Nodes, fitting Pods and VMIs by CPU/memory/GPU, selectors, taints, events.

Checks that the Nodes register with the API server's own kubelet version,
that GPU Pods land on the GPU node and CPU Pods and VMIs never do (its
``nvidia.com/gpu`` taint, tolerated by what asks for GPUs), that a request no node can hold
gets PodScheduled=False with kube-scheduler's wording and a FailedScheduling
Warning (counted, not repeated), that nodeSelector on the GPU product label
and node readiness are honoured, that the autoscaler knob reports
TriggeredScaleUp, and that VMIs are placed (or reported Unschedulable) the
same way.
"""

from __future__ import annotations

import pytest
from localcluster.__main__ import main as localcluster_main
from localcluster.controllers.scheduler import (
    GPU_TAINT,
    demo_nodes,
    pod_requests,
    vmi_requests,
    vmi_tolerations,
)
from localcluster.discovery import version_info
from localcluster.testing import create_object as create
from localcluster.testing import events_for as events
from localcluster.testing import get_object as get
from localcluster.testing import wait_for

from localcluster import LocalCluster

PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
VMIS = ("kubevirt.io", "v1", "virtualmachineinstances")


def pod(name: str, *, gpus: int = 0, cpu: str = "1", memory: str = "1Gi", selector: dict | None = None, **spec) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:2024-01-01",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, **({"limits": limits} if limits else {})},
            }],
            **spec,
        },
    }
    if selector:
        body["spec"]["nodeSelector"] = selector
    return body


def vmi(name: str, *, gpus: int = 0, cores: int = 4) -> dict:
    devices = {"disks": []}
    if gpus:
        devices["gpus"] = [{"name": f"gpu{i}", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"} for i in range(gpus)]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"domain": {"cpu": {"cores": cores}, "memory": {"guest": "16Gi"}, "devices": devices}},
    }


def node_of(cluster, name):
    return (get(cluster, PODS, name) or {}).get("spec", {}).get("nodeName")


def scheduled_condition(obj):
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"), None)


async def test_nodes_are_registered(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        gpu = get(cluster, NODES, "gpu-node-1", None)
        cpu = get(cluster, NODES, "cpu-node-1", None)
        assert gpu["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert gpu["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
        assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert "nvidia.com/gpu" not in cpu["status"]["capacity"]
        assert cpu["status"]["capacity"]["pods"] == "110"
        ready = next(c for c in cpu["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        # The kubelets run the API server's release (what /version answers), as on a cluster without skew.
        served = version_info()["gitVersion"]
        assert cpu["status"]["nodeInfo"]["kubeletVersion"] == gpu["status"]["nodeInfo"]["kubeletVersion"] == served
        assert cpu["status"]["nodeInfo"]["kubeProxyVersion"] == served
        assert cpu["status"]["addresses"][0]["type"] == "InternalIP"


async def test_more_cpu_nodes_take_the_pods_the_first_has_no_room_for(tmp_path):
    """``localcluster --cpu-nodes 2``: a second CPU node like the first; a Pod the full first node cannot hold goes there."""
    nodes = demo_nodes(2)
    assert [n["name"] for n in nodes] == ["cpu-node-1", "cpu-node-2", "gpu-node-1"]
    nodes[0] = dict(nodes[0], pods="1")  # the first holds one Pod
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",), nodes=nodes) as cluster:
        assert get(cluster, NODES, "cpu-node-2")["status"]["capacity"] == {"cpu": "16", "memory": "64Gi", "pods": "110"}
        names = ["jupyter-one", "jupyter-two", "jupyter-three"]
        for name in names:
            create(cluster, PODS, pod(name))
            await wait_for(lambda: node_of(cluster, name))
        placed = sorted(node_of(cluster, name) for name in names)
        assert placed == ["cpu-node-1", "cpu-node-2", "cpu-node-2"]


def test_cpu_nodes_below_one_are_refused_naming_the_option(tmp_path):
    with pytest.raises(SystemExit, match="--cpu-nodes must be at least 1, not 0"):
        localcluster_main(["--state-dir", str(tmp_path), "--cpu-nodes", "0"])
    with pytest.raises(ValueError, match="cpu_nodes must be at least 1"):
        demo_nodes(0)


async def test_gpu_pod_goes_to_the_gpu_node(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        create(cluster, PODS, pod("jupyter-ann", gpus=2))
        await wait_for(lambda: node_of(cluster, "jupyter-ann"))
        assert node_of(cluster, "jupyter-ann") == "gpu-node-1"
        assert scheduled_condition(get(cluster, PODS, "jupyter-ann"))["status"] == "True"
        event = events(cluster, "jupyter-ann", "Scheduled")[0]
        assert event["message"] == "Successfully assigned default/jupyter-ann to gpu-node-1"
        assert event["source"]["component"] == "default-scheduler"


async def test_no_fit_reports_insufficient_gpu_and_retries_when_freed(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        create(cluster, PODS, pod("jupyter-big", gpus=6))
        await wait_for(lambda: node_of(cluster, "jupyter-big"))
        create(cluster, PODS, pod("jupyter-late", gpus=4))
        await wait_for(lambda: events(cluster, "jupyter-late", "FailedScheduling"))
        message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        condition = scheduled_condition(get(cluster, PODS, "jupyter-late"))
        assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", message)
        event = events(cluster, "jupyter-late", "FailedScheduling")
        assert len(event) == 1 and event[0]["type"] == "Warning" and event[0]["message"] == message
        # Another pod coming and going re-evaluates: the event is counted, not duplicated.
        create(cluster, PODS, pod("tiny", cpu="100m"))
        await wait_for(lambda: node_of(cluster, "tiny"))
        cluster.store.delete(cluster.store.kind(*PODS), "default", "tiny", grace_period_seconds=0)
        await wait_for(lambda: events(cluster, "jupyter-late", "FailedScheduling")[0]["count"] >= 2)
        assert len(events(cluster, "jupyter-late", "FailedScheduling")) == 1
        assert node_of(cluster, "jupyter-late") is None
        # Freeing the GPUs lets it in.
        cluster.store.delete(cluster.store.kind(*PODS), "default", "jupyter-big", grace_period_seconds=0)
        await wait_for(lambda: node_of(cluster, "jupyter-late") == "gpu-node-1")


async def test_selector_mismatch_and_insufficient_gpu_in_one_message(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        create(cluster, PODS, pod("jupyter-h100", gpus=1, selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
        await wait_for(lambda: events(cluster, "jupyter-h100", "FailedScheduling"))
        assert events(cluster, "jupyter-h100", "FailedScheduling")[0]["message"] == (
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        )
        create(cluster, PODS, pod("jupyter-many", gpus=9))
        await wait_for(lambda: events(cluster, "jupyter-many", "FailedScheduling"))
        assert events(cluster, "jupyter-many", "FailedScheduling")[0]["message"] == (
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        )
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]},
        ]}}}
        create(cluster, PODS, pod("jupyter-a100", gpus=9, affinity=affinity))
        await wait_for(lambda: events(cluster, "jupyter-a100", "FailedScheduling"))
        assert events(cluster, "jupyter-a100", "FailedScheduling")[0]["message"] == (
            "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."
        )


async def test_node_selector_by_gpu_product(tmp_path):
    nodes = [
        {"name": "a10-node", "cpu": "32", "memory": "128Gi", "gpus": 4, "gpu_product": "NVIDIA-A10"},
        {"name": "a100-node", "cpu": "32", "memory": "256Gi", "gpus": 8, "gpu_product": "NVIDIA-A100-SXM4-80GB"},
    ]
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",), nodes=nodes) as cluster:
        create(cluster, PODS, pod("a", gpus=1, selector={"nvidia.com/gpu.product": "NVIDIA-A10"}))
        create(cluster, PODS, pod("b", gpus=1, selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}))
        await wait_for(lambda: node_of(cluster, "a") and node_of(cluster, "b"))
        assert (node_of(cluster, "a"), node_of(cluster, "b")) == ("a10-node", "a100-node")


async def test_not_ready_node_is_not_used(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        scheduler = cluster.controllers["scheduler"]
        await scheduler.set_node_ready("gpu-node-1", False)
        node = get(cluster, NODES, "gpu-node-1", None)
        assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "Unknown"
        assert {t["effect"] for t in node["spec"]["taints"]} == {"NoSchedule", "NoExecute"}
        create(cluster, PODS, pod("jupyter-gpu", gpus=1))
        await wait_for(lambda: events(cluster, "jupyter-gpu", "FailedScheduling"))
        assert events(cluster, "jupyter-gpu", "FailedScheduling")[0]["message"] == (
            "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
            "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
        )
        await scheduler.set_node_ready("gpu-node-1", True)
        await wait_for(lambda: node_of(cluster, "jupyter-gpu") == "gpu-node-1")
        assert get(cluster, NODES, "gpu-node-1", None)["spec"]["taints"] == [GPU_TAINT]  # only the unreachable taints went


async def test_autoscaler_knob_reports_scale_up(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        cluster.controllers["scheduler"].autoscaler_scale_up = True
        create(cluster, PODS, pod("jupyter-huge", gpus=16))
        await wait_for(lambda: events(cluster, "jupyter-huge", "TriggeredScaleUp"))
        event = events(cluster, "jupyter-huge", "TriggeredScaleUp")[0]
        assert event["message"] == "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"
        assert event["source"]["component"] == "cluster-autoscaler"
        assert events(cluster, "jupyter-huge", "FailedScheduling")


async def test_vmis_are_placed_and_count_against_gpus(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        store = cluster.store
        kind = store.kind(*VMIS)
        for name, gpus in (("vm-ann", 8), ("vm-bob", 1)):
            created = create(cluster, VMIS, vmi(name, gpus=gpus))
            created["status"] = {"phase": "Scheduling"}
            store.replace(kind, "default", name, created, subresource="status")
        await wait_for(lambda: (get(cluster, VMIS, "vm-ann").get("status") or {}).get("nodeName"))
        placed = get(cluster, VMIS, "vm-ann")
        assert placed["status"]["phase"] == "Scheduled"
        assert placed["status"]["nodeName"] == "gpu-node-1"
        assert placed["metadata"]["labels"]["kubevirt.io/nodeName"] == "gpu-node-1"
        await wait_for(lambda: scheduled_condition(get(cluster, VMIS, "vm-bob")))
        condition = scheduled_condition(get(cluster, VMIS, "vm-bob"))
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in condition["message"]
        assert events(cluster, "vm-bob", "FailedScheduling")
        # A GPU pod no longer fits either: the VMI holds all eight.
        create(cluster, PODS, pod("jupyter-gpu", gpus=1))
        await wait_for(lambda: events(cluster, "jupyter-gpu", "FailedScheduling"))


def test_requests_fall_back_to_limits_and_count_vmi_devices():
    requests = pod_requests(pod("p", gpus=2, cpu="500m"))
    assert (requests["nvidia.com/gpu"], requests["cpu"], requests["pods"]) == (2, 0.5, 1)
    vmi_req = vmi_requests(vmi("v", gpus=2))
    assert vmi_req["nvidia.com/GA100_A100_SXM4_80GB"] == 2
    assert vmi_req["cpu"] == 4 and vmi_req["memory"] == 16 * 2**30


def vmi_node(cluster, name):
    return (get(cluster, VMIS, name).get("status") or {}).get("nodeName")


async def schedule_vmi(cluster, body: dict) -> None:
    created = create(cluster, VMIS, body)
    created["status"] = {"phase": "Scheduling"}
    cluster.store.replace(cluster.store.kind(*VMIS), "default", body["metadata"]["name"], created, subresource="status")


async def test_gpu_node_takes_only_what_asks_for_gpus(tmp_path):
    untolerated = "1 node(s) had untolerated taint {nvidia.com/gpu: present}"
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler",)) as cluster:
        assert get(cluster, NODES, "gpu-node-1", None)["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
        assert "taints" not in get(cluster, NODES, "cpu-node-1", None)["spec"]
        # CPU work goes to the CPU node, though the GPU node has more room; what the CPU node cannot hold waits.
        create(cluster, PODS, pod("jupyter-cpu"))
        create(cluster, PODS, pod("jupyter-wide", cpu="20"))
        create(cluster, PODS, pod("jupyter-gpu", gpus=1, cpu="20"))
        await wait_for(lambda: node_of(cluster, "jupyter-cpu") and node_of(cluster, "jupyter-gpu"))
        assert (node_of(cluster, "jupyter-cpu"), node_of(cluster, "jupyter-gpu")) == ("cpu-node-1", "gpu-node-1")
        await wait_for(lambda: events(cluster, "jupyter-wide", "FailedScheduling"))
        assert events(cluster, "jupyter-wide", "FailedScheduling")[0]["message"] == (
            f"0/2 nodes are available: 1 Insufficient cpu, {untolerated}."
        )
        assert node_of(cluster, "jupyter-wide") is None
        # VMIs likewise: their virt-launcher Pods tolerate the taint of the devices they ask for.
        await schedule_vmi(cluster, vmi("vm-cpu"))
        await schedule_vmi(cluster, vmi("vm-wide", cores=20))
        await schedule_vmi(cluster, vmi("vm-gpu", gpus=1, cores=8))
        await wait_for(lambda: vmi_node(cluster, "vm-cpu") and vmi_node(cluster, "vm-gpu"))
        assert (vmi_node(cluster, "vm-cpu"), vmi_node(cluster, "vm-gpu")) == ("cpu-node-1", "gpu-node-1")
        await wait_for(lambda: scheduled_condition(get(cluster, VMIS, "vm-wide")))
        assert untolerated in scheduled_condition(get(cluster, VMIS, "vm-wide"))["message"]


def test_vmi_tolerates_the_taints_of_the_devices_it_asks_for():
    assert vmi_tolerations(vmi("cpu")) == []
    assert vmi_tolerations(vmi("gpu", gpus=2)) == [
        {"key": "nvidia.com/GA100_A100_SXM4_80GB", "operator": "Exists", "effect": "NoSchedule"}
    ]
    own = {"key": "dedicated", "operator": "Equal", "value": "lab", "effect": "NoSchedule"}
    body = vmi("gpu", gpus=1)
    body["spec"]["tolerations"] = [own]
    body["spec"]["domain"]["resources"] = {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}
    assert vmi_tolerations(body) == [
        own,
        {"key": "nvidia.com/GA100_A100_SXM4_80GB", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


PVCS = ("", "v1", "persistentvolumeclaims")
CLASSES = ("storage.k8s.io", "v1", "storageclasses")


def claim(name: str, storage_class: str = "ceph-rbd") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": storage_class},
    }


def with_claim(name: str, claim_name: str) -> dict:
    return pod(name, volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": claim_name}}])


async def test_pods_wait_for_their_claims(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler", "storage")) as cluster:
        create(cluster, PODS, with_claim("orphan", "home-nobody"))
        await wait_for(lambda: events(cluster, "orphan", "FailedScheduling"))
        condition = scheduled_condition(get(cluster, PODS, "orphan"))
        assert condition["message"] == '0/2 nodes are available: persistentvolumeclaim "home-nobody" not found.'
        create(cluster, PVCS, claim("home-nobody", "ceph-rbd"))
        await wait_for(lambda: node_of(cluster, "orphan"))  # the claim came and bound: the Pod is placed

        create(cluster, CLASSES, {"metadata": {"name": "nowhere"}, "provisioner": "example.com/never"}, None)
        create(cluster, PVCS, claim("stuck", "nowhere"))
        create(cluster, PODS, with_claim("waiter", "stuck"))
        await wait_for(lambda: events(cluster, "waiter", "FailedScheduling"))
        condition = scheduled_condition(get(cluster, PODS, "waiter"))
        assert condition["message"] == "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        [pending] = events(cluster, "stuck", "ExternalProvisioning")
        assert "external provisioner 'example.com/never'" in pending["message"]
        assert get(cluster, PVCS, "stuck")["status"]["phase"] == "Pending"


async def test_wait_for_first_consumer_claims_are_provisioned_for_the_chosen_node(tmp_path):
    async with LocalCluster(state_dir=tmp_path, controllers=("scheduler", "storage")) as cluster:
        create(cluster, CLASSES, {"metadata": {"name": "late"}, "provisioner": "rbd.csi.ceph.com",
                                  "volumeBindingMode": "WaitForFirstConsumer"}, None)
        create(cluster, PVCS, claim("home-late", "late"))
        create(cluster, PODS, with_claim("latecomer", "home-late"))
        await wait_for(lambda: node_of(cluster, "latecomer"))
        pvc = get(cluster, PVCS, "home-late")
        assert pvc["status"]["phase"] == "Bound"
        assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node_of(cluster, "latecomer")
        assert events(cluster, "latecomer", "FailedScheduling") == []


async def test_pod_waits_for_its_unbound_immediate_claim_as_kube_scheduler_does(tmp_path):
    # kube-scheduler's VolumeBinding PreFilter: a Pod whose Immediate claim is not Bound yet is
    # Unschedulable (retried once the claim binds); a missing claim likewise. The real plane showed it.
    async with LocalCluster(state_dir=tmp_path, controllers=("storage", "scheduler")) as cluster:
        cluster.controllers["storage"].enabled = False  # the provisioner lags
        create(cluster, ("", "v1", "persistentvolumeclaims"), claim("home"))
        create(cluster, PODS, pod("web", volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}]))
        create(cluster, PODS, pod("lost", volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "missing"}}]))
        await wait_for(lambda: scheduled_condition(get(cluster, PODS, "web") or {}))
        await wait_for(lambda: scheduled_condition(get(cluster, PODS, "lost") or {}))
        waiting = scheduled_condition(get(cluster, PODS, "web"))
        assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")
        assert waiting["message"] == "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        lost = scheduled_condition(get(cluster, PODS, "lost"))
        assert lost["message"] == '0/2 nodes are available: persistentvolumeclaim "missing" not found.'
        assert node_of(cluster, "web") is None
        cluster.controllers["storage"].enabled = True
        cluster.controllers["storage"].kick()
        await wait_for(lambda: node_of(cluster, "web"))
        assert node_of(cluster, "lost") is None
