"""``RealControlPlane``: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler built from the pinned Go modules (tools/k8s/build.sh), run as
child processes on 127.0.0.1 only; with ``kubevirt_bin`` (tools/kubevirt/build.sh)
also KubeVirt's virt-api and virt-controller, installed as virt-operator would (:mod:`.kubevirt`); with
``kueue_dir`` (tools/kueue/build.sh) also Kueue's manager, installed from its own manifests (:mod:`.kueue`).

Everything lives in one state folder::

    STATE/pki/          CAs, serving and client certs, service-account keys
    STATE/etcd/         etcd data
    STATE/logs/*.log    one log per process
    STATE/kubeconfig    admin kubeconfig (system:masters)
    STATE/ports.json    the ports chosen, reused on the next start if free

Children get PR_SET_PDEATHSIG (SIGKILL) when started from the main thread,
so they die with the Python process even on SIGKILL; ``stop()`` (also run by
the context manager, on a failed ``start()`` and at interpreter exit) sends
SIGTERM, then SIGKILL after a grace period.

Test infrastructure: not imported by the product, only via localcluster.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import logging
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..ports import free_port, port_free
from ..toolcache import newest_bin
from .pki import Pki

log = logging.getLogger(__name__)

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# A ClusterIP range inside loopback, so that a stray dial of a ClusterIP can
# only ever reach this machine. kube-apiserver v1.34 accepts any loopback
# range (even 127.0.0.0/8: the ServiceCIDR allocator has no size limit), but
# 127.0.0.0/8 would make 127.0.0.1 the `kubernetes` Service's ClusterIP, so a
# /16 away from 127.0.0.1. Nothing here may dial a ClusterIP: the project
# routes them itself (next phase).
DEFAULT_SERVICE_CIDR = "127.64.0.0/16"

# Feature gates that hold Kubernetes 1.34 to what KubeVirt v1.4 (supported up to Kubernetes 1.31) reads and writes,
# on kube-apiserver (which then drops the field from every write) and kube-scheduler (which then never sets it).
# PodObservedGenerationTracking (beta, on by default in 1.34) puts observedGeneration on a Pod's conditions, a field
# KubeVirt v1.4's client-go drops when it decodes them; virt-controller's JSON Patch of the virt-launcher Pod's
# conditions `test`s them as it decoded them, so it failed over and over, and the VMI's status, written only after
# that patch, stayed Pending for minutes.
KUBEVIRT_SKEW_GATES = "PodObservedGenerationTracking=false"

# The kube-controller-manager controllers this plane runs (issue #14).
DEFAULT_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "node-lifecycle-controller",
    "persistentvolume-binder-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    # the admission plugin StorageObjectInUseProtection adds these finalizers;
    # without their controllers a PVC or PV delete never completes
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    # publishes kube-root-ca.crt into every namespace (service-account
    # projected volumes need it)
    "root-ca-certificate-publisher-controller",
)


def _urlopen(url_or_req, *, context=None, timeout: float = 5.0):
    """urlopen that never uses a proxy from the environment: every URL here is
    on 127.0.0.1."""
    handlers = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open(url_or_req, timeout=timeout)


class ControlPlaneError(RuntimeError):
    """A component failed to start or become ready."""


# Tries before a start gives up on ports taken between choosing and binding.
PORT_ATTEMPTS = 3


def find_bin_dir() -> Path | None:
    """``$WORKSPACESPAWNER_K8S_BIN``, else the newest complete build in the cache."""
    env = os.environ.get("WORKSPACESPAWNER_K8S_BIN")
    if env:
        return Path(env)
    return newest_bin("k8s", ".built")


def find_kubevirt_bin() -> Path | None:
    """KubeVirt's and CDI's binaries: ``$WORKSPACESPAWNER_KUBEVIRT_BIN``, else the newest tools/kubevirt/build.sh
    build in the cache, else None (the local cluster's imitations of their controllers run)."""
    env = os.environ.get("WORKSPACESPAWNER_KUBEVIRT_BIN")
    if env:
        return Path(env)
    return newest_bin("kubevirt", ".built", "virt-controller")


def _pdeathsig():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def kubeconfig_dict(server: str, ca_pem: bytes, user: dict, name: str = "realplane") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def write_kubeconfig(path: Path, cfg: dict) -> Path:
    """kubeconfig as JSON (valid YAML), mode 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=2) + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


def _ok(status: int, body, what: str, accept=(200, 201)) -> None:
    if status not in accept:
        raise RuntimeError(f"{what}: HTTP {status}: {body}")


class RealControlPlane:
    """A real Kubernetes control plane on 127.0.0.1, started from ``bin_dir``."""

    def __init__(
        self,
        state_dir,
        bin_dir=None,
        *,
        service_cidr: str = DEFAULT_SERVICE_CIDR,
        controllers=DEFAULT_CONTROLLERS,
        extra_apiserver_args=(),
        ready_timeout: float = 120.0,
        etcd_unsafe_no_fsync: bool = True,
        kubevirt_bin=None,
        kueue_dir=None,
        kueue_pod_selector: dict | None = None,
        kueue_config: dict | None = None,
    ):
        self.state_dir = Path(state_dir).resolve()
        bin_dir = bin_dir or find_bin_dir()
        if bin_dir is None:
            raise ControlPlaneError("no control-plane binaries: run tools/k8s/build.sh or set WORKSPACESPAWNER_K8S_BIN")
        self.bin_dir = Path(bin_dir).resolve()
        self.service_cidr = service_cidr
        self.controllers = tuple(controllers)
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.ready_timeout = ready_timeout
        self.etcd_unsafe_no_fsync = etcd_unsafe_no_fsync
        self.kubevirt = None
        #: CDI's cdi-apiserver (:mod:`.cdi`), with KubeVirt's components where the build has it and this machine
        #: lets it run in a network namespace of its own; else None (our CDI agent's admission check stands in).
        self.cdi = None
        #: CDI's cdi-controller (:mod:`.cdicontroller`) beside cdi-apiserver, or None (our CDI agent moves the
        #: DataVolumes).
        self.cdi_controller = None
        #: Called with the plane once the controller manager works, before KubeVirt starts: virt-controller exits
        #: when the CDI API appears after its start (it "reinitializes": a Pod would be restarted), so the CDI CRDs
        #: of our agents go in first.
        self.before_kubevirt: list = []
        if kubevirt_bin is not None:
            from .kubevirt import KubeVirt

            self.kubevirt = KubeVirt(self, kubevirt_bin)
            from . import cdi

            if cdi.usable(kubevirt_bin):
                from .cdicontroller import CdiController

                self.cdi = cdi.CdiApiServer(self, kubevirt_bin)
                self.cdi_controller = CdiController(self, kubevirt_bin)
        #: Kueue's manager (:mod:`.kueue`), started last, or None.
        self.kueue = None
        if kueue_dir is not None:
            from .kueue import Kueue

            self.kueue = Kueue(self, kueue_dir, kueue_pod_selector, kueue_config)
        self.pki = Pki(self.state_dir / "pki")
        self.logs_dir = self.state_dir / "logs"
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.ports: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._atexit = False

    # -- public API -------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def service_ip(self) -> str:
        import ipaddress

        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))

    def start(self) -> RealControlPlane:
        for b in BINARIES:
            if not os.access(self.bin_dir / b, os.X_OK):
                raise ControlPlaneError(f"{self.bin_dir / b} is missing: run tools/k8s/build.sh")
        if self.kubevirt is not None and self.kubevirt.missing():
            raise ControlPlaneError(
                f"{self.kubevirt.bin_dir} lacks {', '.join(self.kubevirt.missing())}: run tools/kubevirt/build.sh"
            )
        if self.kueue is not None and self.kueue.missing():
            raise ControlPlaneError(f"Kueue's build lacks {', '.join(self.kueue.missing())}: run tools/kueue/build.sh")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._start_components()
                break
            except ControlPlaneError as e:
                self.stop()
                if attempt == PORT_ATTEMPTS - 1 or "address already in use" not in str(e).lower():
                    raise
                log.warning("a chosen port was taken before its component bound it; choosing ports again")
                (self.state_dir / "ports.json").unlink(missing_ok=True)
            except BaseException:
                self.stop()
                raise
        log.info("real control plane ready at %s (kubeconfig %s)", self.url, self.kubeconfig)
        return self

    def _start_components(self) -> None:
        self.pki.ensure(self.service_ip)
        self._choose_ports()
        self._write_kubeconfigs()
        self._start_etcd()
        self._start_apiserver()
        self._start_controller_manager()
        self._start_scheduler()
        self._wait_default_serviceaccount()
        if self.cdi is not None:
            self.cdi.start()
            self.cdi_controller.start()
        if self.kubevirt is not None:
            for prepare in self.before_kubevirt:
                prepare(self)
            self.kubevirt.start()
        if self.kueue is not None:
            self.kueue.start()

    def stop(self, grace: float = 15.0) -> None:
        """Stop every child in reverse start order (scheduler, controller
        manager, API server, etcd last, so that the API server can still reach
        it while it shuts down): SIGTERM, then SIGKILL after ``grace`` seconds."""
        with self._lock:
            procs = list(self._procs.items())[::-1]
            self._procs.clear()
        for name, p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                    p.wait(grace)
                except ProcessLookupError:
                    pass
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %.0fs: killing it", name, grace)
                    p.kill()
                    p.wait()
            f = getattr(p, "_log_file", None)
            if f:
                f.close()
        if self.cdi is not None:
            self.cdi.close()
            self.cdi_controller.close()
        if self.kueue is not None:
            self.kueue.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self._procs.items()}

    def request(self, method: str, path: str, body=None, *, timeout: float = 10.0, as_user: str | None = None):
        """An admin request, or with ``as_user`` one the admin makes as that user (``Impersonate-User``: a
        ServiceAccount's name brings its groups); returns (status, parsed JSON or text)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if as_user is not None:
            req.add_header("Impersonate-User", as_user)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _urlopen(req, context=self._admin_ssl(), timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def create_or_replace(self, collection: str, obj: dict, *, attempts: int = 5) -> None:
        """Create ``obj`` in ``collection`` (an admin request), or replace the one of its name; RuntimeError if refused.

        A replace carries the resourceVersion just read; one another writer changed meanwhile (kube-apiserver's
        APIService availability controller writes an APIService's status while a restarted plane comes up) is
        answered 409 Conflict, and read and replaced again, ``attempts`` times at most.
        """
        status, body = self.request("POST", collection, obj)
        name = obj["metadata"]["name"]
        for _ in range(attempts if status == 409 else 0):
            current_status, current = self.request("GET", f"{collection}/{name}")
            _ok(current_status, current, f"reading {name}")
            replaced = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
            status, body = self.request("PUT", f"{collection}/{name}", replaced)
            if status != 409:
                break
        _ok(status, body, f"writing {obj['kind']} {name}")

    def wait_condition(self, path: str, condition: str, deadline: float) -> None:
        """Poll ``path`` (admin GET) until its ``status.conditions`` has ``condition`` True; RuntimeError after
        ``deadline`` (monotonic)."""
        while True:
            status, obj = self.request("GET", path)
            conditions = (obj.get("status") or {}).get("conditions") or [] if status == 200 else []
            if any(c["type"] == condition and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path}: not {condition} in time: {conditions}")
            time.sleep(0.2)

    def serviceaccount_kubeconfig(
        self, namespace: str, name: str, path=None, *, expiration_seconds: int = 3600, create: bool = True
    ) -> Path:
        """Mint a token for ServiceAccount ``namespace/name`` (TokenRequest) and
        write a kubeconfig using it (default ``STATE/sa-<ns>-<name>.kubeconfig``)."""
        if create:
            st, _ = self.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
            if st not in (201, 409):
                raise ControlPlaneError(f"creating ServiceAccount {namespace}/{name}: HTTP {st}")
        token = self.serviceaccount_token(namespace, name, expiration_seconds=expiration_seconds)
        path = Path(path) if path else self.state_dir / f"sa-{namespace}-{name}.kubeconfig"
        cfg = kubeconfig_dict(self.url, self.pki.path("ca.crt").read_bytes(), {"token": token}, name=f"{namespace}-{name}")
        return write_kubeconfig(path, cfg)

    def serviceaccount_token(self, namespace: str, name: str, *, expiration_seconds: int = 3600) -> str:
        """A token of the existing ServiceAccount ``namespace/name`` (TokenRequest), as a Pod of it mounts one."""
        st, tr = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
        if st != 201:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name}: HTTP {st}: {tr}")
        return tr["status"]["token"]

    # -- internals --------------------------------------------------------

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))
        ctx.load_cert_chain(str(self.pki.path("admin.crt")), str(self.pki.path("admin.key")))
        return ctx

    def _choose_ports(self) -> None:
        names = ("etcd_client", "etcd_peer", "apiserver", "controller_manager", "scheduler")
        if self.kubevirt is not None:
            names += ("virt_api", "virt_controller")
        saved = {}
        pf = self.state_dir / "ports.json"
        if pf.exists():
            try:
                saved = json.loads(pf.read_text())
            except ValueError:
                saved = {}
        ports = {}
        for n in names:
            p = saved.get(n)
            ports[n] = p if isinstance(p, int) and port_free(p) and p not in ports.values() else free_port()
        self.ports = ports
        pf.write_text(json.dumps(ports, indent=2) + "\n")

    def _client_kubeconfig(self, name: str) -> Path:
        pk = self.pki
        user = {
            "client-certificate-data": base64.b64encode(pk.path(f"{name}.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode(pk.path(f"{name}.key").read_bytes()).decode(),
        }
        return write_kubeconfig(
            self.state_dir / f"{name}.kubeconfig" if name != "admin" else self.kubeconfig,
            kubeconfig_dict(self.url, pk.path("ca.crt").read_bytes(), user),
        )

    def _write_kubeconfigs(self) -> None:
        for n in ("admin", "controller-manager", "scheduler"):
            self._client_kubeconfig(n)

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        logf = open(self.logs_dir / f"{name}.log", "ab")
        logf.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {' '.join(args)}\n".encode())
        logf.flush()
        main = threading.current_thread() is threading.main_thread()
        p = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=self.state_dir,
            start_new_session=True,
            preexec_fn=_pdeathsig if main else None,
            env={k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "ETCD"))}
            | {"NO_PROXY": "*", "no_proxy": "*", "HTTPS_PROXY": "", "HTTP_PROXY": ""}
            | (env or {}),
        )
        p._log_file = logf
        with self._lock:
            self._procs[name] = p
        return p

    def _log_tail(self, name: str, n: int = 30) -> str:
        try:
            return "\n".join((self.logs_dir / f"{name}.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _wait(self, name: str, probe, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        last = None
        while time.monotonic() < deadline:
            p = self._procs.get(name)
            if p is not None and p.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {p.returncode}:\n{self._log_tail(name)}")
            try:
                if probe():
                    return
            except Exception as e:  # noqa: BLE001 - any failure means "not yet"
                last = e
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{name} not ready after {timeout or self.ready_timeout:.0f}s ({last}):\n{self._log_tail(name)}"
        )

    def _https_ok(self, port: int, path: str, ctx: ssl.SSLContext) -> bool:
        with _urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5) as r:
            return r.status == 200

    def _start_etcd(self) -> None:
        c, p = self.ports["etcd_client"], self.ports["etcd_peer"]
        args = [
            str(self.bin_dir / "etcd"),
            "--name=realplane",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{c}",
            f"--advertise-client-urls=http://127.0.0.1:{c}",
            f"--listen-peer-urls=http://127.0.0.1:{p}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p}",
            f"--initial-cluster=realplane=http://127.0.0.1:{p}",
            "--initial-cluster-state=new",
            "--log-level=warn",
            "--quota-backend-bytes=2147483648",
        ]
        if self.etcd_unsafe_no_fsync:
            args.append("--unsafe-no-fsync")
        self._spawn("etcd", args)

        def probe():
            with _urlopen(f"http://127.0.0.1:{c}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"

        self._wait("etcd", probe, 60)

    def _start_apiserver(self) -> None:
        pk = self.pki.path
        args = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd_client']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # Endpoints/EndpointSlices refuse loopback addresses, so the
            # default reconciler would fail forever on 127.0.0.1; and nothing
            # may dial the kubernetes Service's ClusterIP anyway.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={self.state_dir / 'apiserver'}",
            f"--tls-cert-file={pk('apiserver.crt')}",
            f"--tls-private-key-file={pk('apiserver.key')}",
            f"--client-ca-file={pk('ca.crt')}",
            f"--kubelet-client-certificate={pk('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={pk('apiserver-kubelet-client.key')}",
            # the node agent's kubelet API (.kubeletapi): on each Node's InternalIP, its certificate of the plane's CA
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pk('ca.crt')}",
            "--authorization-mode=Node,RBAC",
            # the default admission plugins stay on; NodeRestriction goes with
            # the Node authorizer (as kubeadm does); ExtendedResourceToleration
            # as GPU clusters with tainted GPU nodes run it (GKE does): a Pod
            # asking for nvidia.com/gpu tolerates the GPU taint, as on the
            # embedded cluster
            "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pk('sa.pub')}",
            f"--service-account-signing-key-file={pk('sa.key')}",
            f"--requestheader-client-ca-file={pk('front-proxy-ca.crt')}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--proxy-client-cert-file={pk('front-proxy-client.crt')}",
            f"--proxy-client-key-file={pk('front-proxy-client.key')}",
            "--enable-aggregator-routing=false",
            "--profiling=false",
            f"--feature-gates={KUBEVIRT_SKEW_GATES}",
            "--v=1",
            *self.extra_apiserver_args,
        ]
        self._spawn("apiserver", args)
        ctx = self._admin_ssl()
        self._wait("apiserver", lambda: self._https_ok(self.ports["apiserver"], "/readyz", ctx))

    def _component_args(self, name: str, port: int, verbosity: int = 1) -> list[str]:
        kc = self.state_dir / f"{name}.kubeconfig"
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.state_dir / name}",
            "--leader-elect=false",
            f"--v={verbosity}",
        ]

    def _insecure_ctx(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert of a local component
        return ctx

    def _start_controller_manager(self) -> None:
        pk = self.pki.path
        port = self.ports["controller_manager"]
        args = [
            str(self.bin_dir / "kube-controller-manager"),
            *self._component_args("controller-manager", port),
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={pk('sa.key')}",
            f"--root-ca-file={pk('ca.crt')}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allocate-node-cidrs=false",
        ]
        self._spawn("controller-manager", args)
        ctx = self._insecure_ctx()
        self._wait("controller-manager", lambda: self._https_ok(port, "/healthz", ctx))

    def _start_scheduler(self) -> None:
        port = self.ports["scheduler"]
        # verbosity 2: each Pod it cannot place, and why ("Unable to schedule pod; no fit; waiting"), in its log
        args = [*self._component_args("scheduler", port, verbosity=2), f"--feature-gates={KUBEVIRT_SKEW_GATES}"]
        self._spawn("scheduler", [str(self.bin_dir / "kube-scheduler"), *args])
        ctx = self._insecure_ctx()
        self._wait("scheduler", lambda: self._https_ok(port, "/healthz", ctx))

    def _wait_default_serviceaccount(self) -> None:
        """The serviceaccount controller creates ``default/default``: proof the
        controller manager talks to the API server."""
        self._wait(
            "controller-manager",
            lambda: self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        )
