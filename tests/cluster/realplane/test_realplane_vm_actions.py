"""The product's VM start and stop calls (workspacespawner.k8s.kubevirt) against KubeVirt's own virt-api.

virt-api serves ``virtualmachines/start`` and ``/stop`` with go-restful routes that declare no response type:
go-restful then answers 406 Not Acceptable to a request whose ``Accept`` names only ``application/json``, and
serves one that also accepts ``*/*`` (what client-go and so virtctl send).

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUBEVIRT_BIN.
"""

from __future__ import annotations

import uuid

from kubernetes_asyncio import client, config

from workspacespawner.k8s.kubevirt import start_vm, stop_vm


def halted_vm(name: str) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}],
                }
            },
        },
    }


async def test_start_and_stop_vm_are_served_by_the_real_virt_api(kubevirt_plane):
    namespace = f"act-{uuid.uuid4().hex[:8]}"
    assert kubevirt_plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})[0] == 201
    api = await config.new_client_from_config(config_file=str(kubevirt_plane.kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        await custom.create_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", halted_vm("vm1"))
        # nothing to stop yet: KubeVirt's 409, which stop_vm reads as False
        assert await stop_vm(api, namespace, "vm1") is False
        await start_vm(api, namespace, "vm1")
        vm = await custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", "vm1")
        assert vm["spec"]["runStrategy"] == "Always"
        assert await stop_vm(api, namespace, "vm1", grace_period=0) is True
        vm = await custom.get_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", "vm1")
        assert vm["spec"]["runStrategy"] == "Halted"
    finally:
        await api.close()
        kubevirt_plane.request("DELETE", f"/api/v1/namespaces/{namespace}")
