"""Our controllers as API clients of the real control plane: the node agent
registers Nodes and renews their Leases, a Pod created by kubectl is placed
by kube-scheduler on our Node and runs as a local process until Ready, its
log read through kube-apiserver from the node agent's kubelet API, and a
PVC on ceph-rbd is provisioned by our provisioner and bound by
kube-controller-manager.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import datetime
import json
import subprocess

from kubernetes_asyncio import client
from localcluster.testing import eventually, gone, run_kubectl


async def test_nodes_registered_with_capacity_and_fresh_leases(realcluster, cluster_api):
    core = client.CoreV1Api(cluster_api)
    nodes = {n.metadata.name: n for n in (await core.list_node()).items}
    assert set(nodes) == {"cpu-node-1", "gpu-node-1"}
    gpu = nodes["gpu-node-1"].status
    assert gpu.capacity["nvidia.com/gpu"] == "8" and gpu.allocatable["cpu"] == "32" and gpu.capacity["memory"] == "256Gi"
    assert "nvidia.com/gpu" not in nodes["cpu-node-1"].status.capacity

    leases = client.CoordinationV1Api(cluster_api)

    async def renewed_twice():
        first = await leases.read_namespaced_lease("gpu-node-1", "kube-node-lease")
        assert first.spec.holder_identity == "gpu-node-1"
        return first.spec.renew_time

    first = await renewed_twice()

    async def later():
        lease = await leases.read_namespaced_lease("gpu-node-1", "kube-node-lease")
        return lease.spec.renew_time > first

    await eventually(later, 30, what="the Lease renewed")
    for node in (await core.list_node()).items:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.status.conditions
        age = datetime.datetime.now(datetime.UTC) - (await leases.read_namespaced_lease(node.metadata.name, "kube-node-lease")).spec.renew_time
        assert age < datetime.timedelta(seconds=40)


async def test_kubectl_pod_scheduled_by_kube_scheduler_runs_and_is_ready(realcluster, kubectl, cluster_api, cluster_namespace):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": cluster_namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": ["python3", "-c", "import time; print('up', flush=True); time.sleep(600)"],
                }
            ],
            "terminationGracePeriodSeconds": 5,
        },
    }
    subprocess.run(
        [kubectl, f"--kubeconfig={realcluster.kubeconfig}", "create", "-f", "-"],
        input=json.dumps(pod), text=True, check=True, capture_output=True, timeout=60,
    )
    core = client.CoreV1Api(cluster_api)

    async def ready():
        got = await core.read_namespaced_pod("sleeper", cluster_namespace)
        conditions = {c.type: c.status for c in got.status.conditions or []}
        return got.status.phase == "Running" and conditions.get("Ready") == "True" and got

    got = await eventually(ready, 60, what="the Pod Running and Ready")
    assert got.spec.node_name == "cpu-node-1"  # kube-scheduler: the GPU node is tainted

    async def scheduled_and_started():
        # Events and the Pod's status are separate writes (a kubelet gives no order between them).
        # kube-scheduler writes events.k8s.io Events: core/v1 shows its name as reportingComponent, not source
        events = await core.list_namespaced_event(cluster_namespace)
        by = {(e.reason, e.source.component or e.reporting_component) for e in events.items}
        return ("Scheduled", "default-scheduler") in by and ("Started", "kubelet") in by

    await eventually(scheduled_and_started, 30, what="the Scheduled and Started Events")
    assert got.status.pod_ip.startswith("127.")
    out = run_kubectl(kubectl, realcluster.kubeconfig, "get", "pod", "sleeper", "-n", cluster_namespace, "-o", "wide").stdout
    assert "Running" in out and "cpu-node-1" in out

    # pods/log: kube-apiserver asks the node's kubelet API (the node agent's, localcluster.realplane.kubeletapi)
    assert run_kubectl(kubectl, realcluster.kubeconfig, "logs", "sleeper", "-n", cluster_namespace).stdout == "up\n"
    assert await core.read_namespaced_pod_log("sleeper", cluster_namespace, container="main", tail_lines=1) == "up\n"
    try:
        await core.read_namespaced_pod_log("sleeper", cluster_namespace, container="main", previous=True)
        raise AssertionError("a previous log of a container that never restarted")
    except client.ApiException as e:  # the kubelet's 400, passed on by kube-apiserver
        assert e.status == 400 and 'previous terminated container \\"main\\" in pod \\"sleeper\\" not found' in e.body
    node = await core.read_node("cpu-node-1")
    assert node.status.daemon_endpoints.kubelet_endpoint.port == realcluster.agents.kubelet_api.port

    await core.delete_namespaced_pod("sleeper", cluster_namespace)

    async def pod_gone():
        return await gone(core.read_namespaced_pod, "sleeper", cluster_namespace)

    await eventually(pod_gone, 60, what="the Pod deleted (the node agent confirms)")


async def test_pvc_on_ceph_rbd_binds(realcluster, cluster_api, cluster_namespace):
    core = client.CoreV1Api(cluster_api)
    await core.create_namespaced_persistent_volume_claim(
        cluster_namespace,
        {
            "metadata": {"name": "home"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
        },
    )

    async def bound():
        pvc = await core.read_namespaced_persistent_volume_claim("home", cluster_namespace)
        return pvc.status.phase == "Bound" and pvc

    pvc = await eventually(bound, 60, what="the PVC Bound")
    assert pvc.spec.storage_class_name == "ceph-rbd"  # the default class, from DefaultStorageClass admission
    pv = await core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.spec.csi.driver == "rbd.csi.ceph.com" and pv.spec.claim_ref.uid == pvc.metadata.uid
    assert pv.status.phase == "Bound"
    assert pvc.status.capacity["storage"] == "2Gi"


async def test_a_node_marked_unknown_reports_ready_again_and_takes_pods(realcluster, cluster_api, cluster_namespace):
    """kube-controller-manager marks a node whose heartbeats were late Ready=Unknown and taints it unreachable; the
    lifecycle controller never marks it Ready again: its kubelet does, by posting its status. A node agent that only
    renewed the Lease left the node NotReady for good, and every later Pod for it Pending (a hub start hung)."""
    core = client.CoreV1Api(cluster_api)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now, "lastTransitionTime": now}
    await core.patch_node_status("cpu-node-1", {"status": {"conditions": [unknown]}})

    async def tainted():
        node = await core.read_node("cpu-node-1")
        return any(t.key == "node.kubernetes.io/unreachable" for t in node.spec.taints or [])

    async def ready_and_untainted():
        node = await core.read_node("cpu-node-1")
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        return ready == ["True"] and not await tainted()

    await eventually(ready_and_untainted, 60, what="the node Ready again, its unreachable taint removed")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-unknown", "namespace": cluster_namespace},
           "spec": {"containers": [{"name": "main", "image": "python:3.11", "command": ["sleep", "600"]}],
                    "terminationGracePeriodSeconds": 1}}
    await core.create_namespaced_pod(cluster_namespace, pod)

    async def running():
        got = await core.read_namespaced_pod("after-unknown", cluster_namespace)
        return got.status.phase == "Running" and got.spec.node_name == "cpu-node-1"

    await eventually(running, 60, what="a new Pod Running on the node")
    await core.delete_namespaced_pod("after-unknown", cluster_namespace)
