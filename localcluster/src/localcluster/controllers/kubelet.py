"""The kubelet's part of the node agent: one bound Pod, run as local processes.

:class:`PodRuntime` takes a Pod from bound to running to gone: it gives the
pod an address, sets up its volumes as directories, pulls (pretends to pull)
each image, runs init containers then containers under a
:class:`~.runtime.Supervisor` each, and reports all of it in the Pod's
status and Events the way a kubelet does. How a container maps onto a
process is described in :mod:`.nodeagent`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import shutil
from pathlib import Path

from ..attacher import MultiAttachError, consumer_of
from ..conditions import set_condition
from ..errors import ApiError
from ..store import rfc3339
from ..volumes import attach_claim, host_path_dir, remove_tree
from .isolation import Bind, Layers, sandboxed
from .refs import PODS, PVCS, ephemeral_claim_name, get_or_none, is_owned_by
from .runtime import (
    BACKOFF,
    EXITED,
    RUNNING,
    Filesystem,
    Launch,
    LaunchError,
    LogTail,
    Supervisor,
    find_inside,
    resolve_command,
    translate,
)
from .workload import Workload

log = logging.getLogger("localcluster")

_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
CONFIG_ERROR = "CreateContainerConfigError"


def expand_references(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in env values, command and args (``$$`` escapes a ``$``)."""

    def one(match):
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, value)


def container_ports(containers: list[dict]) -> dict[str, int]:
    """The named ports of ``containers``: {name: containerPort}, for probes and Services."""
    return {p["name"]: p["containerPort"] for c in containers for p in c.get("ports") or [] if p.get("name")}


def image_repository(image: str) -> str:
    """``image`` without its tag or digest: ``quay.io/jupyter/base-notebook:2024`` -> ``quay.io/jupyter/base-notebook``."""
    repository = image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return repository


def image_id(image: str) -> str:
    """A stable, digest-shaped imageID for ``image`` (the host environment plays every image)."""
    return f"{image_repository(image)}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_log_path(pods_dir: Path, pod: dict, container: str, previous: bool = False) -> Path:
    """The file of a container's output in ``pods_dir``: its current run, or (``previous``) the run before its last restart."""
    return Path(pods_dir) / pod["metadata"]["uid"] / f"{container}{'.previous' if previous else ''}.log"


def _when(value):
    return rfc3339(value) if value is not None else None


def _terminated(run: dict, container_id: str | None) -> dict:
    out = {k: (_when(v) if k in ("startedAt", "finishedAt") else v) for k, v in run.items()}
    if container_id:
        out["containerID"] = container_id
    return {"terminated": out}


class PodRuntime(Workload):
    """One Pod on this node: its address, volumes, containers and the status that follows them."""

    component = "kubelet"

    def __init__(self, agent, pod: dict):
        super().__init__(agent, pod, agent.pods_dir)
        self.ip = agent.addresses.allocate(self.uid)
        self.start_time = None
        self.volumes: dict[str, Path] = {}
        self.size_limits: dict[str, str] = {}
        self.init_failed = False
        self.initialized = False
        spec = pod["spec"]
        policy = spec.get("restartPolicy", "Always")
        self.specs = {c["name"]: c for c in spec.get("initContainers") or []} | {c["name"]: c for c in spec["containers"]}
        self.init = [self._supervisor(c, "Never" if policy == "Never" else "OnFailure") for c in spec.get("initContainers") or []]
        self.containers = [self._supervisor(c, policy) for c in spec["containers"]]

    @staticmethod
    def node_of(pod: dict) -> str | None:
        return pod["spec"].get("nodeName")

    @staticmethod
    def startable(pod: dict) -> bool:
        return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    @staticmethod
    async def finish(agent, pod: dict) -> None:
        """Confirm the Pod's deletion, as a kubelet does once its containers are gone (grace period 0)."""
        meta = pod["metadata"]
        try:
            await agent.client.delete(
                agent.client.kind(*PODS), meta["namespace"], meta["name"], grace_period_seconds=0, preconditions={"uid": meta["uid"]}
            )
        except ApiError as e:
            log.debug("kubelet: deleting pod %s/%s: %s", meta["namespace"], meta["name"], e.message)

    # -- lifecycle ---------------------------------------------------------------

    def _supervisor(self, container: dict, policy: str) -> Supervisor:
        name = container["name"]
        return Supervisor(
            name,
            functools.partial(self._launch, container),
            LogTail(self.agent.log_path(self.obj, name), previous=self.agent.log_path(self.obj, name, previous=True)),
            policy=policy,
            delay=self.agent.backoff,
            on_change=self._container_changed,
            clock=self.client.clock,
            probe=container.get("readinessProbe"),
            host=self.ip,
            ports=container_ports([container]),
        )

    async def run(self) -> None:
        """Set the pod up and run its containers until they are done (or the task is cancelled)."""
        self.start_time = self.client.clock()
        self.publish()
        await self._mount_volumes()
        for sup in self.init:
            await self._pull(sup)
            result = await sup.run()
            if result["exitCode"] != 0:
                self.init_failed = True
                self.publish()
                self.agent.cluster.attacher.detach(self.uid)  # a finished Pod's volumes are detached
                return
        self.initialized = True
        self.publish()
        await asyncio.gather(*(self._pull_and_run(sup) for sup in self.containers))
        self.agent.cluster.attacher.detach(self.uid)

    async def _pull_and_run(self, sup: Supervisor) -> None:
        await self._pull(sup)
        await sup.run()

    def all_supervisors(self) -> list[Supervisor]:
        return self.init + self.containers

    async def stop(self, grace: float) -> None:
        """Stop every container: cancel the restart loops, SIGTERM, SIGKILL after ``grace`` seconds."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await asyncio.gather(*(sup.stop(grace) for sup in self.all_supervisors()))

    async def retire(self, confirm: bool) -> None:
        """Stop the containers within the grace period, free the address and scratch, confirm the deletion.

        The per-pod root and volumes go; container logs stay for post-mortems.
        """
        self.terminating = True
        grace = self.obj["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.obj["spec"].get("terminationGracePeriodSeconds", 30)
        if confirm:
            for sup in self.all_supervisors():
                if sup.state == RUNNING:
                    self.container_event(sup, "Killing", f"Stopping container {sup.name}")
        await self.stop(self.agent.grace(grace))
        self.agent.forget(self)
        self.agent.cluster.attacher.detach(self.uid)
        for path in (self.dir / "root", self.dir / "volumes"):
            await remove_tree(path)
        if confirm and self.agent.node_ready(self.node):
            await self.flush()
            await self.finish(self.agent, self.obj)

    # -- images --------------------------------------------------------------------

    def container_event(self, sup: Supervisor, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event about one container, with the ``involvedObject.fieldPath`` a kubelet gives it
        (``spec.containers{notebook}``, ``spec.initContainers{scratch-notice}``)."""
        init = any(c.get("name") == sup.name for c in self.obj["spec"].get("initContainers") or [])
        self.event(reason, message, warning=warning, field_path=f"spec.{'initContainers' if init else 'containers'}{{{sup.name}}}")

    async def _pull(self, sup: Supervisor) -> None:
        container = self.specs[sup.name]
        image = container.get("image", "")
        if container.get("imagePullPolicy") != "Always" and image in self.agent.pulled_images:
            self.container_event(sup, "Pulled", f'Container image "{image}" already present on machine')
            return
        attempts = 0
        while True:
            self.container_event(sup, "Pulling", f'Pulling image "{image}"')
            sup.wait("ContainerCreating")
            began = self.client.clock()
            if self.agent.pull_seconds:
                await asyncio.sleep(self.agent.pull_seconds)
            if image not in self.agent.failing_images:
                break
            attempts += 1
            reason = f'failed to pull and unpack image "{image}": not found'
            self.container_event(sup, "Failed", f'Failed to pull image "{image}": {reason}', warning=True)
            self.container_event(sup, "Failed", "Error: ErrImagePull", warning=True)
            sup.wait("ErrImagePull", reason)
            await asyncio.sleep(self.agent.backoff(1))
            self.container_event(sup, "BackOff", f'Back-off pulling image "{image}"')
            self.container_event(sup, "Failed", "Error: ImagePullBackOff", warning=True)
            sup.wait("ImagePullBackOff", f'Back-off pulling image "{image}"')
            await asyncio.sleep(self.agent.backoff(attempts))
        self.agent.pulled_images.add(image)
        took = (self.client.clock() - began).total_seconds()
        self.container_event(sup, "Pulled", f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including waiting)')

    # -- volumes -------------------------------------------------------------------

    async def _mount_volumes(self) -> None:
        reported = ""
        while True:
            try:
                self.volumes = self._volume_dirs()
                return
            except LaunchError as e:
                self.agent.cluster.attacher.detach(self.uid)  # all or nothing: a waiting Pod holds no volume
                if e.message != reported:
                    self.event(e.reason, e.message, warning=True)
                    reported = e.message
            await asyncio.sleep(self.agent.backoff(1))

    def _volume_dirs(self) -> dict[str, Path]:
        dirs = {}
        for volume in self.obj["spec"].get("volumes") or []:
            name = volume["name"]
            scratch = self.dir / "volumes" / name
            if "persistentVolumeClaim" in volume:
                dirs[name] = self._claim_dir(name, volume["persistentVolumeClaim"]["claimName"])
                continue
            if "ephemeral" in volume:
                dirs[name] = self._claim_dir(name, ephemeral_claim_name(self.name, name), ephemeral=True)
                continue
            if "hostPath" in volume:
                dirs[name] = self._host_path(name, volume["hostPath"])
                continue
            files = self._volume_files(volume)
            if files is not None:
                if scratch.exists():
                    shutil.rmtree(scratch)
                for relative, (data, mode) in files.items():
                    target = scratch / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    target.chmod(mode)
            elif "emptyDir" in volume:
                if (volume["emptyDir"] or {}).get("sizeLimit"):
                    self.size_limits[name] = volume["emptyDir"]["sizeLimit"]
            else:
                log.debug("pod %s/%s: volume %s (%s) is an empty directory here", self.namespace, self.name, name, sorted(volume))
            scratch.mkdir(parents=True, exist_ok=True)
            dirs[name] = scratch
        return dirs

    def _claim_dir(self, volume: str, claim: str, ephemeral: bool = False) -> Path:
        """The directory of a bound claim; LaunchError while it is missing, unbound or (ephemeral) not the Pod's own."""
        if ephemeral:
            pvc = get_or_none(self.client, PVCS, self.namespace, claim)
            if pvc is not None and not is_owned_by(pvc, self.obj):
                raise LaunchError(
                    "FailedMount",
                    f"PVC {self.namespace}/{claim} was not created for pod {self.namespace}/{self.name} (pod is not owner)",
                )
        consumer = consumer_of("Pod", self.obj, self.node)
        try:
            path = attach_claim(self.agent.cluster, self.namespace, claim, consumer, self.client)
        except MultiAttachError as e:
            raise LaunchError("FailedAttachVolume", e.message) from None
        if path is None:
            raise LaunchError("FailedMount", f'Unable to attach or mount volumes: unmounted volumes=[{volume}]: persistentvolumeclaim "{claim}" is not bound')
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _host_path(self, volume: str, source: dict) -> Path:
        """The node's directory (or file) for a hostPath volume, after the kubelet's type check."""
        path = source["path"]
        host = host_path_dir(self.agent.cluster, self.node, path)
        wanted = source.get("type") or ""
        if wanted in ("", "DirectoryOrCreate") and not host.exists():
            host.mkdir(mode=0o755, parents=True)
        elif wanted == "FileOrCreate" and not host.exists():
            host.parent.mkdir(parents=True, exist_ok=True)
            host.touch(mode=0o644)
        checks = {
            "DirectoryOrCreate": (host.is_dir, "a directory"),
            "Directory": (host.is_dir, "a directory"),
            "FileOrCreate": (host.is_file, "a file"),
            "File": (host.is_file, "a file"),
            "Socket": (host.is_socket, "a socket file"),
            "CharDevice": (host.is_char_device, "a character device"),
            "BlockDevice": (host.is_block_device, "a block device"),
        }
        check = checks.get(wanted)
        if check is not None and not check[0]():
            raise LaunchError("FailedMount", f'MountVolume.SetUp failed for volume "{volume}" : hostPath type check failed: {path} is not {check[1]}')
        return host

    def _volume_files(self, volume: dict) -> dict[str, tuple[bytes, int]] | None:
        """Files of a secret, configMap or projected volume: {relative path: (data, mode)}; None for other volumes."""
        sources = []
        if "secret" in volume:
            sources.append(("Secret", volume["secret"], volume["secret"].get("secretName")))
        if "configMap" in volume:
            sources.append(("ConfigMap", volume["configMap"], volume["configMap"].get("name")))
        projected = volume.get("projected")
        for source in (projected or {}).get("sources") or []:
            for key, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
                if key in source:
                    sources.append((kind, source[key], source[key].get("name")))
        if not sources and projected is None:
            return None
        default_mode = (projected or sources[0][1]).get("defaultMode", 0o644)
        files: dict[str, tuple[bytes, int]] = {}
        for kind, source, name in sources:
            data = self.agent.object_data(kind, self.namespace, name)
            if data is None:
                if source.get("optional"):
                    continue
                raise LaunchError("FailedMount", f'MountVolume.SetUp failed for volume "{volume["name"]}" : {kind.lower()} "{name}" not found')
            items = source.get("items") or [{"key": key, "path": key} for key in data]
            for item in items:
                if item["key"] not in data:
                    raise LaunchError("FailedMount", f'MountVolume.SetUp failed for volume "{volume["name"]}" : {kind.lower()} "{name}" has no key {item["key"]}')
                files[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
        return files

    def _filesystem(self, container: dict) -> tuple[Filesystem, list[Bind]]:
        """The container's paths mapped to the host, and its volume mounts as sandbox binds.

        In a sandbox (``agent.isolation``) the root is the host's own (the
        read-only lower layer); else the pod's ``root`` directory, holding
        each ``mountPath`` as a symlink.
        """
        mounts, binds = {}, []
        for mount in container.get("volumeMounts") or []:
            host = self.volumes.get(mount["name"], self.dir / "volumes" / mount["name"])
            if mount.get("subPath"):
                host = host / mount["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = host
            binds.append(Bind(host, mount["mountPath"], bool(mount.get("readOnly")) or self._claim_read_only(mount["name"])))
        if self.agent.isolation:
            return Filesystem(Path("/"), mounts), binds
        fs = Filesystem(self.dir / "root", mounts)
        fs.root.mkdir(parents=True, exist_ok=True)
        fs.link_mounts()
        return fs, binds

    def _claim_read_only(self, volume: str) -> bool:
        """Whether the Pod's volume ``volume`` is a claim it mounts read-only (``persistentVolumeClaim.readOnly``)."""
        for spec in self.obj["spec"].get("volumes") or []:
            if spec["name"] == volume:
                return bool((spec.get("persistentVolumeClaim") or {}).get("readOnly"))
        return False

    # -- environment ---------------------------------------------------------------

    def _ref_data(self, kind: str, ref: dict) -> dict[str, bytes] | None:
        data = self.agent.object_data(kind, self.namespace, ref.get("name"))
        if data is None and not ref.get("optional"):
            raise LaunchError(CONFIG_ERROR, f'{kind.lower()} "{ref.get("name")}" not found')
        return data

    def _field(self, path: str) -> str:
        meta, spec = self.obj["metadata"], self.obj["spec"]
        labelled = _FIELD_MAP.match(path)
        if labelled:
            return (meta.get(labelled.group(1)) or {}).get(labelled.group(2), "")
        host_ip = self.agent.host_ip(self.node)
        return {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.podIP": self.ip,
            "status.podIPs": self.ip,
            "status.hostIP": host_ip,
            "status.hostIPs": host_ip,
        }.get(path, "")

    def _value_from(self, source: dict) -> str | None:
        for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            if key in source:
                ref = source[key]
                data = self._ref_data(kind, ref)
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise LaunchError(CONFIG_ERROR, f"couldn't find key {ref['key']} in {kind} {self.namespace}/{ref['name']}")
                return data[ref["key"]].decode(errors="replace")
        if "fieldRef" in source:
            return self._field(source["fieldRef"]["fieldPath"])
        log.debug("pod %s/%s: env valueFrom %s is not supported: empty", self.namespace, self.name, sorted(source))
        return ""

    def _container_env(self, container: dict) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            data = self._ref_data(kind, source.get("secretRef") or source.get("configMapRef") or {})
            for key, value in (data or {}).items():
                env[source.get("prefix", "") + key] = value.decode(errors="replace")
        for var in container.get("env") or []:
            if "valueFrom" in var:
                value = self._value_from(var["valueFrom"])
                if value is not None:
                    env[var["name"]] = value
            else:
                env[var["name"]] = expand_references(var.get("value", ""), env)
        return env

    def _launch(self, container: dict) -> Launch:
        """The process for ``container``: in its sandbox, or with command line, environment and cwd mapped onto the host."""
        declared = self._container_env(container)
        fs, binds = self._filesystem(container)
        words = (container.get("command") or []) + (container.get("args") or []) or self.agent.image_command(container.get("image", ""))
        if self.agent.isolation:
            return self._sandboxed(container, declared, fs, binds, words)
        env = {key: translate(value, fs, self.ip) for key, value in declared.items()}
        home, mounted = self._home(fs, declared.get("HOME"))
        env.update(self.agent.host_env(env), HOME=str(home), HOSTNAME=self.name)
        if container.get("workingDir"):
            cwd = fs.map(container["workingDir"])
        else:
            cwd = home if mounted or not fs.mounts else next(iter(fs.mounts.values()))
        cwd.mkdir(parents=True, exist_ok=True)
        argv = [translate(expand_references(word, declared), fs, self.ip) for word in words]
        return Launch(resolve_command(argv, fs, env, cwd), env, cwd)

    def _sandboxed(self, container: dict, declared: dict[str, str], fs: Filesystem, binds: list[Bind], words: list[str]) -> Launch:
        """The container in a sandbox of its own: real paths, a fresh writable layer over the host's root (see :mod:`.isolation`)."""
        env = {key: translate(value, None, self.ip) for key, value in declared.items()}
        home = declared.get("HOME") or next((path for path in fs.mounts if path.startswith("/home")), "/root")
        env.update(self.agent.host_env(env), HOME=home, HOSTNAME=self.name)
        if container.get("workingDir"):
            cwd = container["workingDir"]
        else:
            cwd = home if fs.mount_of(home) or not fs.mounts else next(iter(fs.mounts))
        argv = find_inside([translate(expand_references(word, declared), None, self.ip) for word in words], fs, env)
        layers = Layers.under(self.dir / "containers" / container["name"])
        layers.prepare(fresh_upper=True)
        return sandboxed(Launch(argv, env, Path(cwd)), layers, binds, self.name, self.dir)

    @staticmethod
    def _home(fs: Filesystem, declared: str | None) -> tuple[Path, bool]:
        """HOME on the host, and whether a volume holds it.

        The declared HOME if a volume holds it, else the first mount under
        ``/home``, else a scratch directory in the pod's root.
        """
        if declared and fs.mount_of(declared):
            return fs.map(declared), True
        for path, host in fs.mounts.items():
            if path.startswith("/home"):
                return host, True
        home = fs.map(declared or "/root")
        home.mkdir(parents=True, exist_ok=True)
        return home, False

    # -- status --------------------------------------------------------------------

    def _container_changed(self, sup: Supervisor, what: str) -> None:
        name = sup.name
        if what == "started":
            self.container_event(sup, "Created", f"Created container {name}")
            self.container_event(sup, "Started", f"Started container {name}")
        elif what == "waiting" and sup.reason == CONFIG_ERROR:
            self.container_event(sup, "Failed", f"Error: {sup.message}", warning=True)
        elif what in ("backoff", "exited") and sup.exit and sup.exit["reason"] == "StartError":
            self.container_event(sup, "Failed", f"Error: {sup.exit.get('message', '')}", warning=True)
        if what == "backoff" and sup.failures >= 2:
            self.container_event(sup, "BackOff", f"Back-off restarting failed container {name} in pod {self.name}_{self.namespace}({self.uid})", warning=True)
        self.publish()

    def phase(self) -> str:
        if self.init_failed:
            return "Failed"
        if not self.initialized:
            return "Pending"
        if all(sup.final for sup in self.containers):
            return "Succeeded" if all(sup.exit["exitCode"] == 0 for sup in self.containers) else "Failed"
        if any(sup.runs == 0 for sup in self.containers):
            return "Pending"
        return "Running"

    def _container_status(self, sup: Supervisor, initializing: bool) -> dict:
        container = self.specs[sup.name]
        image = container.get("image", "")
        container_id = f"localcluster://{sup.process.pid}" if sup.process else None
        last = _terminated(sup.previous, None) if sup.previous else {}
        if sup.state == RUNNING:
            state = {"running": {"startedAt": _when(sup.started_at)}}
        elif sup.state == EXITED or (sup.state == BACKOFF and sup.failures < 2):
            state = _terminated(sup.exit, container_id)
        elif sup.state == BACKOFF:
            message = f"back-off {sup.backoff:g}s restarting failed container={sup.name} pod={self.name}_{self.namespace}({self.uid})"
            state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
            last = _terminated(sup.exit, container_id)
        else:
            waiting = {"reason": "PodInitializing" if initializing and sup.reason == "ContainerCreating" else sup.reason}
            if sup.message:
                waiting["message"] = sup.message
            state = {"waiting": waiting}
        status = {
            "name": sup.name,
            "image": image,
            "imageID": image_id(image) if sup.runs else "",
            "ready": sup.ready,
            "restartCount": sup.restarts,
            "started": sup.state == RUNNING,
            "state": state,
            "lastState": last,
        }
        if container_id:
            status["containerID"] = container_id
        return status

    def build_status(self, current: dict) -> dict:
        status = dict(current)
        now = rfc3339(self.client.clock())
        phase = self.phase()
        conditions = list(status.get("conditions") or [])
        unready = [sup.name for sup in self.containers if not sup.ready]
        if phase in ("Succeeded", "Failed"):
            ready, reason, message = "False", "PodCompleted", ""
        elif unready:
            ready, reason, message = "False", "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
        else:
            ready, reason, message = "True", "", ""
        pending_init = [sup.name for sup in self.init if not sup.final or sup.exit["exitCode"] != 0]
        set_condition(conditions, "PodReadyToStartContainers", "True" if self.ip else "False", now=now)
        if self.initialized or not self.init:
            set_condition(conditions, "Initialized", "True", now=now)
        else:
            set_condition(conditions, "Initialized", "False", "ContainersNotInitialized", f"containers with incomplete status: [{' '.join(pending_init)}]", now=now)
        set_condition(conditions, "Ready", ready, reason, message, now=now)
        set_condition(conditions, "ContainersReady", ready, reason, message, now=now)
        if not any(c.get("type") == "PodScheduled" for c in conditions):
            set_condition(conditions, "PodScheduled", "True", now=now)
        host_ip = self.agent.host_ip(self.node)
        status.update(
            phase=phase,
            conditions=conditions,
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            startTime=_when(self.start_time),
            # PodInitializing only while init containers run; before that (volumes, pulls) ContainerCreating
            containerStatuses=[self._container_status(sup, bool(self.init) and not self.initialized) for sup in self.containers],
        )
        if self.ip:
            status.update(podIP=self.ip, podIPs=[{"ip": self.ip}])
        if self.init:
            status["initContainerStatuses"] = [self._container_status(sup, False) for sup in self.init]
        return status
