"""The local API server's Pod defaulting and admission plugins, as a default kube-apiserver runs them.

Covers, on a store with the real validator (no controllers): requests
defaulted from limits (``SetDefaults_Pod``), ``status.qosClass`` set on create
by the Kubernetes rules and kept by status writes that leave it out,
ExtendedResourceToleration (a Pod asking for ``nvidia.com/gpu`` tolerates the
GPU node taint, once, and keeps tolerating it across updates), and
StorageObjectInUseProtection's finalizers on new PVCs and PVs; then the same
seen through the ``kubernetes`` client.
"""

from __future__ import annotations

import pytest
from localcluster.defaults import PV_PROTECTION, PVC_PROTECTION, pod_qos_class
from localcluster.kinds import KINDS
from localcluster.store import Store
from localcluster.validation import Validator

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def validator():
    return Validator(KINDS)


@pytest.fixture
def store(validator):
    return Store(KINDS, validator)


def kind(store, plural: str):
    return store.kind("", "v1", plural)


def container(name: str = "notebook", **resources) -> dict:
    body = {"name": name, "image": "quay.io/jupyter/base-notebook:2025-01-01"}
    if resources:
        body["resources"] = resources
    return body


def pod(name: str, *containers: dict, init: tuple = (), **spec) -> dict:
    # a client's copy names the ServiceAccount admission gave it: updates may not change it
    body = {"containers": list(containers) or [container()], "serviceAccountName": "default", **spec}
    if init:
        body["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def create_pod(store, body: dict) -> dict:
    return store.create(kind(store, "pods"), "default", body)


# -- requests default to limits -------------------------------------------------------


def test_limits_without_requests_default_the_requests(store):
    created = create_pod(store, pod(
        "p",
        container("a", limits={"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}),
        container("b", limits={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "500m"}),
        container("c", requests={"memory": "1Gi"}),
        init=(container("setup", limits={"memory": "256Mi"}),),
    ))
    a, b, c = created["spec"]["containers"]
    assert a["resources"]["requests"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert b["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}  # a request given is kept
    assert c["resources"] == {"requests": {"memory": "1Gi"}}  # no limits: nothing to default from
    assert created["spec"]["initContainers"][0]["resources"]["requests"] == {"memory": "256Mi"}


def test_an_update_without_the_defaulted_requests_is_defaulted_again(store):
    body = pod("p", container(limits={"cpu": "1", "memory": "1Gi"}))
    create_pod(store, body)
    body["metadata"]["labels"] = {"changed": "yes"}  # the client's copy never had the requests
    updated = store.replace(kind(store, "pods"), "default", "p", body)
    assert updated["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


# -- QoS class ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "init", "qos"),
    [
        ([container()], (), "BestEffort"),
        ([container(limits={"nvidia.com/gpu": "1"})], (), "BestEffort"),  # only cpu and memory count
        ([container(requests={"cpu": "0"})], (), "BestEffort"),  # zero counts as unset
        ([container(requests={"cpu": "1"})], (), "Burstable"),
        ([container(limits={"cpu": "1", "memory": "1Gi"})], (), "Guaranteed"),  # requests defaulted to limits
        ([container(limits={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "500m"})], (), "Burstable"),
        ([container(limits={"cpu": "1"})], (), "Burstable"),  # memory not limited
        ([container("a", limits={"cpu": "1", "memory": "1Gi"}), container("b")], (), "Burstable"),
        (
            [container(limits={"cpu": "1", "memory": "1Gi"})],
            (container("setup", requests={"cpu": "100m"}),),
            "Burstable",
        ),
        (
            [container(limits={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})],
            (container("setup", limits={"cpu": "100m", "memory": "64Mi"}),),
            "Guaranteed",
        ),
    ],
)
def test_qos_class_is_set_on_create(store, containers, init, qos):
    created = create_pod(store, pod("p", *containers, init=init))
    assert created["status"] == {"phase": "Pending", "qosClass": qos}
    assert pod_qos_class(created) == qos


def test_qos_class_survives_status_writes_that_leave_it_out(store):
    created = create_pod(store, pod("p", container(limits={"cpu": "1", "memory": "1Gi"})))
    created["status"] = {"phase": "Running"}
    written = store.replace(kind(store, "pods"), "default", "p", created, subresource="status")
    assert written["status"] == {"phase": "Running", "qosClass": "Guaranteed"}
    written["metadata"]["labels"] = {"x": "y"}
    assert store.replace(kind(store, "pods"), "default", "p", written)["status"]["qosClass"] == "Guaranteed"


# -- ExtendedResourceToleration ------------------------------------------------------------


def test_extended_resource_requests_get_their_toleration(store):
    gpu = create_pod(store, pod("gpu", container(limits={"nvidia.com/gpu": "2"})))
    assert gpu["spec"]["tolerations"] == [GPU_TOLERATION]
    both = create_pod(store, pod(
        "both",
        container("a", requests={"example.com/fpga": "1"}),
        init=(container("setup", limits={"nvidia.com/gpu": "1"}),),
    ))
    assert both["spec"]["tolerations"] == [
        {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"},
        GPU_TOLERATION,
    ]
    native = create_pod(store, pod("cpu", container(limits={"cpu": "1", "hugepages-2Mi": "2Mi", "memory": "2Mi"})))
    assert "tolerations" not in native["spec"]


def test_the_toleration_is_added_once_and_kept_across_updates(store):
    z2jh = {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"}
    body = pod("p", container(limits={"nvidia.com/gpu": "1"}), tolerations=[z2jh, GPU_TOLERATION])
    created = create_pod(store, body)
    assert created["spec"]["tolerations"] == [z2jh, GPU_TOLERATION]
    del body["spec"]["tolerations"]
    body["metadata"]["labels"] = {"changed": "yes"}
    updated = store.replace(kind(store, "pods"), "default", "p", body)
    assert updated["spec"]["tolerations"] == [GPU_TOLERATION]


# -- StorageObjectInUseProtection ----------------------------------------------------------


def test_new_claims_and_volumes_get_protection_finalizers(store):
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "home", "finalizers": ["example.com/keep"]},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    created = store.create(kind(store, "persistentvolumeclaims"), "default", claim)
    assert created["metadata"]["finalizers"] == ["example.com/keep", PVC_PROTECTION]
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv-1"}},
    }
    assert store.create(kind(store, "persistentvolumes"), None, volume)["metadata"]["finalizers"] == [PV_PROTECTION]
    # Only on create: an update may take the finalizer off (the protection controller does).
    created["metadata"]["finalizers"] = []
    assert not store.replace(kind(store, "persistentvolumeclaims"), "default", "home", created)["metadata"].get("finalizers")


# -- through a client ------------------------------------------------------------------------


@pytest.mark.parametrize("cluster_thread", [{"controllers": ()}], indirect=True)
def test_seen_through_the_kubernetes_client(sync_api):
    from kubernetes import client

    v1 = client.CoreV1Api(sync_api)
    body = pod("jupyter-ann", container(limits={"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}))
    v1.create_namespaced_pod("default", body)
    read = v1.read_namespaced_pod("jupyter-ann", "default")
    assert read.status.qos_class == "Guaranteed"
    assert read.spec.containers[0].resources.requests == {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert [(t.key, t.operator, t.effect) for t in read.spec.tolerations] == [("nvidia.com/gpu", "Exists", "NoSchedule")]
