"""The real control plane (tools/k8s/build.sh + localcluster.realplane) as a
Kubernetes API: kubectl's view of the server version, create/get/list/watch/
delete of a Namespace, a PersistentVolumeClaim and a ConfigMap through
kubernetes_asyncio, the loopback service range, real RBAC for a
ServiceAccount kubeconfig (403 without a Role, 200 with one), the namespace
controller (Terminating, then gone), ownerReference garbage collection, and
the KubeVirt/CDI CRDs (``kubectl get vm,vmi,dv,pvc``).

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
import time

import pytest
from kubernetes_asyncio import client, watch
from localcluster.realplane import CRDS_DIR
from localcluster.testing import eventually, gone, run_kubectl


def test_kubectl_version_shows_real_server(plane, kubectl):
    out = json.loads(run_kubectl(kubectl, plane.kubeconfig, "version", "-o", "json").stdout)
    server = out["serverVersion"]
    assert server["gitVersion"].startswith("v1."), server
    assert (int(server["major"]), int(server["minor"].rstrip("+"))) >= (1, 34), server
    assert server["platform"] == "linux/amd64" or server["platform"].startswith("linux/")


def test_service_range_is_loopback(plane):
    status, svc = plane.request("GET", "/api/v1/namespaces/default/services/kubernetes")
    assert status == 200, svc
    ip = ipaddress.ip_address(svc["spec"]["clusterIP"])
    assert ip in ipaddress.ip_network(plane.service_cidr)
    assert ip.is_loopback


class Watcher:
    """Watch ``list_fn`` from the resourceVersion of a fresh list, recording
    (type, name, phase) until ``(until_type, until_name)`` arrives."""

    def __init__(self, list_fn, *args, until: tuple[str, str], **kwargs):
        self.list_fn, self.args, self.kwargs, self.until = list_fn, args, kwargs, until
        self.events: list[tuple[str, str, str | None]] = []
        self.task = None

    async def start(self):
        rv = (await self.list_fn(*self.args, **self.kwargs)).metadata.resource_version
        self.task = asyncio.create_task(self._run(rv))
        return self

    async def _run(self, rv):
        w = watch.Watch()
        async with w.stream(self.list_fn, *self.args, resource_version=rv, timeout_seconds=90, **self.kwargs) as st:
            async for ev in st:
                obj = ev["object"]
                phase = getattr(getattr(obj, "status", None), "phase", None)
                self.events.append((ev["type"], obj.metadata.name, phase))
                if (ev["type"], obj.metadata.name) == self.until:
                    return

    async def done(self, timeout=90):
        await asyncio.wait_for(self.task, timeout)
        return self.events

    def types(self, name):
        return [t for t, n, _ in self.events if n == name]


async def test_namespace_configmap_pvc_crud_and_watch(api, namespace):
    core = client.CoreV1Api(api)
    ns = await core.read_namespace(namespace)
    assert ns.status.phase == "Active"
    assert namespace in [n.metadata.name for n in (await core.list_namespace()).items]

    cms = await Watcher(core.list_namespaced_config_map, namespace, until=("DELETED", "cm1")).start()
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm1"}, "data": {"a": "1"}})
    cm = await core.read_namespaced_config_map("cm1", namespace)
    assert cm.data == {"a": "1"}
    await core.patch_namespaced_config_map("cm1", namespace, {"data": {"a": "2"}})
    names = [c.metadata.name for c in (await core.list_namespaced_config_map(namespace)).items]
    assert "cm1" in names and "kube-root-ca.crt" in names  # root-ca publisher runs
    await core.delete_namespaced_config_map("cm1", namespace)
    await cms.done()
    assert cms.types("cm1") == ["ADDED", "MODIFIED", "DELETED"], cms.events

    pvcs = await Watcher(core.list_namespaced_persistent_volume_claim, namespace, until=("DELETED", "data")).start()
    pvc = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await core.create_namespaced_persistent_volume_claim(namespace, pvc)
    got = await core.read_namespaced_persistent_volume_claim("data", namespace)
    assert got.spec.resources.requests["storage"] == "1Gi"
    assert "kubernetes.io/pvc-protection" in (got.metadata.finalizers or [])  # admission plugin
    assert got.status.phase == "Pending"  # no PV, no default StorageClass
    listed = await core.list_namespaced_persistent_volume_claim(namespace)
    assert [p.metadata.name for p in listed.items] == ["data"]
    await core.delete_namespaced_persistent_volume_claim("data", namespace)
    # the pvc-protection controller removes the finalizer of an unused claim,
    # then the claim is gone
    await pvcs.done()
    types = pvcs.types("data")
    assert types[0] == "ADDED" and types[-1] == "DELETED", pvcs.events
    with pytest.raises(client.ApiException) as err:
        await core.read_namespaced_persistent_volume_claim("data", namespace)
    assert err.value.status == 404


async def test_serviceaccount_rbac_403_then_200(plane, api, namespace):
    from kubernetes_asyncio import config

    kc = plane.serviceaccount_kubeconfig(namespace, "reader")
    sa_api = await config.new_client_from_config(config_file=str(kc))
    try:
        sa_core = client.CoreV1Api(sa_api)
        with pytest.raises(client.ApiException) as err:
            await sa_core.list_namespaced_config_map(namespace)
        assert err.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in err.value.body

        rbac = client.RbacAuthorizationV1Api(api)
        await rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
            },
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "cm-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )

        async def allowed():
            try:
                _, status, _ = await sa_core.list_namespaced_config_map_with_http_info(namespace)
                return status == 200
            except client.ApiException as e:
                if e.status != 403:
                    raise
                return False

        await eventually(allowed, 30, what="RBAC grant")
        # still scoped: other namespaces and other verbs stay forbidden
        with pytest.raises(client.ApiException) as err:
            await sa_core.list_namespaced_config_map("default")
        assert err.value.status == 403
        with pytest.raises(client.ApiException) as err:
            await sa_core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
        assert err.value.status == 403
    finally:
        await sa_api.close()


async def test_namespace_deletion_terminating_then_gone(api):
    core = client.CoreV1Api(api)
    name = f"doomed-{int(time.time() * 1000) % 100000}"
    nss = await Watcher(core.list_namespace, field_selector=f"metadata.name={name}", until=("DELETED", name)).start()
    await core.create_namespace({"metadata": {"name": name}})
    await core.create_namespaced_config_map(name, {"metadata": {"name": "content"}})
    await core.delete_namespace(name)
    ns = await core.read_namespace(name)
    assert ns.status.phase == "Terminating"
    assert ns.metadata.deletion_timestamp is not None
    # the namespace controller empties it, then removes the namespace
    events = await nss.done(120)
    assert events[0][:2] == ("ADDED", name), events
    assert ("MODIFIED", name, "Terminating") in events, events
    assert events[-1][:2] == ("DELETED", name), events
    with pytest.raises(client.ApiException) as err:
        await core.read_namespace(name)
    assert err.value.status == 404


async def test_owner_reference_garbage_collection(api, namespace):
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}})
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}})
    await core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    async def dependent_gone():
        return await gone(core.read_namespaced_config_map, "dependent", namespace)

    await eventually(dependent_gone, 90, what="dependent collected by the garbage collector")
    await core.read_namespaced_config_map("bystander", namespace)


async def test_kubevirt_and_cdi_crds(plane, kubectl, api, namespace):
    run_kubectl(kubectl, plane.kubeconfig, "apply", "--server-side", "-f", str(CRDS_DIR))
    for crd in (
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "datavolumes.cdi.kubevirt.io",
        "datasources.cdi.kubevirt.io",
    ):

        async def established(crd=crd):
            status, obj = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            assert status == 200, obj
            conds = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        # (kubectl wait --for=condition=Established errors out while
        # .status.conditions is still unset, right after the apply)
        await eventually(established, 60, what=f"{crd} Established")
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": namespace},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}},
        },
    }
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "disk1", "namespace": namespace},
        "spec": {
            "source": {"blank": {}},
            "storage": {"resources": {"requests": {"storage": "1Gi"}}},
        },
    }
    res = subprocess.run(
        [kubectl, f"--kubeconfig={plane.kubeconfig}", "create", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [vm, dv]}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    # discovery of fresh CRDs can lag a moment in kubectl's cache
    deadline = time.monotonic() + 30
    while True:
        out = run_kubectl(kubectl, plane.kubeconfig, "get", "vm,vmi,dv,pvc", "-n", namespace, check=False)
        if out.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert out.returncode == 0, out.stderr
    assert "virtualmachine.kubevirt.io/vm1" in out.stdout, out.stdout
    assert "datavolume.cdi.kubevirt.io/disk1" in out.stdout, out.stdout
    # the CRD's structural schema is enforced: spec.template is required
    bad = {**vm, "metadata": {"name": "vm2", "namespace": namespace}, "spec": {"runStrategy": "Halted"}}
    res = subprocess.run(
        [kubectl, f"--kubeconfig={plane.kubeconfig}", "create", "-f", "-"],
        input=json.dumps(bad),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0
    assert "spec.template" in res.stderr, res.stderr
