"""helm-values/retention.yaml: the admin commands' ServiceAccount, Role and RoleBinding, their right to clone from the
golden images' namespace, and the daily purge CronJob.

Covers: every document is a valid Kubernetes object (kubernetes-validate,
strict); the namespace, the hub image and the ledger URL are values.yaml's;
the admin commands' config loads as they load it (namespace, ledger on the
hub's volume); the CronJob runs the purge daily with a ``--dry-run`` first, as
the admin ServiceAccount; the Role deletes nothing but what a purge removes
(PVCs, DataVolumes, VirtualMachines, Services, the cloud-init Secrets) and
grants no Pod deletion or eviction; in the golden images' namespace the
admin may only clone (CDI's check of every write of a VM root disk). Then the admin commands (``disk list,
expand, snapshot, restore``, ``retention list, purge --dry-run, purge,
reclaim``) run against the local cluster, which records every request: the
Role grants each one (a missing rule fails) and nothing unused (an excess
rule fails). tests/cluster/realplane/test_realplane_retention.py applies the
file to a real API server and purges with the ServiceAccount's token.
"""

from __future__ import annotations

import shlex

import pytest
import yaml
from kubernetes_validate import validate as validate_manifest

from localcluster import ClusterThread
from tests.support.chartvalues import HELM_VALUES, our_values
from tests.support.lifecycleenv import NS, make_home, make_root_and_vm, with_kube
from tests.support.rbacmap import access_for, uncovered, unused
from workspacespawner.admin import disk as disk_command
from workspacespawner.admin import retention as retention_command
from workspacespawner.admin.common import namespace_of
from workspacespawner.core import names
from workspacespawner.k8s.kinds import SECRET, SERVICE
from workspacespawner.lifecycle import retention
from workspacespawner.lifecycle.phases import Phase, Status, WorkspaceRef
from workspacespawner.quota.cli import load_hub_config
from workspacespawner.quota.config import WorkspaceQuota

#: Rules the scenario does not reach: (group, resource, verb) -> why they are granted.
NOT_EXERCISED = {
    # `disk expand USER --pvc ROOT`: a root disk's PVC is CDI's, maybe without our owner labels; its DataVolume says whose it is.
    ("cdi.kubevirt.io", "datavolumes", "get"): "disk expand of a VM root disk",
}

#: What a purge deletes: the only resources the admin Role may delete.
PURGED = {"persistentvolumeclaims", "datavolumes", "virtualmachines", "services", "secrets"}


def manifests() -> list[dict]:
    """The documents of helm-values/retention.yaml."""
    return [doc for doc in yaml.safe_load_all((HELM_VALUES / "retention.yaml").read_text()) if doc]


#: The admin commands' ServiceAccount, Role and RoleBinding.
ADMIN = "workspacespawner-admin"
#: The namespace of the golden images (rbac.yaml's clone-source Role), where the admin may clone from.
GOLDEN = names.GOLDEN_IMAGE_NAMESPACE


def find(kind: str, name: str | None = None) -> dict:
    [doc] = [d for d in manifests() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def test_manifests_are_valid_kubernetes_objects():
    docs = manifests()
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Role", "RoleBinding", "ConfigMap", "CronJob"]
    for doc in docs:
        validate_manifest(doc, "1.32.0", strict=True)
        clone_source = doc["metadata"]["name"] == "workspacespawner-admin-clone-source"
        assert doc["metadata"]["namespace"] == (GOLDEN if clone_source else "jhub")


def test_binding_and_cronjob_use_the_admin_service_account():
    binding = find("RoleBinding", ADMIN)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "workspacespawner-admin"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "workspacespawner-admin", "namespace": "jhub"}]
    pod = find("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == find("ServiceAccount")["metadata"]["name"] == "workspacespawner-admin"


def test_in_the_golden_images_namespace_the_admin_may_only_clone():
    role, binding = find("Role", "workspacespawner-admin-clone-source"), find("RoleBinding", "workspacespawner-admin-clone-source")
    assert role["rules"] == [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "workspacespawner-admin", "namespace": "jhub"}]


def test_the_role_deletes_only_what_a_purge_removes():
    rules = find("Role", ADMIN)["rules"]
    deletable = {r for rule in rules if "delete" in rule["verbs"] or "*" in rule["verbs"] for r in rule["resources"]}
    assert deletable == PURGED
    granted = {r for rule in rules for r in rule["resources"]}
    assert "pods/eviction" not in granted and "*" not in granted  # the fence is not the admin Role's
    assert all("*" not in rule["verbs"] and "*" not in rule["apiGroups"] for rule in rules)


def test_cronjob_purges_daily_after_a_dry_run_with_the_hub_image():
    cronjob = find("CronJob")
    minute, hour, *rest = cronjob["spec"]["schedule"].split()
    assert rest == ["*", "*", "*"] and minute.isdigit() and hour.isdigit()  # once a day
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    [container] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    image = our_values()["hub"]["image"]
    assert container["image"] == f"{image['name']}:{image['tag']}"
    script = container["command"][-1]
    commands = [shlex.split(line) for line in script.splitlines() if line.startswith("workspacespawner ")]
    assert [c[:3] for c in commands] == [["workspacespawner", "retention", "purge"]] * 2
    assert "--dry-run" in commands[0] and "--dry-run" not in commands[1]
    assert "set -e" in script  # the purge runs only after the dry run printed its plan
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    config_path = commands[1][commands[1].index("-f") + 1]
    assert config_path.rsplit("/", 1)[0] in mounted


def test_the_admin_config_is_values_yamls(tmp_path):
    (tmp_path / "jupyterhub_config.py").write_text(find("ConfigMap")["data"]["jupyterhub_config.py"])
    config = load_hub_config(str(tmp_path / "jupyterhub_config.py"))
    assert namespace_of(config, None) == "jhub"
    hub_ledger = our_values()["hub"]["config"]["WorkspaceQuota"]["ledger_url"]
    assert WorkspaceQuota(config=config).database_url() == hub_ledger == "sqlite:////srv/jupyterhub/workspacespawner-ledger.sqlite"
    pod = find("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [hub_db] = [v for v in pod["volumes"] if v.get("persistentVolumeClaim")]
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == hub_db["name"]]
    assert mount["mountPath"] == "/srv/jupyterhub"


# -- every call of the admin commands, granted ----------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The permissions the admin commands needed for a scenario of each of them on the local cluster."""
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    workdir = tmp_path_factory.mktemp("admin")
    (workdir / "jupyterhub_config.py").write_text(
        f"c.WorkspaceQuota.ledger_url = 'sqlite:///{workdir / 'ledger.sqlite'}'\nc.KubeSpawner.namespace = {NS!r}\n"
    )
    common = ["-f", str(workdir / "jupyterhub_config.py"), "--kubeconfig", str(cluster.kubeconfig), "--actor", "root"]

    async def setup(kube):
        for user in ("ann", "bob", "dee"):
            await make_home(kube, user)
        await make_root_and_vm(kube, thread, "cy", "ws-cy", secret="ws-cy-cloudinit")
        meta = {"namespace": NS, "labels": names.owner_labels("cy"), "annotations": names.owner_annotations("cy")}
        await kube.create(SERVICE, NS, {"metadata": {"name": "ws-cy", **meta},
                                        "spec": {"selector": {names.DOMAIN_LABEL: "ws-cy"}, "ports": [{"name": "jupyter", "port": 8888}]}})
        await kube.create(SECRET, NS, {"metadata": {"name": "ws-cy-cloudinit", **meta}, "stringData": {"userdata": "#cloud-config\n"}})
        for ref, days in (
            (WorkspaceRef(namespace=NS, user_name="bob", home_pvc="home-bob"), 0),
            (WorkspaceRef(namespace=NS, user_name="cy", server_name="vm", root_disk="ws-cy-root", vm="ws-cy"), 0),
            (WorkspaceRef(namespace=NS, user_name="dee", home_pvc="home-dee"), 30),
        ):
            await retention.retain(kube, ref, Status(Phase.STOPPED), days=days)

    try:
        thread.call(lambda cl: with_kube(cl.kubeconfig, setup))
        cluster.requests.clear()
        assert disk_command.main(["list", *common]) == 0
        assert disk_command.main(["expand", "ann", "--size", "2Gi", *common]) == 0
        assert disk_command.main(["snapshot", "ann", "--name", "ann-1", "--wait", "30", *common]) == 0
        assert disk_command.main(["restore", "ann", "--snapshot", "ann-1", *common]) == 0
        assert retention_command.main(["list", *common]) == 0
        assert retention_command.main(["purge", "--dry-run", *common]) == 0
        assert retention_command.main(["purge", "--json", *common]) == 0
        assert retention_command.main(["reclaim", "dee", *common]) == 0
        records = list(cluster.requests.records)
    finally:
        thread.stop()
    accesses = [a for a in (access_for(r.method, r.path, r.query) for r in records) if a is not None]
    return accesses


def test_the_commands_did_what_the_scenario_says(recorded):
    deleted = {a.resource for a in recorded if a.verb == "delete"}
    assert deleted == PURGED  # the purge removed bob's home and cy's VM with everything that goes with it
    assert {a.namespace for a in recorded} == {NS}


def test_the_role_grants_every_call_and_nothing_more(recorded):
    rules = find("Role", ADMIN)["rules"]
    assert uncovered(recorded, rules) == []
    assert unused(rules, recorded, allowed=NOT_EXERCISED) == []
    assert not [triple for triple in NOT_EXERCISED if triple in {a.triple for a in recorded}]  # the list is current
