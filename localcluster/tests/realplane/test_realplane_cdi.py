"""CDI's own cdi-apiserver on the real control plane (localcluster.realplane.cdi): it runs in a network namespace of
its own, kube-apiserver calls its webhooks on a loopback relay, and they judge DataVolumes in CDI's own words: a
DataVolume without a source is refused, and a clone from another namespace is admitted only for a creator who may
clone there (CDI's clone authorization, a SubjectAccessReview), then carries CDI's signed clone token.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real, WORKSPACESPAWNER_K8S_BIN and WORKSPACESPAWNER_KUBEVIRT_BIN (the
folder tools/kubevirt/build.sh printed), where this machine grants a network namespace.
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid

import pytest

CLONE_TOKEN = "cdi.kubevirt.io/storage.clone.token"


@pytest.fixture
def cdi_plane(kubevirt_plane):
    if kubevirt_plane.cdi is None:
        pytest.skip("cdi-apiserver needs a network namespace of its own (unshare --net), which this machine refuses")
    return kubevirt_plane


@pytest.fixture
def namespaces(cdi_plane):
    made = [f"cdi-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("src", "dst")]
    for name in made:
        status, body = cdi_plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        assert status == 201, body
    yield made
    for name in made:
        cdi_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def datavolume(namespace: str, name: str, **spec) -> dict:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"storage": {"resources": {"requests": {"storage": "1Gi"}}}, **spec},
    }


def create(plane, obj: dict, path: str):
    return plane.request("POST", path, obj)


def dv_path(namespace: str) -> str:
    return f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes"


def test_cdi_apiserver_runs_apart_and_its_webhooks_and_api_are_registered(cdi_plane):
    plane = cdi_plane
    assert "cdi-apiserver" in plane.pids()
    status, hook = plane.request(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/cdi-api-datavolume-validate"
    )
    assert status == 200, hook
    assert hook["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{plane.cdi.port}/datavolume-validate"
    status, service = plane.request("GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.upload.cdi.kubevirt.io")
    assert status == 200 and any(
        c["type"] == "Available" and c["status"] == "True" for c in service["status"]["conditions"]
    ), service
    # its fixed port is its own: nothing listens on it out here
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", 8443)) != 0


def test_a_datavolume_without_a_source_is_refused_in_cdis_words(cdi_plane, namespaces):
    _, dst = namespaces
    status, body = create(cdi_plane, datavolume(dst, "nothing"), dv_path(dst))
    assert status == 422, body
    assert body["message"].startswith('admission webhook "datavolume-validate.cdi.kubevirt.io" denied the request: '), body
    assert "Data volume should have either Source or SourceRef, or be externally populated" in body["message"], body


def test_a_clone_from_another_namespace_needs_the_creators_right_to_clone_there(cdi_plane, namespaces, kubectl):
    plane = cdi_plane
    src, dst = namespaces
    golden = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "golden", "namespace": src},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    status, body = create(plane, golden, f"/api/v1/namespaces/{src}/persistentvolumeclaims")
    assert status == 201, body
    # a student's ServiceAccount that may make DataVolumes in its own namespace only
    status, body = create(plane, {"metadata": {"name": "student"}}, f"/api/v1/namespaces/{dst}/serviceaccounts")
    assert status == 201, body
    rules = [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"], "verbs": ["create", "get"]}]
    grant(plane, dst, "make-datavolumes", rules, dst)
    kubeconfig = plane.serviceaccount_kubeconfig(dst, "student", create=False)

    clone = datavolume(dst, "mine", source={"pvc": {"namespace": src, "name": "golden"}})
    refused = kubectl_create(kubectl, kubeconfig, clone)
    assert refused.returncode != 0
    words = f"User system:serviceaccount:{dst}:student has insufficient permissions in clone source namespace {src}"
    assert words in refused.stderr, refused.stderr
    # what a client reads: a 422 (not a 403), the webhook's name and CDI's words (the hub's forbidden_error reads this)
    status, body = plane.request("POST", dv_path(dst), clone, as_user=f"system:serviceaccount:{dst}:student")
    assert status == 422 and body["message"] == (
        f'admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request:  {words}'
    ), (status, body)
    status, _ = plane.request("GET", f"{dv_path(dst)}/mine")
    assert status == 404  # nothing half-made

    grant(plane, src, "clone-golden", [
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]},
    ], dst)
    admitted = kubectl_create(kubectl, kubeconfig, clone)
    assert admitted.returncode == 0, admitted.stderr
    status, made = plane.request("GET", f"{dv_path(dst)}/mine")
    assert status == 200, made
    assert made["metadata"]["annotations"][CLONE_TOKEN].count(".") == 2  # CDI's signed token (a JWT)


def grant(plane, namespace: str, name: str, rules: list[dict], subject_namespace: str) -> None:
    """A Role ``name`` with ``rules`` in ``namespace``, bound to ServiceAccount ``subject_namespace/student``."""
    status, body = create(plane, {"metadata": {"name": name}, "rules": rules},
                          f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles")
    assert status == 201, body
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "student", "namespace": subject_namespace}],
    }
    status, body = create(plane, binding, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings")
    assert status == 201, body


def kubectl_create(kubectl, kubeconfig, obj: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "create", "-f", "-"], input=json.dumps(obj),
                          capture_output=True, text=True, timeout=60)
