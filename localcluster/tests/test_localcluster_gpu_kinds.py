"""The local cluster's GPU kinds as pure functions: node specs to Node objects, devices, and resource fitting.

Covers: a MIG node in the mixed strategy (slices advertised by name, GPU
feature discovery's per-profile labels, no ``nvidia.com/gpu``), a
time-sliced node with ``renameByDefault`` false (replicas of
``nvidia.com/gpu``, product ``-SHARED``) and true
(``nvidia.com/gpu.shared``), specs that cannot be refused with the node and
key named, the devices read back from Node objects (replicas on their card,
MIG slices packed on their cards with GPU instance ids), the scheduler's
fitting of every extended resource by its name (a MIG slice never counted
as a whole GPU while some node advertises it; an unknown VM device name
still one), a VMI's device name in its virt-launcher Pod, and device
assignments kept per resource.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from localcluster.controllers.gpumetrics import DeviceAssignments
from localcluster.controllers.gpunodes import gpu_fields, mig_profile, node_devices
from localcluster.controllers.launcher import compute_resources
from localcluster.controllers.scheduler import (
    DEFAULT_NODES,
    ECONOMY_NODES,
    GPU_TAINT,
    advertised_resources,
    filter_node,
    make_node,
    vmi_requests,
)

NOW = "2026-01-01T00:00:00Z"


def node(spec: dict) -> dict:
    return make_node(spec, 0, NOW)


def economy(name: str) -> dict:
    return node(next(s for s in ECONOMY_NODES if s["name"] == name))


def test_a_mig_node_advertises_its_slices_with_gpu_feature_discovery_labels():
    mig = economy("gpu-node-mig")
    allocatable, labels = mig["status"]["allocatable"], mig["metadata"]["labels"]
    assert {k: v for k, v in allocatable.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/mig-1g.10gb": "9", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "1"
    assert labels["nvidia.com/mig-3g.40gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert mig_profile("nvidia.com/mig-1g.10gb+me") == ("1g.10gb+me", 1, 10)
    assert mig_profile("nvidia.com/gpu") is None


def test_time_slicing_with_and_without_renaming():
    t4 = economy("gpu-node-t4")
    assert t4["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert t4["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert t4["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert t4["metadata"]["labels"]["nvidia.com/gpu.count"] == "1"
    renamed = node({"name": "t4", "gpus": 2, "gpu_product": "Tesla-T4", "gpu_replicas": 3, "gpu_shared_name": True})
    assert renamed["status"]["allocatable"]["nvidia.com/gpu.shared"] == "6"
    assert "nvidia.com/gpu" not in renamed["status"]["allocatable"]
    assert renamed["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"


def test_the_default_nodes_are_unchanged():
    gpu = node(DEFAULT_NODES[1])
    assert {k: v for k, v in gpu["metadata"]["labels"].items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu_fields({"name": "cpu"}) == ({}, {})


@pytest.mark.parametrize(("spec", "words"), [
    ({"gpus": 1, "gpu_replicas": 0}, "gpu_replicas must be at least 1, not 0"),
    ({"gpus": -1}, "gpus must not be negative"),
    ({"gpus": "many"}, "gpus must be a whole number, not 'many'"),
    ({"gpu_resources": {"nvidia.com/mig-3g.40gb": 3}, "mig_gpus": 1}, "need 2 card(s)"),
])
def test_a_spec_that_cannot_be_is_refused_naming_node_and_key(spec, words):
    with pytest.raises(ValueError, match="node 'bad'") as raised:
        gpu_fields({"name": "bad", **spec})
    assert words in str(raised.value)


def test_devices_replicas_on_their_card_and_mig_slices_packed_per_card():
    t4 = node({"name": "t4", "gpus": 2, "gpu_product": "Tesla-T4", "gpu_replicas": 2})
    assert [(d.gpu, d.replica) for d in node_devices(t4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert node_devices(t4)[1].device_id.endswith("::1")
    mig = node_devices(economy("gpu-node-mig"))
    assert [(d.gpu, d.instance, d.profile) for d in mig[:4]] == [
        (0, 1, "3g.40gb"), (0, 2, "2g.20gb"), (0, 3, "1g.10gb"), (0, 4, "1g.10gb")]
    assert {d.gpu for d in mig[4:]} == {1} and len(mig) == 11
    assert mig[0].device_id.startswith("MIG-") and mig[0].fb_mib == 40 * 1024
    assert [d.gpu for d in node_devices(node(DEFAULT_NODES[1]))] == list(range(8))


def pod_spec(resource: str, count: int = 1) -> tuple[dict, dict]:
    return {"tolerations": [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]}, {resource: Decimal(count)}


def test_every_extended_resource_fits_by_its_own_name():
    nodes = [node(s) for s in ECONOMY_NODES]
    advertised = advertised_resources(nodes)
    mig, cpu, a100 = economy("gpu-node-mig"), economy("cpu-node-1"), economy("gpu-node-1")
    spec, asks = pod_spec("nvidia.com/mig-1g.10gb")
    assert filter_node(spec, asks, mig, {}, advertised=advertised) == []
    full = {"nvidia.com/mig-1g.10gb": Decimal(9)}
    assert filter_node(spec, asks, mig, full, advertised=advertised) == ["Insufficient nvidia.com/mig-1g.10gb"]
    # a slice is never a whole GPU where some node advertises slices: the A100 node has no room for it
    assert filter_node(spec, asks, a100, {}, advertised=advertised) == ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    assert filter_node(spec, asks, cpu, {}, advertised=advertised) == ["Insufficient nvidia.com/mig-1g.10gb"]
    # a device name no node advertises still counts as a whole GPU (and tolerates its taint), as before
    spec, asks = pod_spec("nvidia.com/GA102GL_A10")
    assert filter_node(spec, asks, a100, {}, advertised=advertised) == []
    assert filter_node(spec, asks, a100, {"nvidia.com/gpu": Decimal(8)}, advertised=advertised) == ["Insufficient nvidia.com/gpu"]


def test_a_vmi_asks_for_its_device_names_and_its_launcher_requests_them():
    vmi = {"spec": {"domain": {"cpu": {"cores": 2}, "devices": {
        "gpus": [{"name": "g", "deviceName": "nvidia.com/mig-3g.40gb"}],
        "hostDevices": [{"name": "h", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"}]}}}}
    asks = vmi_requests(vmi)
    assert asks["nvidia.com/mig-3g.40gb"] == 1 and asks["nvidia.com/GA100_A100_SXM4_80GB"] == 1
    resources = compute_resources(vmi, asks)
    assert resources["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert resources["requests"]["nvidia.com/GA100_A100_SXM4_80GB"] == "1"
    host = node({"name": "vm-host", "gpu_resources": {"nvidia.com/GA100_A100_SXM4_80GB": 2}, "taints": [GPU_TAINT]})
    assert host["status"]["allocatable"]["nvidia.com/GA100_A100_SXM4_80GB"] == "2"
    assert "nvidia.com/mig.strategy" not in host["metadata"]["labels"]


def test_device_assignments_are_kept_per_resource():
    devices = DeviceAssignments()
    assert devices.assign("n", 7, {"a": 1}, "nvidia.com/mig-1g.10gb") == {"a": [0]}
    assert devices.assign("n", 8, {"a": 2}) == {"a": [0, 1]}  # whole GPUs: their own indices
    assert devices.assign("n", 7, {"a": 1, "b": 2}, "nvidia.com/mig-1g.10gb") == {"a": [0], "b": [1, 2]}
    assert devices.assign("n", 7, {"b": 2}, "nvidia.com/mig-1g.10gb") == {"b": [1, 2]}
