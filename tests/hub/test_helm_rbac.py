"""helm-values/rbac.yaml grants the hub exactly the Kubernetes API calls workspacespawner makes.

A real JupyterHub with the sample config pieces runs the spawner's
scenarios on the local cluster, which records every API request: a
container workspace started and stopped; a VM workspace started, fenced
(a second start next to its running VMI reads the VMI's Node and is
refused), stopped, and started again with another profile (the VM and its
cloud-init Secret updated), stopped. Each request becomes the RBAC
permission it needs (:mod:`rbacmap`, unit-tested here too), plus the
permission CDI checks on the hub's behalf for each cloned DataVolume
(``datavolumes/source`` create in the source namespace). Then: every
permission is granted by the right Role (a missing rule fails), and every
rule granted is used or listed in :data:`NOT_EXERCISED` (an excess rule
fails).
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import yaml
from kubernetes_validate import validate as validate_manifest

from tests.support.chartvalues import HELM_VALUES, our_values
from tests.support.hubharness import CONFIG_D, Hub
from tests.support.rbacmap import Access, access_for, rule_triples, uncovered, unused
from workspacespawner.backends.vm.manifests import VMIdentity
from workspacespawner.backends.vm.workspace import VMWorkspace
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE
from workspacespawner.localcluster import ClusterThread
from workspacespawner.localcluster.goldenimage import make_golden_image

#: The test hub's namespace (hubharness); rbac.yaml's hub namespace stands for it.
HUB_NAMESPACE = "default"
PIECES = ("10-workspace-spawner.py", "20-profiles.py", "90-check-config.py")

#: Rules granted for features the scenario here does not exercise yet: (group, resource, verb) -> why.
#: Remove an entry when its feature's calls join the scenario (the test then finds the rule used).
NOT_EXERCISED = {
    # Quota: a warning or a stop for exhausted card-hours is also posted as an Event on the workspace
    # (workspacespawner/quota/events.py); the enforcer's warnings take an hour of GPU use to arrive.
    ("", "events", "create"): "quota Events",
    # Lifecycle issue: snapshot and restore of disks through ceph-csi's VolumeSnapshotClass.
    ("snapshot.storage.k8s.io", "volumesnapshots", "get"): "disk snapshots",
    ("snapshot.storage.k8s.io", "volumesnapshots", "list"): "disk snapshots",
    ("snapshot.storage.k8s.io", "volumesnapshots", "create"): "disk snapshots",
    ("snapshot.storage.k8s.io", "volumesnapshots", "delete"): "disk snapshots",
    # A claim still Pending when the Pod is made (a WaitForFirstConsumer class, a slow provisioner) is watched
    # until it binds (workspacespawner/storage/binding.py); the scenario's homes bind at once.
    ("", "persistentvolumeclaims", "watch"): "claims binding late",
}


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


# -- the recorded scenario ----------------------------------------------------------------------


def running_vm_identity(thread: ClusterThread, user: str) -> VMIdentity:
    """The identity of ``user``'s one VMI, read from the cluster's store (not through the API: nothing recorded)."""

    def vmis(cluster):
        store = cluster.store
        return [o for o in store.objects(store.kind("kubevirt.io", "v1", "virtualmachineinstances")) if o["metadata"]["namespace"] == HUB_NAMESPACE]

    [vmi] = thread.call(vmis)
    return VMIdentity.for_workspace(
        namespace=HUB_NAMESPACE, user_name=user, kubespawner_username=user, base_name=vmi["metadata"]["name"], home_pvc=f"home-{user}"
    )


async def fence(kubeconfig, ident: VMIdentity) -> None:
    """A second start of ``ident``'s running VM, refused by the fence (which reads the VMI and its Node)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        workspace = VMWorkspace(ident=ident, settings=None, custom_api=client.CustomObjectsApi(api), core_api=client.CoreV1Api(api))
        with pytest.raises(WorkspaceError) as refused:
            await workspace.fence()
    assert refused.value.reason == "already-running"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> list[Access]:
    """The permissions every request of the scenario needed (see the module docstring), in order."""
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    try:
        thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES)
        cluster.requests.clear()
        config = "\n".join(f"load_subconfig({str(CONFIG_D / piece)!r})" for piece in PIECES)
        hub = Hub(tmp_path_factory.mktemp("hub"), cluster.kubeconfig, config).start()
        try:
            hub.create_user("rita")
            hub.start_server("rita", {"profile": "jupyterlab-cpu"})
            hub.stop_server("rita")
            hub.start_server("rita", {"profile": "ubuntu-vm"})
            asyncio.run(fence(cluster.kubeconfig, running_vm_identity(thread, "rita")))
            hub.stop_server("rita")
            hub.start_server("rita", {"profile": "ubuntu-vm-gpu-code"})
            hub.stop_server("rita")
        finally:
            hub.stop()
        records = cluster.requests.records
    finally:
        thread.stop()
    accesses = []
    for request in records:
        access = access_for(request.method, request.path, request.query)
        if access is not None:
            accesses.append(access)
        if access == Access("cdi.kubevirt.io", "datavolumes", "create", HUB_NAMESPACE) and request.status < 300:
            source = request.body["spec"]["sourceRef"]
            accesses.append(Access("cdi.kubevirt.io", "datavolumes/source", "create", source.get("namespace", HUB_NAMESPACE)))
    return accesses


def role_for(access: Access) -> tuple[str, str]:
    """Which role of rbac.yaml must grant ``access``: by its namespace."""
    if access.namespace is None:
        return NODES_ROLE
    if access.namespace == HUB_NAMESPACE:
        return HUB_ROLE
    if access.namespace == find(*CLONE_ROLE)["metadata"]["namespace"]:
        return CLONE_ROLE
    raise AssertionError(f"the spawner called into namespace {access.namespace!r}: {access}")


def test_scenario_used_every_kind_of_call(recorded):
    triples = {a.triple for a in recorded}
    for expected in [
        ("", "pods", "create"),
        ("", "persistentvolumeclaims", "create"),
        ("subresources.kubevirt.io", "virtualmachines/start", "update"),
        ("subresources.kubevirt.io", "virtualmachines/stop", "update"),
        ("kubevirt.io", "virtualmachines", "update"),
        ("", "secrets", "update"),
        ("", "nodes", "get"),
        ("cdi.kubevirt.io", "datavolumes/source", "create"),
    ]:
        assert expected in triples, expected


def test_roles_grant_every_recorded_call(recorded):
    missing = []
    for role in (HUB_ROLE, CLONE_ROLE, NODES_ROLE):
        missing += [(role[1], a) for a in uncovered([a for a in recorded if role_for(a) == role], find(*role)["rules"])]
    assert missing == [], "rbac.yaml lacks rules for these calls"


def test_roles_grant_nothing_unused(recorded):
    excess = []
    for role in (HUB_ROLE, CLONE_ROLE, NODES_ROLE):
        calls = [a for a in recorded if role_for(a) == role]
        excess += [(role[1], t) for t in unused(find(*role)["rules"], calls, NOT_EXERCISED)]
    assert excess == [], "rbac.yaml grants rules nothing uses (or add them to NOT_EXERCISED, with the reason)"


def test_not_exercised_list_is_current(recorded):
    granted = rule_triples(find(*HUB_ROLE)["rules"])
    used = {a.triple for a in recorded}
    assert set(NOT_EXERCISED) <= granted, "NOT_EXERCISED names rules rbac.yaml does not grant"
    assert not set(NOT_EXERCISED) & used, "NOT_EXERCISED names rules the scenario now uses: remove them"


def test_missing_and_excess_rules_are_caught(recorded):
    rules = copy.deepcopy(find(*HUB_ROLE)["rules"])
    calls = [a for a in recorded if role_for(a) == HUB_ROLE]
    without_start = [r for r in rules if r["apiGroups"] != ["subresources.kubevirt.io"]]
    assert {a.resource for a in uncovered(calls, without_start)} == {"virtualmachines/start", "virtualmachines/stop"}
    with_deletes = rules + [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"], "verbs": ["delete"]}]
    assert unused(with_deletes, calls, NOT_EXERCISED) == [("cdi.kubevirt.io", "datavolumes", "delete")]
