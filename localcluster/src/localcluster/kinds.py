"""The table of kinds the local API server serves.

Each row mirrors what a real cluster's discovery documents say about a
resource (group, version, plural, namespaced or cluster-scoped, subresources)
plus how the local cluster validates and patches it. Adding a kind is adding a
row: the server, discovery, validation and kubectl tables all read from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .version import at_least


@dataclass(frozen=True)
class Kind:
    """One served resource, as discovery (``/api/v1``, ``/apis/{g}/{v}``) lists it.

    ``schema`` names where the object's schema comes from:
    ``"kubernetes"`` uses kubernetes-validate's strict schema for ``kind``;
    ``"kubevirt:<definition>"`` and ``"cdi:<definition>"`` use the trimmed
    OpenAPI definitions carried in ``localcluster/schemas``.
    ``strategic_merge`` is True for kinds that accept
    ``application/strategic-merge-patch+json`` (built-in kinds only, as in
    Kubernetes; custom resources answer 415).
    ``generation`` is True for kinds whose registry maintains
    ``metadata.generation`` (1 on create, one more for each change outside
    ``metadata`` and ``status``, and on being marked for deletion): every
    custom resource, and the built-in kinds whose strategy sets it. Other
    kinds keep whatever ``generation`` a client wrote on create.
    ``categories`` are the discovery categories (``all`` is what ``kubectl get
    all`` lists). ``subresources`` are ``status`` (read and written) and
    ``log`` (read only, see :data:`READ_ONLY_SUBRESOURCES`).
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: str
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    strategic_merge: bool = False
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    categories: tuple[str, ...] = field(default=())
    generation: bool = True

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def built_in(self) -> bool:
        """A kind of Kubernetes itself (not a custom resource): its list items carry no ``kind``/``apiVersion``."""
        return self.schema == "kubernetes"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> tuple[str, str, str]:
        """(group, version, plural): how a URL names this kind."""
        return (self.group, self.version, self.plural)


def _core(kind, plural, namespaced=True, short=(), sub=(), categories=(), generation=False):
    return Kind(
        group="",
        version="v1",
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        schema="kubernetes",
        short_names=short,
        subresources=sub,
        strategic_merge=True,
        categories=categories,
        generation=generation,
    )


KINDS: tuple[Kind, ...] = (
    # Pods have metadata.generation since 1.33 (KEP-5067: the pod strategy sets it, bumped on spec changes).
    _core("Pod", "pods", short=("po",), sub=("status", "log"), categories=("all",), generation=at_least(1, 33)),
    _core("PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), sub=("status",)),
    _core("PersistentVolume", "persistentvolumes", namespaced=False, short=("pv",), sub=("status",)),
    _core("Service", "services", short=("svc",), sub=("status",), categories=("all",)),
    _core("Secret", "secrets"),
    _core("ConfigMap", "configmaps", short=("cm",)),
    _core("Event", "events", short=("ev",)),
    _core("ServiceAccount", "serviceaccounts", short=("sa",)),
    _core("Namespace", "namespaces", namespaced=False, short=("ns",), sub=("status",)),
    _core("ResourceQuota", "resourcequotas", short=("quota",), sub=("status",)),
    _core("Node", "nodes", namespaced=False, short=("no",), sub=("status",)),
    Kind(
        group="storage.k8s.io",
        version="v1",
        kind="StorageClass",
        plural="storageclasses",
        namespaced=False,
        schema="kubernetes",
        short_names=("sc",),
        strategic_merge=True,
        generation=False,
    ),
    Kind(
        group="snapshot.storage.k8s.io",
        version="v1",
        kind="VolumeSnapshot",
        plural="volumesnapshots",
        namespaced=True,
        schema="snapshot:v1.VolumeSnapshot",
        short_names=("vs",),
        subresources=("status",),
    ),
    Kind(
        group="snapshot.storage.k8s.io",
        version="v1",
        kind="VolumeSnapshotContent",
        plural="volumesnapshotcontents",
        namespaced=False,
        schema="snapshot:v1.VolumeSnapshotContent",
        short_names=("vsc", "vscs"),
        subresources=("status",),
    ),
    Kind(
        group="snapshot.storage.k8s.io",
        version="v1",
        kind="VolumeSnapshotClass",
        plural="volumesnapshotclasses",
        namespaced=False,
        schema="snapshot:v1.VolumeSnapshotClass",
        short_names=("vsclass", "vsclasses"),
    ),
    Kind(
        group="kubevirt.io",
        version="v1",
        kind="VirtualMachine",
        plural="virtualmachines",
        namespaced=True,
        schema="kubevirt:v1.VirtualMachine",
        short_names=("vm", "vms"),
        subresources=("status",),
        categories=("all",),
    ),
    Kind(
        group="kubevirt.io",
        version="v1",
        kind="VirtualMachineInstance",
        plural="virtualmachineinstances",
        namespaced=True,
        schema="kubevirt:v1.VirtualMachineInstance",
        short_names=("vmi", "vmis"),
        subresources=("status",),
        categories=("all",),
    ),
    Kind(
        group="cdi.kubevirt.io",
        version="v1beta1",
        kind="DataVolume",
        plural="datavolumes",
        namespaced=True,
        schema="cdi:v1beta1.DataVolume",
        short_names=("dv", "dvs"),
        subresources=("status",),
        categories=("all",),
    ),
    Kind(
        group="cdi.kubevirt.io",
        version="v1beta1",
        kind="DataSource",
        plural="datasources",
        namespaced=True,
        schema="cdi:v1beta1.DataSource",
        short_names=("das",),
        subresources=("status",),
        categories=("all",),
    ),
)

#: Subresources that only answer GET (``pods/log``); the others (``status``) are read and written.
READ_ONLY_SUBRESOURCES = frozenset({"log"})

#: KubeVirt's subresource API group: ``PUT .../virtualmachines/{name}/start|stop|restart``.
KUBEVIRT_SUBRESOURCE_GROUP = "subresources.kubevirt.io"
KUBEVIRT_SUBRESOURCE_VERSION = "v1"
VM_ACTIONS = ("start", "stop", "restart")


def by_key(kinds=KINDS) -> dict[tuple[str, str, str], Kind]:
    """Map (group, version, plural) to its Kind."""
    return {k.key: k for k in kinds}


def by_kind(kinds=KINDS) -> dict[tuple[str, str], Kind]:
    """Map (apiVersion, kind) to its Kind."""
    return {(k.api_version, k.kind): k for k in kinds}


def groups(kinds=KINDS) -> dict[str, list[str]]:
    """Map each non-core group to its served versions, in table order."""
    out: dict[str, list[str]] = {}
    for k in kinds:
        if k.group and k.version not in out.setdefault(k.group, []):
            out[k.group].append(k.version)
    return out
