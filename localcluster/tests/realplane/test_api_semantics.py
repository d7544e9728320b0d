"""The same probes of API semantics against both control planes.

Each test runs against the embedded local cluster (always) and against the
real kube-apiserver of this tier (with WORKSPACESPAWNER_CONTROL_PLANE=real),
so the real server proves what the embedded one is expected to answer:
list paging (``limit``/``continue``), the type meta of list items, server-side apply, ``metadata.generation``
of custom resources, namespace deletion, PVC resize on a class without
``allowVolumeExpansion``, ownerReference garbage collection (orphan,
foreground, absent owners), finalizers during deletion, ``/version`` and the
ServiceAccount API. Where the embedded cluster differs on purpose (it answers
server-side apply with 415), the test says so and checks each plane's answer;
the local cluster's README lists the differences.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from localcluster.testing import eventually

#: The repository's root (tools/k8s/versions.env names the real plane's versions).
REPO = Path(__file__).resolve().parents[3]

VM_PATH = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"


def real_release() -> str:
    """The release the real tier builds (``tools/k8s/versions.env``), e.g. ``v1.34.4``."""
    for line in (REPO / "tools" / "k8s" / "versions.env").read_text().splitlines():
        if line.startswith("K8S_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("K8S_VERSION missing from tools/k8s/versions.env")


@pytest.fixture(scope="session")
def real_crds(plane):
    """The KubeVirt and CDI CRDs created on the real plane and Established."""
    import time

    from localcluster.realplane import CRDS_DIR

    names = []
    for path in sorted(Path(CRDS_DIR).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        status, body = plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert status in (201, 409), body
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            _, obj = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                break
            assert time.monotonic() < deadline, f"{name} not Established"
            time.sleep(0.2)
    # discovery of the new group takes a moment to reach every handler
    while plane.request("GET", "/apis/kubevirt.io/v1/virtualmachines")[0] != 200:
        assert time.monotonic() < deadline, "kubevirt.io/v1 not served"
        time.sleep(0.2)
    return names


def cm(name: str, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}


def cms(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps"


MERGE = "application/merge-patch+json"


# -- paging ----------------------------------------------------------------------


async def test_list_paging_with_limit_and_continue(probe, ns):
    for i in range(5):
        await probe.ok("POST", cms(ns), cm(f"cm-{i}", labels={"probe": "paging"}))
    query = {"labelSelector": "probe=paging", "limit": "2"}
    first = await probe.ok("GET", cms(ns), query=query)
    assert [o["metadata"]["name"] for o in first["items"]] == ["cm-0", "cm-1"]
    token = first["metadata"]["continue"]
    assert token
    assert "remainingItemCount" not in first["metadata"]  # not counted under a selector
    # a page continues the list as it was at the first page's resourceVersion
    await probe.ok("POST", cms(ns), cm("cm-5", labels={"probe": "paging"}))
    await probe.ok("DELETE", f"{cms(ns)}/cm-3")
    second = await probe.ok("GET", cms(ns), query={**query, "continue": token})
    assert [o["metadata"]["name"] for o in second["items"]] == ["cm-2", "cm-3"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    third = await probe.ok("GET", cms(ns), query={**query, "continue": second["metadata"]["continue"]})
    assert [o["metadata"]["name"] for o in third["items"]] == ["cm-4"]
    assert not third["metadata"].get("continue")
    # without a selector the server counts what is left
    everything = (await probe.ok("GET", cms(ns)))["items"]
    page = await probe.ok("GET", cms(ns), query={"limit": "1"})
    assert page["metadata"]["remainingItemCount"] == len(everything) - 1
    status, body = await probe.call("GET", cms(ns), query={"limit": "1", "continue": "not-a-token"})
    assert (status, body["reason"]) == (400, "BadRequest"), body
    assert body["message"].startswith("invalid continue token: continue key is not valid"), body


async def test_list_items_of_built_in_kinds_carry_no_type_meta(probe, ns, vm_kind):
    """kube-apiserver leaves ``kind``/``apiVersion`` off the items of a built-in list (typed lists encode empty
    TypeMeta); a custom resource's items keep theirs (unstructured). Watch events carry them either way."""
    await probe.ok("POST", cms(ns), cm("typed"))
    [item] = [o for o in (await probe.ok("GET", cms(ns)))["items"] if o["metadata"]["name"] == "typed"]
    assert "kind" not in item and "apiVersion" not in item, item
    assert (await probe.ok("GET", f"{cms(ns)}/typed"))["kind"] == "ConfigMap"
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "typed"},
          "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}}}}
    await probe.ok("POST", VM_PATH.format(ns=ns), vm)
    [item] = (await probe.ok("GET", VM_PATH.format(ns=ns)))["items"]
    assert (item["kind"], item["apiVersion"]) == ("VirtualMachine", "kubevirt.io/v1"), item


# -- server-side apply --------------------------------------------------------------


async def test_server_side_apply(probe, ns):
    """A real server creates on apply; the embedded one answers 415 as a server without apply does, creating nothing."""
    body = cm("applied") | {"data": {"a": "1"}}
    query = {"fieldManager": "probe"}
    status, answer = await probe.call(
        "PATCH", f"{cms(ns)}/applied", body, content_type="application/apply-patch+yaml", query=query
    )
    if probe.real:
        assert status == 201, answer
        managers = [(f["manager"], f["operation"]) for f in answer["metadata"]["managedFields"]]
        assert managers == [("probe", "Apply")]
        return
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType"), answer
    assert "application/merge-patch+json" in answer["message"]
    assert "apply-patch" not in answer["message"].split("accepted media types include:")[1]
    assert await probe.gone(f"{cms(ns)}/applied")
    await probe.ok("POST", cms(ns), cm("applied"))
    status, answer = await probe.call(
        "PATCH", f"{cms(ns)}/applied", body, content_type="application/apply-patch+yaml", query=query
    )
    assert status == 415, answer


# -- generation of custom resources ---------------------------------------------------


@pytest.fixture
def vm_kind(probe, request):
    if probe.real:
        request.getfixturevalue("real_crds")


async def test_custom_resource_generation_counts_spec_changes_only(probe, ns, vm_kind):
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1"},
        "spec": {
            "runStrategy": "Halted",
            # with a firmware uuid the embedded virt-controller has none to
            # write into the spec (a spec change: generation 2) under the probe
            "template": {
                "spec": {
                    "domain": {
                        "devices": {},
                        "firmware": {"uuid": str(uuid.uuid4())},
                        "resources": {"requests": {"memory": "1Gi"}},
                    }
                }
            },
        },
    }
    path = VM_PATH.format(ns=ns)
    created = await probe.ok("POST", path, vm)
    assert created["metadata"]["generation"] == 1

    async def generation_after(patch, sub=""):
        out = await probe.ok("PATCH", f"{path}/vm1{sub}", patch, content_type=MERGE)
        return out["metadata"]["generation"]

    assert await generation_after({"metadata": {"labels": {"a": "b"}}}) == 1
    assert await generation_after({"metadata": {"annotations": {"a": "b"}}}) == 1
    assert await generation_after({"status": {"printableStatus": "Stopped"}}, "/status") == 1
    assert await generation_after({"spec": {"runStrategy": "Always"}}) == 2
    # a change to metadata sent together with the same spec is no spec change
    assert await generation_after({"metadata": {"labels": {"a": "c"}}, "spec": {"runStrategy": "Always"}}) == 2


# -- namespace deletion ------------------------------------------------------------


async def test_namespace_deletion_terminating_then_gone(probe):
    name = f"doomed-{uuid.uuid4().hex[:8]}"
    created = await probe.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert created["spec"] == {"finalizers": ["kubernetes"]}
    assert created["status"] == {"phase": "Active"}
    await probe.ok("POST", cms(name), cm("plain"))
    await probe.ok("POST", cms(name), cm("held", finalizers=["example.com/hold"]))

    deleted = await probe.ok("DELETE", f"/api/v1/namespaces/{name}")
    assert deleted["status"]["phase"] == "Terminating"
    ns = await probe.ok("GET", f"/api/v1/namespaces/{name}")
    assert ns["status"]["phase"] == "Terminating" and ns["metadata"]["deletionTimestamp"]

    status, body = await probe.call("POST", cms(name), cm("late"))
    assert (status, body["reason"]) == (403, "Forbidden"), body
    assert body["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {name} because it is being terminated'
    )

    # the namespace's content is deleted; a finalizer holds one object, and so the namespace
    await eventually(lambda: probe.gone(f"{cms(name)}/plain"), 60, what="plain ConfigMap deleted")

    async def held_marked():
        return (await probe.ok("GET", f"{cms(name)}/held"))["metadata"].get("deletionTimestamp")

    await eventually(held_marked, 60, what="held ConfigMap marked for deletion")
    assert (await probe.ok("GET", f"/api/v1/namespaces/{name}"))["status"]["phase"] == "Terminating"
    await probe.ok("PATCH", f"{cms(name)}/held", {"metadata": {"finalizers": None}}, content_type=MERGE)
    await eventually(lambda: probe.gone(f"/api/v1/namespaces/{name}"), 120, what="namespace gone")


async def test_immortal_namespaces_may_not_be_deleted(probe):
    status, body = await probe.call("DELETE", "/api/v1/namespaces/default", query={"dryRun": "All"})
    assert (status, body["reason"]) == (403, "Forbidden"), body
    assert body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'


# -- PVC resize ------------------------------------------------------------------


async def test_pvc_resize_refused_without_allow_volume_expansion(probe, ns):
    sc_name, pv_name = f"fixed-{ns}", f"pv-{ns}"
    await probe.ok(
        "POST",
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "metadata": {"name": sc_name},
            "provisioner": "example.com/none",
            "allowVolumeExpansion": False,
            "volumeBindingMode": "Immediate",
        },
    )
    try:
        await probe.ok(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": sc_name,
                    "hostPath": {"path": f"/tmp/{pv_name}"},
                    "claimRef": {"namespace": ns, "name": "data"},
                },
            },
        )
        claim = {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": sc_name,
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
        await probe.ok("POST", path, claim)

        async def bound():
            return (await probe.ok("GET", f"{path}/data")).get("status", {}).get("phase") == "Bound"

        await eventually(bound, 60, what="claim Bound to its volume")
        grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        status, body = await probe.call("PATCH", f"{path}/data", grow, content_type=MERGE)
        assert (status, body["reason"]) == (403, "Forbidden"), body
        assert body["message"] == (
            'persistentvolumeclaims "data" is forbidden: only dynamically provisioned pvc can be resized '
            "and the storageclass that provisions the pvc must support resize"
        )
        got = await probe.ok("GET", f"{path}/data")
        assert got["spec"]["resources"]["requests"]["storage"] == "1Gi"
    finally:
        await probe.call("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
        await probe.call("DELETE", f"/api/v1/persistentvolumes/{pv_name}")
        await probe.call("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{sc_name}")


async def test_pvc_resize_refused_while_unbound(probe, ns):
    """Validation, before any admission plugin: only a Bound claim's storage request may change."""
    sc_name = f"later-{ns}"
    await probe.ok(
        "POST",
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": sc_name}, "provisioner": "example.com/none", "volumeBindingMode": "WaitForFirstConsumer"},
    )
    try:
        path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
        claim = {
            "metadata": {"name": "waiting"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": sc_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        assert (await probe.ok("POST", path, claim))["status"]["phase"] == "Pending"
        grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        status, body = await probe.call("PATCH", f"{path}/waiting", grow, content_type=MERGE)
        assert (status, body["reason"]) == (422, "Invalid"), body
        assert body["message"].startswith(
            'PersistentVolumeClaim "waiting" is invalid: spec: Forbidden: spec is immutable after creation '
            "except resources.requests and volumeAttributesClassName for bound claims\n"
        ), body
    finally:
        await probe.call("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{sc_name}")


# -- garbage collection ---------------------------------------------------------------


def owned_by(owner: dict, **extra) -> list[dict]:
    meta = owner["metadata"]
    return [{"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"], **extra}]


async def test_orphan_propagation_keeps_dependents_and_drops_the_reference(probe, ns):
    owner = await probe.ok("POST", cms(ns), cm("owner"))
    await probe.ok("POST", cms(ns), cm("dependent", ownerReferences=owned_by(owner)))
    await probe.ok("DELETE", f"{cms(ns)}/owner", query={"propagationPolicy": "Orphan"})

    async def orphaned():
        return not (await probe.ok("GET", f"{cms(ns)}/dependent"))["metadata"].get("ownerReferences")

    await eventually(orphaned, 60, what="dependent's ownerReference removed")
    # The garbage collector drops the owner's orphan finalizer only after it rewrote the dependents.
    await eventually(lambda: probe.gone(f"{cms(ns)}/owner"), 60, what="owner gone once its dependents are orphaned")


async def test_foreground_propagation_waits_for_blocking_dependents(probe, ns):
    owner = await probe.ok("POST", cms(ns), cm("owner"))
    refs = owned_by(owner, blockOwnerDeletion=True)
    await probe.ok("POST", cms(ns), cm("dependent", ownerReferences=refs, finalizers=["example.com/hold"]))
    answer = await probe.ok("DELETE", f"{cms(ns)}/owner", query={"propagationPolicy": "Foreground"})
    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"] and answer["metadata"]["deletionTimestamp"]

    async def dependent_marked():
        return (await probe.ok("GET", f"{cms(ns)}/dependent"))["metadata"].get("deletionTimestamp")

    await eventually(dependent_marked, 60, what="dependent marked for deletion")
    held = await probe.ok("GET", f"{cms(ns)}/owner")
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    await probe.ok("PATCH", f"{cms(ns)}/dependent", {"metadata": {"finalizers": None}}, content_type=MERGE)
    await eventually(lambda: probe.gone(f"{cms(ns)}/owner"), 60, what="owner gone after its dependent")
    assert await probe.gone(f"{cms(ns)}/dependent")


async def test_dependents_of_an_absent_owner_are_collected(probe, ns):
    owner = await probe.ok("POST", cms(ns), cm("owner"))
    await probe.ok("POST", cms(ns), cm("kept", ownerReferences=owned_by(owner)))
    ghost = {"metadata": {"name": "never-created", "uid": str(uuid.uuid4())}}
    stale = {"metadata": {"name": "owner", "uid": str(uuid.uuid4())}}  # the name exists, the uid does not
    await probe.ok("POST", cms(ns), cm("orphan", ownerReferences=owned_by(ghost)))
    await probe.ok("POST", cms(ns), cm("stale", ownerReferences=owned_by(stale)))
    await eventually(lambda: probe.gone(f"{cms(ns)}/orphan"), 60, what="dependent of a missing owner collected")
    await eventually(lambda: probe.gone(f"{cms(ns)}/stale"), 60, what="dependent of a stale uid collected")
    await probe.ok("GET", f"{cms(ns)}/kept")


# -- finalizers during deletion --------------------------------------------------------


async def test_no_new_finalizers_while_being_deleted(probe, ns):
    await probe.ok("POST", cms(ns), cm("held", finalizers=["example.com/a"]))
    await probe.ok("DELETE", f"{cms(ns)}/held")
    patch = {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}
    status, body = await probe.call("PATCH", f"{cms(ns)}/held", patch, content_type=MERGE)
    assert (status, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == (
        'ConfigMap "held" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added '
        'if the object is being deleted, found new finalizers []string{"example.com/b"}'
    )
    # removing one is allowed, and the last one going removes the object
    await probe.ok("PATCH", f"{cms(ns)}/held", {"metadata": {"finalizers": []}}, content_type=MERGE)
    assert await probe.gone(f"{cms(ns)}/held")


# -- version and ServiceAccounts ---------------------------------------------------------


async def test_version_is_the_real_tiers_release(probe):
    info = await probe.ok("GET", "/version")
    assert info["gitVersion"] == real_release(), info
    assert (int(info["major"]), int(info["minor"])) >= (1, 32)
    assert info["platform"].startswith("linux/")


async def test_pods_run_as_an_existing_serviceaccount(probe, ns):
    """Each namespace gets a ``default`` ServiceAccount; a Pod names one (``default`` if none), and it must exist (403)."""
    sas = f"/api/v1/namespaces/{ns}/serviceaccounts"

    async def exists(path):
        return (await probe.call("GET", path))[0] == 200

    await eventually(lambda: exists(f"{sas}/default"), 30, what="default ServiceAccount")
    pods = f"/api/v1/namespaces/{ns}/pods"
    pod = {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    created = await probe.ok("POST", pods, pod, query={"dryRun": "All"})
    assert created["spec"]["serviceAccountName"] == "default"
    assert created["spec"]["serviceAccount"] == "default"
    named = {"metadata": {"name": "named"}, "spec": {**pod["spec"], "serviceAccountName": "missing"}}
    status, body = await probe.call("POST", pods, named, query={"dryRun": "All"})
    assert (status, body["reason"]) == (403, "Forbidden"), body
    assert body["message"] == (
        f'pods "named" is forbidden: error looking up service account {ns}/missing: serviceaccount "missing" not found'
    )
    await probe.ok("POST", sas, {"metadata": {"name": "missing"}})
    created = await probe.ok("POST", pods, named, query={"dryRun": "All"})
    assert created["spec"]["serviceAccountName"] == "missing"


async def test_serviceaccounts_are_served(probe, ns):
    created = await probe.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "hub"}})
    assert created["kind"] == "ServiceAccount"
    names = [o["metadata"]["name"] for o in (await probe.ok("GET", f"/api/v1/namespaces/{ns}/serviceaccounts"))["items"]]
    assert "hub" in names


# -- request errors, word for word ---------------------------------------------------

#: (what, method, path under the namespace, body, content type, query, status, reason, message; "{uid}" is ConfigMap a's uid)
REFUSALS = [
    ("rename by patch", "PATCH", "configmaps/a", {"metadata": {"name": "b"}}, MERGE, None, 400, "BadRequest",
     "the name of the object (b) does not match the name on the URL (a)"),
    ("no name", "POST", "configmaps", {"metadata": {}}, None, None, 422, "Invalid",
     'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'),
    ("uid precondition", "DELETE", "configmaps/a", {"preconditions": {"uid": "x"}}, None, None, 409, "Conflict",
     'Operation cannot be fulfilled on ConfigMap "a": the UID in the precondition (x) does not match the UID in '
     "record ({uid}). The object might have been deleted and then recreated"),
    ("continue with resourceVersion", "GET", "configmaps", None, None,
     {"limit": "1", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0IjoiYVx1MDAwMCJ9", "resourceVersion": "5"},
     400, "BadRequest", "specifying resource version is not allowed when using continue"),
    ("container name", "POST", "pods",
     {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "Bad_C", "image": "busybox"}]}}, None, {"dryRun": "All"},
     422, "Invalid",
     'Pod "p" is invalid: spec.containers[0].name: Invalid value: "Bad_C": a lowercase RFC 1123 label must consist of '
     "lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
     "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
    ("service port 0", "POST", "services", {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 0}]}}, None, None,
     422, "Invalid",
     'Service "svc" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, '
     "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]"),
    ("propagation policy", "DELETE", "configmaps/a", None, None, {"propagationPolicy": "Bogus"}, 422, "Invalid",
     'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": supported values: '
     '"Foreground", "Background", "Orphan", "nil"'),
    ("dryRun value", "POST", "configmaps", {"metadata": {"name": "d"}}, None, {"dryRun": "Some"}, 422, "Invalid",
     'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Some"]: supported values: "All"'),
]


@pytest.mark.parametrize("row", REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_refusals_are_worded_as_kube_apiserver_words_them(probe, ns, row):
    _, method, path, body, content_type, query, code, reason, message = row
    a = await probe.ok("POST", cms(ns), cm("a"))
    kwargs = {"content_type": content_type} if content_type else {}
    status, answer = await probe.call(method, f"/api/v1/namespaces/{ns}/{path}", body, query=query, **kwargs)
    assert (status, answer["reason"], answer["message"]) == (code, reason, message.format(uid=a["metadata"]["uid"]))


async def test_secret_string_data_is_folded_into_data(probe, ns):
    body = {"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "y", "c": "z"}}
    created = await probe.ok("POST", f"/api/v1/namespaces/{ns}/secrets", body)
    assert "stringData" not in created
    assert created["data"] == {"a": "eA==", "b": "eQ==", "c": "eg=="}


async def test_a_list_from_resource_version_0_is_not_paged(probe, ns):
    """resourceVersion=0 lists from the watch cache, which does not page: limit is ignored."""
    for name in ("a", "b", "c"):
        await probe.ok("POST", cms(ns), cm(name, labels={"probe": "rv0"}))
    listed = await probe.ok("GET", cms(ns), query={"limit": "1", "resourceVersion": "0", "labelSelector": "probe=rv0"})
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a", "b", "c"]
    assert not listed["metadata"].get("continue")


# -- kubectl create: protobuf bodies ---------------------------------------------------


def kubectl_binary() -> str:
    """The tier's own kubectl (tools/k8s/build.sh) when it is there, else the one on PATH; skip if none."""
    import os
    import shutil

    own = Path(os.environ.get("WORKSPACESPAWNER_K8S_BIN") or "/nonexistent") / "kubectl"
    found = str(own) if os.access(own, os.X_OK) else shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl")
    return found


async def test_kubectl_create_sends_protobuf_and_is_understood(probe, ns):
    """kubectl 1.32 and newer creates built-in objects with protobuf bodies (client-go's typed clients, no fallback)."""
    import subprocess

    kubectl = [kubectl_binary(), f"--kubeconfig={probe.kubeconfig}", "-n", ns, "create"]
    for args in (
        ["configmap", "settings", "--from-literal=a=b"],
        ["secret", "generic", "token", "--from-literal=a=b"],
        ["serviceaccount", "robot"],
    ):
        done = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert (await probe.ok("GET", f"{cms(ns)}/settings"))["data"] == {"a": "b"}
    secret = await probe.ok("GET", f"/api/v1/namespaces/{ns}/secrets/token")
    assert (secret["data"], secret["type"]) == ({"a": "Yg=="}, "Opaque")
    await probe.ok("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/robot")
