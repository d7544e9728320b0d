"""Server-side defaulting, admission and status reset, as the Kubernetes API server does them.

Only the defaults clients visibly rely on are filled in (the ones kubectl
prints and kubespawner reads back): Pod restartPolicy, dnsPolicy,
schedulerName, terminationGracePeriodSeconds, container
imagePullPolicy/terminationMessage*, a container's ``resources.requests``
for each resource it only limits (request = limit, ``SetDefaults_Pod``), the
Pod's initial ``Pending`` status and its ``status.qosClass`` (Guaranteed,
Burstable or BestEffort by the rules of ``GetPodQOS``, set on create and kept
by later status writes); Service type, clusterIP, sessionAffinity and port
protocol/targetPort; PVC volumeMode and ``Pending`` status; PV ``Available``
status; a Secret's ``type`` (``Opaque``) and its ``stringData`` folded into ``data``; Namespace ``Active`` status and ``spec.finalizers: [kubernetes]``
(kept as it was by updates: the namespace lifecycle in :mod:`.store` empties
it). Defaulting runs on create and update alike.

Admission plugins of a default kube-apiserver:

* **ExtendedResourceToleration** (create and update): a Pod requesting an
  extended resource (a domain-prefixed name outside ``kubernetes.io/``, such
  as ``nvidia.com/gpu``) in any container or init container gets the
  toleration ``{key: <resource>, operator: Exists, effect: NoSchedule}``, so
  it tolerates the taint GPU operators and cloud GPU pools put on their
  nodes.
* **ServiceAccount** (create): a Pod without ``spec.serviceAccountName``
  runs as ``default`` (``spec.serviceAccount`` mirrors it, as the v1 API
  shows the deprecated field); a Pod naming a ServiceAccount that does not
  exist is 403 Forbidden. No token volume is mounted (the local cluster has
  no tokens; see its README).
* **DefaultStorageClass** (create): a PVC created without
  ``spec.storageClassName`` (and without the legacy
  ``volume.beta.kubernetes.io/storage-class`` annotation) gets the name of the
  default StorageClass, the newest one annotated
  ``storageclass.kubernetes.io/is-default-class: "true"``.
* **PersistentVolumeClaimResize** (update, :func:`admit_update`): a claim
  may grow only if it is Bound and its StorageClass has
  ``allowVolumeExpansion: true``; else 403 Forbidden, worded as the plugin.
* **StorageObjectInUseProtection** (create): every PVC gets the finalizer
  ``kubernetes.io/pvc-protection`` and every PV ``kubernetes.io/pv-protection``;
  the protection controller (:mod:`.controllers.protection`) removes them
  once a deleted claim is no longer used, a deleted volume no longer bound.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import random
from decimal import Decimal

from . import errors
from .kinds import Kind
from .resourcequota import admit_claim
from .validation import parse_quantity

#: Service cluster IPs are loopback addresses, so the local cluster's service proxy can listen on them.
SERVICE_NETWORK = ipaddress.ip_network("127.96.0.0/16")

#: The annotations that mark the default StorageClass (GA and legacy beta), and a PVC's legacy class annotation.
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class")
BETA_CLAIM_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"

#: The finalizers of the StorageObjectInUseProtection admission plugin.
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"

#: The ServiceAccount every namespace has and a Pod runs as unless it names another.
DEFAULT_SERVICE_ACCOUNT = "default"

#: The finalizer of ``spec.finalizers`` the namespace controller removes once a deleted namespace is empty.
NAMESPACE_FINALIZER = "kubernetes"

#: The resources the Pod QoS class is computed from.
QOS_RESOURCES = ("cpu", "memory")


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


def _default_requests(resources) -> None:
    """A resource limited but not requested is requested at its limit (``SetDefaults_Pod``)."""
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.get("requests")
    if requests is None:
        requests = resources["requests"] = {}
    if isinstance(requests, dict):
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


def _default_containers(containers: list) -> None:
    for container in containers or []:
        if isinstance(container, dict):
            _canonical_resources(container.get("resources"))
            _default_requests(container.get("resources"))
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
    # v1's deprecated spec.serviceAccount is the same field as serviceAccountName (both ways, as conversion does)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        spec["serviceAccountName"] = spec["serviceAccount"] = account
    _default_containers(spec.get("containers"))
    _default_containers(spec.get("initContainers"))


def _pod_containers(pod: dict) -> list[dict]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, dict)]


def _quantities(values) -> dict[str, Decimal]:
    out = {}
    for name, value in (values or {}).items() if isinstance(values, dict) else ():
        try:
            out[name] = parse_quantity(value)
        except (TypeError, ValueError):
            continue
    return out


def pod_qos_class(pod: dict) -> str:
    """The Pod's QoS class, as ``GetPodQOS`` computes it from cpu and memory of every container.

    BestEffort: no container requests or limits cpu or memory. Guaranteed:
    every container limits both, and the summed requests equal the summed
    limits. Burstable otherwise. Zero quantities count as unset.
    """
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in _pod_containers(pod):
        resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
        for total, section in ((requests, "requests"), (limits, "limits")):
            for name, amount in _quantities(resources.get(section)).items():
                if name in QOS_RESOURCES and amount > 0:
                    total[name] = total.get(name, Decimal(0)) + amount
        limited = {n for n, a in _quantities(resources.get("limits")).items() if n in QOS_RESOURCES and a > 0}
        if limited != set(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(name) == amount for name, amount in requests.items()) and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def is_extended_resource(name: str) -> bool:
    """Whether ``name`` is an extended resource: domain-prefixed, outside ``kubernetes.io/``, not a quota ``requests.`` name."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _admit_extended_resource_tolerations(pod: dict) -> None:
    """ExtendedResourceToleration: tolerate the NoSchedule taint named after each extended resource requested."""
    requested = set()
    for container in _pod_containers(pod):
        resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
        if isinstance(resources.get("requests"), dict):
            requested.update(name for name in resources["requests"] if is_extended_resource(name))
    spec = pod.get("spec")
    if not requested or not isinstance(spec, dict):
        return
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = spec["tolerations"] = []
    if not isinstance(tolerations, list):
        return  # the schema reports it
    for name in sorted(requested):
        wanted = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if not any(
            isinstance(t, dict) and (t.get("key"), t.get("operator"), t.get("value", ""), t.get("effect")) == (name, "Exists", "", "NoSchedule")
            for t in tolerations
        ):
            tolerations.append(wanted)


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


def _default_secret(obj: dict, store) -> None:
    """``type`` defaults to ``Opaque``; ``stringData`` is write-only: folded into ``data`` (base64, over the same keys), then dropped."""
    if not obj.get("type"):
        obj["type"] = "Opaque"
    string_data = obj.get("stringData")
    if not isinstance(string_data, dict) or not all(isinstance(v, str) for v in string_data.values()):
        return  # left for validation to name
    del obj["stringData"]
    if string_data:
        data = obj["data"] if isinstance(obj.get("data"), dict) else {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(value.encode()).decode()
        obj["data"] = data


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


def _storage_class(store, name: str) -> dict | None:
    kind = store.kind("storage.k8s.io", "v1", "storageclasses")
    return next((sc for sc in store.objects(kind) if sc["metadata"]["name"] == name), None)


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


def _add_finalizer(obj: dict, finalizer: str) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        finalizers = meta.get("finalizers") if isinstance(meta.get("finalizers"), list) else []
        if finalizer not in finalizers:
            meta["finalizers"] = [*finalizers, finalizer]


def apply_defaults(kind: Kind, obj: dict, store, *, creating: bool) -> None:
    """Fill in the defaults the API server sets for built-in kinds, then run its admission plugins; other kinds are left alone.

    ``creating`` is True on create, when admission plugins that act only on
    create (DefaultStorageClass, StorageObjectInUseProtection) run too and a
    Pod gets its ``status.qosClass``. A claim then passes ResourceQuota
    (:mod:`.resourcequota`; 403 when it would exceed a quota).
    """
    if kind.group != "":
        return
    defaulter = {
        "Pod": _default_pod,
        "Service": _default_service,
        "Secret": _default_secret,
        "PersistentVolumeClaim": _default_pvc,
    }.get(kind.kind)
    if defaulter is not None:
        defaulter(obj, store)
    if creating and kind.kind == "Pod":
        _admit_service_account(obj, store)
    if kind.kind == "Pod":
        _admit_extended_resource_tolerations(obj)
        if creating and isinstance(obj.get("status"), dict):
            obj["status"]["qosClass"] = pod_qos_class(obj)
    if creating and kind.kind == "PersistentVolumeClaim":
        _admit_pvc(obj, store)
        _add_finalizer(obj, PVC_PROTECTION)
    if kind.kind == "PersistentVolumeClaim":
        admit_claim(obj, store)  # ResourceQuota: a validating plugin, after the mutating ones
    if creating and kind.kind == "PersistentVolume":
        _add_finalizer(obj, PV_PROTECTION)
    if creating and kind.kind == "Namespace":
        obj["spec"] = {**(obj.get("spec") if isinstance(obj.get("spec"), dict) else {}), "finalizers": [NAMESPACE_FINALIZER]}


def _admit_service_account(pod: dict, store) -> None:
    """The ServiceAccount admission plugin without tokens: default the Pod's ServiceAccount, refuse a missing one (403)."""
    spec, meta = pod.get("spec"), pod.get("metadata") or {}
    try:
        kind = store.kind("", "v1", "serviceaccounts")
    except errors.ApiError:
        return  # a store without ServiceAccounts
    if not isinstance(spec, dict):
        return
    name = spec.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT
    spec["serviceAccountName"] = spec["serviceAccount"] = name
    namespace = meta.get("namespace")
    if not any(sa["metadata"]["name"] == name and sa["metadata"].get("namespace") == namespace for sa in store.objects(kind)):
        raise errors.forbidden(
            "pods",
            meta.get("name") or "",
            f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found',
        )


def storage_request(pvc: dict) -> str | None:
    """A claim's ``spec.resources.requests.storage``, as written (``"10Gi"``), or None."""
    return (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")


def admit_update(kind: Kind, new: dict, current: dict, store) -> None:
    """Validating admission on update (after validation, as kube-apiserver orders them): PersistentVolumeClaimResize.

    A claim whose ``spec.resources.requests.storage`` grows must be Bound
    and its StorageClass must allow expansion; else 403 Forbidden with the
    plugin's message. Raises :class:`~.errors.ApiError`.
    """
    if kind.group != "" or kind.kind != "PersistentVolumeClaim":
        return
    try:
        grows = parse_quantity(storage_request(new)) > parse_quantity(storage_request(current))
    except (TypeError, ValueError):
        return
    if not grows:
        return
    name = current["metadata"]["name"]
    if (current.get("status") or {}).get("phase") != "Bound":
        raise errors.forbidden(kind.plural, name, "Only bound persistent volume claims can be expanded")
    new_class = (new.get("spec") or {}).get("storageClassName")
    storage_class = _storage_class(store, new_class) if new_class and new_class == (current.get("spec") or {}).get("storageClassName") else None
    if not (storage_class or {}).get("allowVolumeExpansion"):
        raise errors.forbidden(
            kind.plural,
            name,
            "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
        )


def carry_over_status(kind: Kind, new: dict, current: dict) -> None:
    """On a status write, keep a Pod's ``status.qosClass`` when the writer left it out (the pod status strategy backfills it)."""
    if kind.group == "" and kind.kind == "Pod" and isinstance(new.get("status"), dict):
        qos = (current.get("status") or {}).get("qosClass")
        if qos and not new["status"].get("qosClass"):
            new["status"]["qosClass"] = qos


def carry_over(kind: Kind, new: dict, current: dict) -> None:
    """On update, keep server-assigned fields the client left out (Service clusterIP/clusterIPs), and a Namespace's spec, as Kubernetes does."""
    if kind.group == "" and kind.kind == "Namespace":
        if "spec" in current:
            new["spec"] = copy.deepcopy(current["spec"])
        else:
            new.pop("spec", None)
    if kind.group == "" and kind.kind == "Service":
        new_spec, old_spec = new.get("spec"), current.get("spec") or {}
        if isinstance(new_spec, dict):
            for key in ("clusterIP", "clusterIPs"):
                if key in old_spec and not new_spec.get(key):
                    new_spec[key] = old_spec[key]
