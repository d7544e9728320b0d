"""helm-values/retention.yaml on a real API server: it applies, and the purge runs with the admin ServiceAccount's token.

The purge needs no controllers (it deletes PVCs and objects found by label):
a retained home PVC and a retained VM root disk (DataVolume, with its
VirtualMachine, Service and cloud-init Secret), both past retain-until, are
made as the cluster admin; ``workspacespawner retention purge --dry-run``
then ``purge`` run with a kubeconfig holding the ServiceAccount
``workspacespawner-admin``'s token and delete exactly them; the same token
gets 403 for what the Role does not allow (deleting or evicting a Pod,
reading Nodes or ConfigMaps, changing a Secret).

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kubernetes_asyncio import client
from localcluster.realplane import CRDS_DIR
from localcluster.testing import eventually, run_kubectl

from tests.support.chartvalues import HELM_VALUES
from tests.support.paths import REPO
from workspacespawner.core import names
from workspacespawner.k8s.api import Kube
from workspacespawner.k8s.kinds import DATA_VOLUME, PVC, SECRET, SERVICE, VIRTUAL_MACHINE
from workspacespawner.lifecycle import retention
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef
from workspacespawner.storage import home

CRDS = ("virtualmachines.kubevirt.io", "virtualmachineinstances.kubevirt.io", "datavolumes.cdi.kubevirt.io")


async def crds_established(plane, kubectl) -> None:
    run_kubectl(kubectl, plane.kubeconfig, "apply", "--server-side", "-f", str(CRDS_DIR))
    for crd in CRDS:

        async def established(crd=crd):
            status, obj = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            conditions = ((obj if status == 200 else {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await eventually(established, 60, what=f"{crd} Established")


async def retained_workspaces(kube: Kube, namespace: str) -> None:
    """bob's retained home and cy's retained VM (root disk, VM, Service, cloud-init Secret), all past retain-until."""
    await home.ensure_home_pvc(kube.core_api, home.make_home_pvc(
        name="home-bob", namespace=namespace, user_name="bob", kubespawner_username="bob",
        storage_class="ceph-rbd", size="1Gi", access_modes=["ReadWriteOnce"],
    ), "bob")
    meta = {"namespace": namespace, "labels": names.owner_labels("cy"), "annotations": names.owner_annotations("cy")}
    root_meta = {**meta, "labels": names.disk_labels("cy", "cy", names.ROOT_DISK)}
    await kube.create(DATA_VOLUME, namespace, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": "ws-cy-root", **root_meta},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "ubuntu", "namespace": "golden-images"},
                 "storage": {"resources": {"requests": {"storage": "2Gi"}}}},
    })
    volumes = [{"name": "root", "dataVolume": {"name": "ws-cy-root"}}, {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "ws-cy-cloudinit"}}}]
    await kube.create(VIRTUAL_MACHINE, namespace, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "ws-cy", **meta},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}, "memory": {"guest": "1Gi"}},
            "volumes": volumes,
        }}},
    })
    await kube.create(SERVICE, namespace, {"metadata": {"name": "ws-cy", **meta},
                                           "spec": {"selector": {names.DOMAIN_LABEL: "ws-cy"}, "ports": [{"name": "jupyter", "port": 8888}]}})
    await kube.create(SECRET, namespace, {"metadata": {"name": "ws-cy-cloudinit", **meta}, "stringData": {"userdata": "#cloud-config\n"}})
    for ref in (
        WorkspaceRef(namespace=namespace, user_name="bob", home_pvc="home-bob"),
        WorkspaceRef(namespace=namespace, user_name="cy", server_name="vm", root_disk="ws-cy-root", vm="ws-cy"),
    ):
        await retention.retain(kube, ref, Status(Phase.STOPPED), days=0)


def admin_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workspacespawner.cli", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


async def test_retention_manifests_apply_and_the_admin_account_purges(plane, kubectl, api, namespace, tmp_path):
    from kubernetes_asyncio import config

    await crds_established(plane, kubectl)
    manifest = tmp_path / "retention.yaml"
    manifest.write_text((HELM_VALUES / "retention.yaml").read_text().replace("namespace: jhub", f"namespace: {namespace}"))
    # the admin's right to clone from the golden images (CDI's check of every write of cy's root disk) lives there
    assert plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": "golden-images"}})[0] in (201, 409)
    applied = run_kubectl(kubectl, plane.kubeconfig, "apply", "-f", str(manifest)).stdout
    for kind in ("serviceaccount", "role", "rolebinding", "configmap", "cronjob"):
        assert f"{kind}" in applied.lower(), applied

    kube = Kube(client.CoreV1Api(api), client.CustomObjectsApi(api))
    await retained_workspaces(kube, namespace)
    token_kubeconfig = plane.serviceaccount_kubeconfig(namespace, "workspacespawner-admin", create=False)
    (tmp_path / "jupyterhub_config.py").write_text(
        f"c.KubeSpawner.namespace = {namespace!r}\nc.WorkspaceQuota.ledger_url = 'sqlite:///{tmp_path / 'ledger.sqlite'}'\n"
    )
    common = ["-f", str(tmp_path / "jupyterhub_config.py"), "--kubeconfig", str(token_kubeconfig), "--actor", "retention-cronjob"]

    dry = admin_command("retention", "purge", "--dry-run", "--json", *common)
    assert dry.returncode == 0, dry.stderr
    assert sorted((r["name"], r["why"]) for r in json.loads(dry.stdout)) == [("home-bob", "dry run"), ("ws-cy-root", "dry run")]
    assert await kube.get(PVC, namespace, "home-bob") is not None

    purged = admin_command("retention", "purge", "--json", *common)
    assert purged.returncode == 0, purged.stderr
    assert sorted((r["name"], r["why"]) for r in json.loads(purged.stdout)) == [("home-bob", "ok"), ("ws-cy-root", "ok")]
    for kind, name in ((DATA_VOLUME, "ws-cy-root"), (VIRTUAL_MACHINE, "ws-cy"), (SERVICE, "ws-cy"), (SECRET, "ws-cy-cloudinit")):
        assert await kube.get(kind, namespace, name) is None, (kind.kind, name)

    async def home_gone():  # the PVC protection controller lets it go: nothing mounts it
        return await kube.get(PVC, namespace, "home-bob") is None

    await eventually(home_gone, 60, what="home-bob deleted")
    audit = admin_command("audit", "-f", str(tmp_path / "jupyterhub_config.py"), "--action", "delete", "--json")
    assert audit.returncode == 0, audit.stderr
    assert sorted((r["disk"], r["actor"], r["result"]) for r in json.loads(audit.stdout)) == [
        ("home-bob", "retention-cronjob", "ok"), ("ws-cy-root", "retention-cronjob", "ok")]

    # what the Role does not allow, with the same token
    await client.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": "bystander"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    admin_api = await config.new_client_from_config(config_file=str(token_kubeconfig))
    try:
        core = client.CoreV1Api(admin_api)
        refused = [
            core.delete_namespaced_pod("bystander", namespace),
            core.create_namespaced_pod_eviction("bystander", namespace, {"metadata": {"name": "bystander"}}),
            core.list_node(),
            core.list_namespaced_config_map(namespace),
            core.patch_namespaced_secret("anything", namespace, {"metadata": {"labels": {"x": "y"}}}),
        ]
        for call in refused:
            with pytest.raises(client.ApiException) as err:
                await call
            assert err.value.status == 403, err.value
            assert f"system:serviceaccount:{namespace}:workspacespawner-admin" in err.value.body
    finally:
        await admin_api.close()
