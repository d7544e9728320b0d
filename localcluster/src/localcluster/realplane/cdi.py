"""CDI's own cdi-apiserver on the real control plane (issue #39): its admission webhooks judge every DataVolume.

:class:`CdiApiServer` runs the ``cdi-apiserver`` that tools/kubevirt/build.sh
built (CDI v1.61.1) as a process against the plane's kube-apiserver, after
applying what cdi-operator creates for it, from cdi-operator's own code (the
build's ``cdi-install-objects``, :mod:`.installobjects`): CDI's CRDs (the
DataVolume, DataSource, StorageProfile, CDIConfig, DataImportCron,
ObjectTransfer and volume populator kinds), the ``cdi`` namespace, every
component's ServiceAccount and RBAC (cdi-apiserver's, cdi-controller's, the
aggregated ``cdi.kubevirt.io:admin|edit|view`` roles); then, once it serves,
its webhook configurations (the DataVolume mutating and validating webhooks,
CDI's, ObjectTransfer's, DataImportCron's and the populators') and the
APIService ``v1beta1.upload.cdi.kubevirt.io``, on its loopback port.

That is CDI's admission as a cluster runs it: the DataVolume validating
webhook checks every DataVolume the hub writes (its source or ``sourceRef``,
its ``storage`` or ``pvc``), and the mutating webhook is CDI's clone
authorization: a DataVolume cloned from another namespace is admitted only
if its creator may ``create`` ``datavolumes/source`` (or ``pods``) there
(a SubjectAccessReview), and is stamped with CDI's signed clone token. The
DataVolumes are then moved by CDI's own cdi-controller (:mod:`.cdicontroller`),
which the plane starts after cdi-apiserver.

cdi-apiserver listens on ``0.0.0.0:8443``, fixed in its code, so it runs in
a network namespace of its own (:mod:`.netns`): each plane's copy has the
port to itself, reaches only the plane's kube-apiserver (through a relay
on its loopback address) and is reached on a free port of the machine
(another relay), which the webhooks and the APIService name. Its namespace
is ``cdi``, its fallback when it has no ServiceAccount files, and its
identity the ServiceAccount ``cdi/cdi-apiserver`` (a token kubeconfig), with
cdi-operator's roles; its serving certificate (for ``cdi-api.cdi.svc``) comes
from the plane's PKI, and it creates its own signing key Secret
(``cdi-api-signing-key``) as in a cluster.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from . import CRDS_DIR, installobjects, netns

log = logging.getLogger(__name__)

NAMESPACE = "cdi"
#: cdi-operator's names: the Service the webhooks and the APIService call, the ServiceAccount of cdi-apiserver.
API_SERVICE, API_SERVICE_ACCOUNT = "cdi-api", "cdi-apiserver"
#: The port cdi-apiserver listens on, fixed in its code (cmd/cdi-apiserver: defaultPort).
FIXED_PORT = 8443
BINARIES = ("cdi-apiserver", "cdi-controller", "cdi-install-objects")
#: The CDI CR's CRD, from :data:`~.CRDS_DIR` (CDI v1.61.1's own, verbatim).
CDI_CRD = "cdis.cdi.kubevirt.io"


def usable(bin_dir) -> bool:
    """Whether ``bin_dir`` holds cdi-apiserver and this machine lets it run in a network namespace of its own."""
    return bin_dir is not None and all(os.access(Path(bin_dir) / b, os.X_OK) for b in BINARIES) and netns.available()


class CdiApiServer:
    """cdi-apiserver of ``plane`` (a :class:`~.plane.RealControlPlane`), from ``bin_dir`` (see the module docstring).

    ``start()`` runs in the plane's start, before KubeVirt's components (virt-controller wants CDI's API in place
    when it starts); the process is one of the plane's children (its log ``STATE/logs/cdi-apiserver.log``), and
    ``close()`` ends its relays once the plane stopped it.
    """

    def __init__(self, plane, bin_dir):
        self.plane = plane
        self.bin_dir = Path(bin_dir).resolve()
        self.relays: list[netns.Relay] = []
        self.port: int | None = None
        #: The CRDs applied from cdi-operator's code (the plane's other CRDs leave these alone).
        self.crd_names: set[str] = set()

    def start(self, timeout: float = 120.0) -> None:
        objects = installobjects.read(self.bin_dir / "cdi-install-objects", NAMESPACE)
        # the CDI CR's own CRD comes with cdi-operator's manifests, not its resources; KubeVirt's virt-controller
        # waits for its informer of that kind once CDI's API is there
        objects.insert(0, yaml.safe_load((CRDS_DIR / f"{CDI_CRD}.yaml").read_text()))
        installobjects.apply(self.plane, NAMESPACE, objects, timeout=timeout)
        self.crd_names = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
        # what cdi-controller's config controller creates first (createCDIConfig: MakeEmptyCDIConfigSpec): the
        # DataVolume mutating webhook reads it for every DataVolume
        self.plane.create_or_replace("/apis/cdi.kubevirt.io/v1beta1/cdiconfigs", {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "CDIConfig",
            "metadata": {"name": "config", "labels": {"cdi.kubevirt.io": ""}},
            "spec": {},
        })
        self._start_apiserver()
        installobjects.register(self.plane, objects, namespace=NAMESPACE, service=API_SERVICE, port=self.port,
                                timeout=timeout, labels={"cdi.kubevirt.io": API_SERVICE})

    def _start_apiserver(self) -> None:
        plane = self.plane
        crt, key = plane.pki.serving(API_SERVICE, (f"{API_SERVICE}.{NAMESPACE}.svc", "localhost"))
        kubeconfig = plane.serviceaccount_kubeconfig(
            NAMESPACE, API_SERVICE_ACCOUNT, create=False, expiration_seconds=7 * 24 * 3600
        )
        serve = netns.sockets_dir(plane) / "cdi-apiserver-serve.sock"
        serve.unlink(missing_ok=True)
        self.close()
        apiserver, dial, relay = netns.apiserver_dial(plane, "cdi-apiserver")
        self.relays.append(relay)
        command = [str(self.bin_dir / "cdi-apiserver"), f"--kubeconfig={kubeconfig}", "--v=2"]
        plane._spawn(
            "cdi-apiserver",
            netns.isolated(command, dial={apiserver: dial}, serve={FIXED_PORT: serve}),
            env={"CERT_FILE": str(crt), "KEY_FILE": str(key)},
        )
        plane._wait("cdi-apiserver", serve.exists)
        relay = netns.Relay(0, serve).start()
        self.relays.append(relay)
        self.port = relay.port
        ctx = plane._insecure_ctx()
        plane._wait("cdi-apiserver", lambda: plane._https_ok(self.port, "/healthz", ctx))

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays.clear()
