"""PATCH semantics of the local cluster, against the Kubernetes API server's.

Covers ``localcluster.patch.apply_patch``: RFC 7386 merge
patches (null deletes, maps merge, lists replace), RFC 6902 JSON patches
(add/replace/remove/test, 422 Invalid when an operation fails, 400 for a body
that is not a list), strategic merge patches driven by kubernetes-validate's
schema markers (Pod containers/env/volumes/ports merged by their merge keys,
``$patch: delete``/``replace``, finalizers as a set, ``$deleteFromPrimitiveList``,
``$setElementOrder``, ``$retainKeys``, labels null deletion, replaced lists,
list order as the API server orders it), 415 for strategic merge on a custom
resource (KubeVirt VirtualMachine), for server-side apply and for unknown
content types, and that the input object is never mutated. No cluster.
"""

from __future__ import annotations

import copy
import json

import pytest
from localcluster.errors import ApiError
from localcluster.kinds import by_kind
from localcluster.patch import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, apply_patch

KINDS = by_kind()
POD_KIND = KINDS[("v1", "Pod")]
SERVICE_KIND = KINDS[("v1", "Service")]
VM_KIND = KINDS[("kubevirt.io/v1", "VirtualMachine")]


def make_pod():
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "jupyter-alice",
            "namespace": "hub",
            "uid": "u-1",
            "labels": {"app": "jupyterhub", "component": "singleuser-server", "tier": "gpu"},
            "annotations": {"hub.jupyter.org/username": "alice"},
            "finalizers": ["a.example.com/x", "b.example.com/y"],
        },
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "jupyter/base:1",
                    "env": [
                        {"name": "JUPYTERHUB_USER", "value": "alice"},
                        {"name": "MEM_LIMIT", "value": "1G"},
                    ],
                    "ports": [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1G"}},
                    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                },
                {"name": "sidecar", "image": "busybox:1"},
            ],
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}},
                {"name": "scratch", "emptyDir": {}},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"gpu": "true"},
        },
        "status": {"phase": "Running"},
    }


def smp(obj, patch, kind=POD_KIND):
    return apply_patch(obj, patch, STRATEGIC_MERGE_PATCH, kind)


def names(items):
    return [item["name"] for item in items]


# --- merge patch (RFC 7386) ----------------------------------------------------------


def test_merge_patch_null_deletes_and_maps_merge():
    pod = make_pod()
    before = copy.deepcopy(pod)
    patch = {"metadata": {"labels": {"tier": None, "new": "x"}, "annotations": None}}
    out = apply_patch(pod, patch, MERGE_PATCH, POD_KIND)
    assert out["metadata"]["labels"] == {"app": "jupyterhub", "component": "singleuser-server", "new": "x"}
    assert "annotations" not in out["metadata"]
    assert out["spec"] == before["spec"]
    assert pod == before  # never mutated


def test_merge_patch_lists_replace_and_nested_nulls_are_dropped():
    pod = make_pod()
    patch = {"spec": {"containers": [{"name": "only", "image": "x"}], "affinity": {"a": {"b": None, "c": 1}}}}
    out = apply_patch(pod, patch, MERGE_PATCH, POD_KIND)
    assert out["spec"]["containers"] == [{"name": "only", "image": "x"}]
    assert out["spec"]["affinity"] == {"a": {"c": 1}}


def test_merge_patch_accepts_raw_json_and_content_type_parameters():
    pod = make_pod()
    out = apply_patch(pod, b'{"status": {"phase": "Succeeded"}}', MERGE_PATCH + "; charset=utf-8", POD_KIND)
    assert out["status"]["phase"] == "Succeeded"


def test_merge_patch_works_for_custom_resources():
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "spec": {"running": False}}
    assert apply_patch(vm, {"spec": {"running": True}}, MERGE_PATCH, VM_KIND)["spec"] == {"running": True}


@pytest.mark.parametrize("body", [[1, 2], "null", "not json", b"[]"])
def test_merge_patch_body_must_be_an_object(body):
    with pytest.raises(ApiError) as caught:
        apply_patch(make_pod(), body, MERGE_PATCH, POD_KIND)
    assert caught.value.code == 400


# --- JSON patch (RFC 6902) ------------------------------------------------------------


def test_json_patch_add_replace_remove():
    pod = make_pod()
    before = copy.deepcopy(pod)
    ops = [
        {"op": "add", "path": "/metadata/labels/hub.jupyter.org~1username", "value": "alice"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "jupyter/base:2"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "third", "image": "x"}},
        {"op": "test", "path": "/status/phase", "value": "Running"},
    ]
    out = apply_patch(pod, ops, JSON_PATCH, POD_KIND)
    assert out["metadata"]["labels"]["hub.jupyter.org/username"] == "alice"
    assert out["spec"]["containers"][0]["image"] == "jupyter/base:2"
    assert out["metadata"]["finalizers"] == ["b.example.com/y"]
    assert names(out["spec"]["containers"]) == ["notebook", "sidecar", "third"]
    assert pod == before


def test_json_patch_accepts_raw_bytes():
    body = json.dumps([{"op": "replace", "path": "/status/phase", "value": "Failed"}]).encode()
    assert apply_patch(make_pod(), body, JSON_PATCH, POD_KIND)["status"]["phase"] == "Failed"


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/status/phase", "value": "Pending"}],
        [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}],
        [{"op": "remove", "path": "/spec/affinity"}],
        [{"op": "replace", "path": "/metadata/labels/missing", "value": "x"}],
        [{"op": "add", "path": "/spec/missing/deeper", "value": 1}],
        [{"op": "explode", "path": "/spec"}],
        [{"path": "/spec"}],
    ],
)
def test_json_patch_failures_are_422_and_leave_the_object_alone(ops):
    pod = make_pod()
    before = copy.deepcopy(pod)
    with pytest.raises(ApiError) as caught:
        apply_patch(pod, ops, JSON_PATCH, POD_KIND)
    assert caught.value.code == 422
    assert caught.value.reason == "Invalid"
    assert caught.value.message == "the server rejected our request due to an error in our request"
    assert pod == before


@pytest.mark.parametrize("body", [{"op": "add"}, "[1]", [["nested"]], "not json"])
def test_json_patch_body_must_be_a_list_of_operations(body):
    with pytest.raises(ApiError) as caught:
        apply_patch(make_pod(), body, JSON_PATCH, POD_KIND)
    assert caught.value.code == 400


# --- strategic merge patch -----------------------------------------------------------


def test_patching_one_container_image_keeps_the_others():
    pod = make_pod()
    before = copy.deepcopy(pod)
    out = smp(pod, {"spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]}})
    containers = out["spec"]["containers"]
    assert names(containers) == ["notebook", "sidecar"]
    assert containers[1] == {"name": "sidecar", "image": "busybox:2"}
    assert containers[0] == before["spec"]["containers"][0]
    assert pod == before


def test_new_container_is_added_where_the_api_server_puts_it():
    # Without $setElementOrder the API server places a new element before the
    # live elements (the kubectl patch task documentation shows the same).
    out = smp(make_pod(), {"spec": {"containers": [{"name": "extra", "image": "redis"}]}})
    assert names(out["spec"]["containers"]) == ["extra", "notebook", "sidecar"]
    # A new element after a patched one follows it.
    out = smp(make_pod(), {"spec": {"containers": [{"name": "notebook", "tty": True}, {"name": "extra"}]}})
    assert names(out["spec"]["containers"]) == ["notebook", "extra", "sidecar"]


def test_env_merges_by_name_inside_a_container():
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "env": [{"name": "MEM_LIMIT", "value": "2G"}, {"name": "NEW", "value": "1"}],
                }
            ]
        }
    }
    out = smp(make_pod(), patch)
    notebook = out["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in notebook["env"]}
    assert env == {"JUPYTERHUB_USER": "alice", "MEM_LIMIT": "2G", "NEW": "1"}
    assert notebook["image"] == "jupyter/base:1"
    assert notebook["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]


def test_env_entry_deleted_with_patch_delete_directive():
    env = [{"name": "MEM_LIMIT", "$patch": "delete"}]
    out = smp(make_pod(), {"spec": {"containers": [{"name": "notebook", "env": env}]}})
    assert names(out["spec"]["containers"][0]["env"]) == ["JUPYTERHUB_USER"]


def test_volumes_merge_by_name():
    patch = {
        "spec": {
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ]
        }
    }
    out = smp(make_pod(), patch)
    volumes = {v["name"]: v for v in out["spec"]["volumes"]}
    assert set(volumes) == {"home", "scratch", "shm"}
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "claim-alice"}
    assert volumes["scratch"]["emptyDir"] == {"sizeLimit": "10Gi"}


def test_retain_keys_switches_a_volume_source():
    patch = {
        "spec": {
            "volumes": [
                {
                    "$retainKeys": ["name", "persistentVolumeClaim"],
                    "name": "scratch",
                    "persistentVolumeClaim": {"claimName": "scratch-alice"},
                }
            ]
        }
    }
    out = smp(make_pod(), patch)
    scratch = next(v for v in out["spec"]["volumes"] if v["name"] == "scratch")
    assert scratch == {"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch-alice"}}


def test_retain_keys_must_list_every_patched_key():
    patch = {"spec": {"volumes": [{"$retainKeys": ["name"], "name": "scratch", "emptyDir": {}}]}}
    with pytest.raises(ApiError) as caught:
        smp(make_pod(), patch)
    assert caught.value.code == 400


def test_patch_delete_removes_a_container():
    out = smp(make_pod(), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}})
    assert names(out["spec"]["containers"]) == ["notebook"]


def test_patch_replace_in_a_merge_list_replaces_the_list():
    patch = {"spec": {"volumes": [{"name": "only", "emptyDir": {}}, {"$patch": "replace"}]}}
    out = smp(make_pod(), patch)
    assert out["spec"]["volumes"] == [{"name": "only", "emptyDir": {}}]


def test_patch_replace_and_delete_in_maps():
    out = smp(make_pod(), {"spec": {"nodeSelector": {"$patch": "replace", "zone": "a"}}})
    assert out["spec"]["nodeSelector"] == {"zone": "a"}
    out = smp(make_pod(), {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert out["spec"]["nodeSelector"] == {}


def test_finalizers_are_a_set_union():
    pod = make_pod()
    out = smp(pod, {"metadata": {"finalizers": ["b.example.com/y", "c.example.com/z"]}})
    finalizers = out["metadata"]["finalizers"]
    assert sorted(finalizers) == ["a.example.com/x", "b.example.com/y", "c.example.com/z"]
    assert len(finalizers) == 3
    # The API server's order: live "a" precedes patched "b", new "c" follows "b".
    assert finalizers == ["a.example.com/x", "b.example.com/y", "c.example.com/z"]


def test_delete_from_primitive_list():
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/x"]}}
    out = smp(make_pod(), patch)
    assert out["metadata"]["finalizers"] == ["b.example.com/y"]
    # Deleting from a list that is not there is a no-op, not a new list.
    out = smp({"metadata": {}}, patch)
    assert "finalizers" not in out["metadata"]


def test_labels_null_deletion_and_addition():
    patch = {"metadata": {"labels": {"tier": None, "hub.jupyter.org/username": "alice"}}}
    out = smp(make_pod(), patch)
    assert out["metadata"]["labels"] == {
        "app": "jupyterhub",
        "component": "singleuser-server",
        "hub.jupyter.org/username": "alice",
    }
    out = smp(make_pod(), {"metadata": {"labels": None}})
    assert "labels" not in out["metadata"]


def test_set_element_order_orders_the_merged_list():
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "extra"}, {"name": "notebook"}],
            "containers": [{"name": "extra", "image": "redis"}],
        }
    }
    out = smp(make_pod(), patch)
    assert names(out["spec"]["containers"]) == ["sidecar", "extra", "notebook"]
    assert not any(k.startswith("$") for k in out["spec"])
    # Order alone, no list change.
    patch = {"spec": {"$setElementOrder/volumes": [{"name": "scratch"}, {"name": "home"}]}}
    assert names(smp(make_pod(), patch)["spec"]["volumes"]) == ["scratch", "home"]


def test_set_element_order_for_a_primitive_list_as_kubectl_apply_sends_it():
    patch = {
        "metadata": {
            "$setElementOrder/finalizers": ["c.example.com/z", "a.example.com/x"],
            "$deleteFromPrimitiveList/finalizers": ["b.example.com/y"],
            "finalizers": ["c.example.com/z"],
        }
    }
    out = smp(make_pod(), patch)
    assert out["metadata"]["finalizers"] == ["c.example.com/z", "a.example.com/x"]


def test_set_element_order_must_agree_with_the_patch_list():
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "notebook"}],
            "containers": [{"name": "extra", "image": "redis"}],
        }
    }
    with pytest.raises(ApiError) as caught:
        smp(make_pod(), patch)
    assert caught.value.code == 400


def test_lists_without_merge_strategy_are_replaced():
    patch = {"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "alice"}]}}
    out = smp(make_pod(), patch)
    assert out["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "alice"}]


def test_ports_merge_by_container_port_and_resource_maps_merge():
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "ports": [{"containerPort": 8888, "name": "http"}],
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ]
        }
    }
    notebook = smp(make_pod(), patch)["spec"]["containers"][0]
    assert notebook["ports"] == [{"containerPort": 8888, "name": "http", "protocol": "TCP"}]
    assert notebook["resources"]["limits"] == {"nvidia.com/gpu": "2", "memory": "1G"}


def test_service_ports_merge_by_port():
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8888}, {"port": 443, "targetPort": 8443}]}}
    out = smp(svc, {"spec": {"ports": [{"port": 443, "targetPort": 9443}]}}, SERVICE_KIND)
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 8888}, {"port": 443, "targetPort": 9443}]


def test_new_fields_drop_nulls_and_directives():
    patch = {
        "spec": {
            "affinity": {"nodeAffinity": {"x": None, "y": 1}},
            "initContainers": [{"name": "init", "image": "busybox", "args": None}],
            "dnsConfig": {"$patch": "replace", "nameservers": ["1.1.1.1"]},
        },
        "metadata": {"ownerReferences": [{"uid": "o-1", "name": "owner", "$patch": "delete"}]},
    }
    out = smp(make_pod(), patch)
    assert out["spec"]["affinity"] == {"nodeAffinity": {"y": 1}}
    assert out["spec"]["initContainers"] == [{"name": "init", "image": "busybox"}]
    # A map carrying $patch on a field the live object lacks is dropped, as
    # strategicpatch.removeDirectives drops it.
    assert "dnsConfig" not in out["spec"]
    assert out["metadata"]["ownerReferences"] == []


def test_merge_list_element_without_merge_key_is_400():
    with pytest.raises(ApiError) as caught:
        smp(make_pod(), {"spec": {"containers": [{"image": "no-name"}]}})
    assert caught.value.code == 400
    assert "merge key" in caught.value.message


def test_unknown_patch_directive_is_400():
    with pytest.raises(ApiError) as caught:
        smp(make_pod(), {"spec": {"nodeSelector": {"$patch": "frobnicate"}}})
    assert caught.value.code == 400


def test_strategic_merge_never_mutates_its_inputs():
    pod = make_pod()
    patch = {
        "metadata": {"labels": {"tier": None}, "$deleteFromPrimitiveList/finalizers": ["a.example.com/x"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "notebook"}],
            "containers": [{"name": "notebook", "env": [{"name": "MEM_LIMIT", "$patch": "delete"}]}],
        },
    }
    pod_before, patch_before = copy.deepcopy(pod), copy.deepcopy(patch)
    smp(pod, patch)
    assert pod == pod_before
    assert patch == patch_before


def test_strategic_merge_on_a_custom_resource_is_415():
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "spec": {"running": False}}
    with pytest.raises(ApiError) as caught:
        smp(vm, {"spec": {"running": True}}, VM_KIND)
    assert caught.value.code == 415
    assert caught.value.reason == "UnsupportedMediaType"


@pytest.mark.parametrize("content_type", [APPLY_PATCH, "application/json", "text/plain", ""])
def test_server_side_apply_and_unknown_content_types_are_415(content_type):
    with pytest.raises(ApiError) as caught:
        apply_patch(make_pod(), {"spec": {}}, content_type, POD_KIND)
    assert caught.value.code == 415
    assert caught.value.reason == "UnsupportedMediaType"


def test_server_side_apply_is_415_as_from_a_server_without_it():
    """Worded as kube-apiserver's 415 for a patch type it does not serve: the accepted types, apply not among them."""
    with pytest.raises(ApiError) as caught:
        apply_patch(make_pod(), "kind: Pod", APPLY_PATCH, POD_KIND)
    assert (caught.value.code, caught.value.reason) == (415, "UnsupportedMediaType")
    assert caught.value.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
    )
