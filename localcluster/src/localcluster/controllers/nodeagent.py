"""The node agent: every node's kubelet, and for VMs virt-handler and the guest, as local processes.

A Pod bound to a node (``spec.nodeName``) runs here as real processes
(:mod:`.kubelet`); a VirtualMachineInstance scheduled to a node boots here
as an emulated guest (:mod:`.virthandler`, :mod:`.guest`). There are no
containers, so this is what "running a container" means, and where it
stops being the real thing:

**Image.** Ignored: the Python environment of the host acts as every image.
Pulls are pretended (``Pulling``/``Pulled`` events, ``pull_seconds`` of
delay; ``failing_images`` fail with ``ErrImagePull``/``ImagePullBackOff``).

**Command.** ``command + args`` (kubespawner leaves ``command`` empty and
relies on the image's entrypoint: then ``args`` alone), with ``$(VAR)``
references expanded. With neither, the image's default command is what
``image_commands`` says for the image, else ``default_command``
(``jupyterhub-singleuser``, what the Jupyter docker-stacks images'
``start-notebook.py`` runs under JupyterHub). The program is looked up
inside the workload's filesystem first (see below), then by its name on
PATH, which starts with the container's own PATH (if its env sets one),
then the host Python's ``bin`` directory, then the host's PATH.

**Network.** Every pod and guest gets its own address from
``127.10.0.0/16`` (all of 127/8 is routed to ``lo`` on Linux), reported as
``status.podIP`` (or the VMI's ``status.interfaces``). ``0.0.0.0`` in any
argument or env value becomes that address, so every pod can listen on the
same port. Nothing stops a process from binding elsewhere: there is no
network namespace.

**Environment.** The container's ``env`` and ``envFrom`` (values, Secret
and ConfigMap keys, ``fieldRef`` to metadata.name/namespace/uid/labels/
annotations, spec.nodeName, status.podIP/hostIP) over a minimal base of
PATH and LANG, plus HOSTNAME and HOME. Not the host's environment. Images
run their servers as an unprivileged user; when the agent itself runs as
root, its processes are root too, so it plays the image's Jupyter
configuration (``/etc/jupyter``) with ``allow_root`` set: a directory
``state_dir/image/jupyter`` put first on ``JUPYTER_CONFIG_PATH``.

**Filesystem.** Each volume is a host directory: a PVC is its
PersistentVolume's directory (:func:`~..volumes.claim_path`), and so is a
generic ``ephemeral`` volume's claim ``<pod>-<volume>`` (created by
:mod:`.ephemeral`, owned by the Pod and deleted with it; the containers
wait until it is Bound). Before a claim is mounted the cluster's attacher
(:mod:`..attacher`) attaches its volume: a ReadWriteOnce claim used on
another node keeps the Pod in ``ContainerCreating`` (VMI: waiting) with the
Warning ``FailedAttachVolume`` until the holder is gone. A ``hostPath`` is the node's directory
``state_dir/nodes/<node>/hostpath/<path>``, which outlives pods, checked
against its ``type`` as the kubelet does (``DirectoryOrCreate`` and
``FileOrCreate`` create it; ``Directory``, ``File``, ... must exist, else
the Warning ``FailedMount`` and the container waits in
``ContainerCreating``). An emptyDir (``sizeLimit`` recorded, not enforced)
and Secret/ConfigMap/projected volumes (files written from their data) live
in ``state_dir/pods/<uid>/volumes/<name>`` and go with the pod.
Where the agent runs on Linux as root, or as a user who may make user
namespaces (kernel overlayfs, bind mounts and namespaces: see
:mod:`.isolation` and :mod:`.sandbox`), every container runs in a sandbox:
its own mount, PID and UTS namespaces (hostname: the pod's name), ``/`` an overlay of the host's root filesystem, read-only, under a
fresh writable layer ``state_dir/pods/<uid>/containers/<name>/upper`` (the
container's writable layer, emptied at each start), the host's other
filesystems read-only, a fresh ``/proc``, the host's ``/dev`` with a private
``/dev/shm``, and each volume bind-mounted at its real ``mountPath``
(``subPath`` honoured; ``volumeMounts[].readOnly`` and
``persistentVolumeClaim.readOnly`` mounts are read-only: writes fail with
EROFS). So the host's Python and JupyterLab are there, paths are real
(nothing is rewritten, HOME is the declared one, else the first mount under
``/home``, else ``/root``; the working directory is ``workingDir``, else
HOME if a volume holds it, else the first mount), and nothing of the host
is writable but ``/dev``. The mounts go with the namespace's last process.

Elsewhere (not Linux, or no user namespaces for a user who is not root)
the agent says once at start that it cannot sandbox, and paths are mapped instead: ``readOnly`` is accepted and
not enforced (making a directory read-only for one process and writable
for another needs a read-only bind mount), the pod's root
``state_dir/pods/<uid>/root`` holds each ``mountPath`` as a symlink to its
directory, and an absolute path in an argument or env value (alone or as
``--opt=/path``) that lies under a ``mountPath`` (or exists in the pod's
root) is rewritten to the host path; HOME is the declared HOME if a volume
holds it, else the first mount under ``/home``, else a scratch directory in
the root; the working directory is the mapped ``workingDir``, else HOME if
a volume holds it, else the first mount. A process can then see and write
the whole host filesystem, and paths it builds itself (``/home/jovyan``
hard-coded in a script) are host paths.

**Guests.** The root filesystem is the directory of the VMI's first disk
(its DataVolume's PVC), so files the guest writes there survive stops and
starts as on a real root disk; in a sandbox it is the upper layer of the
guest's ``/`` over the host's root filesystem (see :mod:`.virthandler`). cloud-init and systemd are emulated as
:mod:`.guest` describes; nothing else in the guest runs.

**Lifecycle.** Status follows the processes (phase, podIP, container
states, restart counts, readiness from ``httpGet``/``tcpSocket`` probes,
``CrashLoopBackOff`` with exponential back-off from ``restart_backoff``).
A deleted pod's processes get SIGTERM, then SIGKILL after its grace period
(capped by ``max_grace_seconds``) before the agent confirms the deletion.
While a Node's ``Ready`` condition is not True, the agent leaves that node's
pods and guests alone, as an unreachable kubelet would: processes keep
running, neither status nor Events are written, deletions are not
finished. Liveness and startup probes, resource limits, security contexts,
users and lifecycle hooks are not enforced. Output (stdout and stderr, the
last ~200 lines) is kept in ``state_dir/pods/<uid>/<container>.log`` (the
container's current run; the run before its last restart in
``<container>.previous.log``), served as the ``pods/log`` subresource (see
:mod:`..podlogs`), and in ``state_dir/vmis/<uid>/<unit>.log`` (every run of
the unit, and ``console.log`` for the boot).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from pathlib import Path

from ..conditions import find_condition
from ..errors import ApiError
from ..kinds import Kind
from . import isolation
from .base import Controller
from .gpumetrics import NodeMetrics
from .kubelet import PodRuntime, container_log_path, image_repository
from .launcher import is_console_log, is_launcher, launched_vmi
from .refs import CONFIG_MAPS, LEASES, NODES, PODS, PVCS, SECRETS, VMIS, get_or_none
from .runtime import AddressPool, base_env
from .scheduler import DEFAULT_NODES, node_address, register_nodes, report_node_ready
from .virthandler import GuestRuntime
from .workload import Workload

log = logging.getLogger("localcluster")


class NodeAgent(Controller):
    """Runs bound Pods and scheduled VMIs as local processes (see the module docstring).

    Knobs, settable while the cluster runs:

    ``failing_images``
        images whose pull fails (``ErrImagePull``, then ``ImagePullBackOff``).
    ``pull_seconds``
        how long each image pull takes (default 0).
    ``restart_backoff``
        seconds before the first restart of a crashed container, doubling per
        quick failure up to ``restart_backoff_cap`` (a kubelet starts at 10 s
        and caps at 300 s; the default 1.0 keeps tests quick).
    ``max_grace_seconds``
        cap on a deletion's grace period before SIGKILL (default 10).
    ``stop_grace_seconds``
        grace given to processes when the agent itself stops (default 2).
    ``fail_guest``
        VMI names whose guest fails to boot (phase ``Failed``).
    ``default_command``, ``image_commands``
        what a container with neither ``command`` nor ``args`` runs: the
        command for its image (``{"repo/name:tag" or "repo/name": [...]}``),
        else ``default_command`` (``["jupyterhub-singleuser"]``).
    ``isolation``
        whether Pods and guests run in sandboxes of their own (see
        :mod:`.isolation`): None (the default) finds out at start, once,
        and says so when they cannot; False maps paths instead.
    ``conflict_wait``
        seconds a status write that met a 409 Conflict waits for the
        client's cache to catch up before it is made again (default 5).
    ``lease_seconds``
        on the real control plane: how often each node's Lease in
        ``kube-node-lease`` is renewed (default 10, a kubelet's), so that
        kube-controller-manager's node lifecycle controller keeps it Ready;
        a node it marked ``Ready=Unknown`` meanwhile (heartbeats that came
        late on a loaded machine) is reported Ready again at the same pace.

    ``metrics``
        the nodes' dcgm-exporter and kubelet volume metrics
        (:class:`~.gpumetrics.NodeMetrics`): ``await agent.metrics.serve()``
        gives their URL, ``agent.metrics.set_gpu(node, index, util=...)``
        sets what a GPU reports (``gpu_instance=`` a MIG slice of it).

    On the real control plane (``cluster.real_control_plane``) the agent also
    plays each kubelet's registration: it registers the cluster's Nodes
    (``cluster.nodes``, else the scheduler's default ones) with their
    capacity and keeps their Leases fresh; on the embedded cluster the
    scheduler registers them.
    """

    name = "nodeagent"
    watches = (PODS, VMIS, NODES)
    reads = (PVCS, SECRETS, CONFIG_MAPS)

    def __init__(self, cluster):
        super().__init__(cluster)
        self.failing_images: set[str] = set()
        self.pull_seconds = 0.0
        self.restart_backoff = 1.0
        self.restart_backoff_cap = 30.0
        self.max_grace_seconds = 10.0
        self.stop_grace_seconds = 2.0
        self.fail_guest: set[str] = set()
        self.default_command = ["jupyterhub-singleuser"]
        self.image_commands: dict[str, list[str]] = {}
        self.addresses = AddressPool()
        self.pulled_images: set[str] = set()
        self.runtimes: dict[str, Workload] = {}
        self.pods_dir = cluster.state_dir / "pods"
        self.vmis_dir = cluster.state_dir / "vmis"
        self._background: set[asyncio.Task] = set()
        self.jupyter_config = self._image_jupyter_config(cluster.state_dir / "image" / "jupyter")
        self.lease_seconds = 10.0
        self.conflict_wait = 5.0
        self.isolation: bool | None = None
        self.metrics = NodeMetrics(cluster, self.client)

    # -- helpers shared by pods and guests -------------------------------------------

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (exponential, capped)."""
        return min(self.restart_backoff * 2 ** max(failures - 1, 0), self.restart_backoff_cap)

    def host_env(self, declared: dict[str, str]) -> dict[str, str]:
        """What the host adds to a process's ``declared`` environment: PATH, LANG and the image's Jupyter config."""
        env = base_env(declared.get("PATH"))
        paths = [str(self.jupyter_config), declared.get("JUPYTER_CONFIG_PATH")]
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in paths if p)
        return env

    @staticmethod
    def _image_jupyter_config(directory: Path) -> Path:
        """A Jupyter config directory allowing root, as an image's user is not root but the agent's processes may be
        (the agent runs as root, or a sandbox makes its user root of a user namespace)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"allow_root": True}}))
        return directory

    def log_path(self, obj: dict, name: str | None = None, previous: bool = False) -> Path:
        """Where the output of a Pod's container (default: its first) or a VMI's unit (default: its console) is kept.

        The last ~200 lines, as ``kubectl logs`` would show them; the file
        stays after the object is gone. ``previous``: a container's run
        before its last restart (``kubectl logs --previous``).
        """
        if obj["kind"] == "Pod" and is_console_log(obj, name):
            return self.vmis_dir / launched_vmi(obj) / "serial-console.log"
        if obj["kind"] == "Pod":
            return container_log_path(self.pods_dir, obj, name or obj["spec"]["containers"][0]["name"], previous)
        return self.vmis_dir / obj["metadata"]["uid"] / f"{name or 'console'}.log"

    def container_output(self, pod: dict, name: str):
        """The live :class:`~.runtime.LogTail` of a Pod's container running here, or None. A virt-launcher Pod's
        ``guest-console-log`` container is its guest's serial console (:attr:`.virthandler.GuestRuntime.serial`)."""
        if is_console_log(pod, name):
            guest = self.runtimes.get(launched_vmi(pod))
            return getattr(guest, "serial", None)
        runtime = self.runtimes.get(pod["metadata"]["uid"])
        for sup in runtime.all_supervisors() if isinstance(runtime, PodRuntime) else ():
            if sup.name == name:
                return sup.output
        return None

    def image_command(self, image: str) -> list[str]:
        """The default command of ``image`` (its CMD, as this host plays it)."""
        return list(self.image_commands.get(image) or self.image_commands.get(image_repository(image)) or self.default_command)

    def node_ready(self, name: str) -> bool:
        """Whether node ``name`` is reachable: its Ready condition is True (an unknown node counts as ready).

        On the real control plane always True: this agent is every node's
        kubelet, and it keeps running whatever the node lifecycle controller
        concludes (reachability is a knob of the embedded cluster only).
        """
        if self.real_control_plane:
            return True
        node = get_or_none(self.client, NODES, None, name)
        if node is None:
            return True
        ready = find_condition((node.get("status") or {}).get("conditions"), "Ready")
        return ready is None or ready.get("status") == "True"

    def host_ip(self, name: str) -> str:
        """The node's InternalIP, or 127.0.0.1."""
        node = get_or_none(self.client, NODES, None, name) or {}
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return address["address"]
        return "127.0.0.1"

    def object_data(self, kind: str, namespace: str, name: str | None) -> dict[str, bytes] | None:
        """The data of a Secret (base64-decoded) or ConfigMap as bytes; None if it does not exist."""
        plural = "secrets" if kind == "Secret" else "configmaps"
        try:
            obj = self.client.get(self.client.kind("", "v1", plural), namespace, name or "")
        except ApiError:
            return None
        data = {key: base64.b64decode(value) for key, value in (obj.get("data") or {}).items()} if kind == "Secret" else {
            key: value.encode() for key, value in (obj.get("data") or {}).items()
        }
        if kind == "ConfigMap":
            data.update({key: base64.b64decode(value) for key, value in (obj.get("binaryData") or {}).items()})
        data.update({key: value.encode() for key, value in (obj.get("stringData") or {}).items()})
        return data

    async def write_status(self, runtime: Workload) -> dict | None:
        """Replace the status of the runtime's object with ``runtime.build_status(current status)``.

        Nothing is written while the runtime's node is not Ready. Returns the
        stored object, or None when nothing was written.
        """
        if not self.node_ready(runtime.node):
            return None

        def rebuild(current: dict) -> None:
            current["status"] = runtime.build_status(current.get("status") or {})

        return await self.update(runtime.obj, rebuild, "status")

    async def update(self, obj: dict, mutate, subresource: str | None = None, attempts: int = 20) -> dict | None:
        """Apply ``mutate`` to the stored copy of ``obj`` (same uid) and write it back; None if that failed.

        The write is conditional on the copy's resourceVersion (custom
        resources take no other update); on a 409 Conflict the copy is read
        again (the client's cache may lag its watch a moment) and the change
        made again (once the cache has moved past the copy that conflicted,
        or after ``conflict_wait`` seconds), up to ``attempts`` times.
        """
        kind = self.client.kind_of(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        for attempt in range(attempts):
            version = None
            try:
                current = self.client.get(kind, meta["namespace"], meta["name"])
                if current["metadata"]["uid"] != meta["uid"]:
                    return None
                version = current["metadata"].get("resourceVersion")
                mutate(current)
                return await self.client.replace(kind, meta["namespace"], meta["name"], current, subresource=subresource)
            except ApiError as e:
                if e.code == 409 and attempt + 1 < attempts:
                    await self._cache_moved(kind, meta, version)
                    continue
                level = logging.WARNING if e.code == 422 else logging.DEBUG
                log.log(level, "nodeagent: cannot update %s %s/%s: %s", obj["kind"], meta["namespace"], meta["name"], e.message)
                return None
        return None

    async def _cache_moved(self, kind: Kind, meta: dict, version: str | None) -> None:
        """Wait (up to ``conflict_wait`` seconds) until the cached copy is no longer at ``version``."""
        deadline = asyncio.get_running_loop().time() + self.conflict_wait
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
            cached = get_or_none(self.client, (kind.group, kind.version, kind.plural), meta["namespace"], meta["name"])
            if cached is None or cached["metadata"].get("resourceVersion") != version:
                return

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("nodeagent: %s failed", task.get_name(), exc_info=task.exception())

    # -- reconcile ---------------------------------------------------------------------

    async def reconcile(self, kind: Kind, obj: dict, deleted: bool) -> None:
        if kind.key == NODES:
            self._node_changed(obj["metadata"]["name"])
        elif kind.key == PODS:
            await self._reconcile_workload(PodRuntime, obj, deleted)
        elif kind.key == VMIS:
            await self._reconcile_workload(GuestRuntime, obj, deleted)

    def _node_changed(self, node: str) -> None:
        """A node came back (or went away): look again at everything on it."""
        if not self.node_ready(node):
            return
        for key in (PODS, VMIS):
            kind = self.client.kind(*key)
            for obj in self.client.objects(kind):
                if node in (obj["spec"].get("nodeName"), (obj.get("status") or {}).get("nodeName")):
                    self._queue.put_nowait((kind, obj, False))
        for runtime in self.runtimes.values():
            if runtime.node == node:
                runtime.publish()

    async def _reconcile_workload(self, runtime_class: type[Workload], obj: dict, deleted: bool) -> None:
        """Start what was placed here, retire what was deleted, leave unreachable nodes alone."""
        meta = obj["metadata"]
        runtime = self.runtimes.get(meta["uid"])
        if deleted:
            if runtime is not None:
                self._spawn(runtime.retire(confirm=False), f"retire-{meta['name']}")
            return
        node = runtime_class.node_of(obj)
        if not node or not self.node_ready(node):
            return
        if runtime is not None:
            runtime.obj = obj
        if meta.get("deletionTimestamp"):
            if runtime is None:
                await runtime_class.finish(self, obj)
            elif not runtime.terminating:
                runtime.terminating = True
                self._spawn(runtime.retire(confirm=True), f"retire-{meta['name']}")
            return
        if runtime is None and runtime_class.startable(obj) and not (runtime_class is PodRuntime and is_launcher(obj)):
            runtime = self.runtimes[meta["uid"]] = runtime_class(self, obj)
            runtime.task = self._spawn(runtime.run(), f"{runtime.component}-{meta['namespace']}-{meta['name']}")

    def forget(self, runtime: Workload) -> None:
        """A workload is gone from this node: drop it and free its address."""
        self.runtimes.pop(runtime.uid, None)
        self.addresses.release(runtime.ip)

    def grace(self, seconds: float) -> float:
        """A grace period, capped by ``max_grace_seconds``."""
        return min(seconds, self.max_grace_seconds)

    # -- start and stop ----------------------------------------------------------------

    async def start(self) -> None:
        if self.isolation is None:
            reason = await isolation.check(self.cluster.state_dir)
            self.isolation = reason is None
            if reason is not None:
                log.warning("nodeagent: workspaces share the host's filesystem (paths are mapped, readOnly is not enforced): cannot sandbox: %s", reason)
        if self.real_control_plane:
            specs = self.cluster.nodes or DEFAULT_NODES
            # the kubelets' API, which kube-apiserver asks for pods/log (the plane's, when it serves one)
            serve = getattr(self.cluster, "serve_kubelet_api", None)
            port = await serve(self, [node_address(spec, i) for i, spec in enumerate(specs)]) if serve else 10250
            await register_nodes(self.client, specs, port)
            await self.client.watch((LEASES,))
            await self._renew_leases([spec["name"] for spec in specs])
            self._tasks.append(asyncio.create_task(self._lease_loop([s["name"] for s in specs]), name="nodeagent-leases"))
        await super().start()

    async def _lease_loop(self, nodes: list[str]) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds)
            await self._renew_leases(nodes)
            await self._report_ready(nodes)

    async def _report_ready(self, nodes: list[str]) -> None:
        """Post the status of each node not shown Ready: kube-controller-manager marks a node whose heartbeats came
        late ``Ready=Unknown`` and never marks it Ready again; its kubelet does, as here."""
        for name in nodes:
            node = get_or_none(self.client, NODES, None, name)
            ready = find_condition(((node or {}).get("status") or {}).get("conditions"), "Ready")
            if node is None or (ready or {}).get("status") == "True":
                continue
            log.warning("nodeagent: node %s was shown Ready=%s; reporting it Ready", name, (ready or {}).get("status"))
            try:
                await report_node_ready(self.client, name)
            except ApiError as e:
                log.warning("nodeagent: reporting node %s Ready: %s", name, e.message)

    async def _renew_leases(self, nodes: list[str]) -> None:
        """Renew (or create) each node's Lease in ``kube-node-lease``, as its kubelet's heartbeat."""
        kind = self.client.kind(*LEASES)
        now = self.client.clock().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for name in nodes:
            node = get_or_none(self.client, NODES, None, name)
            current = get_or_none(self.client, LEASES, "kube-node-lease", name)
            lease = current or {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now},
            }
            lease["spec"].update(holderIdentity=name, leaseDurationSeconds=40, renewTime=now)
            if node is not None:
                lease["metadata"]["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                ]
            try:
                if current is not None:
                    await self.client.replace(kind, "kube-node-lease", name, lease)
                else:
                    await self.client.create(kind, "kube-node-lease", lease)
            except ApiError as e:
                log.warning("nodeagent: renewing the Lease of node %s: %s", name, e.message)

    async def stop(self) -> None:
        """Stop reconciling and end every process this agent started (the cluster is going away)."""
        await super().stop()
        await self.metrics.close()
        runtimes = list(self.runtimes.values())
        for runtime in runtimes:
            runtime.terminating = True
        await asyncio.gather(*(runtime.stop(self.stop_grace_seconds) for runtime in runtimes), return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self.runtimes.clear()
