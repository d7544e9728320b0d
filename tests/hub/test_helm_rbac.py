"""helm-values/rbac.yaml's documents, and the request-to-permission mapping of :mod:`rbacmap`.

Here: every document is a valid Kubernetes object without wildcards, and
every binding grants the chart's ``hub`` ServiceAccount a role of its own
namespace (the clone Role in the golden-image namespace of values.yaml).
That the roles grant the hub exactly what it needs is proven on a real API
server by its authorizer: tests/cluster/realplane/test_realplane_rbac.py
(the hub runs with the ServiceAccount's token; without any one grant, some
request of its scenario is denied). :mod:`rbacmap` (unit-tested here) still
serves tests/hub/test_helm_retention.py, whose admin commands include the
snapshots the real plane has no API for.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes_validate import validate as validate_manifest

from tests.support.chartvalues import HELM_VALUES, our_values
from tests.support.rbacmap import Access, access_for, rule_triples, uncovered, unused

# -- the mapping, unit by unit -----------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, query, expected",
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", {}, Access("", "pods", "get", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods", {}, Access("", "pods", "list", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, Access("", "pods", "watch", "ns")),
        ("GET", "/api/v1/namespaces/ns/events", {"watch": "True", "resourceVersion": "5"}, Access("", "events", "watch", "ns")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, Access("", "pods", "watch", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "false"}, Access("", "pods", "list", "ns")),
        ("POST", "/api/v1/namespaces/ns/persistentvolumeclaims", {}, Access("", "persistentvolumeclaims", "create", "ns")),
        ("PUT", "/api/v1/namespaces/ns/secrets/s", {}, Access("", "secrets", "update", "ns")),
        ("PATCH", "/api/v1/namespaces/ns/persistentvolumeclaims/home-a", {}, Access("", "persistentvolumeclaims", "patch", "ns")),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, Access("", "pods", "delete", "ns")),
        ("DELETE", "/api/v1/namespaces/ns/pods", {"labelSelector": "a=b"}, Access("", "pods", "deletecollection", "ns")),
        ("GET", "/api/v1/nodes/gpu-1", {}, Access("", "nodes", "get", None)),
        ("GET", "/api/v1/namespaces/jhub", {}, Access("", "namespaces", "get", None)),
        ("GET", "/api/v1/namespaces", {}, Access("", "namespaces", "list", None)),
        ("PATCH", "/api/v1/namespaces/ns/pods/p/status", {}, Access("", "pods/status", "patch", "ns")),
        (
            "PUT",
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/start",
            {},
            Access("subresources.kubevirt.io", "virtualmachines/start", "update", "ns"),
        ),
        (
            "PUT",
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/stop/",
            {},
            Access("subresources.kubevirt.io", "virtualmachines/stop", "update", "ns"),
        ),
        ("POST", "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes", {}, Access("cdi.kubevirt.io", "datavolumes", "create", "ns")),
        ("GET", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm", {}, Access("kubevirt.io", "virtualmachineinstances", "get", "ns")),
        ("GET", "/apis/storage.k8s.io/v1/storageclasses/ceph-rbd", {}, Access("storage.k8s.io", "storageclasses", "get", None)),
        ("HEAD", "/api/v1/namespaces/ns/pods/p", {}, Access("", "pods", "get", "ns")),
    ],
)
def test_access_for_request(method, path, query, expected):
    assert access_for(method, path, query) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/kubevirt.io/v1", "/apis/kubevirt.io", "/version", "/openapi/v2", "/healthz"])
def test_non_resource_requests_need_no_rule(path):
    assert access_for("GET", path) is None


def test_unknown_method_is_refused():
    with pytest.raises(ValueError):
        access_for("TRACE", "/api/v1/namespaces/ns/pods")


def test_rules_expand_and_compare():
    rules = [
        {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "create"]},
        {"apiGroups": ["subresources.kubevirt.io"], "resources": ["virtualmachines/start"], "verbs": ["update"]},
    ]
    assert rule_triples(rules) == {
        ("", "pods", "get"),
        ("", "pods", "create"),
        ("", "secrets", "get"),
        ("", "secrets", "create"),
        ("subresources.kubevirt.io", "virtualmachines/start", "update"),
    }
    calls = [Access("", "pods", "get", "ns"), Access("", "pods", "delete", "ns"), Access("", "pods", "delete", "ns")]
    assert uncovered(calls, rules) == [Access("", "pods", "delete", "ns")]
    assert unused(rules, calls, allowed=[("", "secrets", "get")]) == [
        ("", "pods", "create"),
        ("", "secrets", "create"),
        ("subresources.kubevirt.io", "virtualmachines/start", "update"),
    ]


# -- rbac.yaml ----------------------------------------------------------------------------------


def manifests() -> list[dict]:
    """The documents of helm-values/rbac.yaml."""
    return [doc for doc in yaml.safe_load_all((HELM_VALUES / "rbac.yaml").read_text()) if doc]


def find(kind: str, name: str) -> dict:
    """The one document of rbac.yaml with this kind and name."""
    [doc] = [d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


HUB_ROLE = ("Role", "workspacespawner-hub")
CLONE_ROLE = ("Role", "workspacespawner-clone-source")
NODES_ROLE = ("ClusterRole", "workspacespawner-hub-nodes")


def test_rbac_manifests_are_valid_kubernetes_objects():
    docs = manifests()
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    for doc in docs:
        validate_manifest(doc, "1.32.0", strict=True)
        for rule in doc.get("rules", ()):
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule
            assert "resourceNames" not in rule


def test_bindings_grant_the_charts_hub_service_account():
    values = our_values()
    hub_role, clone_role = find(*HUB_ROLE), find(*CLONE_ROLE)
    assert clone_role["metadata"]["namespace"] == values["hub"]["config"]["WorkspaceSpawner"]["vm_golden_image_namespace"]
    for doc in manifests():
        if doc["kind"].endswith("Binding"):
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": hub_role["metadata"]["namespace"]}]
            role = find(doc["roleRef"]["kind"], doc["roleRef"]["name"])
            assert role["metadata"].get("namespace") == doc["metadata"].get("namespace")


def test_the_dashboards_rbac_is_valid_and_grants_the_hubs_service_account_its_watches():
    """helm-values/dashboard-rbac.yaml: valid objects without wildcards, bound to the chart's ``hub`` ServiceAccount,
    granting the watches of Nodes and VolumeSnapshots the dashboard's caches need, and no delete."""
    docs = [doc for doc in yaml.safe_load_all((HELM_VALUES / "dashboard-rbac.yaml").read_text()) if doc]
    for doc in docs:
        validate_manifest(doc, "1.32.0", strict=True)
    rules = [(g, r, v) for doc in docs if doc["kind"] in ("Role", "ClusterRole")
             for rule in doc["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]]
    assert ("", "nodes", "watch") in rules and ("snapshot.storage.k8s.io", "volumesnapshots", "watch") in rules
    assert not [rule for rule in rules if "*" in rule or rule[2] in ("delete", "deletecollection")]
    for doc in docs:
        if doc["kind"].endswith("Binding"):
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]
