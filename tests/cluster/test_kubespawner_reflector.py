"""kubespawner's ``ResourceReflector`` on the local cluster's watches: its cache in step for Pods and for a custom kind.

The spawner's watches are kubespawner's reflectors (and ours built on them), so
they must follow the local cluster's list-then-watch as they follow a real API
server's: ADDED, MODIFIED and DELETED for Pods by label, and KubeVirt
VirtualMachines through CustomObjectsApi. No controllers run.
"""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from localcluster.testing import wait_for

NS = "default"

api_only = pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)

class _VirtualMachineApi:
    """A ``list_namespaced_virtual_machine`` for the reflector, over CustomObjectsApi."""

    def __init__(self, custom):
        self.custom = custom

    def list_namespaced_virtual_machine(self, namespace, **kwargs):
        return self.custom.list_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachines", **kwargs)


async def start_reflector(**traits):
    """A started kubespawner ResourceReflector (see kubespawner.reflector) with ``traits``."""
    from kubespawner.clients import load_config
    from kubespawner.reflector import NamespacedResourceReflector

    load_config()
    reflector = NamespacedResourceReflector(namespace=NS, timeout_seconds=2, **traits)
    if reflector.api_group_name == "CustomObjectsApi":
        reflector.api = _VirtualMachineApi(reflector.api)
    await reflector.start()
    return reflector


@api_only
async def test_kubespawner_reflector_for_pods(kube_env, api):
    v1 = client.CoreV1Api(api)
    reflector = await start_reflector(kind="pods", labels={"component": "singleuser-server"})
    try:
        pod = {
            "metadata": {"name": "jupyter-ann", "labels": {"component": "singleuser-server"}},
            "spec": {"containers": [{"name": "notebook", "image": "jupyter/base:1"}]},
        }
        await v1.create_namespaced_pod(NS, pod)
        await v1.create_namespaced_pod(NS, {**pod, "metadata": {"name": "other"}})
        await wait_for(lambda: "default/jupyter-ann" in reflector.resources)
        await v1.patch_namespaced_pod_status("jupyter-ann", NS, {"status": {"phase": "Running"}})
        await wait_for(lambda: reflector.resources["default/jupyter-ann"]["status"]["phase"] == "Running")
        await v1.delete_namespaced_pod("jupyter-ann", NS)
        await wait_for(lambda: "default/jupyter-ann" not in reflector.resources)
        assert "default/other" not in reflector.resources
    finally:
        await reflector.stop()


@api_only
async def test_kubespawner_reflector_for_a_custom_kind(kube_env, api):
    custom = client.CustomObjectsApi(api)
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm-ann", "labels": {"app": "ws"}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
    }
    await custom.create_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachines", vm)
    reflector = await start_reflector(
        kind="virtualmachines",
        api_group_name="CustomObjectsApi",
        list_method_name="list_namespaced_virtual_machine",
        labels={"app": "ws"},
    )
    try:
        assert "default/vm-ann" in reflector.resources
        await custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", NS, "virtualmachines", "vm-ann", {"spec": {"runStrategy": "Always"}},
            _content_type="application/merge-patch+json",
        )
        await wait_for(lambda: reflector.resources["default/vm-ann"]["spec"]["runStrategy"] == "Always")
        await custom.delete_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachines", "vm-ann")
        await wait_for(lambda: "default/vm-ann" not in reflector.resources)
    finally:
        await reflector.stop()
