"""The local API server's REST verbs, as kubernetes_asyncio, the sync kubernetes client and raw HTTP see them.

Covers: create (generateName, dryRun), get, list with equality, set-based and
field selectors (namespaced, across namespaces, cluster-scoped), replace
(and 409 on a stale resourceVersion), patch with merge, JSON and strategic
merge patches (a container merged by name) and 415 for strategic merge on a
custom resource, delete (finalizers, deletionTimestamp, ownerReferences
garbage collection, propagationPolicy Orphan, 404 once gone, a graceful Pod
deletion due after its grace period), metadata.generation (kept only by the
kinds that keep one in Kubernetes, never set by clients), deletecollection
with a label selector, the status subresource, Status bodies for 400, 404,
405, 409, 415 and 422, discovery documents (with trailing slashes),
server-side printing as Table, KubeVirt's start/stop/restart subresources,
and the cluster's fault injector and request log. The cluster runs without
controllers, so only the API server is under test.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import stat
import time

import kubernetes
import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from localcluster.version import at_least

pytestmark = pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)

NS = "default"
VM_GROUP, VM_VERSION, VM_PLURAL = "kubevirt.io", "v1", "virtualmachines"


def configmap(name: str, labels: dict | None = None, data: dict | None = None, **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}, **meta},
        "data": data or {},
    }


def pod(name: str | None = None, *, generate_name: str | None = None, containers=("main",)) -> dict:
    meta = {"name": name} if name else {"generateName": generate_name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": c, "image": f"busybox:{c}"} for c in containers]},
    }


def virtual_machine(name: str) -> dict:
    return {
        "apiVersion": f"{VM_GROUP}/{VM_VERSION}",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}},
        },
    }


def status_of(error: ApiException) -> dict:
    """The Status object a failed call answered with."""
    return json.loads(error.body)


async def expect_status(call, code: int, reason: str) -> dict:
    """Await ``call`` expecting an ApiException carrying a Status with ``code`` and ``reason``."""
    with pytest.raises(ApiException) as info:
        await call
    status = status_of(info.value)
    assert (info.value.status, status["kind"], status["code"], status["reason"]) == (code, "Status", code, reason)
    return status


# -- create / get / list -----------------------------------------------------


async def test_create_with_generate_name(api, cluster):
    v1 = client.CoreV1Api(api)
    created = await v1.create_namespaced_pod(NS, pod(generate_name="web-"))
    assert created.metadata.name.startswith("web-") and len(created.metadata.name) > len("web-")
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert created.status.phase == "Pending"
    fetched = await v1.read_namespaced_pod(created.metadata.name, NS)
    assert fetched.metadata.uid == created.metadata.uid
    (post,) = cluster.requests.matching("POST", "/pods$")
    assert post.status == 201 and post.body["metadata"] == {"generateName": "web-"}


async def test_dry_run_create_is_not_stored(api, cluster):
    v1 = client.CoreV1Api(api)
    answered = await v1.create_namespaced_config_map(NS, configmap("ghost"), dry_run="All")
    assert answered.metadata.name == "ghost"
    await expect_status(v1.read_namespaced_config_map("ghost", NS), 404, "NotFound")
    assert cluster.requests.matching("POST")[0].query == {"dryRun": "All"}


async def test_list_with_label_and_field_selectors(api):
    v1 = client.CoreV1Api(api)
    await v1.create_namespace({"metadata": {"name": "other"}})
    for name, labels, ns in [
        ("a", {"app": "x", "tier": "web"}, NS),
        ("b", {"app": "x", "tier": "db"}, NS),
        ("c", {"app": "y"}, NS),
        ("d", {"app": "x", "tier": "web"}, "other"),
    ]:
        await v1.create_namespaced_config_map(ns, configmap(name, labels))

    async def names(**kwargs):
        listed = await v1.list_namespaced_config_map(NS, **kwargs)
        return sorted(item.metadata.name for item in listed.items)

    assert await names(label_selector="app=x") == ["a", "b"]
    assert await names(label_selector="app!=x") == ["c"]
    assert await names(label_selector="tier in (web,cache),app") == ["a"]
    assert await names(label_selector="!tier") == ["c"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    everywhere = await v1.list_config_map_for_all_namespaces(label_selector="tier=web")
    assert sorted((i.metadata.namespace, i.metadata.name) for i in everywhere.items) == [("default", "a"), ("other", "d")]
    assert int(everywhere.metadata.resource_version) > 0
    namespaces = await v1.list_namespace()
    assert {"default", "kube-system", "other"} <= {n.metadata.name for n in namespaces.items}


async def test_list_document_shape(raw):
    status, body, _ = await raw.request("GET", "/api/v1/namespaces/default/configmaps?limit=1&continue=")
    assert status == 200
    assert body["kind"] == "ConfigMapList" and body["apiVersion"] == "v1" and body["items"] == []
    assert body["metadata"]["resourceVersion"] and "continue" not in body["metadata"]


async def test_cluster_scoped_kinds(api):
    storage = client.StorageV1Api(api)
    await storage.create_storage_class({"metadata": {"name": "fast"}, "provisioner": "example.com/local"})
    assert [sc.metadata.name for sc in (await storage.list_storage_class()).items] == ["fast"]
    deleted = await storage.delete_storage_class("fast")
    assert deleted.metadata.name == "fast"  # ReturnDeletedObject, as for storageclasses in Kubernetes


async def test_create_in_missing_namespace_is_404(api):
    await expect_status(
        client.CoreV1Api(api).create_namespaced_config_map("nowhere", configmap("x")), 404, "NotFound"
    )


# -- replace / patch ---------------------------------------------------------


async def test_replace_and_stale_resource_version_conflict(api):
    v1 = client.CoreV1Api(api)
    created = await v1.create_namespaced_config_map(NS, configmap("cfg", data={"a": "1"}))
    first = created.to_dict()
    body = api.sanitize_for_serialization(created)
    body["data"] = {"a": "2"}
    replaced = await v1.replace_namespaced_config_map("cfg", NS, body)
    assert replaced.data == {"a": "2"}
    assert int(replaced.metadata.resource_version) > int(first["metadata"]["resource_version"])
    body["data"] = {"a": "3"}  # still carries the first resourceVersion
    status = await expect_status(v1.replace_namespaced_config_map("cfg", NS, body), 409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert status["details"] == {"name": "cfg", "kind": "configmaps"}


async def test_patch_content_types(api, cluster):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_config_map(NS, configmap("cfg", {"app": "x"}, {"a": "1", "b": "2"}))
    merged = await v1.patch_namespaced_config_map(
        "cfg", NS, {"data": {"b": None, "c": "3"}}, _content_type="application/merge-patch+json"
    )
    assert merged.data == {"a": "1", "c": "3"}
    patched = await v1.patch_namespaced_config_map(
        "cfg", NS, [{"op": "replace", "path": "/metadata/labels/app", "value": "y"}]
    )
    assert patched.metadata.labels == {"app": "y"}
    types = [r.content_type for r in cluster.requests.matching("PATCH")]
    assert types == ["application/merge-patch+json", "application/json-patch+json"]


async def test_strategic_merge_patch_merges_containers_by_name(api, cluster):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_pod(NS, pod("web", containers=("a", "b")))
    patched = await v1.patch_namespaced_pod("web", NS, {"spec": {"containers": [{"name": "b", "image": "busybox:new"}]}})
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "busybox:a"), ("b", "busybox:new")]
    assert cluster.requests.matching("PATCH")[0].content_type == "application/strategic-merge-patch+json"


async def test_strategic_merge_patch_on_custom_resource_is_415(api):
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, virtual_machine("vm1"))
    call = custom.patch_namespaced_custom_object(
        VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/strategic-merge-patch+json",
    )
    await expect_status(call, 415, "UnsupportedMediaType")
    merged = await custom.patch_namespaced_custom_object(
        VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged["metadata"]["labels"] == {"a": "b"}


async def test_unknown_patch_type_is_415(raw):
    await raw.request("POST", "/api/v1/namespaces/default/configmaps", configmap("cfg"))
    status, body, _ = await raw.request(
        "PATCH", "/api/v1/namespaces/default/configmaps/cfg", {"data": {}}, content_type="text/plain"
    )
    assert (status, body["reason"], body["code"]) == (415, "UnsupportedMediaType", 415)


# -- delete ------------------------------------------------------------------


async def test_delete_with_finalizers_marks_then_removes(api):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_config_map(NS, configmap("held", finalizers=["example.com/hold"]))
    answer = await v1.delete_namespaced_config_map("held", NS)
    assert answer.status is None  # the object itself, not a Status: it still exists
    marked = await v1.read_namespaced_config_map("held", NS)
    assert marked.metadata.deletion_timestamp is not None
    await v1.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json")
    await expect_status(v1.read_namespaced_config_map("held", NS), 404, "NotFound")


async def test_delete_answers_status_or_object_like_kubernetes(raw):
    await raw.request("POST", "/api/v1/namespaces/default/configmaps", configmap("cfg"))
    status, body, _ = await raw.request("DELETE", "/api/v1/namespaces/default/configmaps/cfg")
    assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "cfg" and body["details"]["kind"] == "configmaps" and body["details"]["uid"]
    await raw.request("POST", "/api/v1/namespaces/default/pods", pod("web"))
    status, body, _ = await raw.request("DELETE", "/api/v1/namespaces/default/pods/web", {"gracePeriodSeconds": 0})
    assert status == 200 and body["kind"] == "Pod" and body["metadata"]["name"] == "web"
    status, body, _ = await raw.request("DELETE", "/api/v1/namespaces/default/pods/web")
    assert (status, body["reason"]) == (404, "NotFound")


async def test_owner_references_garbage_collection(api):
    v1 = client.CoreV1Api(api)

    async def owner_and_dependent(suffix):
        owner = await v1.create_namespaced_config_map(NS, configmap(f"owner-{suffix}"))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}
        await v1.create_namespaced_secret(NS, {"metadata": {"name": f"dep-{suffix}", "ownerReferences": [ref]}})

    await owner_and_dependent("bg")
    await v1.delete_namespaced_config_map("owner-bg", NS, propagation_policy="Background")
    await expect_status(v1.read_namespaced_secret("dep-bg", NS), 404, "NotFound")

    await owner_and_dependent("orphan")
    await v1.delete_namespaced_config_map("owner-orphan", NS, body=client.V1DeleteOptions(propagation_policy="Orphan"))
    assert (await v1.read_namespaced_secret("dep-orphan", NS)).metadata.name == "dep-orphan"


async def test_delete_precondition_conflict(api):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_config_map(NS, configmap("cfg"))
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    await expect_status(v1.delete_namespaced_config_map("cfg", NS, body=options), 409, "Conflict")


async def test_delete_collection_with_label_selector(api, raw):
    v1 = client.CoreV1Api(api)
    for name, app in [("a", "x"), ("b", "x"), ("c", "y")]:
        await v1.create_namespaced_config_map(NS, configmap(name, {"app": app}))
    status, body, _ = await raw.request("DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dx")
    assert status == 200 and body["kind"] == "ConfigMapList"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]
    left = await v1.list_namespaced_config_map(NS)
    assert [i.metadata.name for i in left.items] == ["c"]
    await v1.delete_collection_namespaced_config_map(NS, label_selector="app=y")
    assert (await v1.list_namespaced_config_map(NS)).items == []


async def test_graceful_pod_deletion_is_due_after_its_grace_period(api, cluster):
    v1 = client.CoreV1Api(api)
    body = pod("placed")
    body["spec"]["nodeName"] = "node-1"
    await v1.create_namespaced_pod(NS, body)
    cluster.store.clock = lambda: datetime.datetime(2030, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
    await v1.delete_namespaced_pod("placed", NS, grace_period_seconds=45)
    marked = await v1.read_namespaced_pod("placed", NS)
    assert marked.metadata.deletion_grace_period_seconds == 45
    assert marked.metadata.deletion_timestamp == datetime.datetime(2030, 1, 1, 12, 0, 45, tzinfo=datetime.UTC)


# -- generation --------------------------------------------------------------


async def test_generation_only_where_kubernetes_keeps_one(api, raw):
    v1 = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    merge = "application/merge-patch+json"
    # Built-in kinds without it: ConfigMap, Service, PVC... (Pods since 1.33).
    created = await v1.create_namespaced_config_map(NS, configmap("plain", data={"a": "1"}))
    assert created.metadata.generation is None
    updated = await v1.patch_namespaced_config_map("plain", NS, {"data": {"a": "2"}, "metadata": {"generation": 7}}, _content_type=merge)
    assert updated.metadata.generation is None  # clients cannot set it either
    _, svc, _ = await raw.request("POST", "/api/v1/namespaces/default/services",
                                  {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}})
    assert "generation" not in svc["metadata"]
    web = await v1.create_namespaced_pod(NS, pod("web"))
    assert web.metadata.generation == (1 if at_least(1, 33) else None)
    # Custom resources: 1, then one more per change outside metadata and status, and on being marked for deletion.
    body = virtual_machine("vm1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    vm = await custom.create_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, body)
    assert vm["metadata"]["generation"] == 1
    patch = custom.patch_namespaced_custom_object
    vm = await patch(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", {"metadata": {"labels": {"a": "b"}, "generation": 9}}, _content_type=merge)
    assert vm["metadata"]["generation"] == 1
    vm = await patch(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", {"spec": {"runStrategy": "Always"}}, _content_type=merge)
    assert vm["metadata"]["generation"] == 2
    vm = await custom.patch_namespaced_custom_object_status(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", {"status": {"ready": False}},
                                                            _content_type=merge)
    assert vm["metadata"]["generation"] == 2
    await custom.delete_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1")
    vm = await custom.get_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1")
    assert vm["metadata"]["generation"] == 3 and vm["metadata"]["deletionGracePeriodSeconds"] == 0


# -- status subresource ------------------------------------------------------


async def test_status_subresource(api, raw):
    v1 = client.CoreV1Api(api)
    created = await v1.create_namespaced_pod(NS, pod("web"))
    body = api.sanitize_for_serialization(created)
    body["status"] = {"phase": "Running", "podIP": "127.0.0.9"}
    body["spec"]["containers"][0]["image"] = "busybox:ignored"
    updated = await v1.replace_namespaced_pod_status("web", NS, body)
    assert updated.status.phase == "Running" and updated.spec.containers[0].image == "busybox:main"
    read = await v1.read_namespaced_pod_status("web", NS)
    assert read.status.pod_ip == "127.0.0.9"
    patched = await v1.patch_namespaced_pod_status(
        "web", NS, {"status": {"phase": "Succeeded"}}, _content_type="application/merge-patch+json"
    )
    assert patched.status.phase == "Succeeded"
    # the main resource ignores status changes
    main = api.sanitize_for_serialization(patched)
    main["status"] = {"phase": "Failed"}
    assert (await v1.replace_namespaced_pod("web", NS, main)).status.phase == "Succeeded"
    status, body, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/web/bogus")
    assert (status, body["reason"]) == (404, "NotFound")


# -- error Status objects ----------------------------------------------------


async def test_error_status_objects(api, raw):
    v1 = client.CoreV1Api(api)
    path = "/api/v1/namespaces/default/configmaps"
    status, body, _ = await raw.request("POST", path, "{not json")
    assert (status, body["kind"], body["code"], body["reason"]) == (400, "Status", 400, "BadRequest")
    await expect_status(v1.read_namespaced_config_map("missing", NS), 404, "NotFound")
    status, body, _ = await raw.request("POST", f"{path}/cfg", configmap("cfg"))
    assert (status, body["code"], body["reason"]) == (405, 405, "MethodNotAllowed")
    for method, where in [("PUT", path), ("POST", "/api/v1/configmaps"), ("POST", "/api/v1/watch/namespaces/default/configmaps")]:
        status, body, _ = await raw.request(method, where, configmap("cfg"))
        assert (status, body["reason"]) == (405, "MethodNotAllowed"), where
    await v1.create_namespaced_config_map(NS, configmap("cfg"))
    status = await expect_status(v1.create_namespaced_config_map(NS, configmap("cfg")), 409, "AlreadyExists")
    assert status["message"] == 'configmaps "cfg" already exists'
    status, body, _ = await raw.request("POST", path, configmap("yml"), content_type="application/x-protobuf")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    broken = pod("bad")
    del broken["spec"]["containers"]
    status = await expect_status(v1.create_namespaced_pod(NS, broken), 422, "Invalid")
    assert status["details"]["causes"]
    status, body, _ = await raw.request("GET", "/api/v1/namespaces/default/widgets")
    assert (status, body["reason"]) == (404, "NotFound")
    status, body, _ = await raw.request("GET", "/no/such/path")
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")


# -- discovery ---------------------------------------------------------------


async def test_discovery_documents(api, raw):
    version = await client.VersionApi(api).get_code()
    assert (version.major, version.minor) == ("1", "34") and version.git_version == "v1.34.4"
    assert (await client.CoreApi(api).get_api_versions()).versions == ["v1"]
    groups = {g.name: g for g in (await client.ApisApi(api).get_api_versions()).groups}
    assert {"storage.k8s.io", "kubevirt.io", "cdi.kubevirt.io", "subresources.kubevirt.io"} <= set(groups)
    assert groups["cdi.kubevirt.io"].preferred_version.group_version == "cdi.kubevirt.io/v1beta1"
    core = {r.name: r for r in (await client.CoreV1Api(api).get_api_resources()).resources}
    assert core["pods"].short_names == ["po"] and core["pods"].namespaced and core["pods"].kind == "Pod"
    assert core["pods"].singular_name == "pod" and "watch" in core["pods"].verbs
    assert core["pods/status"].verbs == ["get", "patch", "update"]
    assert not core["nodes"].namespaced
    for path in ("/api", "/api/", "/api/v1/", "/apis/", "/apis/kubevirt.io/", "/apis/kubevirt.io/v1/", "/version/"):
        status, body, headers = await raw.request("GET", path)
        assert status == 200 and headers["Content-Type"] == "application/json", path
    _, vms, _ = await raw.request("GET", "/apis/kubevirt.io/v1")
    vm = next(r for r in vms["resources"] if r["name"] == "virtualmachines")
    assert vm["shortNames"] == ["vm", "vms"] and vm["categories"] == ["all"]
    _, sub, _ = await raw.request("GET", "/apis/subresources.kubevirt.io/v1/")
    assert sorted(r["name"] for r in sub["resources"]) == [
        "virtualmachines/restart", "virtualmachines/start", "virtualmachines/stop"
    ]
    aggregated = {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"}
    status, body, headers = await raw.request("GET", "/apis", headers=aggregated)
    assert body["kind"] == "APIGroupList" and headers["Content-Type"] == "application/json"
    for path in ("/healthz", "/readyz", "/livez"):
        assert (await raw.request("GET", path))[1] == "ok"
    assert (await raw.request("GET", "/apis/nosuch.group"))[0] == 404


async def test_openapi_documents(raw):
    _, root, _ = await raw.request("GET", "/openapi/v3")
    url = root["paths"]["api/v1"]["serverRelativeURL"]
    _, doc, _ = await raw.request("GET", url)
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    status, v2, _ = await raw.request("GET", "/openapi/v2")
    assert status == 200 and v2["swagger"] == "2.0"


# -- server-side printing ----------------------------------------------------

TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}


async def test_table_for_list_and_get(raw):
    await raw.request("POST", "/api/v1/namespaces/default/pods", pod("web"))
    status, table, _ = await raw.request("GET", "/api/v1/namespaces/default/pods", headers=TABLE)
    assert status == 200 and (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1)]
    (row,) = table["rows"]
    assert row["cells"][:4] == ["web", "0/1", "Pending", 0]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "web"
    _, one, _ = await raw.request("GET", "/api/v1/namespaces/default/pods/web?includeObject=Object", headers=TABLE)
    assert one["rows"][0]["object"]["kind"] == "Pod"
    await raw.request("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", virtual_machine("vm1"))
    _, vms, _ = await raw.request("GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", headers=TABLE)
    assert [c["name"] for c in vms["columnDefinitions"]] == ["Name", "Age", "Status", "Ready"]


# -- KubeVirt subresources ---------------------------------------------------


async def test_vm_start_subresource_answers_202(raw, cluster):
    pytest.importorskip("localcluster.vmactions", exc_type=ImportError)
    await raw.request("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", virtual_machine("vm1"))
    path = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/start"
    status, body, _ = await raw.request("PUT", path, {})
    assert (status, body) == (202, None)
    status, body, _ = await raw.request("PUT", path.replace("vm1", "missing"), {})
    assert (status, body["reason"]) == (404, "NotFound")
    status, body, _ = await raw.request("POST", path, {})
    assert (status, body["reason"]) == (405, "MethodNotAllowed")


# -- faults and the request log ----------------------------------------------


async def test_fault_injection_and_request_log(api, cluster):
    v1 = client.CoreV1Api(api)
    await v1.create_namespaced_config_map(NS, configmap("cfg"))
    cluster.faults.add("GET", r"/configmaps/cfg$", status=503, reason="ServiceUnavailable", message="try later", count=2)
    for _ in range(2):
        status = await expect_status(v1.read_namespaced_config_map("cfg", NS), 503, "ServiceUnavailable")
        assert status["message"] == "try later"
    assert (await v1.read_namespaced_config_map("cfg", NS)).metadata.name == "cfg"

    cluster.faults.add("*", r"/configmaps", delay=0.3)
    started = time.monotonic()
    await v1.list_namespaced_config_map(NS)
    assert time.monotonic() - started >= 0.3

    cluster.faults.add("GET", "/configmaps", status=500)
    cluster.faults.clear()
    await v1.list_namespaced_config_map(NS)

    assert cluster.requests.count("GET", r"/configmaps/cfg$") == 3
    assert [r.status for r in cluster.requests.matching("GET", r"/configmaps/cfg$")] == [503, 503, 200]
    (post,) = cluster.requests.matching("POST")
    assert post.content_type == "application/json" and post.body["metadata"]["name"] == "cfg"
    listing = cluster.requests.matching("GET", r"/configmaps$")[-1]
    assert listing.body is None and listing.status == 200
    cluster.requests.clear()
    assert cluster.requests.count() == 0


def test_faults_are_thread_safe(cluster):
    """Many threads consuming one fault's uses never consume more than ``count``."""
    from concurrent.futures import ThreadPoolExecutor

    cluster.faults.add("GET", "/x", status=500, count=50)
    with ThreadPoolExecutor(8) as pool:
        hits = list(pool.map(lambda _: cluster.faults.match("GET", "/x"), range(200)))
    assert sum(hit is not None for hit in hits) == 50


# -- the sync kubernetes client ----------------------------------------------


def test_sync_client_verbs(sync_api):
    v1 = kubernetes.client.CoreV1Api(sync_api)
    ApiError = kubernetes.client.exceptions.ApiException
    created = v1.create_namespaced_config_map(NS, configmap("", {"app": "s"}, generateName="sync-"))
    name = created.metadata.name
    assert name.startswith("sync-")
    assert v1.read_namespaced_config_map(name, NS).metadata.uid == created.metadata.uid
    assert [i.metadata.name for i in v1.list_namespaced_config_map(NS, label_selector="app in (s)").items] == [name]
    assert v1.list_namespaced_config_map(NS, field_selector=f"metadata.name!={name}").items == []
    body = sync_api.sanitize_for_serialization(created)
    body["data"] = {"k": "v"}
    assert v1.replace_namespaced_config_map(name, NS, body).data == {"k": "v"}
    with pytest.raises(ApiError) as info:
        v1.replace_namespaced_config_map(name, NS, body)
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "Conflict"
    patched = v1.patch_namespaced_config_map(name, NS, [{"op": "add", "path": "/data/j", "value": "1"}])
    assert patched.data == {"k": "v", "j": "1"}
    merged = v1.patch_namespaced_config_map(
        name, NS, {"data": {"m": "2"}}, _content_type="application/merge-patch+json"
    )
    assert merged.data == {"k": "v", "j": "1", "m": "2"}
    strategic = v1.patch_namespaced_config_map(
        name, NS, {"data": {"s": "3"}}, _content_type="application/strategic-merge-patch+json"
    )
    assert strategic.data["s"] == "3"
    answer = sync_api.sanitize_for_serialization(v1.delete_namespaced_config_map(name, NS))
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    with pytest.raises(ApiError) as info:
        v1.read_namespaced_config_map(name, NS)
    assert info.value.status == 404
    v1.create_namespaced_config_map(NS, configmap("c1", {"app": "s"}))
    v1.delete_collection_namespaced_config_map(NS, label_selector="app=s")
    assert v1.list_namespaced_config_map(NS).items == []


def test_sync_custom_objects(sync_api):
    custom = kubernetes.client.CustomObjectsApi(sync_api)
    custom.create_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, virtual_machine("vm1"))
    listed = custom.list_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL)
    assert listed["kind"] == "VirtualMachineList" and [i["metadata"]["name"] for i in listed["items"]] == ["vm1"]
    vm = custom.get_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1")
    vm["status"] = {"printableStatus": "Stopped"}
    custom.replace_namespaced_custom_object_status(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1", vm)
    status = custom.get_namespaced_custom_object_status(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1")
    assert status["status"]["printableStatus"] == "Stopped"
    answer = custom.delete_namespaced_custom_object(VM_GROUP, VM_VERSION, NS, VM_PLURAL, "vm1")
    assert answer["kind"] == "Status" and answer["details"]["group"] == VM_GROUP


async def test_many_concurrent_clients(api):
    """Writes from many coroutines at once all land, each with its own resourceVersion."""
    v1 = client.CoreV1Api(api)
    created = await asyncio.gather(*(v1.create_namespaced_config_map(NS, configmap(f"c{i}")) for i in range(20)))
    assert len({c.metadata.resource_version for c in created}) == 20


def test_kubeconfig_is_private_and_points_at_the_cluster(cluster, kubeconfig):
    assert stat.S_IMODE(os.stat(kubeconfig).st_mode) == 0o600
    with open(kubeconfig) as f:
        doc = yaml.safe_load(f)
    context = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]
    assert context["namespace"] == "default"
    assert next(c for c in doc["clusters"] if c["name"] == context["cluster"])["cluster"]["server"] == cluster.url
    assert next(u for u in doc["users"] if u["name"] == context["user"])["user"]["token"]
