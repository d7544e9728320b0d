"""The zero-to-jupyterhub 4.4.0 chart, rendered by Helm with ``helm-values/values.yaml``, created on an API server.

Every object a first install creates (hub Deployment, Roles and
RoleBindings, NetworkPolicies, the hub's PVC, ServiceAccounts, ...) passes
a server-side dry run and is then created, on the real kube-apiserver with
its admission plugins and validation; the hub's ServiceAccount then holds
exactly the chart's Role (the real authorizer answers). On the embedded
cluster the kinds it serves are created the same way, and the kinds it does
not serve (workloads, policies, RBAC: see the local cluster's README) are
listed.
"""

from __future__ import annotations

from localcluster.testing import eventually

from tests.support.chart import our_values, render

#: Kinds of the chart the embedded cluster does not serve (its README, "Differences from a real API server").
NOT_EMBEDDED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "DaemonSet",
    "Deployment",
    "Job",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "StatefulSet",
}


async def create_all(probe, objects, ns, *, dry_run: bool) -> tuple[dict[str, int], set[str]]:
    """POST each object (``dryRun=All`` if asked); returns ``({kind/name: status}, kinds not served)``."""
    answers, unserved = {}, set()
    for obj in objects:
        path = await probe.collection_path(obj, ns)
        if path is None:
            unserved.add(obj["kind"])
            continue
        status, body = await probe.call("POST", path, obj, query={"dryRun": "All"} if dry_run else None)
        answers[f"{obj['kind']}/{obj['metadata']['name']}"] = status if status == 201 else (status, body.get("message"))
    return answers, unserved


async def test_chart_objects_are_accepted(probe, ns):
    objects = render(our_values(), namespace=ns)
    try:
        dry, unserved = await create_all(probe, objects, ns, dry_run=True)
        assert {k: v for k, v in dry.items() if v != 201} == {}
        created, _ = await create_all(probe, objects, ns, dry_run=False)
        assert {k: v for k, v in created.items() if v != 201} == {}
        assert unserved == (set() if probe.real else NOT_EMBEDDED)
        pvc = await probe.ok("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/hub-db-dir")
        assert pvc["spec"]["storageClassName"] == "ceph-rbd"
        await probe.ok("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/hub")
        if probe.real:
            hub = await probe.ok("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/hub")
            assert hub["spec"]["template"]["spec"]["serviceAccountName"] == "hub"
    finally:
        for obj in objects:
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                path = await probe.collection_path(obj, ns)
                if path:
                    await probe.call("DELETE", f"{path}/{obj['metadata']['name']}")


async def test_hub_serviceaccount_holds_the_charts_role(plane, api, namespace):
    """The real authorizer with the rendered Role and RoleBinding: the hub may list and create Pods, not patch them, not read ConfigMaps."""
    from kubernetes_asyncio import config
    from localcluster.testing import Probe

    admin = Probe(api, "real")
    objects = render(our_values(), namespace=namespace)
    wanted = {("ServiceAccount", "hub"), ("Role", "hub"), ("RoleBinding", "hub")}
    for obj in objects:
        if (obj["kind"], obj["metadata"]["name"]) in wanted:
            await admin.ok("POST", await admin.collection_path(obj, namespace), obj)
    kubeconfig = plane.serviceaccount_kubeconfig(namespace, "hub", create=False)
    hub_api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        hub = Probe(hub_api, "real")
        pods = f"/api/v1/namespaces/{namespace}/pods"

        async def may_list_pods():
            return (await hub.call("GET", pods))[0] == 200

        await eventually(may_list_pods, 30, what="the hub's Role in force")
        pod = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        assert (await hub.call("POST", pods, pod, query={"dryRun": "All"}))[0] == 201
        # authorization comes before the lookup: no such Pod needed for a 403
        patch = {"metadata": {"labels": {"a": "b"}}}
        status, body = await hub.call("PATCH", f"{pods}/probe", patch, content_type="application/merge-patch+json")
        assert status == 403, body
        status, body = await hub.call("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert status == 403, body
        assert f"system:serviceaccount:{namespace}:hub" in body["message"]
    finally:
        await hub_api.close()
