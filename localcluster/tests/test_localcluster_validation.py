"""Tests for the local cluster's write validation (``localcluster.validation``).

Covers, without a cluster: a minimal valid object of every served kind; an
unknown (misspelled) field in every kind rejected with a 422 naming it; types,
enums and quantities; server-populated fields accepted; names, label keys and
values, annotation keys and size (``ValidateObjectMeta``); the update rules
(metadata name/namespace/uid, Pod spec, PVC class/modes/volume and
shrink-versus-grow, immutable Secrets and ConfigMaps, Service clusterIP,
VolumeSnapshot source); the realistic KubeVirt VirtualMachine and CDI
DataVolume the spawner writes; and the trimmed schema files themselves.
"""

from __future__ import annotations

import copy
import importlib.resources
import json

import pytest
from localcluster.kinds import KINDS, by_kind
from localcluster.schemas import trim
from localcluster.validation import Validator, is_qualified_name, parse_quantity

from localcluster import errors

KIND = by_kind()
POD = KIND[("v1", "Pod")]
PVC = KIND[("v1", "PersistentVolumeClaim")]
SERVICE = KIND[("v1", "Service")]
SECRET = KIND[("v1", "Secret")]
CONFIGMAP = KIND[("v1", "ConfigMap")]
NAMESPACE = KIND[("v1", "Namespace")]
VM = KIND[("kubevirt.io/v1", "VirtualMachine")]
DATAVOLUME = KIND[("cdi.kubevirt.io/v1beta1", "DataVolume")]
SNAPSHOT = KIND[("snapshot.storage.k8s.io/v1", "VolumeSnapshot")]


def _obj(kind, body, name="demo", namespace="jhub"):
    meta = {"name": name}
    if kind.namespaced:
        meta["namespace"] = namespace
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, **body}


#: The smallest body a real API server accepts, per kind (kind name -> body without metadata).
MINIMAL = {
    "Pod": {"spec": {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2025-01-01"}]}},
    "PersistentVolumeClaim": {
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    },
    "PersistentVolume": {
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/var/lib/localcluster/pv-demo"},
        }
    },
    "Service": {"spec": {"selector": {"app": "demo"}, "ports": [{"port": 8888, "targetPort": "notebook-port"}]}},
    "Secret": {"type": "Opaque", "data": {"token": "c2VjcmV0"}},
    "ConfigMap": {"data": {"key": "value"}},
    "ServiceAccount": {"automountServiceAccountToken": False},
    "Event": {
        "involvedObject": {"kind": "Pod", "name": "demo", "namespace": "jhub"},
        "reason": "Scheduled",
        "message": "Successfully assigned jhub/demo to node-1",
        "type": "Normal",
    },
    "Namespace": {},
    "ResourceQuota": {"spec": {"hard": {"requests.storage": "100Gi"}}},
    "Node": {"spec": {}},
    "StorageClass": {"provisioner": "rbd.csi.ceph.com", "allowVolumeExpansion": True},
    "VolumeSnapshot": {"spec": {"source": {"persistentVolumeClaimName": "claim-ann"}}},
    "VolumeSnapshotContent": {"spec": {"deletionPolicy": "Delete", "driver": "rbd.csi.ceph.com",
                                       "source": {"volumeHandle": "0001-rbd-1"},
                                       "volumeSnapshotRef": {"name": "snap-ann", "namespace": "jhub"}}},
    "VolumeSnapshotClass": {"driver": "rbd.csi.ceph.com", "deletionPolicy": "Delete"},
    "VirtualMachine": {
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}
    },
    "VirtualMachineInstance": {"spec": {"domain": {"devices": {}}}},
    "DataVolume": {
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "ubuntu-2404"},
            "storage": {"resources": {"requests": {"storage": "50Gi"}}},
        }
    },
    "DataSource": {"spec": {"source": {"pvc": {"name": "ubuntu-2404-golden", "namespace": "images"}}}},
}

#: One misspelled field per kind: (path of the dict to put it in, misspelled key, value, expected cause field).
MISSPELLED = {
    "Pod": (["spec"], "contianers", [], "spec.contianers"),
    "PersistentVolumeClaim": (["spec"], "storageClass", "ceph-rbd", "spec.storageClass"),
    "PersistentVolume": (["spec"], "capacty", {}, "spec.capacty"),
    "Service": (["spec", "ports", 0], "targetPrt", 8888, "spec.ports[0].targetPrt"),
    "Secret": ([], "stringdata", {}, "stringdata"),
    "ConfigMap": (["metadata"], "lables", {}, "metadata.lables"),
    "ServiceAccount": ([], "automountToken", False, "automountToken"),
    "Event": (["involvedObject"], "nmae", "x", "involvedObject.nmae"),
    "Namespace": ([], "spce", {}, "spce"),
    "ResourceQuota": (["spec"], "hardd", {}, "spec.hardd"),
    "Node": (["spec"], "unschedulabel", True, "spec.unschedulabel"),
    "StorageClass": ([], "reclaimPolicyy", "Retain", "reclaimPolicyy"),
    "VolumeSnapshot": (["spec"], "volumeSnapshotClass", "csi-rbd", "spec.volumeSnapshotClass"),
    "VolumeSnapshotContent": (["spec", "source"], "volumeHandel", "0001-rbd-1", "spec.source.volumeHandel"),
    "VolumeSnapshotClass": ([], "deletionPolicyy", "Delete", "deletionPolicyy"),
    "VirtualMachine": (["spec"], "runStrategi", "Always", "spec.runStrategi"),
    "VirtualMachineInstance": (["spec", "domain"], "cpuu", {}, "spec.domain.cpuu"),
    "DataVolume": (["spec", "storage"], "storageClass", "ceph-rbd", "spec.storage.storageClass"),
    "DataSource": (["spec", "source", "pvc"], "nmespace", "images", "spec.source.pvc.nmespace"),
}


def minimal(kind, **meta):
    obj = _obj(kind, copy.deepcopy(MINIMAL[kind.kind]))
    obj["metadata"].update(meta)
    return obj


@pytest.fixture(scope="module")
def validator():
    return Validator()


def causes_of(validator, kind, obj, old=None):
    with pytest.raises(errors.ApiError) as info:
        validator.validate(kind, obj, old)
    assert info.value.code == 422
    assert info.value.reason == "Invalid"
    return info.value.details["causes"]


def fields_of(validator, kind, obj, old=None):
    return {c["field"] for c in causes_of(validator, kind, obj, old)}


# --- schema ------------------------------------------------------------------------


def test_every_kind_has_a_sample():
    assert {k.kind for k in KINDS} == set(MINIMAL) == set(MISSPELLED)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_minimal_object_of_each_kind_passes(validator, kind):
    validator.validate(kind, minimal(kind))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_misspelled_field_is_rejected_and_named(validator, kind):
    obj = minimal(kind)
    where, key, value, field = MISSPELLED[kind.kind]
    target = obj
    for step in where:
        target = target[step]
    target[key] = value
    causes = causes_of(validator, kind, obj)
    assert {"field": field, "reason": "FieldValueInvalid", "message": f'unknown field "{field}"'} in causes


def test_invalid_status_body_is_kubernetes_shaped(validator):
    obj = minimal(VM)
    obj["spec"]["runStrategi"] = "Always"
    with pytest.raises(errors.ApiError) as info:
        validator.validate(VM, obj)
    status = info.value.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "VirtualMachine"
    assert status["details"]["group"] == "kubevirt.io"
    assert status["details"]["name"] == "demo"
    assert status["message"].startswith('VirtualMachine.kubevirt.io "demo" is invalid: spec.runStrategi')


def test_wrong_type_and_missing_required_field(validator):
    pod = minimal(POD)
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": "8888"}]
    del pod["spec"]["containers"][0]["name"]
    causes = causes_of(validator, POD, pod)
    assert {"field": "spec.containers[0].name", "reason": "FieldValueRequired", "message": "Required value"} in causes
    assert {
        "field": "spec.containers[0].ports[0].containerPort",
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "8888": must be of type integer',
    } in causes


def test_enum_is_reported_as_not_supported(validator):
    dv = minimal(DATAVOLUME)
    dv["spec"]["storage"]["accessModes"] = ["ReadWriteSometimes"]
    (cause,) = causes_of(validator, DATAVOLUME, dv)
    assert cause["field"] == "spec.storage.accessModes[0]"
    assert cause["reason"] == "FieldValueNotSupported"
    assert '"ReadWriteOnce"' in cause["message"]


def test_map_keys_are_bracketed_in_field_paths(validator):
    pvc = minimal(PVC)
    pvc["spec"]["resources"]["requests"]["storage"] = "10 Gi"
    (cause,) = causes_of(validator, PVC, pvc)
    assert cause["field"] == "spec.resources.requests[storage]"
    assert "quantities must match the regular expression" in cause["message"]


@pytest.mark.parametrize("size", ["10Gi", "500M", "1.5Ti", "1e9", 10737418240, 1.5])
def test_quantities_take_strings_and_numbers(validator, size):
    pvc = minimal(PVC)
    pvc["spec"]["resources"]["requests"]["storage"] = size
    validator.validate(PVC, pvc)
    dv = minimal(DATAVOLUME)
    dv["spec"]["storage"]["resources"]["requests"]["storage"] = size
    validator.validate(DATAVOLUME, dv)


def test_int_or_string_takes_both(validator):
    for target in (8888, "notebook-port"):
        svc = minimal(SERVICE)
        svc["spec"]["ports"][0]["targetPort"] = target
        validator.validate(SERVICE, svc)
    svc["spec"]["ports"][0]["targetPort"] = 88.5
    assert fields_of(validator, SERVICE, svc) == {"spec.ports[0].targetPort"}


def test_server_populated_fields_are_accepted(validator):
    server_meta = {
        "uid": "0d8d6a8e-1f7c-4f59-9f53-6f8a1d2c3b4a",
        "resourceVersion": "42",
        "generation": 2,
        "creationTimestamp": "2026-01-05T10:00:00Z",
        "managedFields": [
            {
                "manager": "kubespawner",
                "operation": "Update",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {}},
            }
        ],
        "finalizers": ["kubernetes.io/pvc-protection"],
    }
    pod = minimal(POD, **server_meta)
    pod["status"] = {
        "phase": "Running",
        "podIP": "127.0.0.5",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-05T10:00:03Z"}],
        "containerStatuses": [
            {
                "name": "notebook",
                "image": "x",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-05T10:00:02Z"}},
            }
        ],
    }
    validator.validate(POD, pod)
    vm = minimal(VM, **server_meta)
    vm["status"] = {"printableStatus": "Stopped", "ready": False, "created": False, "conditions": []}
    validator.validate(VM, vm)


def test_null_values_are_accepted(validator):
    vm = minimal(VM, creationTimestamp=None, labels=None)
    vm["spec"]["dataVolumeTemplates"] = None
    validator.validate(VM, vm)
    validator.validate(POD, minimal(POD, creationTimestamp=None))


def test_crd_metadata_is_checked_as_object_meta(validator):
    vm = minimal(VM)
    vm["metadata"]["lables"] = {"a": "b"}
    assert "metadata.lables" in fields_of(validator, VM, vm)
    snap = minimal(SNAPSHOT)
    snap["metadata"]["anotations"] = {}
    assert "metadata.anotations" in fields_of(validator, SNAPSHOT, snap)


def test_volumesnapshot_source_needs_exactly_one(validator):
    snap = minimal(SNAPSHOT)
    snap["spec"]["source"] = {}
    assert fields_of(validator, SNAPSHOT, snap) == {"spec.source"}
    snap["spec"]["source"] = {"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"}
    assert fields_of(validator, SNAPSHOT, snap) == {"spec.source"}
    snap["spec"]["source"] = {"volumeSnapshotContentName": "b"}
    snap["status"] = {
        "readyToUse": True,
        "restoreSize": "10Gi",
        "boundVolumeSnapshotContentName": "snapcontent-1",
        "creationTime": "2026-01-05T10:00:00Z",
        "error": {"message": "x", "time": "2026-01-05T10:00:00Z"},
    }
    validator.validate(SNAPSHOT, snap)


def test_pvc_needs_access_mode_and_storage_request(validator):
    pvc = minimal(PVC)
    pvc["spec"] = {"resources": {}}
    assert fields_of(validator, PVC, pvc) == {"spec.accessModes", "spec.resources[storage]"}


def test_compiled_schemas_are_shared():
    assert Validator().schema_validator(POD) is Validator().schema_validator(POD)


# --- names, labels, annotations -------------------------------------------------------


@pytest.mark.parametrize(
    "kind,name,ok",
    [
        (POD, "jupyter-ann", True),
        (POD, "jupyter-ann.gpu-1", True),
        (POD, "Jupyter-Ann", False),
        (POD, "jupyter_ann", False),
        (POD, "-ann", False),
        (POD, "a" * 253, True),
        (POD, "a" * 254, False),
        (PVC, "claim-ann", True),
        (NAMESPACE, "jhub", True),
        (NAMESPACE, "j.hub", False),
        (NAMESPACE, "a" * 64, False),
        (SERVICE, "ws-ann", True),
        (SERVICE, "1ws", False),
        (SERVICE, "ws.ann", False),
        (VM, "ws-ann", True),
        (VM, "WS", False),
        (DATAVOLUME, "ws-ann-root", True),
        (DATAVOLUME, "ws ann", False),
    ],
)
def test_names(validator, kind, name, ok):
    obj = minimal(kind)
    obj["metadata"]["name"] = name
    if ok:
        validator.validate(kind, obj)
    else:
        causes = causes_of(validator, kind, obj)
        assert {c["field"] for c in causes} == {"metadata.name"}
        assert all(c["reason"] == "FieldValueInvalid" for c in causes)


def test_missing_name_is_required(validator):
    pod = minimal(POD)
    del pod["metadata"]["name"]
    (cause,) = causes_of(validator, POD, pod)
    assert cause == {
        "field": "metadata.name",
        "reason": "FieldValueRequired",
        "message": "Required value: name or generateName is required",
    }


def test_namespace_on_cluster_scoped_kind_is_forbidden(validator):
    ns = minimal(NAMESPACE, namespace="jhub")
    assert fields_of(validator, NAMESPACE, ns) == {"metadata.namespace"}


@pytest.mark.parametrize(
    "key",
    ["app", "app.kubernetes.io/name", "hub.jupyter.org/username", "My_Key.1", "a" * 63, "x/" + "a" * 63],
)
def test_good_label_keys(validator, key):
    validator.validate(POD, minimal(POD, labels={key: "v"}))


@pytest.mark.parametrize(
    "key",
    ["-app", "app-", "a b", "a/b/c", "/app", "example.com/", "Example.com/app", "a" * 64, "a" * 254 + "/app"],
)
def test_bad_label_keys(validator, key):
    causes = causes_of(validator, POD, minimal(POD, labels={key: "v"}))
    assert {c["field"] for c in causes} == {"metadata.labels"}
    assert all(c["message"].startswith(f"Invalid value: {json.dumps(key)}: ") for c in causes)


@pytest.mark.parametrize(
    "value,ok",
    [("", True), ("v1.2_x-y", True), ("a" * 63, True), ("a" * 64, False), ("bad value", False), ("-v", False), ("v.", False)],
)
def test_label_values(validator, value, ok):
    pod = minimal(POD, labels={"app": value})
    if ok:
        validator.validate(POD, pod)
    else:
        causes = causes_of(validator, POD, pod)
        assert {c["field"] for c in causes} == {"metadata.labels"}


def test_64_char_label_value_message(validator):
    (cause,) = causes_of(validator, POD, minimal(POD, labels={"app": "a" * 64}))
    assert cause["message"].endswith("must be no more than 63 characters")


def test_annotation_keys_and_total_size(validator):
    validator.validate(POD, minimal(POD, annotations={"hub.jupyter.org/username": "Ann Smith <ann@example.org>"}))
    assert fields_of(validator, POD, minimal(POD, annotations={"bad key": "v"})) == {"metadata.annotations"}
    big = {"a": "x" * (256 * 1024 - 1)}
    validator.validate(POD, minimal(POD, annotations=big))
    big = {"ab": "x" * (256 * 1024 - 1)}
    (cause,) = causes_of(validator, POD, minimal(POD, annotations=big))
    assert cause["reason"] == "FieldValueTooLong" and cause["field"] == "metadata.annotations"


def test_qualified_name_messages_follow_kubernetes():
    assert is_qualified_name("app.kubernetes.io/name") == []
    assert is_qualified_name("a/b/c")[0].startswith("a qualified name must consist of")
    assert is_qualified_name("Bad.Prefix/x")[0].startswith("prefix part a lowercase RFC 1123 subdomain")
    assert is_qualified_name("x/")[0] == "name part must be non-empty"


# --- updates ---------------------------------------------------------------------------


def stored(kind, **meta):
    return minimal(kind, uid="3f1c", resourceVersion="7", creationTimestamp="2026-01-05T10:00:00Z", **meta)


def test_metadata_name_namespace_uid_are_immutable(validator):
    old = stored(POD)
    for key, value in (("name", "other"), ("namespace", "other"), ("uid", "9999")):
        new = copy.deepcopy(old)
        new["metadata"][key] = value
        (cause,) = causes_of(validator, POD, new, old)
        assert cause == {
            "field": f"metadata.{key}",
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "{value}": field is immutable',
        }


def test_labels_and_annotations_may_change(validator):
    old = stored(PVC)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"hub.jupyter.org/retained": "true"}
    new["metadata"]["annotations"] = {"hub.jupyter.org/retain-until": "2026-02-01T00:00:00Z"}
    validator.validate(PVC, new, old)


@pytest.mark.parametrize(
    "field,old_value,new_value",
    [
        ("storageClassName", "ceph-rbd", "ceph-rbd-fast"),
        ("storageClassName", None, "ceph-rbd"),
        ("accessModes", ["ReadWriteOnce"], ["ReadWriteMany"]),
        ("volumeMode", "Filesystem", "Block"),
        ("volumeName", "pv-1", "pv-2"),
    ],
)
def test_pvc_immutable_fields(validator, field, old_value, new_value):
    old = stored(PVC)
    if old_value is not None:
        old["spec"][field] = old_value
    new = copy.deepcopy(old)
    new["spec"][field] = new_value
    (cause,) = causes_of(validator, PVC, new, old)
    assert cause["field"] == f"spec.{field}"
    assert cause["reason"] == "FieldValueInvalid"
    assert cause["message"].endswith("field is immutable")


def test_pvc_volume_name_may_be_set_once_and_default_volume_mode_is_filesystem(validator):
    old = stored(PVC)
    new = copy.deepcopy(old)
    new["spec"]["volumeName"] = "pv-1"
    new["spec"]["volumeMode"] = "Filesystem"
    validator.validate(PVC, new, old)


def test_pvc_shrink_is_rejected_and_grow_accepted(validator):
    old = stored(PVC)
    old["spec"]["resources"]["requests"]["storage"] = "10Gi"
    unbound = copy.deepcopy(old)
    unbound["spec"]["resources"]["requests"]["storage"] = "20Gi"
    (cause,) = causes_of(validator, PVC, unbound, old)
    assert (cause["field"], cause["reason"]) == ("spec", "FieldValueForbidden")
    assert cause["message"].startswith(
        "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n"
    )
    old["status"] = {"phase": "Bound"}
    grow = copy.deepcopy(old)
    grow["spec"]["resources"]["requests"]["storage"] = "20Gi"
    validator.validate(PVC, grow, old)
    same = copy.deepcopy(old)
    same["spec"]["resources"]["requests"]["storage"] = 10 * 2**30
    validator.validate(PVC, same, old)
    shrink = copy.deepcopy(old)
    shrink["spec"]["resources"]["requests"]["storage"] = "9500Mi"
    (cause,) = causes_of(validator, PVC, shrink, old)
    assert cause == {
        "field": "spec.resources.requests.storage",
        "reason": "FieldValueForbidden",
        "message": "Forbidden: field can not be less than previous value",
    }


def test_pod_spec_is_immutable_except_images_deadline_tolerations(validator):
    old = stored(POD)
    old["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1"}]
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "quay.io/jupyter/base-notebook:2026-01-01"
    new["spec"]["initContainers"][0]["image"] = "busybox:2"
    new["spec"]["activeDeadlineSeconds"] = 3600
    new["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    validator.validate(POD, new, old)

    changed = copy.deepcopy(old)
    changed["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    (cause,) = causes_of(validator, POD, changed, old)
    assert cause["field"] == "spec" and cause["reason"] == "FieldValueForbidden"
    assert cause["message"].startswith("Forbidden: pod updates may not change fields other than `spec.containers[*].image`")
    assert "spec.containers" in cause["message"]


def test_pod_node_name_is_set_once(validator):
    old = stored(POD)
    bound = copy.deepcopy(old)
    bound["spec"]["nodeName"] = "node-1"
    validator.validate(POD, bound, old)
    moved = copy.deepcopy(bound)
    moved["spec"]["nodeName"] = "node-2"
    assert fields_of(validator, POD, moved, bound) == {"spec"}


def test_pod_status_update_keeps_spec(validator):
    old = stored(POD)
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Running"}
    validator.validate(POD, new, old)


@pytest.mark.parametrize("kind,field", [(SECRET, "data"), (CONFIGMAP, "data"), (CONFIGMAP, "binaryData")])
def test_immutable_secret_and_configmap_data(validator, kind, field):
    old = stored(kind)
    mutable = copy.deepcopy(old)
    mutable[field] = {"other": "b3RoZXI="}
    validator.validate(kind, mutable, old)

    old["immutable"] = True
    new = copy.deepcopy(old)
    new[field] = {"other": "b3RoZXI="}
    (cause,) = causes_of(validator, kind, new, old)
    assert cause == {
        "field": field,
        "reason": "FieldValueForbidden",
        "message": "Forbidden: field is immutable when `immutable` is set",
    }
    unset = copy.deepcopy(old)
    unset["immutable"] = False
    assert fields_of(validator, kind, unset, old) == {"immutable"}


def test_immutable_secret_string_data_counts_as_data(validator):
    old = stored(SECRET)
    old["immutable"] = True
    new = copy.deepcopy(old)
    new["stringData"] = {"token": "new"}
    assert fields_of(validator, SECRET, new, old) == {"data"}


def test_secret_type_is_immutable(validator):
    old = stored(SECRET)
    new = copy.deepcopy(old)
    new["type"] = "kubernetes.io/basic-auth"
    assert fields_of(validator, SECRET, new, old) == {"type"}


def test_service_cluster_ip_is_immutable_once_set(validator):
    old = stored(SERVICE)
    old["spec"].update(clusterIP="127.96.0.1", clusterIPs=["127.96.0.1"])
    same = copy.deepcopy(old)
    same["spec"]["ports"][0]["port"] = 8080
    validator.validate(SERVICE, same, old)
    moved = copy.deepcopy(old)
    moved["spec"].update(clusterIP="127.96.0.2", clusterIPs=["127.96.0.2"])
    assert fields_of(validator, SERVICE, moved, old) == {"spec.clusterIP", "spec.clusterIPs[0]"}
    external = copy.deepcopy(old)
    external["spec"] = {"type": "ExternalName", "externalName": "hub.example.org"}
    validator.validate(SERVICE, external, old)


def test_volumesnapshot_source_is_immutable(validator):
    old = stored(SNAPSHOT)
    new = copy.deepcopy(old)
    new["spec"]["source"]["persistentVolumeClaimName"] = "claim-bob"
    (cause,) = causes_of(validator, SNAPSHOT, new, old)
    assert cause["field"] == "spec.source.persistentVolumeClaimName"
    assert cause["message"].endswith("persistentVolumeClaimName is immutable")


# --- the spawner's KubeVirt and CDI objects -----------------------------------------------


def realistic_vm():
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "ws-ann",
            "namespace": "jhub",
            "labels": {"app.kubernetes.io/managed-by": "workspacespawner", "hub.jupyter.org/username": "ann"},
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": "ws-ann"}},
                "spec": {
                    "domain": {
                        "cpu": {"cores": 8},
                        "memory": {"guest": "32Gi"},
                        "resources": {"requests": {"memory": "32Gi", "cpu": "8"}},
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                                {"name": "homedisk", "disk": {"bus": "virtio"}},
                                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                            "gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GA102GL_A10"}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "evictionStrategy": "None",
                    "terminationGracePeriodSeconds": 60,
                    "volumes": [
                        {"name": "rootdisk", "dataVolume": {"name": "ws-ann-root"}},
                        {"name": "homedisk", "persistentVolumeClaim": {"claimName": "claim-ann"}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": "ws-ann-cloudinit"}}},
                    ],
                },
            },
        },
    }


def test_realistic_virtual_machine_passes(validator):
    validator.validate(VM, realistic_vm())


def test_realistic_virtual_machine_typos_are_named(validator):
    vm = realistic_vm()
    gpu = vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"][0]
    gpu["deviceNmae"] = gpu.pop("deviceName")
    vm["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = "eight"
    causes = causes_of(validator, VM, vm)
    by_field = {c["field"]: c for c in causes}
    assert set(by_field) == {
        "spec.template.spec.domain.devices.gpus[0].deviceNmae",
        "spec.template.spec.domain.cpu.cores",
    }
    assert by_field["spec.template.spec.domain.cpu.cores"]["reason"] == "FieldValueTypeInvalid"


def test_realistic_data_volume_passes(validator):
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": "ws-ann-root",
            "namespace": "jhub",
            "annotations": {"cdi.kubevirt.io/storage.bind.immediate.requested": "true"},
        },
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "ubuntu-2404-cuda", "namespace": "golden-images"},
            "storage": {
                "storageClassName": "ceph-rbd",
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "resources": {"requests": {"storage": "50Gi"}},
            },
        },
    }
    validator.validate(DATAVOLUME, dv)
    dv["spec"]["sourceRef"].pop("kind")
    assert fields_of(validator, DATAVOLUME, dv) == {"spec.sourceRef.kind"}


# --- quantities and the trimmed schema files --------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [("10Gi", 10 * 2**30), ("500m", 0.5), ("1.5k", 1500), ("1e3", 1000), ("2", 2), (3, 3), ("100Mi", 100 * 2**20)],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "10 Gi", "10GB", "Gi", "1.2.3", "1K", True, None])
def test_parse_quantity_rejects(text):
    with pytest.raises((ValueError, TypeError)):
        parse_quantity(text)


@pytest.mark.parametrize(
    "filename,roots",
    [(name.replace(".json", ".trimmed.json"), roots) for name, roots in trim.ROOTS.items()],
)
def test_trimmed_files_are_closed_and_small(filename, roots):
    ref = importlib.resources.files("localcluster.schemas").joinpath(filename)
    text = ref.read_text("utf-8")
    assert len(text.encode()) < trim.MAX_BYTES
    document = json.loads(text)
    definitions = document["definitions"]
    assert trim.reachable(definitions, roots) == sorted(definitions)
    assert document["info"]["x-trimmed-roots"] == list(roots)


def test_snapshot_definitions_are_closed():
    ref = importlib.resources.files("localcluster.schemas").joinpath("snapshot-openapi.json")
    definitions = json.loads(ref.read_text("utf-8"))["definitions"]
    assert trim.reachable(definitions, ["v1.VolumeSnapshot", "v1.VolumeSnapshotContent", "v1.VolumeSnapshotClass"]) == sorted(definitions)
