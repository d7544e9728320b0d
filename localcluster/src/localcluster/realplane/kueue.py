"""Kueue on the real control plane (issue #41): its own manager, admitting Pods at its scheduling gate by queue.

:class:`Kueue` runs the ``kueue`` manager that tools/kueue/build.sh built
(Kueue v0.15, from its Go module) as a process against the plane's
kube-apiserver, installed from Kueue's own manifests: the module's
``config/default``, rendered by the plane's kubectl (``kubectl kustomize``,
what Kueue's releases publish as ``manifests.yaml``). Applied from them: the
CRDs (ClusterQueue, LocalQueue, ResourceFlavor, Workload, Cohort, ...), the
``kueue-system`` namespace, the ServiceAccount ``kueue-controller-manager``
and every Role, ClusterRole and binding Kueue grants itself (its own RBAC,
nothing more: the manager runs as that ServiceAccount), the empty Secret
its certificate management fills, the webhook configurations (its Pod,
Job and Workload webhooks: a Pod with ``kueue.x-k8s.io/queue-name`` gets
Kueue's scheduling gate until its Workload is admitted) and the APIService
of its visibility API (``v1beta2.visibility.kueue.x-k8s.io``: a pending
Workload's place in its ClusterQueue and LocalQueue).

As released, Kueue manages its certificates itself
(``internalCertManagement``): it makes a CA and a serving certificate for
``kueue-webhook-service.kueue-system.svc`` into that Secret and writes the
CA into the webhook configurations and the CRDs' conversion webhooks. In a
cluster the kubelet mounts the Secret at the manager's ``webhook.certDir``;
here :meth:`Kueue.start` does, once Kueue has filled it. (A certificate of
the plane's own CA would not do: Kueue's certificate controller keeps a CA
only if it is one it could have made, naming ``kueue-ca``, and replaces any
other.) The webhooks keep calling the Service by name, and the Services are
``ExternalName`` ``localhost`` on the port the manager is reached at, so
kube-apiserver dials loopback and checks the certificate for the Service's
name, as in a cluster.

The manager listens on ports its configuration names (webhooks 9443, health
8081) and on one its code fixes (the visibility API, 8082), so it runs in a
network namespace of its own (:mod:`.netns`), each port relayed to a free
port of the machine. Its visibility server reads the in-cluster
configuration, so the manager gets what a Pod of its ServiceAccount has: the
``KUBERNETES_SERVICE_*`` variables and the ServiceAccount's token, CA and
namespace under ``/var/run/secrets/kubernetes.io/serviceaccount`` (``/run``
seen as a folder of the plane's); the folder its visibility server writes
its certificate into (``/visibility``, fixed in its code) is the plane's too. Its configuration is Kueue's default one
(the rendered ``kueue-manager-config``) with the Pod integration on (only
Pods that name a queue are held; namespaces ``kube-system`` and
``kueue-system`` are left alone, as Kueue's default selector says, and
:attr:`Kueue.pod_selector` narrows it to the workspaces' Pods), leader
election off and its metrics server off.

Test infrastructure: not imported by the product.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import signal
import subprocess
from pathlib import Path

import yaml

from . import installobjects, netns

NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
BINARY = "kueue"
#: The Services the manifests name: the webhooks', the visibility API's (both ExternalName ``localhost`` here).
WEBHOOK_SERVICE, VISIBILITY_SERVICE = "kueue-webhook-service", "kueue-visibility-server"
#: The Secret Kueue's certificate controller fills, and the ConfigMap holding the manager's configuration.
CERT_SECRET, CONFIG_MAP = "kueue-webhook-server-cert", "kueue-manager-config"
#: The ports inside the manager's network namespace: its webhooks and health probes (its configuration's
#: defaults) and the visibility API (fixed in its code: pkg/visibility, ``8082``).
WEBHOOK_PORT, HEALTH_PORT, VISIBILITY_PORT = 9443, 8081, 8082
#: Where the visibility server writes its self-signed certificate (fixed in its code: pkg/visibility, ``certDir``).
VISIBILITY_DIR = "/visibility"
#: The frameworks whose objects Kueue queues here: Jobs (training jobs, #42) and plain Pods (workspaces).
FRAMEWORKS = ("batch/job", "pod")


def render(kubectl: Path, kueue_dir: Path) -> list[dict]:
    """Kueue's install, as its releases publish it: ``kubectl kustomize config/default`` of the build's manifests."""
    done = subprocess.run([str(kubectl), "kustomize", str(kueue_dir / "config" / "default")],
                          capture_output=True, text=True, check=True, timeout=120)
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def manager_config(objects: list[dict], *, cert_dir: str, pod_selector: dict | None, extra: dict | None = None) -> dict:
    """Kueue's default configuration (the rendered ConfigMap's) as this plane runs it (module docstring), with the
    top-level sections of ``extra`` (a site's settings: ``resources``, ``fairSharing``, ...) over it."""
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == CONFIG_MAP]
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    config["leaderElection"] = {"leaderElect": False}
    config["metrics"] = {**(config.get("metrics") or {}), "bindAddress": "0"}
    config["health"] = {**(config.get("health") or {}), "healthProbeBindAddress": f":{HEALTH_PORT}"}
    config["webhook"] = {**(config.get("webhook") or {}), "port": WEBHOOK_PORT, "certDir": cert_dir}
    integrations = config.setdefault("integrations", {})
    integrations["frameworks"] = list(FRAMEWORKS)
    if pod_selector is not None:
        integrations.setdefault("podOptions", {})["podSelector"] = pod_selector
    return {**config, **(extra or {})}


def with_service_port(obj: dict, service: str, port: int) -> dict:
    """``obj`` (a webhook configuration, a CRD, an APIService) with every reference to Service ``service`` on
    ``port``."""
    def fix(ref: dict | None) -> dict | None:
        return {**ref, "port": port} if ref and ref.get("name") == service else ref

    obj = copy.deepcopy(obj)
    for hook in obj.get("webhooks") or []:
        hook["clientConfig"]["service"] = fix(hook["clientConfig"].get("service"))
    conversion = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
    if conversion.get("clientConfig"):
        conversion["clientConfig"]["service"] = fix(conversion["clientConfig"].get("service"))
    if obj["kind"] == "APIService":
        obj["spec"]["service"] = fix(obj["spec"].get("service"))
    return obj


def external_name(name: str, port: int) -> dict:
    """The Service ``name`` in ``kueue-system``: ExternalName ``localhost`` on ``port``."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port, "protocol": "TCP"}]}}


class Kueue:
    """Kueue's manager on ``plane`` (a :class:`~.plane.RealControlPlane`), from ``kueue_dir`` (tools/kueue's build
    folder); ``pod_selector``: a label selector narrowing the Pods Kueue's Pod integration looks at; ``config``:
    sections of Kueue's configuration over its defaults.

    ``start()`` runs last in the plane's start; the process is one of the plane's children (its log
    ``STATE/logs/kueue.log``), and ``close()`` ends its relays once the plane stopped it.
    """

    def __init__(self, plane, kueue_dir, pod_selector: dict | None = None, config: dict | None = None):
        self.plane = plane
        self.kueue_dir = Path(kueue_dir).resolve()
        self.pod_selector = pod_selector
        #: Sections of Kueue's configuration a site sets (:func:`manager_config`'s ``extra``).
        self.config = config
        self.run_dir = plane.state_dir / "kueue" / "run"
        self.relays: list[netns.Relay] = []
        #: The machine's ports the manager is reached at: ``webhook``, ``health``, ``visibility``.
        self.ports: dict[str, int] = {}
        #: What :meth:`start` started the manager with (its configuration, its served ports), for :meth:`restart`.
        self._manager: tuple[dict, dict[int, Path]] | None = None
        #: The APIServices the manager serves (its visibility API), Available once it serves them.
        self._api_services: list[str] = []

    def missing(self) -> list[str]:
        """What the build folder lacks (its binary, its manifests)."""
        wanted = (self.kueue_dir / "bin" / BINARY, self.kueue_dir / "config" / "default")
        return [str(path) for path in wanted if not path.exists()]

    def start(self, timeout: float = 180.0) -> None:
        plane = self.plane
        self.close()
        serve = self._open_relays()
        objects = [with_service_port(with_service_port(o, WEBHOOK_SERVICE, self.ports["webhook"]),
                                     VISIBILITY_SERVICE, self.ports["visibility"])
                   for o in render(plane.bin_dir / "kubectl", self.kueue_dir)]
        config = manager_config(objects, cert_dir="/run/kueue/webhook-certs", pod_selector=self.pod_selector,
                                extra=self.config)
        later = (*installobjects.WEBHOOK_KINDS, "APIService")
        skip = {o["kind"] for o in objects if o["kind"] not in installobjects.KINDS}
        installobjects.apply(plane, NAMESPACE, [o for o in objects if o["kind"] not in later], skip=skip,
                             timeout=timeout)
        for obj in objects:
            if obj["kind"] == "Secret" and obj["metadata"]["name"] == CERT_SECRET:
                plane.create_or_replace(f"/api/v1/namespaces/{NAMESPACE}/secrets", obj)
        for name, port in ((WEBHOOK_SERVICE, self.ports["webhook"]), (VISIBILITY_SERVICE, self.ports["visibility"])):
            plane.create_or_replace(f"/api/v1/namespaces/{NAMESPACE}/services", external_name(name, port))
        for obj in objects:
            if obj["kind"] in later:
                plane.create_or_replace(installobjects.collection(obj), obj)
        self._manager = (config, serve)
        self._api_services = [o["metadata"]["name"] for o in objects if o["kind"] == "APIService"]
        self._start_manager(config, serve)
        self._mount_certificates(timeout)
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        plane = self.plane
        plane._wait(BINARY, self._ready, timeout)
        for name in self._api_services:
            plane._wait(BINARY, lambda name=name: _available(plane, name), timeout)

    def restart(self, timeout: float = 180.0) -> None:
        """Kill the manager (as a node lost, or an OOM kill, would) and start it again with the same configuration,
        as its Deployment would; returns once it serves its webhooks and visibility API again. The objects and
        Workloads it made stay in the API server, as in a real cluster."""
        process = self.plane._procs.get(BINARY)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            process._log_file.close()
        self._start_manager(*self._manager)
        self._wait_serving(timeout)

    def _open_relays(self) -> dict[int, Path]:
        """A relay from a free port of the machine to each of the manager's ports (:attr:`ports`); its ``serve``."""
        serve = {}
        for name, port in (("webhook", WEBHOOK_PORT), ("health", HEALTH_PORT), ("visibility", VISIBILITY_PORT)):
            socket_path = netns.sockets_dir(self.plane) / f"kueue-{name}.sock"
            socket_path.unlink(missing_ok=True)
            serve[port] = socket_path
            outside = netns.Relay(0, socket_path).start()
            self.relays.append(outside)
            self.ports[name] = outside.port
        return serve

    def _start_manager(self, config: dict, serve: dict[int, Path]) -> None:
        plane = self.plane
        self._write_account()
        config_path = plane.state_dir / "kueue" / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        apiserver, dial, relay = netns.apiserver_dial(plane, BINARY)
        self.relays.append(relay)
        command = [str(self.kueue_dir / "bin" / BINARY), f"--config={config_path}", "--zap-log-level=2"]
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver)}
        bind = {"/run": self.run_dir, VISIBILITY_DIR: self._visibility_dir()}
        plane._spawn(BINARY, netns.isolated(command, dial={apiserver: dial}, serve=serve, bind=bind), env=env)

    def _visibility_dir(self) -> Path:
        """The folder the manager sees at :data:`VISIBILITY_DIR` (its Deployment's emptyDir). A bind mount needs a
        mount point: an empty folder ``/visibility`` is made on the machine once; nothing is written in it."""
        try:
            Path(VISIBILITY_DIR).mkdir(exist_ok=True)
        except OSError as e:
            raise RuntimeError(f"Kueue's visibility server needs a mount point {VISIBILITY_DIR}: {e}") from e
        folder = self.plane.state_dir / "kueue" / "visibility"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _write_account(self) -> None:
        """What a Pod of Kueue's ServiceAccount has under ``/var/run/secrets/kubernetes.io/serviceaccount``."""
        account = self.run_dir / "secrets" / "kubernetes.io" / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        token = self.plane.serviceaccount_token(NAMESPACE, SERVICE_ACCOUNT, expiration_seconds=7 * 24 * 3600)
        (account / "token").write_text(token)
        (account / "ca.crt").write_bytes(self.plane.pki.path("ca.crt").read_bytes())
        (account / "namespace").write_text(NAMESPACE)
        (self.run_dir / "kueue" / "webhook-certs").mkdir(parents=True, exist_ok=True)

    def _mount_certificates(self, timeout: float) -> None:
        """The kubelet's part: the Secret Kueue filled, as files in its ``webhook.certDir``."""
        found: dict = {}

        def filled() -> bool:
            status, secret = self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{CERT_SECRET}")
            data = (secret.get("data") or {}) if status == 200 else {}
            found.update(data)
            return bool(data.get("tls.crt") and data.get("tls.key"))

        self.plane._wait(BINARY, filled, timeout)
        folder = self.run_dir / "kueue" / "webhook-certs"
        for name, value in found.items():
            (folder / name).write_bytes(base64.b64decode(value))

    def _ready(self) -> bool:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['health']}/readyz", timeout=5) as answer:
            return answer.status == 200

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays.clear()


async def pending_workloads(plane, namespace: str, local_queue: str) -> list[dict] | None:
    """The Workloads waiting in ``local_queue``, as Kueue's visibility API lists them (``positionInLocalQueue``,
    ``positionInClusterQueue``, ``priority``, the owner), or None while there are none."""
    status, body = await asyncio.to_thread(
        plane.request, "GET",
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads")
    return body["items"] if status == 200 and body.get("items") else None


def _available(plane, name: str) -> bool:
    status, obj = plane.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    conditions = (obj.get("status") or {}).get("conditions") or [] if status == 200 else []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)
