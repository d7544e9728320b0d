"""A VM workspace run by KubeVirt's own virt-controller and virt-api, with the node agent as kubelet and virt-handler
(localcluster.realplane.virthandler): virt-api's ``start`` makes virt-controller create the VMI and its
virt-launcher Pod, kube-scheduler places the Pod, the node agent runs it and boots the guest, the VMI reaches
Running and Ready and the guest's service answers on its address and through a Service; ``stop`` takes the VMI
and the Pod away and leaves the VM and its disk.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUBEVIRT_BIN.
"""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from localcluster.realplane.fixtures import read
from localcluster.testing import eventually

UNIT = """\
[Unit]
Description=the guest's web server
[Service]
ExecStart=/usr/bin/python3 -m http.server 8888 --bind 0.0.0.0 --directory /srv/www
Restart=always
[Install]
WantedBy=multi-user.target
"""


def user_data() -> str:
    return "#cloud-config\n" + json.dumps(
        {
            "write_files": [
                {"path": "/srv/www/index.html", "content": "hello from the guest"},
                {"path": "/etc/systemd/system/web.service", "content": UNIT},
            ],
            "runcmd": ["systemctl daemon-reload", "systemctl enable --now web.service"],
        }
    )


def vm(namespace: str, name: str) -> dict:
    """A VM as the product writes one, in brief: Halted, a root disk on a PVC, cloud-init NoCloud from a Secret."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": name, "app": "workspace"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "readinessProbe": {"tcpSocket": {"port": 8888}, "periodSeconds": 1},
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {
                            "disks": [
                                {"name": "root", "disk": {"bus": "virtio"}},
                                {"name": "cloudinit", "disk": {"bus": "virtio"}},
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}, "ports": [{"name": "http", "port": 8888}]}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [
                        {"name": "root", "persistentVolumeClaim": {"claimName": f"{name}-root"}},
                        {"name": "cloudinit", "cloudInitNoCloud": {"secretRef": {"name": f"{name}-cloudinit"}}},
                    ],
                },
            },
        },
    }






async def answer(ip: str, port: int) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 5)
    try:
        writer.write(b"GET / HTTP/1.0\r\nHost: guest\r\n\r\n")
        await writer.drain()
        return (await asyncio.wait_for(reader.read(), 5)).decode(errors="replace")
    finally:
        writer.close()


async def test_a_vm_started_and_stopped_through_virt_api_runs_on_the_node_agent(kubevirt_cluster, kubevirt_namespace):
    ns = kubevirt_namespace
    # the VM path is served by KubeVirt's and CDI's own processes; of ours only the node agent (kubelet, virt-handler)
    # (CDI's where this machine grants them a network namespace, else our CDI agent)
    real_cdi = kubevirt_cluster.plane.cdi_controller is not None
    serving = set(kubevirt_cluster.plane.pids())
    assert {"virt-api", "virt-controller", *(("cdi-apiserver", "cdi-controller") if real_cdi else ())} <= serving, serving
    assert not {"virt", "virtapi", "scheduler", *(("cdi",) if real_cdi else ())} & set(kubevirt_cluster.agents.controllers)
    assert type(kubevirt_cluster.agents.controllers["nodeagent"]).__name__ == "KubeVirtNodeAgent"
    plane = kubevirt_cluster.plane
    name = "ws"
    core = f"/api/v1/namespaces/{ns}"
    base = f"/apis/kubevirt.io/v1/namespaces/{ns}"
    for collection, obj in (
        ("persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"{name}-root"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }),
        ("secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-cloudinit"},
            "data": {"userdata": base64.b64encode(user_data().encode()).decode()},
        }),
        ("services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"kubevirt.io/domain": name}, "ports": [{"port": 80, "targetPort": 8888}]},
        }),
    ):
        status, body = plane.request("POST", f"{core}/{collection}", obj)
        assert status == 201, body
    status, made = plane.request("POST", f"{base}/virtualmachines", vm(ns, name))
    assert status == 201, made.get("message")

    subresource = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}"
    assert plane.request("PUT", f"{subresource}/start", {}) == (202, "")

    async def ready_vmi():
        vmi = await read(plane, f"{base}/virtualmachineinstances/{name}")
        status = (vmi or {}).get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return vmi if status.get("phase") == "Running" and ready else None

    vmi = await eventually(ready_vmi, timeout=120, what="the VMI Running and Ready")
    # virt-controller's part: the VMI is the VM's, placed where kube-scheduler put its launcher Pod
    assert vmi["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]
    assert "kubevirt.io/virtualMachineControllerFinalize" in vmi["metadata"]["finalizers"], vmi["metadata"]
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == vmi["status"]["nodeName"]
    pods = (await read(plane, f"{core}/pods?labelSelector=kubevirt.io/created-by={vmi['metadata']['uid']}"))["items"]
    assert len(pods) == 1, pods
    pod = pods[0]
    assert pod["metadata"]["name"].startswith(f"virt-launcher-{name}-"), pod["metadata"]
    assert pod["spec"]["nodeName"] == vmi["status"]["nodeName"] == "cpu-node-1"
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    assert compute["resources"]["requests"]["devices.kubevirt.io/kvm"] == "1", compute["resources"]
    assert pod["status"]["phase"] == "Running", pod["status"]
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]), pod["status"]
    # the node agent's part (virt-handler): the guest's address, which the Pod holds too
    ip = vmi["status"]["interfaces"][0]["ipAddress"]
    assert pod["status"]["podIP"] == ip
    assert "hello from the guest" in await answer(ip, 8888)
    service = await read(plane, f"{core}/services/{name}")
    assert "hello from the guest" in await answer(service["spec"]["clusterIP"], 80)

    async def vm_ready():
        vm_now = await read(plane, f"{base}/virtualmachines/{name}")
        status = (vm_now or {}).get("status") or {}
        return vm_now if status.get("printableStatus") == "Running" and status.get("ready") else None

    await eventually(vm_ready, timeout=60, what="the VM Running and ready")

    assert plane.request("PUT", f"{subresource}/stop", {}) == (202, "")

    async def stopped():
        vm_now = await read(plane, f"{base}/virtualmachines/{name}")
        vmi_now = await read(plane, f"{base}/virtualmachineinstances/{name}")
        launcher = await read(plane, f"{core}/pods/{pod['metadata']['name']}")
        done = vmi_now is None and launcher is None and (vm_now.get("status") or {}).get("printableStatus") == "Stopped"
        return vm_now if done else None

    vm_now = await eventually(stopped, timeout=90, what="the VMI and its launcher Pod gone, the VM Stopped")
    assert vm_now["spec"]["runStrategy"] == "Halted"
    claim = await read(plane, f"{core}/persistentvolumeclaims/{name}-root")
    assert claim is not None and claim["status"]["phase"] == "Bound", claim
    with pytest.raises(OSError):
        await answer(ip, 8888)
