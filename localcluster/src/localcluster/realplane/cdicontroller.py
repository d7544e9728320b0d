"""CDI's own cdi-controller on the real control plane (issue #39): it moves every DataVolume.

:class:`CdiController` runs the ``cdi-controller`` that tools/kubevirt/build.sh
built (CDI v1.61.1) after :class:`~.cdi.CdiApiServer`, with what cdi-operator
and a cluster's storage give it:

* the ``CDI`` custom resource ``cdi`` (an operator's user creates it; its
  status ``Deployed``, as cdi-operator writes it once CDI is up). The clone
  planner refuses to work without one;
* the ``CSIDriver`` ``rbd.csi.ceph.com``, as ceph-csi installs it: CDI fills
  a DataVolume's PVC through its volume populators only when the PVC's
  StorageClass names a CSI driver the cluster has;
* the StorageClass ``ceph-rbd`` annotated ``cdi.kubevirt.io/clone-strategy:
  csi-clone`` (by the agents' ceph-csi provisioner,
  :mod:`..controllers.storage`), as an administrator sets it for ceph-csi:
  CDI's own table of provisioners knows ``rook-ceph.rbd.csi.ceph.com`` but
  not the plain driver name, and would fall back to a host-assisted copy. Its
  StorageProfile (which cdi-controller makes for each class, and deletes
  while the class is missing) then says ``cloneStrategy: csi-clone``. So a
  golden-image clone is a CSI clone: CDI creates a PVC in the DataSource's
  namespace whose ``dataSourceRef`` is the golden image's PVC, our ceph-csi
  provisioner (:mod:`..controllers.storage`) provisions it as a copy, CDI
  grows it to the size asked (``allowVolumeExpansion``) and rebinds its
  PersistentVolume to the DataVolume's PVC. No importer, cloner or
  upload-server Pod runs: a node here could not run their images. Why not
  CDI's host-assisted copy: it needs those Pods; and a ceph-csi cluster
  clones RBD images in the storage, which is what this path exercises;
* its Deployment's files: the clone token keys (the Secret
  ``cdi-api-signing-key`` that cdi-apiserver made, at ``/var/run/cdi/token/
  keys``) and the upload-server signers (``/var/run/certs/...``, CAs of the
  plane's PKI), in a folder of the plane's that the process sees as
  ``/run`` (:mod:`.netns`'s mount namespace: the paths are fixed in its code).

It runs in a network namespace of its own (controller-runtime serves its
metrics on ``:8080``), dials only the plane's kube-apiserver, as the
ServiceAccount ``cdi/cdi-sa`` with cdi-operator's roles, leader election on
(the Lease ``cdi/cdi-controller-leader-election-helper``); ready once it
leads.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import base64
from pathlib import Path

from ..controllers.storage import RBD_PROVISIONER
from . import netns

NAMESPACE = "cdi"
SERVICE_ACCOUNT = "cdi-sa"
BINARY = "cdi-controller"
LEASE = "cdi-controller-leader-election-helper"
#: cdi-operator's environment of the Deployment ``cdi-deployment``: the images of the Pods CDI would start. None
#: starts here (a clone is a CSI clone), but the controller refuses to start without them.
IMAGES = {
    "IMPORTER_IMAGE": "quay.io/kubevirt/cdi-importer:v1.61.1",
    "CLONER_IMAGE": "quay.io/kubevirt/cdi-cloner:v1.61.1",
    "UPLOADSERVER_IMAGE": "quay.io/kubevirt/cdi-uploadserver:v1.61.1",
    "OVIRT_POPULATOR_IMAGE": "quay.io/kubevirt/ovirt-populator:v1.61.1",
    "UPLOADPROXY_SERVICE": "cdi-uploadproxy",
    "PULL_POLICY": "IfNotPresent",
}


def cdi_cr() -> dict:
    """The ``CDI`` resource an operator creates, with the status cdi-operator writes once CDI is up (its CRD has no
    status subresource): no clone strategy override, so the StorageProfile decides."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "CDI",
        "metadata": {"name": "cdi"},
        "spec": {"imagePullPolicy": "IfNotPresent", "infra": {}, "workload": {}},
        "status": {"phase": "Deployed", "observedVersion": "v1.61.1", "targetVersion": "v1.61.1",
                   "operatorVersion": "v1.61.1"},
    }


def csi_driver() -> dict:
    """ceph-csi's ``CSIDriver`` of the RBD driver (its deploy/rbd/kubernetes/csidriver.yaml)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": RBD_PROVISIONER},
        "spec": {"attachRequired": True, "podInfoOnMount": False, "fsGroupPolicy": "File", "seLinuxMount": True},
    }


class CdiController:
    """cdi-controller of ``plane`` from ``bin_dir``; ``start()`` after the plane's :class:`~.cdi.CdiApiServer`."""

    def __init__(self, plane, bin_dir):
        self.plane = plane
        self.bin_dir = Path(bin_dir).resolve()
        self.run_dir = plane.state_dir / "cdi-controller" / "run"
        self.relays: list[netns.Relay] = []

    def start(self, timeout: float = 120.0) -> None:
        plane = self.plane
        plane.create_or_replace("/apis/cdi.kubevirt.io/v1beta1/cdis", cdi_cr())
        plane.create_or_replace("/apis/storage.k8s.io/v1/csidrivers", csi_driver())
        self._write_files(timeout)
        kubeconfig = plane.serviceaccount_kubeconfig(NAMESPACE, SERVICE_ACCOUNT, create=False,
                                                     expiration_seconds=7 * 24 * 3600)
        self.close()
        apiserver, dial, relay = netns.apiserver_dial(plane, BINARY)
        self.relays.append(relay)
        command = [str(self.bin_dir / BINARY), f"--kubeconfig={kubeconfig}", "--v=2"]
        plane._spawn(BINARY, netns.isolated(command, dial={apiserver: dial}, serve={}, bind={"/run": self.run_dir}),
                     env=IMAGES)
        plane._wait(BINARY, self._leads, timeout)

    def _write_files(self, timeout: float) -> None:
        """The Deployment's mounted files under :attr:`run_dir` (seen as ``/run``; ``/var/run`` links there)."""
        keys = self.run_dir / "cdi" / "token" / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        secret = self._signing_key(timeout)
        for name in ("id_rsa", "id_rsa.pub"):
            (keys / name).write_bytes(base64.b64decode(secret["data"][name]))
            (keys / name).chmod(0o600)
        for signer in ("cdi-uploadserver-signer", "cdi-uploadserver-client-signer"):
            cert, key = self.plane.pki.signer(signer)
            folder = self.run_dir / "certs" / signer
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "tls.crt").write_bytes(cert.read_bytes())
            (folder / "tls.key").write_bytes(key.read_bytes())
        account = self.run_dir / "secrets" / "kubernetes.io" / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        (account / "namespace").write_text(NAMESPACE)

    def _signing_key(self, timeout: float) -> dict:
        """The Secret cdi-apiserver creates at its start, holding the key that signs and checks clone tokens."""
        found: dict = {}

        def made() -> bool:
            status, secret = self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/cdi-api-signing-key")
            if status == 200:
                found.update(secret)
            return status == 200

        self.plane._wait("cdi-apiserver", made, timeout)
        return found

    def _leads(self) -> bool:
        status, lease = self.plane.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
        return status == 200 and bool((lease.get("spec") or {}).get("holderIdentity"))

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays.clear()
