"""The node agent beside KubeVirt's own virt-controller and virt-api: a node's kubelet and virt-handler only.

With the real KubeVirt (:mod:`.kubevirt`), virt-controller makes a VMI's
virt-launcher Pod at once, kube-scheduler places it, and the VMI follows the
Pod (``pkg/virt-controller/watch/vmi/vmi.go``, ``updateStatus``): Pending,
Scheduling while the Pod exists, Scheduled (``status.nodeName``, label
``kubevirt.io/nodeName``) once the Pod runs with its ``compute`` container
started, and its ``Ready`` condition copied from the Pod's. What a node does
in that is what :class:`KubeVirtNodeAgent` adds to the node agent
(:class:`~..controllers.nodeagent.NodeAgent`), whose Pods and guests run as
before:

* the Nodes as virt-handler labels them: ``kubevirt.io/schedulable=true``,
  the ``kubevirt.io/heartbeat`` annotation (renewed every
  ``heartbeat_seconds``; virt-controller's node controller fails the VMIs of
  a node whose heartbeat is older than 5 minutes) and the device plugins'
  ``devices.kubevirt.io/kvm``, ``/tun`` and ``/vhost-net`` (1000 each, as
  virt-handler's device manager advertises them), which every launcher Pod
  requests, and the kubelet's ``ephemeral-storage`` (100Gi) on a Node that
  reports none (the launcher's containers request some);
* kubelet for a virt-launcher Pod bound to a node: phase Running, its init
  containers completed, every container running, ``podIP`` the address
  the guest will have (the node agent's pool, held for the VMI's uid); its
  ``compute`` container is ready while the guest is (every started unit up,
  and the VMI's readiness probe, which KubeVirt puts on that container),
  the others at once; ``Ready`` also waits for the Pod's readiness gates
  (virt-controller's ``kubevirt.io/virtual-machine-unpaused``). A deleted
  launcher Pod shuts its guest down (virt-launcher's SIGTERM), then its
  deletion is confirmed;
* virt-handler for a VMI that is ``Scheduled`` on a node: the guest boots
  (:class:`~..controllers.virthandler.GuestRuntime`), and the VMI's status
  is written as virt-handler writes it: phase Running (Succeeded once shut
  down), ``interfaces`` with the guest's address, ``guestOSInfo``;
  never its ``Ready`` condition (virt-controller's, from the Pod) and never
  the finalizer ``foregroundDeleteVirtualMachine`` (virt-controller lifts
  it once the VMI is final and its Pods are gone). KubeVirt's VMI has no
  status subresource: the status goes with an update of the object, made
  with virt-handler's own credentials (a token of the ServiceAccount
  ``kubevirt/kubevirt-handler``), as virt-api's VMI mutating webhook puts
  back the old status of an update by any account that is not KubeVirt's
  (silently: the update succeeds).

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import asyncio
import copy
import logging

from ..conditions import find_condition, set_condition
from ..controllers.kubelet import PodRuntime
from ..controllers.launcher import CREATED_BY_LABEL, is_launcher
from ..controllers.nodeagent import NodeAgent
from ..controllers.refs import NODES, PODS, VMIS, get_or_none
from ..controllers.virthandler import GuestRuntime
from ..errors import ApiError
from ..store import rfc3339

log = logging.getLogger("localcluster")

SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
HEARTBEAT_ANNOTATION = "kubevirt.io/heartbeat"
#: What virt-handler's device plugins advertise on every node (count each).
DEVICE_PLUGINS = {"devices.kubevirt.io/kvm": "1000", "devices.kubevirt.io/tun": "1000", "devices.kubevirt.io/vhost-net": "1000"}
#: virt-handler's ServiceAccount (virt-operator's install): virt-api's VMI mutating webhook keeps the old status of
#: an update by any account but KubeVirt's own, so the node agent writes VMIs as virt-handler.
HANDLER_NAMESPACE, HANDLER_SERVICE_ACCOUNT = "kubevirt", "kubevirt-handler"
#: What every kubelet reports besides cpu and memory, and the launcher Pod's containers request (when a Node has none).
EPHEMERAL_STORAGE = {"ephemeral-storage": "100Gi"}


class KubeVirtGuest(GuestRuntime):
    """A guest whose VMI KubeVirt's virt-controller owns: virt-handler's part of the status only."""

    @staticmethod
    async def finish(agent, vmi: dict) -> None:
        """Nothing: virt-controller lifts the VMI's finalizer once it is final and its Pods are gone."""

    def publish(self) -> None:
        super().publish()
        self.agent.launcher_changed(self.uid)

    def build_status(self, current: dict) -> dict:
        status = super().build_status(current)
        # Ready is virt-controller's (from the launcher Pod): the current one, in its place (virt-controller's
        # JSON patches test the whole list, order included)
        ready = find_condition(current.get("conditions"), "Ready")
        conditions = [ready if c.get("type") == "Ready" else c for c in status.get("conditions") or []]
        conditions = [c for c in conditions if c is not None]
        if conditions:
            status["conditions"] = conditions
        else:
            status.pop("conditions", None)
        return status


class KubeVirtNodeAgent(NodeAgent):
    """The node agent with KubeVirt's virt-controller running: see the module docstring.

    Knob: ``heartbeat_seconds`` (how often each Node's ``kubevirt.io/heartbeat`` is renewed, default 60).
    """

    def __init__(self, cluster):
        super().__init__(cluster)
        self.heartbeat_seconds = 60.0
        self.handler = None  # the client with virt-handler's credentials (VMI writes)

    async def start(self) -> None:
        from kubernetes_asyncio import config

        from ..client import ApiServerClient

        kubeconfig = await asyncio.to_thread(
            self.cluster.plane.serviceaccount_kubeconfig,
            HANDLER_NAMESPACE,
            HANDLER_SERVICE_ACCOUNT,
            self.cluster.state_dir / "virt-handler.kubeconfig",
            create=False,
            expiration_seconds=7 * 24 * 3600,
        )
        self.handler = ApiServerClient(await config.new_client_from_config(config_file=str(kubeconfig)))
        await super().start()
        names = [spec["name"] for spec in self.cluster.nodes or _default_nodes()]
        await self._heartbeat(names, devices=True)
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(names), name="virt-handler-heartbeat"))

    async def stop(self) -> None:
        await super().stop()
        if self.handler is not None:
            await self.handler.close()
            await self.handler.api.close()
            self.handler = None

    async def _heartbeat_loop(self, names: list[str]) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            await self._heartbeat(names, devices=False)

    async def _heartbeat(self, names: list[str], devices: bool) -> None:
        """virt-handler's node labels and heartbeat; with ``devices``, its device plugins' resources too."""
        now = rfc3339(self.client.clock())

        def label(node: dict) -> None:
            node["metadata"].setdefault("labels", {})[SCHEDULABLE_LABEL] = "true"
            node["metadata"].setdefault("annotations", {})[HEARTBEAT_ANNOTATION] = now

        def advertise(node: dict) -> None:
            for field in ("capacity", "allocatable"):
                resources = node.setdefault("status", {}).setdefault(field, {})
                resources.update({**EPHEMERAL_STORAGE, **resources, **DEVICE_PLUGINS})

        for name in names:
            await self._update_node(name, label)
            if devices:
                await self._update_node(name, advertise, "status")

    async def _update_node(self, name: str, mutate, subresource: str | None = None, attempts: int = 10) -> None:
        """Apply ``mutate`` to Node ``name`` and write it back, read again after a 409 Conflict."""
        kind = self.client.kind(*NODES)
        for attempt in range(attempts):
            node = get_or_none(self.client, NODES, None, name)
            if node is None:
                return
            mutate(node)
            try:
                await self.client.replace(kind, None, name, node, subresource=subresource)
                return
            except ApiError as e:
                if e.code != 409 or attempt + 1 == attempts:
                    log.warning("virt-handler: updating node %s: %s", name, e.message)
                    return
                await asyncio.sleep(0.1)

    # -- reconcile ----------------------------------------------------------------------

    async def reconcile(self, kind, obj, deleted) -> None:
        if kind.key == VMIS:
            await self._reconcile_workload(KubeVirtGuest, obj, deleted)
        elif kind.key == PODS and is_launcher(obj):
            await self._reconcile_launcher(obj, deleted)
        else:
            await super().reconcile(kind, obj, deleted)

    async def write_status(self, runtime) -> dict | None:
        if not isinstance(runtime, KubeVirtGuest):
            return await super().write_status(runtime)
        kind = self.client.kind(*VMIS)
        for attempt in range(20):
            current = get_or_none(self.client, VMIS, runtime.namespace, runtime.name)
            if current is None or current["metadata"]["uid"] != runtime.uid:
                return None
            version = current["metadata"].get("resourceVersion")
            current["status"] = runtime.build_status(current.get("status") or {})
            try:
                return await self.handler.replace(kind, runtime.namespace, runtime.name, current)
            except ApiError as e:
                if e.code == 409:
                    await self._cache_moved(kind, current["metadata"], version)
                    continue
                log.warning("virt-handler: cannot update VMI %s/%s: %s", runtime.namespace, runtime.name, e.message)
                return None
        return None

    def launcher_changed(self, vmi_uid: str) -> None:
        """The guest of ``vmi_uid`` changed: look at its launcher Pod again."""
        for pod in self.client.objects(self.client.kind(*PODS)):
            if (pod["metadata"].get("labels") or {}).get(CREATED_BY_LABEL) == vmi_uid:
                self._queue.put_nowait((self.client.kind(*PODS), pod, False))

    async def _reconcile_launcher(self, pod: dict, deleted: bool) -> None:
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName")
        if deleted or not node:
            return
        vmi_uid = (meta.get("labels") or {}).get(CREATED_BY_LABEL)
        guest = self.runtimes.get(vmi_uid)
        if meta.get("deletionTimestamp"):
            self._spawn(self._retire_launcher(pod, guest), f"launcher-down-{meta['name']}")
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        ip = self.addresses.allocate(vmi_uid)
        status = launcher_status(pod, ip, self.host_ip(node), guest_ready(guest), rfc3339(self.client.clock()))
        if status != pod.get("status"):

            def write(current: dict) -> None:
                current["status"] = launcher_status(current, ip, self.host_ip(node), guest_ready(guest), rfc3339(self.client.clock()))

            await self.update(pod, write, "status")

    async def _retire_launcher(self, pod: dict, guest) -> None:
        """virt-launcher's SIGTERM: the guest shuts down, then the Pod goes (its deletion confirmed, as a kubelet does)."""
        if guest is not None and not guest.terminating:
            guest.terminating = True
            await guest.retire(confirm=True)
        elif guest is not None:
            while guest.uid in self.runtimes:
                await asyncio.sleep(0.1)
        else:
            self.addresses.release((pod.get("status") or {}).get("podIP"))
        await PodRuntime.finish(self, pod)


def _default_nodes() -> list[dict]:
    from ..controllers.scheduler import DEFAULT_NODES

    return DEFAULT_NODES


def guest_ready(guest) -> bool:
    return guest is not None and guest.ready()[0]


def launcher_status(pod: dict, ip: str, host_ip: str, compute_ready: bool, now: str) -> dict:
    """The status a kubelet reports for a running virt-launcher Pod (see the module docstring)."""
    current = pod.get("status") or {}
    status = copy.deepcopy(current)
    started = current.get("startTime") or now
    running = {"running": {"startedAt": started}}

    def container(spec: dict, ready: bool) -> dict:
        return {
            "name": spec["name"],
            "image": spec.get("image", ""),
            "imageID": "",
            "ready": ready,
            "restartCount": 0,
            "started": True,
            "state": running,
            "lastState": {},
        }

    containers = [container(c, compute_ready if c["name"] == "compute" else True) for c in pod["spec"]["containers"]]
    unready = [c["name"] for c in containers if not c["ready"]]
    gates = [g["conditionType"] for g in pod["spec"].get("readinessGates") or []]
    conditions = list(status.get("conditions") or [])
    gates_open = all((find_condition(conditions, g) or {}).get("status") == "True" for g in gates)
    if unready:
        ready = ("False", "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
    elif not gates_open:
        ready = ("False", "ReadinessGatesNotReady", "the status of pod readiness gate is not \"True\"")
    else:
        ready = ("True", "", "")
    set_condition(conditions, "PodReadyToStartContainers", "True", now=now)
    set_condition(conditions, "Initialized", "True", now=now)
    set_condition(conditions, "ContainersReady", *(ready if unready else ("True", "", "")), now=now)
    set_condition(conditions, "Ready", *ready, now=now)
    status.update(
        phase="Running",
        conditions=conditions,
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=ip,
        podIPs=[{"ip": ip}],
        startTime=started,
        containerStatuses=containers,
    )
    if pod["spec"].get("initContainers"):
        status["initContainerStatuses"] = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}},
                "lastState": {},
            }
            for c in pod["spec"]["initContainers"]
        ]
    return status

