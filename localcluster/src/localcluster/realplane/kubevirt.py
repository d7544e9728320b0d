"""KubeVirt's own virt-api and virt-controller on the real control plane (issue #39), installed as virt-operator would.

:class:`KubeVirt` starts the ``virt-api`` and ``virt-controller`` that
tools/kubevirt/build.sh built (KubeVirt v1.4.0), as processes on 127.0.0.1
against the plane's kube-apiserver, after creating what virt-operator creates
for them. What
virt-operator creates comes from virt-operator's own code: the build's
``kubevirt-install-objects`` prints its install strategy
(``pkg/virt-operator/resource/generate/install``) for the namespace
``kubevirt``, and :meth:`KubeVirt.install` applies from it

* every KubeVirt CRD, and the ``KubeVirt`` CRD of virt-operator's manifests;
* the ServiceAccounts, ClusterRoles, ClusterRoleBindings, Roles and
  RoleBindings of every component, unchanged;
* the ValidatingWebhookConfiguration and MutatingWebhookConfiguration of
  virt-api, with ``clientConfig.service`` (the Service ``kubevirt/virt-api``
  port 443, which nothing here could dial) turned into
  ``clientConfig.url: https://127.0.0.1:<port><path>``, and ``caBundle`` the
  cluster CA (virt-operator puts its own CA there);
* the APIServices ``v1.`` and ``v1alpha3.subresources.kubevirt.io``, naming
  an ``ExternalName`` Service ``kubevirt/virt-api`` whose external name is
  ``localhost`` on virt-api's port (the plane runs with
  ``--enable-aggregator-routing=false`` and Endpoints may not hold loopback
  addresses: the aggregator dials the Service's name), ``caBundle`` the
  cluster CA;
* the ValidatingAdmissionPolicy for virt-handler and the common
  instancetypes and preferences;

and leaves out what only makes sense in Pods or with the operator running:
Deployments, the DaemonSet, ClusterIP Services, certificate Secrets and
virt-operator's own webhook (``virt-operator-validator``: nothing serves it).

Then the ``KubeVirt`` CR ``kubevirt/kubevirt`` (with the status virt-operator
writes when done: phase ``Deployed``, the default architecture) with the configuration the
product needs (:data:`FEATURE_GATES`: virtiofs filesystems and host devices;
``permittedHostDevices`` naming :data:`PERMITTED_HOST_DEVICES`, the GPU
resource names of the demo), the ConfigMap ``kubevirt-ca`` (virt-api trusts
client certificates of virt-handler signed by it: the cluster CA here), a
serving certificate for ``virt-api.kubevirt.svc`` and 127.0.0.1 and a client
certificate for talking to virt-handler, both from the plane's PKI, and a
token kubeconfig of the ServiceAccount ``kubevirt-apiserver`` naming the API
server's loopback address. virt-api reads its namespace from the Pod's
ServiceAccount files, which a process here does not have: it falls back to
``kubevirt``, the namespace used.

virt-controller follows virt-api (whose mutating webhook defaults the VMIs it
creates), with virt-operator's arguments, a token kubeconfig of
``kubevirt-controller``, a serving certificate for its metrics port, and
leader election on (always, in KubeVirt: the Lease ``kubevirt/virt-controller``);
ready when ``/leader`` answers 200. It makes a running VM's VMI and the VMI's
virt-launcher Pod; nothing here runs that Pod yet (no kubelet, no virt-handler).

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

from . import installobjects

log = logging.getLogger(__name__)

NAMESPACE = "kubevirt"
#: virt-operator's name of virt-api's Service and its ServiceAccount (components.ApiServiceAccountName).
API_SERVICE, API_SERVICE_ACCOUNT = "virt-api", "kubevirt-apiserver"
CONTROLLER_SERVICE, CONTROLLER_SERVICE_ACCOUNT = "virt-controller", "kubevirt-controller"
BINARIES = ("virt-api", "virt-controller", "kubevirt-install-objects")
#: KubeVirt's feature gates the product's VMs need: ``domain.devices.filesystems`` with
#: ``virtiofs`` (the home PVC) and ``domain.devices.gpus``/``hostDevices`` (GPUs passed through).
FEATURE_GATES = ("ExperimentalVirtiofsSupport", "HostDevices")
#: ``permittedHostDevices.pciHostDevices`` resource names: the demo's default ``vm_gpu_device_name`` and
#: the A100 name of its docs; each as an NVIDIA A100 SXM4 80GB (PCI 10de:20b2) advertised by NVIDIA's
#: device plugin (``externalResourceProvider``), as the GPU operator runs it.
PERMITTED_HOST_DEVICES = ("nvidia.com/gpu", "nvidia.com/GA100_A100_SXM4_80GB")
A100_PCI_SELECTOR = "10DE:20B2"

#: Go's GOARCH for Python's platform.machine().
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "s390x": "s390x", "ppc64le": "ppc64le"}

#: Applied once virt-api serves their validating webhooks (failurePolicy Fail: before that, on a
#: restart, every write of them would be refused).
_VALIDATED = ("VirtualMachineClusterInstancetype", "VirtualMachineClusterPreference")


def kubevirt_cr(
    namespace: str = NAMESPACE, feature_gates=FEATURE_GATES, permitted_host_devices=PERMITTED_HOST_DEVICES
) -> dict:
    """The ``KubeVirt`` CR ``<namespace>/kubevirt`` with the product's feature gates and permitted host devices."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": namespace},
        "spec": {
            "configuration": {
                "developerConfiguration": {"featureGates": list(feature_gates)},
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"pciVendorSelector": A100_PCI_SELECTOR, "resourceName": name, "externalResourceProvider": True}
                        for name in permitted_host_devices
                    ]
                },
            },
        },
    }


class KubeVirt:
    """virt-api of ``plane`` (a :class:`~.plane.RealControlPlane`), from ``bin_dir`` (see the module docstring).

    ``start()`` runs in the plane's ``start()`` after the controller manager
    works; the process is one of the plane's children (its log
    ``STATE/logs/virt-api.log``), stopped with them.
    """

    def __init__(self, plane, bin_dir, *, feature_gates=FEATURE_GATES, permitted_host_devices=PERMITTED_HOST_DEVICES):
        self.plane = plane
        self.bin_dir = Path(bin_dir).resolve()
        self.feature_gates = tuple(feature_gates)
        self.permitted_host_devices = tuple(permitted_host_devices)

    def missing(self) -> list[str]:
        return [b for b in BINARIES if not os.access(self.bin_dir / b, os.X_OK)]

    @property
    def api_port(self) -> int:
        return self.plane.ports["virt_api"]

    @property
    def version(self) -> str:
        """The KubeVirt version of the build (the ``kubevirt=`` line of build.sh's marker beside ``bin``), else v1.4.0."""
        marker = self.bin_dir.parent / ".built"
        try:
            for line in marker.read_text().splitlines():
                if line.startswith("kubevirt="):
                    return line.split("=", 1)[1]
        except OSError:
            pass
        return "v1.4.0"

    def start(self, timeout: float = 120.0) -> None:
        objects = installobjects.read(self.bin_dir / "kubevirt-install-objects", NAMESPACE)
        self.install(objects)
        self._start_virt_api()
        self._register(objects, timeout)
        for obj in objects:
            if obj["kind"] in _VALIDATED:
                self.plane.create_or_replace(installobjects.collection(obj), obj)
        self._start_virt_controller()

    # -- what virt-operator creates -------------------------------------

    def install(self, objects: list[dict], timeout: float = 60.0) -> None:
        """The namespace, CRDs, RBAC, KubeVirt CR and CA ConfigMap (the webhooks and APIServices come
        with virt-api, in :meth:`_register`: a webhook with nobody serving it refuses every VM; the
        cluster instancetypes and preferences after them, through virt-api's validation)."""
        plane = self.plane
        installobjects.apply(plane, NAMESPACE, objects, skip=_VALIDATED, timeout=timeout)
        plane.create_or_replace(
            f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/kubevirts",
            kubevirt_cr(NAMESPACE, self.feature_gates, self.permitted_host_devices),
        )
        self._deployed_status()
        plane.create_or_replace(
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kubevirt-ca", "namespace": NAMESPACE},
                "data": {"ca-bundle": plane.pki.path("ca.crt").read_text()},
            },
        )

    def _deployed_status(self) -> None:
        """The ``KubeVirt`` CR's status as virt-operator writes it once every component is up
        (pkg/virt-operator/kubevirt.go): KubeVirt's components read the CR's configuration only
        while ``status.phase`` is set (virt-config's GetConfigFromKubeVirtCR), and take the default
        architecture from ``status.defaultArchitecture`` (the operator's GOARCH)."""
        path = f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/kubevirts/kubevirt"
        status, kv = self.plane.request("GET", path)
        if status != 200:
            raise RuntimeError(f"reading the KubeVirt CR: HTTP {status}: {kv}")
        kv["status"] = {
            **(kv.get("status") or {}),
            "phase": "Deployed",
            "defaultArchitecture": GOARCH.get(platform.machine(), platform.machine()),
            "observedGeneration": kv["metadata"].get("generation", 1),
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                },
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                },
                {
                    "type": "Degraded",
                    "status": "False",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                },
            ],
        }
        status, body = self.plane.request("PUT", f"{path}/status", kv)
        if status != 200:
            raise RuntimeError(f"writing the KubeVirt CR's status: HTTP {status}: {body}")

    def _register(self, objects: list[dict], timeout: float) -> None:
        """virt-api's webhook configurations and APIServices on its loopback port
        (:func:`.installobjects.register`); waits until the aggregator reports
        ``v1.subresources.kubevirt.io`` Available."""
        installobjects.register(self.plane, objects, namespace=NAMESPACE, service=API_SERVICE, port=self.api_port,
                                timeout=timeout, labels={"kubevirt.io": "virt-api"})

    # -- the process -----------------------------------------------------

    def _start_virt_api(self) -> None:
        plane = self.plane
        crt, key = plane.pki.serving(API_SERVICE, (f"{API_SERVICE}.{NAMESPACE}.svc", "localhost"))
        handler_crt, handler_key = plane.pki.client("virt-api-handler-client", "kubevirt.io:system:client:virt-handler")
        kubeconfig = plane.serviceaccount_kubeconfig(
            NAMESPACE, API_SERVICE_ACCOUNT, create=False, expiration_seconds=7 * 24 * 3600
        )
        port = self.api_port
        plane._spawn(
            "virt-api",
            [
                str(self.bin_dir / "virt-api"),
                f"--kubeconfig={kubeconfig}",
                "--listen=127.0.0.1",
                f"--port={port}",
                f"--tls-cert-file={crt}",
                f"--tls-key-file={key}",
                f"--handler-cert-file={handler_crt}",
                f"--handler-key-file={handler_key}",
                # as virt-operator runs it (components.NewApiServerDeployment); v1.4.0 reads, but
                # never uses, --subresources-only
                "--console-server-port=8186",
                "--subresources-only",
                "--v=2",
            ],
        )
        ctx = plane._insecure_ctx()
        plane._wait("virt-api", lambda: plane._https_ok(port, "/apis/subresources.kubevirt.io/v1/healthz", ctx))

    def _start_virt_controller(self) -> None:
        """virt-controller with virt-operator's arguments (components.NewControllerDeployment), leader
        election on (its default: the Lease ``kubevirt/virt-controller``); ready when it leads."""
        plane = self.plane
        crt, key = plane.pki.serving(CONTROLLER_SERVICE, (f"{CONTROLLER_SERVICE}.{NAMESPACE}.svc", "localhost"))
        kubeconfig = plane.serviceaccount_kubeconfig(
            NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, create=False, expiration_seconds=7 * 24 * 3600
        )
        port = plane.ports["virt_controller"]
        version = self.version
        plane._spawn(
            "virt-controller",
            [
                str(self.bin_dir / "virt-controller"),
                f"--kubeconfig={kubeconfig}",
                f"--launcher-image=quay.io/kubevirt/virt-launcher:{version}",
                f"--exporter-image=quay.io/kubevirt/virt-exportserver:{version}",
                "--listen=127.0.0.1",
                f"--port={port}",
                f"--prom-cert-file={crt}",
                f"--prom-key-file={key}",
                "--v=2",
            ],
        )
        ctx = plane._insecure_ctx()
        plane._wait("virt-controller", lambda: plane._https_ok(port, "/leader", ctx))
