"""The zero-to-jupyterhub 4.4.0 chart rendered by Helm (helm-python-sdk) with ``helm-values/values.yaml``.

Helm's own schema validation accepts the project's values (and refuses a
misspelt key, naming it), and the chart renders the objects a first install
creates: the hub Deployment running our image as the ``hub``
ServiceAccount, its Role and RoleBinding, the NetworkPolicies, the hub's
database PVC. ``tests/cluster/realplane/test_realplane_chart.py`` creates
them on a real API server.
"""

from __future__ import annotations

import pytest

from tests.support.chart import RELEASE, by_kind, our_values, render, validate

NS = "jhub"


@pytest.fixture(scope="module")
def objects():
    return render(our_values(), namespace=NS)


def find(objects, kind, name):
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_values_pass_the_charts_schema():
    validate(our_values())


def test_schema_refuses_an_unknown_key_naming_it():
    from helm_python import HelmValuesError

    values = our_values()
    values["hub"]["nonexistentKey"] = True
    with pytest.raises(HelmValuesError) as err:
        validate(values)
    assert "nonexistentKey" in str(err.value)
    values = our_values()
    values["singleuser"]["startTimeout"] = "soon"  # an integer in the schema
    with pytest.raises(HelmValuesError) as err:
        validate(values)
    assert "startTimeout" in str(err.value)


def test_rendered_objects(objects):
    assert by_kind(objects) == {
        "ClusterRole": [f"{RELEASE}-user-scheduler"],
        "ClusterRoleBinding": [f"{RELEASE}-user-scheduler"],
        "ConfigMap": ["hub", "user-scheduler"],
        "DaemonSet": ["continuous-image-puller", "hook-image-puller"],
        "Deployment": ["hub", "proxy", "user-scheduler"],
        "Job": ["hook-image-awaiter"],
        "NetworkPolicy": ["hub", "proxy", "singleuser"],
        "PersistentVolumeClaim": ["hub-db-dir"],
        "PodDisruptionBudget": ["user-placeholder", "user-scheduler"],
        "Role": ["hook-image-awaiter", "hub"],
        "RoleBinding": ["hook-image-awaiter", "hub"],
        "Secret": ["hub"],
        "Service": ["hub", "proxy-api", "proxy-public"],
        "ServiceAccount": ["continuous-image-puller", "hook-image-awaiter", "hook-image-puller", "hub", "user-scheduler"],
        "StatefulSet": ["user-placeholder"],
    }


def test_hub_runs_our_image_as_the_hub_serviceaccount(objects):
    values = our_values()
    pod = find(objects, "Deployment", "hub")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hub"
    (hub,) = [c for c in pod["containers"] if c["name"] == "hub"]
    assert hub["image"] == f"{values['hub']['image']['name']}:{values['hub']['image']['tag']}"
    binding = find(objects, "RoleBinding", "hub")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": NS}]


def test_hub_role_is_the_charts(objects):
    """The Role the chart gives the hub: core pods, PVCs, secrets, services (no patch/update) and read-only events."""
    assert find(objects, "Role", "hub")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
            "verbs": ["get", "watch", "list", "create", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
    ]


def test_hub_database_pvc_and_network_policies(objects):
    pvc = find(objects, "PersistentVolumeClaim", "hub-db-dir")
    assert pvc["spec"]["storageClassName"] == our_values()["hub"]["db"]["pvc"]["storageClassName"]
    for name in ("hub", "proxy", "singleuser"):
        policy = find(objects, "NetworkPolicy", name)
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_the_proxy_reaches_the_workspaces_dashboard_in_the_hubs_pod(objects):
    """The dashboard runs in the hub's Pod on port 10101: the hub's Service carries the port, and the hub's
    NetworkPolicy admits the proxy's Pods on it (the route /services/workspaces/ -> http://hub:10101)."""
    service = find(objects, "Service", "hub")
    assert {"name": "workspaces", "port": 10101, "targetPort": 10101} in service["spec"]["ports"]
    policy = find(objects, "NetworkPolicy", "hub")
    proxy = find(objects, "Deployment", "proxy")["spec"]["template"]["metadata"]["labels"]
    admitted = [rule for rule in policy["spec"]["ingress"] if {"port": 10101} in rule.get("ports", [])]
    assert any(all(proxy.get(k) == v for k, v in source["podSelector"]["matchLabels"].items())
               for rule in admitted for source in rule["from"] if "podSelector" in source)
