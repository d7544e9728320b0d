"""helm-values/golden-images-rbac.yaml: what publishing a golden image and rebuilding a system disk need besides the
admin's and the hub's Roles.

Covers: every document is a valid Kubernetes object (kubernetes-validate, strict) without wildcards; the publish
bindings name the admin commands' and the hub's ServiceAccounts, the rebuild ones the admin's (the hub's Role has what
a rebuild writes). Then ``workspacespawner image publish`` runs by snapshot and by clone, and ``disk rebuild`` once,
against the local cluster, which records every request: in the workspaces' namespace the admin Role of retention.yaml
with this file's grants each one, in the golden-image namespace this file's Roles do, and this file grants nothing
unused but CDI's clone permission and the undo of a refused publish (neither is a request of the commands').
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import validate as validate_manifest

from localcluster import ClusterThread
from tests.support.chartvalues import HELM_VALUES
from tests.support.lifecycleenv import NS, admin_command_args, with_kube
from tests.support.rbacmap import access_for, uncovered, unused
from tests.support.vmworkspace import GOLDEN_NS, base_image, make_stopped_vm
from workspacespawner.admin import disk as disk_command
from workspacespawner.admin import image as image_command

#: Granted but not a request of the command: (group, resource, verb) -> why.
NOT_REQUESTED = {
    ("cdi.kubevirt.io", "datavolumes/source", "create"): "CDI's clone admission checks it of the DataVolume's creator",
    ("cdi.kubevirt.io", "datasources", "delete"): "the undo of a publish whose snapshot or clone the cluster refused",
}


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((HELM_VALUES / name).read_text()) if doc]


def rules_in(docs: list[dict], namespace: str) -> list[dict]:
    return [rule for doc in docs if doc["kind"] == "Role" and doc["metadata"]["namespace"] == namespace for rule in doc["rules"]]


def test_manifests_are_valid_and_bind_the_two_service_accounts():
    docs = documents("golden-images-rbac.yaml")
    for doc in docs:
        validate_manifest(doc, "1.32.0", strict=True)
        for rule in doc.get("rules", ()):
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule
    for binding in (d for d in docs if d["kind"] == "RoleBinding"):
        expected = {"workspacespawner-admin"} if "rebuild" in binding["metadata"]["name"] else {"hub", "workspacespawner-admin"}
        assert {s["name"] for s in binding["subjects"]} == expected


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The permissions ``image publish`` needed, by snapshot and by clone, and ``disk rebuild``, on the local cluster."""
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"), controllers=("storage", "protection", "snapshots", "cdi"))
    cluster = thread.start()
    try:
        base_image(thread)
        thread.call(lambda cl: with_kube(cl.kubeconfig, lambda kube: make_stopped_vm(kube, cl, "ann")), timeout=90)
        common, _url = admin_command_args(tmp_path_factory.mktemp("admin"), cluster)
        cluster.requests.clear()
        assert image_command.main(["publish", "ann", "--name", "by-snapshot", *common]) == 0
        assert image_command.main(["publish", "ann", "--name", "by-clone", "--via", "clone", *common]) == 0
        assert disk_command.main(["rebuild", "ann", *common]) == 0
        records = list(cluster.requests.records)
    finally:
        thread.stop()
    return [a for a in (access_for(r.method, r.path, r.query) for r in records) if a is not None]


def test_every_call_is_granted_and_nothing_more(recorded):
    assert {a.namespace for a in recorded} == {NS, GOLDEN_NS}
    ours = documents("golden-images-rbac.yaml")
    admin = rules_in(documents("retention.yaml"), "jhub") + rules_in(ours, "jhub")
    golden = rules_in(ours, GOLDEN_NS)
    assert uncovered([a for a in recorded if a.namespace == NS], admin) == []
    assert uncovered([a for a in recorded if a.namespace == GOLDEN_NS], golden) == []
    assert unused(rules_in(ours, "jhub") + golden, recorded, allowed=NOT_REQUESTED) == []
