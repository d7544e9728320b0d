"""Server-side defaulting, admission and status reset, as the Kubernetes API server does them.

Only the defaults clients visibly rely on are filled in (the ones kubectl
prints and kubespawner reads back): Pod restartPolicy, dnsPolicy,
schedulerName, terminationGracePeriodSeconds, container
imagePullPolicy/terminationMessage*, the Pod's initial ``Pending`` status;
Service type, clusterIP, sessionAffinity and port protocol/targetPort;
PVC volumeMode and ``Pending`` status; PV ``Available`` status;
Namespace ``Active`` status. Defaulting runs on create and update alike;
the DefaultStorageClass admission plugin only on create: a PVC created
without ``spec.storageClassName`` (and without the legacy
``volume.beta.kubernetes.io/storage-class`` annotation) gets the name of the
default StorageClass, the newest one annotated
``storageclass.kubernetes.io/is-default-class: "true"``.
"""

from __future__ import annotations

import ipaddress
import random
from decimal import Decimal

from .kinds import Kind

#: Service cluster IPs are loopback addresses, so the local cluster's service proxy can listen on them.
SERVICE_NETWORK = ipaddress.ip_network("127.96.0.0/16")

#: The annotations that mark the default StorageClass (GA and legacy beta), and a PVC's legacy class annotation.
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class")
BETA_CLAIM_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def reset_status(kind: Kind, obj: dict) -> None:
    """Replace a client-sent status with the initial one (kinds with a status subresource)."""
    obj.pop("status", None)
    initial = {
        "Pod": {"phase": "Pending"},
        "PersistentVolumeClaim": {"phase": "Pending"},
        "PersistentVolume": {"phase": "Pending"},
        "Namespace": {"phase": "Active"},
    }.get(kind.kind) if kind.group == "" else None
    if initial is not None:
        obj["status"] = dict(initial)


def _image_pull_policy(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    if "@" in name:
        return "IfNotPresent"
    if ":" not in name or name.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def canonical_quantity(value):
    """A quantity sent as a JSON number, as the API server stores it: a string (``2.0`` -> ``"2"``, ``0.5`` -> ``"500m"``).

    Strings are kept as sent. Clients such as the ``kubernetes`` package
    refuse to read quantities that are not strings, as a real server never
    returns them.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    exact = Decimal(str(value))
    if exact == exact.to_integral_value():
        return str(int(exact))
    milli = exact * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return str(exact)


def _canonical_resources(resources) -> None:
    if not isinstance(resources, dict):
        return
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, dict):
            for name, value in values.items():
                values[name] = canonical_quantity(value)


def _default_containers(containers: list) -> None:
    for container in containers or []:
        if isinstance(container, dict):
            _canonical_resources(container.get("resources"))
            container.setdefault("imagePullPolicy", _image_pull_policy(str(container.get("image", ""))))
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _default_pod(obj: dict, store) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    _default_containers(spec.get("containers"))
    _default_containers(spec.get("initContainers"))


def _used_cluster_ips(store) -> set[str]:
    kind = store.kind("", "v1", "services")
    return {
        s.get("spec", {}).get("clusterIP")
        for s in store.objects(kind)
    }


def _free_cluster_ip(used: set) -> str:
    """A free address of :data:`SERVICE_NETWORK`, starting at a random one so two local clusters rarely collide."""
    size = SERVICE_NETWORK.num_addresses
    start = random.randrange(1, size - 1)
    for step in range(size - 2):
        address = SERVICE_NETWORK[1 + (start + step) % (size - 2)]
        if str(address) not in used and not str(address).endswith((".0", ".255")):
            return str(address)
    raise RuntimeError("the local cluster's service network is full")


def _default_service(obj: dict, store) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") in (None, "") and spec["type"] != "ExternalName":
        spec["clusterIP"] = _free_cluster_ip(_used_cluster_ips(store))
    if spec.get("clusterIP") and spec.get("clusterIP") != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def _default_pvc(obj: dict, store) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("volumeMode", "Filesystem")
        _canonical_resources(spec.get("resources"))


def default_storage_class(store) -> dict | None:
    """The default StorageClass (the newest annotated default, then by name, as Kubernetes picks it), or None."""
    kind = store.kind("storage.k8s.io", "v1", "storageclasses")
    defaults = [
        sc for sc in store.objects(kind)
        if any((sc["metadata"].get("annotations") or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)
    ]
    defaults.sort(key=lambda sc: sc["metadata"]["name"])
    defaults.sort(key=lambda sc: sc["metadata"]["creationTimestamp"], reverse=True)
    return defaults[0] if defaults else None


def _admit_pvc(obj: dict, store) -> None:
    """The DefaultStorageClass admission plugin: a claim that names no class gets the default one."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("storageClassName") is not None:
        return
    if BETA_CLAIM_CLASS_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
        return
    default = default_storage_class(store)
    if default is not None:
        spec["storageClassName"] = default["metadata"]["name"]


def apply_defaults(kind: Kind, obj: dict, store, *, creating: bool) -> None:
    """Fill in the defaults the API server sets for built-in kinds; other kinds are left alone.

    ``creating`` is True on create, when admission plugins that act only on
    create (DefaultStorageClass) run too.
    """
    if kind.group != "":
        return
    defaulter = {
        "Pod": _default_pod,
        "Service": _default_service,
        "PersistentVolumeClaim": _default_pvc,
    }.get(kind.kind)
    if defaulter is not None:
        defaulter(obj, store)
    if creating and kind.kind == "PersistentVolumeClaim":
        _admit_pvc(obj, store)


def carry_over(kind: Kind, new: dict, current: dict) -> None:
    """On update, keep server-assigned fields the client left out (Service clusterIP/clusterIPs), as Kubernetes does."""
    if kind.group == "" and kind.kind == "Service":
        new_spec, old_spec = new.get("spec"), current.get("spec") or {}
        if isinstance(new_spec, dict):
            for key in ("clusterIP", "clusterIPs"):
                if key in old_spec and not new_spec.get(key):
                    new_spec[key] = old_spec[key]
