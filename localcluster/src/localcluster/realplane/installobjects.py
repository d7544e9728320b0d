"""Applying what an operator would install, from the operator's own code: shared by KubeVirt's and CDI's components.

The build's ``kubevirt-install-objects`` and ``cdi-install-objects``
(tools/kubevirt) print, as a JSON ``List``, what virt-operator and
cdi-operator create: CRDs, ServiceAccounts, RBAC, webhook configurations,
APIServices, Deployments, Services. The real plane runs the components as
processes on loopback, so it applies the objects that make sense without
Pods (:func:`apply`) and points the webhooks and APIServices at the
component's loopback port (:func:`register`): a webhook's
``clientConfig.service`` becomes ``clientConfig.url`` (``https://127.0.0.1:
<port><path>``), and an APIService names an ``ExternalName`` Service
``localhost`` on that port (the plane runs with
``--enable-aggregator-routing=false`` and Endpoints may not hold loopback
addresses: the aggregator dials the Service's name). Both trust the
cluster CA, which signs the component's serving certificate.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

#: kind -> (API path prefix, plural, namespaced) of the kinds applied from an operator's install objects.
KINDS = {
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "APIService": ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
    "VirtualMachineClusterInstancetype": (
        "/apis/instancetype.kubevirt.io/v1beta1",
        "virtualmachineclusterinstancetypes",
        False,
    ),
    "VirtualMachineClusterPreference": (
        "/apis/instancetype.kubevirt.io/v1beta1",
        "virtualmachineclusterpreferences",
        False,
    ),
}
#: Kinds only Pods give a meaning to, or that :func:`register` applies once the component serves them.
NOT_APPLIED = (
    "Deployment",
    "DaemonSet",
    "Service",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
)
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def collection(obj: dict) -> str:
    """The API path of ``obj``'s collection (its kind one of :data:`KINDS`)."""
    prefix, plural, namespaced = KINDS[obj["kind"]]
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}"
    return f"{prefix}/{plural}"


def read(command: Path, namespace: str) -> list[dict]:
    """The objects ``command`` (a build's ``*-install-objects``) prints for ``namespace``."""
    out = subprocess.run(
        [str(command), f"--namespace={namespace}"], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(out.stdout)["items"]


def webhook_to_url(config: dict, port: int, ca_pem: bytes) -> dict:
    """``config`` (a webhook configuration) with every ``clientConfig.service`` turned into
    ``url: https://127.0.0.1:<port><path>`` and ``caBundle`` set to ``ca_pem``."""
    webhooks = []
    for hook in config.get("webhooks") or []:
        client = hook["clientConfig"]
        service = client.get("service") or {}
        url = f"https://127.0.0.1:{port}{service.get('path') or '/'}"
        webhooks.append({**hook, "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}})
    return {**config, "webhooks": webhooks}


def apply(plane, namespace: str, objects: list[dict], *, skip=(), timeout: float = 60.0) -> None:
    """Create ``namespace`` and every object of ``objects`` but :data:`NOT_APPLIED` and ``skip`` kinds, the CRDs
    first (waiting until each is Established)."""
    plane.create_or_replace("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        plane.create_or_replace(collection(crd), crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        plane.wait_condition(f"{collection(crd)}/{crd['metadata']['name']}", "Established", deadline)
    left_out = {"CustomResourceDefinition", *NOT_APPLIED, *skip}
    for obj in objects:
        if obj["kind"] not in left_out:
            plane.create_or_replace(collection(obj), obj)


def register(plane, objects: list[dict], *, namespace: str, service: str, port: int, timeout: float = 120.0,
             labels: dict | None = None) -> None:
    """The webhook configurations of ``objects`` that call ``service`` (on ``port``, through :func:`webhook_to_url`),
    an ExternalName Service ``namespace/service`` for the APIServices that name it, and those APIServices; waits
    until the aggregator reports each Available. Webhooks of other services (an operator's own) are left out."""
    ca_pem = plane.pki.path("ca.crt").read_bytes()
    plane.create_or_replace(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": namespace, "labels": labels or {}},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port, "protocol": "TCP"}]},
        },
    )
    names = []
    for obj in objects:
        if obj["kind"] in WEBHOOK_KINDS:
            if all((h["clientConfig"].get("service") or {}).get("name") == service for h in obj.get("webhooks") or []):
                plane.create_or_replace(collection(obj), webhook_to_url(obj, port, ca_pem))
        elif obj["kind"] == "APIService" and (obj["spec"].get("service") or {}).get("name") == service:
            spec = {**obj["spec"], "caBundle": base64.b64encode(ca_pem).decode()}
            spec["service"] = {**spec["service"], "port": port}
            plane.create_or_replace(collection(obj), {**obj, "spec": spec})
            names.append(obj["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        plane.wait_condition(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}", "Available", deadline)
