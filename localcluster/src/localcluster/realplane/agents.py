"""Our controllers as ordinary API clients of the real control plane.

:class:`PlaneAgents` runs, against a :class:`~.plane.RealControlPlane`, the
parts a real cluster gets from elsewhere (see :data:`AGENTS`): the node
agent (every node's kubelet and virt-handler: it registers the Nodes with
cpu, memory and GPU capacity (``nvidia.com/gpu``, MIG slices, time-sliced
replicas: :mod:`..controllers.gpunodes`), renews their Leases, runs Pods
as local processes and reports through ``pods/status``), the ceph-csi
provisioner (``storage``), the snapshot controller, CDI, virt-controller,
the VMI half of our scheduler (a VMI stands for its virt-launcher Pod
here, and kube-scheduler does not know VMIs), and virt-api's VM
subresources behind the aggregator (:mod:`.virtapi`), and kube-proxy's part
(``serviceproxy``: every selector Service's ClusterIP, inside loopback,
forwarded to a ready endpoint). kube-scheduler places Pods;
kube-controller-manager binds PersistentVolumes and collects garbage, so
our binder, protection and Pod scheduling stay off (``real_control_plane``
tells each controller).

Each agent has credentials of its own: a ServiceAccount in ``kube-system``
named ``localcluster-<agent>``, bound to a ClusterRole of the same name
holding only what it reads and writes (:data:`RULES`), and a token
kubeconfig from the TokenRequest API. Every client dials 127.0.0.1 only (the
kubeconfigs name the API server's loopback address, never the
``kubernetes`` Service).

:func:`install` prepares the plane (the KubeVirt, CDI and VolumeSnapshot
CRDs, CDI's clone-permission check, the agents' ServiceAccounts, roles and
kubeconfigs), synchronously, once per start;
then ``await PlaneAgents(plane).start()`` on an event loop (or
``ClusterThread(cluster=PlaneAgents(plane))``).

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import yaml

from ..attacher import Attacher
from ..client import ApiServerClient
from ..store import utcnow
from . import CRDS_DIR

log = logging.getLogger(__name__)

#: The agents run on the real control plane, in start order (names of :data:`~..controllers.CONTROLLERS`).
AGENTS = ("storage", "snapshots", "cdi", "scheduler", "virt", "nodeagent", "serviceproxy", "virtapi")
#: The agents beside KubeVirt's own virt-controller and virt-api (:mod:`.kubevirt`): no imitation of them, and no
#: VMI scheduler (kube-scheduler places the virt-launcher Pods); the node agent is :mod:`.virthandler`'s.
KUBEVIRT_AGENTS = tuple(a for a in AGENTS if a not in ("scheduler", "virt", "virtapi"))
#: The agents beside KubeVirt's components and CDI's own cdi-controller (:mod:`.cdicontroller`): no CDI agent either.
KUBEVIRT_CDI_AGENTS = tuple(a for a in KUBEVIRT_AGENTS if a != "cdi")


def default_agents(plane) -> tuple[str, ...]:
    """The agents ``plane`` needs: all of :data:`AGENTS`, or fewer beside KubeVirt's and CDI's own components."""
    if getattr(plane, "kubevirt", None) is None:
        return AGENTS
    return KUBEVIRT_CDI_AGENTS if getattr(plane, "cdi_controller", None) is not None else KUBEVIRT_AGENTS


#: The CRDs of :data:`~.CRDS_DIR` that KubeVirt's install brings itself (its own version of them).
KUBEVIRT_CRDS = ("virtualmachineinstances.kubevirt.io", "virtualmachines.kubevirt.io")
#: The CRDs of :data:`~.CRDS_DIR` installed only for KubeVirt's own virt-controller: with CDI's API present it waits
#: for its informers of these kinds (cdi-operator's configuration; nothing of ours reads them) before it works.
CDI_CONFIG_CRDS = ("cdis.cdi.kubevirt.io", "cdiconfigs.cdi.kubevirt.io", "storageprofiles.cdi.kubevirt.io")

_READ = ["get", "list", "watch"]
_EVENTS = {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "update", "patch"]}

#: Each agent's ClusterRole rules: what its controller reads (cached by list+watch) and writes.
RULES: dict[str, list[dict]] = {
    "storage": [
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": [*_READ, "update", "patch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": [*_READ, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": [*_READ, "create"]},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": _READ},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": _READ},
        _EVENTS,
    ],
    "snapshots": [
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": _READ},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": [*_READ, "update"]},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots/status"], "verbs": ["update"]},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotclasses"], "verbs": [*_READ, "create"]},
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": _READ},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotcontents"],
         "verbs": [*_READ, "create", "delete"]},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshotcontents/status"], "verbs": ["update"]},
        _EVENTS,
    ],
    "cdi": [
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": [*_READ, "create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": _READ},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": _READ},
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes", "datasources"], "verbs": [*_READ, "update"]},
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/status", "datasources/status"], "verbs": ["update"]},
        # the clone check (install_clone_permission) asks it of every writer of a cloned DataVolume
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]},
        {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": _READ},
        _EVENTS,
    ],
    "scheduler": [
        {"apiGroups": [""], "resources": ["pods", "nodes", "persistentvolumeclaims"], "verbs": _READ},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": _READ},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": [*_READ, "update"]},
        _EVENTS,
    ],
    "virt": [
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": _READ},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines"], "verbs": [*_READ, "update"]},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines/status"], "verbs": ["update"]},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": [*_READ, "create", "update", "delete"]},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances/finalizers"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*_READ, "create", "delete"]},  # virt-launcher Pods
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"], "verbs": _READ},
        _EVENTS,
    ],
    "serviceproxy": [
        {"apiGroups": [""], "resources": ["services", "pods"], "verbs": _READ},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": _READ},
    ],
    "virtapi": [
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines", "virtualmachineinstances"], "verbs": [*_READ, "update"]},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachines/status"], "verbs": ["update"]},
    ],
    "nodeagent": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*_READ, "create", "update"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": [*_READ, "create", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*_READ, "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["secrets", "configmaps", "persistentvolumeclaims"], "verbs": _READ},
        {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstances"], "verbs": [*_READ, "update"]},
        _EVENTS,
    ],
}

NAMESPACE = "kube-system"


def install_crds(plane, timeout: float = 60.0, kubevirt: bool = False) -> None:
    """Create (or update) the KubeVirt, CDI and VolumeSnapshot CRDs of :data:`~.CRDS_DIR`, wait until each is Established,
    then install CDI's clone-permission check (:func:`install_clone_permission`). With ``kubevirt`` (the plane runs
    KubeVirt's own components), not :data:`KUBEVIRT_CRDS` but :data:`CDI_CONFIG_CRDS` too. On a plane that runs CDI's
    own cdi-apiserver (``plane.cdi``), CDI's CRDs and clone authorization are its own: neither is installed here."""
    skip = set(KUBEVIRT_CRDS if kubevirt else CDI_CONFIG_CRDS)
    real_cdi = getattr(plane, "cdi", None)
    if real_cdi is not None:  # CDI's own CRDs and admission (:mod:`.cdi`)
        skip |= real_cdi.crd_names
    names = []
    for path in sorted(Path(CRDS_DIR).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in skip:
            continue
        plane.create_or_replace("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        plane.wait_condition(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", "Established", deadline)
    if real_cdi is None:
        install_clone_permission(plane)


#: The name of CDI's clone-permission check here (:func:`install_clone_permission`).
CLONE_POLICY = "cdi-clone-source-permission"


def install_clone_permission(plane) -> None:
    """CDI's admission check of a cross-namespace clone, as a ValidatingAdmissionPolicy asking the real authorizer.

    CDI's mutating webhook admits a write of a DataVolume cloned from
    another namespace, its creation and every later update (a label, an
    annotation) until it is being deleted, only if the writer may
    ``create`` ``datavolumes/source`` (group ``cdi.kubevirt.io``) or ``pods``
    in the source namespace (CDI ``doc/RBAC.md``, "PVC Cloning";
    ``DataVolume.AuthorizeUser``), else refuses it with "User NAME has
    insufficient permissions in clone source namespace NS", a 422 (its
    admission response's code, not a 403; localcluster/tests/realplane/
    test_realplane_cdi.py reads both from cdi-apiserver). Our CDI runs no
    webhook, so a CEL policy asks kube-apiserver's authorizer the same
    question for the DataVolume's ``sourceRef`` (a DataSource) or
    ``source.pvc``, on create and update but not once the DataVolume is
    being deleted, and refuses with reason ``Invalid``: a 422 too. Our CDI
    agent may clone anywhere, as cdi-controller may. Where the plane runs
    cdi-apiserver (:mod:`.cdi`) this policy is not installed.
    """
    source_ns = (
        "has(object.spec.sourceRef) ? (has(object.spec.sourceRef.namespace) ? object.spec.sourceRef.namespace : request.namespace)"
        " : has(object.spec.source) && has(object.spec.source.pvc) && has(object.spec.source.pvc.namespace)"
        " ? object.spec.source.pvc.namespace : request.namespace"
    )
    may = "authorizer.group('{group}').resource('{resource}').namespace(variables.sourceNamespace).check('create').allowed()"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": CLONE_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["cdi.kubevirt.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["datavolumes"],
            }]},
            "variables": [{"name": "sourceNamespace", "expression": source_ns}],
            "validations": [{
                "expression": (
                    "has(object.metadata.deletionTimestamp) || variables.sourceNamespace == request.namespace || "
                    + may.format(group="cdi.kubevirt.io", resource="datavolumes/source") + " || "
                    + may.format(group="", resource="pods")
                ),
                "messageExpression": (
                    "'User ' + request.userInfo.username + ' has insufficient permissions in clone source namespace '"
                    " + variables.sourceNamespace"
                ),
                "reason": "Invalid",  # 422, as CDI's webhook answers
            }],
        },
    }
    plane.create_or_replace("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", policy)
    plane.create_or_replace("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": CLONE_POLICY},
        "spec": {"policyName": CLONE_POLICY, "validationActions": ["Deny"]},
    })


def install_agent(plane, agent: str) -> Path:
    """The ServiceAccount, ClusterRole and binding of ``agent``; returns its token kubeconfig."""
    name = f"localcluster-{agent}"
    plane.create_or_replace(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": RULES[agent]},
    )
    plane.create_or_replace(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    )
    return plane.serviceaccount_kubeconfig(
        NAMESPACE, name, plane.state_dir / "agents" / f"{agent}.kubeconfig", expiration_seconds=86400
    )


def install(plane, agents=AGENTS) -> dict[str, Path]:
    """Prepare ``plane`` for the agents: CRDs (KubeVirt's from its own install when the plane runs it), then each
    agent's credentials. Returns {agent: kubeconfig}."""
    install_crds(plane, kubevirt=getattr(plane, "kubevirt", None) is not None)
    return {agent: install_agent(plane, agent) for agent in agents}


class PlaneAgents:
    """The agents of :data:`AGENTS` against a started :class:`~.plane.RealControlPlane` (see the module docstring).

    Shaped like :class:`~..cluster.LocalCluster` for the controllers:
    ``state_dir`` (volume directories, pod and guest files, under
    ``<plane state>/agents``), ``nodes`` (node specs, None for the default
    two), ``volume_binding_mode`` of ``ceph-rbd``, ``attacher``,
    ``controllers`` by name, ``client_for(name)``, and
    ``real_control_plane = True``. ``kubeconfigs`` ({agent: path}) come
    from :func:`install` (run here when not given). With ``fault_proxy``,
    ``kubeconfig`` names a :class:`~.faultproxy.FaultProxy` in front of the
    API server (the agents still dial it directly), whose ``faults`` and
    ``requests`` are the cluster's, as the embedded cluster has them. On a
    plane running KubeVirt's own components (``plane.kubevirt``), the node
    agent is :class:`~.virthandler.KubeVirtNodeAgent` and ``agents``
    defaults to :data:`KUBEVIRT_AGENTS`, or :data:`KUBEVIRT_CDI_AGENTS` where
    CDI's own cdi-controller runs too (:func:`default_agents`).
    """

    real_control_plane = True

    def __init__(self, plane, *, agents=None, nodes=None, volume_binding_mode: str = "Immediate", kubeconfigs=None,
                 fault_proxy: bool = False):
        self.plane = plane
        self.kubevirt = getattr(plane, "kubevirt", None) is not None
        self.agents = tuple(agents if agents is not None else default_agents(plane))
        self.state_dir = Path(plane.state_dir) / "agents"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = nodes
        self.volume_binding_mode = volume_binding_mode
        self.attacher = Attacher(utcnow)
        self.kubeconfigs = kubeconfigs
        self.controllers: dict = {}
        self.clients: dict[str, ApiServerClient] = {}
        self.kubeconfig = plane.kubeconfig
        self.url = plane.url
        self.fault_proxy = fault_proxy
        self.proxy = None
        self.kubelet_api = None

    def client_for(self, name: str) -> ApiServerClient:
        """The client of agent ``name`` (its own ServiceAccount's credentials)."""
        return self.clients[name]

    @property
    def client(self) -> ApiServerClient:
        """A client with the plane's admin credentials, for setup (golden images, :mod:`..volumes` lookups by tests)."""
        return self.clients["admin"]

    async def start(self) -> PlaneAgents:
        """Connect each agent with its credentials and start its controller. Returns self."""
        import asyncio

        from kubernetes_asyncio import config

        from ..controllers import CONTROLLERS
        from .virtapi import VirtApi

        factories = {**CONTROLLERS, VirtApi.name: VirtApi}
        if self.kubevirt:
            from .virthandler import KubeVirtNodeAgent

            factories[KubeVirtNodeAgent.name] = KubeVirtNodeAgent

        if self.kubeconfigs is None:
            self.kubeconfigs = await asyncio.to_thread(install, self.plane, self.agents)
        for agent, kubeconfig in {**self.kubeconfigs, "admin": self.plane.kubeconfig}.items():
            api = await config.new_client_from_config(config_file=str(kubeconfig))
            self.clients[agent] = ApiServerClient(api)
        for agent in self.agents:
            self.controllers[agent] = factories[agent](self)
        for controller in self.controllers.values():
            await controller.start()
        if self.fault_proxy:
            await self._start_proxy()
        log.info("agents %s running against %s", ", ".join(self.agents), self.plane.url)
        return self

    async def _start_proxy(self) -> None:
        from .faultproxy import FaultProxy

        pki = self.plane.pki
        self.proxy = await FaultProxy(self.plane.url, pki.path("ca.crt"), pki.path("admin.crt"), pki.path("admin.key")).start()
        self.faults, self.requests = self.proxy.faults, self.proxy.requests
        self.kubeconfig = self.proxy.write_kubeconfig(self.state_dir / "proxy.kubeconfig")

    async def serve_kubelet_api(self, agent, addresses: list[str]) -> int:
        """Start the kubelet API of the node agent ``agent`` on the nodes' ``addresses`` (:mod:`.kubeletapi`); its port."""
        from .kubeletapi import KubeletApi

        pki = self.plane.pki
        cert, key = pki.serving("kubelet", ("kubelet",), ips=tuple(addresses))
        self.kubelet_api = await KubeletApi(agent, addresses, cert, key, pki.path("ca.crt")).start()
        return self.kubelet_api.port

    async def stop(self) -> None:
        """Stop the controllers (the node agent ends its processes), then close the clients."""
        if self.kubelet_api is not None:
            await self.kubelet_api.stop()
        if self.proxy is not None:
            await self.proxy.stop()
        for controller in reversed(list(self.controllers.values())):
            await controller.stop()
        for client in self.clients.values():
            await client.close()
            await client.api.close()
        self.clients.clear()



class RealCluster:
    """A :class:`~.plane.RealControlPlane` with its :class:`PlaneAgents` on a thread of their own.

    ``start()`` starts the plane, installs the agents' CRDs and credentials
    and starts the agents (``thread.call(fn)`` reaches them on their loop, as
    with :class:`~..cluster.ClusterThread`); ``stop()`` stops the agents, then
    the plane. ``kubeconfig`` is the plane's admin kubeconfig;
    ``service_cidr`` the plane's ClusterIP range; ``extra_apiserver_args``
    go to kube-apiserver (an audit policy, say). With ``kubevirt_bin`` (the
    folder tools/kubevirt/build.sh printed) the plane runs KubeVirt's own
    virt-api and virt-controller (:mod:`.kubevirt`) in place of our
    imitations, and the node agent plays virt-handler beside them
    (:mod:`.virthandler`). With ``kueue_dir`` (tools/kueue/build.sh's
    folder) the plane runs Kueue's manager too (``kueue_pod_selector``,
    ``kueue_config``: see :class:`~.kueue.Kueue`). Other keyword
    arguments go to :class:`PlaneAgents` (``nodes``, ``volume_binding_mode``,
    ``agents``).
    """

    def __init__(self, state_dir, bin_dir=None, *, service_cidr=None, extra_apiserver_args=(), kubevirt_bin=None,
                 kueue_dir=None, kueue_pod_selector=None, kueue_config=None, **agent_kwargs):
        from .plane import DEFAULT_SERVICE_CIDR, RealControlPlane

        self.plane = RealControlPlane(
            state_dir,
            bin_dir,
            service_cidr=service_cidr or DEFAULT_SERVICE_CIDR,
            extra_apiserver_args=extra_apiserver_args,
            kubevirt_bin=kubevirt_bin,
            kueue_dir=kueue_dir,
            kueue_pod_selector=kueue_pod_selector,
            kueue_config=kueue_config,
        )
        if kubevirt_bin is not None:
            self.plane.before_kubevirt.append(functools.partial(install_crds, kubevirt=True))
        self.agent_kwargs = agent_kwargs
        self.thread = None

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def agents(self) -> PlaneAgents:
        return self.thread.cluster

    def start(self) -> RealCluster:
        from ..cluster import ClusterThread

        self.plane.start()
        try:
            agents = self.agent_kwargs.get("agents") or default_agents(self.plane)
            kubeconfigs = install(self.plane, agents)
            self.thread = ClusterThread(cluster=PlaneAgents(self.plane, kubeconfigs=kubeconfigs, **self.agent_kwargs))
            self.thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            if self.thread is not None:
                self.thread.stop()
                self.thread = None
        finally:
            self.plane.stop()

    def __enter__(self) -> RealCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
