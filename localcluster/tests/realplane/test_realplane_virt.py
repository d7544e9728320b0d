"""KubeVirt on the real control plane: the CRDs serve ``kubectl get
vm,vmi,dv,pvc``; virt-api's start/stop subresources, served by our
aggregated virt-api (APIService ``v1.subresources.kubevirt.io`` through an
ExternalName Service on localhost), answer as KubeVirt v1.4.1's; a VM started
with the subresource gets a VMI that our scheduler places and the node agent
boots to Running; a request to virt-api without the aggregator's front-proxy
certificate is refused.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from kubernetes_asyncio import client
from localcluster.testing import eventually, gone, run_kubectl

SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"


def vm_manifest(namespace: str) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": namespace},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "dataVolume": {"name": "root"}}],
                }
            },
        },
    }


def data_volume(namespace: str) -> dict:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "root", "namespace": namespace},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }


def action(realcluster, namespace: str, verb: str):
    return realcluster.plane.request("PUT", f"{SUBRESOURCES}/namespaces/{namespace}/virtualmachines/vm1/{verb}", {})


async def test_vm_start_stop_through_the_aggregated_virt_api(realcluster, kubectl, cluster_api, cluster_namespace):
    ns = cluster_namespace
    listed = run_kubectl(kubectl, realcluster.kubeconfig, "get", "vm,vmi,dv,pvc", "-n", ns)
    assert "No resources found" in listed.stderr + listed.stdout

    status, body = realcluster.plane.request("GET", SUBRESOURCES)
    assert status == 200 and {r["name"] for r in body["resources"]} >= {"virtualmachines/start", "virtualmachines/stop"}

    custom = client.CustomObjectsApi(cluster_api)
    await custom.create_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", ns, "datavolumes", data_volume(ns))
    await custom.create_namespaced_custom_object("kubevirt.io", "v1", ns, "virtualmachines", vm_manifest(ns))

    status, body = action(realcluster, ns, "stop")
    assert (status, body["message"]) == (409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": VM is not running')
    assert body["details"] == {"name": "vm1", "group": "kubevirt.io", "kind": "virtualmachine"}

    async def dv_succeeded():
        dv = await custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", ns, "datavolumes", "root")
        return (dv.get("status") or {}).get("phase") == "Succeeded"

    await eventually(dv_succeeded, 60, what="the DataVolume Succeeded")
    status, body = action(realcluster, ns, "start")
    assert status == 202, body

    async def vmi_running():
        try:
            vmi = await custom.get_namespaced_custom_object("kubevirt.io", "v1", ns, "virtualmachineinstances", "vm1")
        except client.ApiException:
            return False
        return (vmi.get("status") or {}).get("phase") == "Running" and vmi

    vmi = await eventually(vmi_running, 90, what="the VMI Running")
    assert vmi["status"]["nodeName"] == "cpu-node-1"
    status, body = action(realcluster, ns, "start")
    assert (status, body["message"]) == (409, 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": VM is already running')

    listed = run_kubectl(kubectl, realcluster.kubeconfig, "get", "vm,vmi,dv,pvc", "-n", ns).stdout
    for line in ("virtualmachine.kubevirt.io/vm1", "virtualmachineinstance.kubevirt.io/vm1", "datavolume.cdi.kubevirt.io/root", "persistentvolumeclaim/root"):
        assert line in listed, listed

    status, body = action(realcluster, ns, "stop")
    assert status == 202, body

    async def vmi_gone():
        return await gone(custom.get_namespaced_custom_object, "kubevirt.io", "v1", ns, "virtualmachineinstances", "vm1")

    await eventually(vmi_gone, 60, what="the VMI gone after stop")
    vm = await custom.get_namespaced_custom_object("kubevirt.io", "v1", ns, "virtualmachines", "vm1")
    assert vm["spec"]["runStrategy"] == "Halted"


def _open(url: str, ctx: ssl.SSLContext):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    return opener.open(url, timeout=10)


def test_virt_api_refuses_a_caller_without_the_front_proxy_certificate(realcluster):
    url = f"https://localhost:{realcluster.agents.controllers['virtapi'].port}{SUBRESOURCES}"
    pki = realcluster.plane.pki
    anonymous = ssl.create_default_context(cafile=str(pki.path("ca.crt")))
    try:
        _open(url, anonymous)
    except urllib.error.HTTPError as e:
        assert e.code == 401
    else:
        raise AssertionError("virt-api answered a caller without a client certificate")
    # the admin's client certificate is the cluster CA's, not the front-proxy CA's: the handshake fails
    admin = ssl.create_default_context(cafile=str(pki.path("ca.crt")))
    admin.load_cert_chain(str(pki.path("admin.crt")), str(pki.path("admin.key")))
    try:
        _open(url, admin)
    except (ssl.SSLError, urllib.error.URLError, ConnectionError) as e:
        assert isinstance(e, (ssl.SSLError, ConnectionError)) or isinstance(e.reason, (ssl.SSLError, ConnectionError)), e
    else:
        raise AssertionError("virt-api answered a caller with a certificate of another CA")
