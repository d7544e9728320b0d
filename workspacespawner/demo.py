"""``workspacespawner demo``: the local cluster and a JupyterHub using WorkspaceSpawner, on loopback.

Starts the embedded Kubernetes API server with its controllers (PVC binder,
scheduler with a CPU node and an 8-GPU node, node agent that runs each Pod's
``jupyterhub-singleuser`` as a local process), then runs ``jupyterhub`` with
the sample config pieces from ``jupyterhub_config.d/`` plus demo settings: a
login that accepts any user name, reachable only on 127.0.0.1, the hub at
http://127.0.0.1:8000. The cluster also holds a golden image
(``golden-images/ubuntu-22.04-gpu-2026-11``) for the VM profiles: their guests run
from cloud-init on the same node agent. Where this machine can boot a real guest
(QEMU and tools/golden-image's Debian 12), the JupyterLab VM profile boots that
under QEMU instead (:mod:`.demoguest`). Ctrl-C stops the hub, every server
and the cluster. With ``--control-plane real`` the cluster is Kubernetes'
own servers instead, with KubeVirt's and CDI's own controllers where they
are built (:func:`start_cluster`).

Everything lives in the state directory (``--state-dir``), so a second run
picks up where the first stopped: the hub's database, and the cluster's
objects, saved in ``cluster/objects.json`` while it runs and when it stops
and loaded when it starts again. Each user's home volume (PVC, PV and its
directory under ``cluster/volumes``), VM root disks and VirtualMachines come
back as they were, and the golden image is reused. Running servers do not:
their Pods and VMIs are gone, as after a node restart, and users start them
again. Delete the state directory to start from scratch.

One demo per state directory: a second one refuses at once, naming the
process that holds the folder (``demo.lock``, with its PID), and changes
nothing. The four ports on 127.0.0.1 (public ``--port``, the proxy's API
``--proxy-api-port``, the hub's own ``--hub-port``, the Workspaces dashboard's
``--dashboard-port``; 0 picks a free one) are
checked before anything starts, and a busy one is named. The URL is printed
once the hub answers through the proxy; on any failure, and on Ctrl-C, the
hub and every process it started (the proxy) and the cluster are stopped.

GPU metrics: when Debian's ``prometheus`` is installed (``--prometheus
auto``, the default), the demo runs it on a free loopback port, its storage
in ``prometheus/`` in the state directory, scraping every 5 s the hub's
``/hub/metrics`` (with the token of a demo service holding ``read:metrics``)
and the local cluster's dcgm-exporter-format GPU metrics and kubelet volume
stats; the Workspaces dashboard asks it (``c.GPUIdle.prometheus_url``) for GPU
utilisation and how full each disk is. A GPU a workspace holds reports a
steady load (:data:`HELD_GPU`). Prometheus stops with the demo, and gets
SIGTERM if the demo is killed. Without it (or ``--prometheus off``) the
demo runs without GPU metrics, and says once how to get them.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import fcntl
import json
import logging
import os
import pprint
import secrets
import shutil
import signal
import socket
import sys
import sysconfig
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from localcluster.codeserver import INSTALL_HINT, code_server_bin
from localcluster.controllers.gpumetrics import GPUReading
from localcluster.controllers.scheduler import ECONOMY_NODES, GPU_TAINT
from localcluster.goldenimage import make_golden_image
from localcluster.ports import free_port
from localcluster.prometheus import PrometheusServer, Target

from localcluster import LocalCluster
from localcluster import prometheus as demoprometheus
from workspacespawner.core.rsttext import summary
from workspacespawner.demoguest import guest_config, publish_real_guest

log = logging.getLogger("workspacespawner.demo")

#: (namespace, name) of the demo's golden-image DataSource, the default of ``vm_golden_image``.
GOLDEN_IMAGE = ("golden-images", "ubuntu-22.04-gpu-2026-11")
#: What the demo's golden image holds: enough of a root filesystem to recognise.
GOLDEN_FILES = {
    "etc/os-release": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04 (workspacespawner demo image)"\n',
    "etc/hostname": "workspace\n",
}

#: Config pieces the demo loads, in order (the school-OAuth piece is for real deployments).
#: The node label and taint of the demo's research team pool (README "Team GPU pools").
POOL_LABEL = "workspacespawner.io/team-pool"
POOL_TAINT = {"key": POOL_LABEL, "value": "research", "effect": "NoSchedule"}

#: The demo's cluster: :data:`~.localcluster.controllers.scheduler.ECONOMY_NODES` (a CPU node, 8 A100s, 2 V100s, an
#: A100 split into MIG slices, a T4 time-sliced 4 ways) and an 8-A100 node the research group owns as a team pool.
DEMO_NODES = [
    *ECONOMY_NODES,
    {"name": "gpu-node-research", "cpu": "32", "memory": "256Gi", "gpus": 8, "gpu_product": "NVIDIA-A100-SXM4-80GB",
     "labels": {POOL_LABEL: "research"}, "taints": [GPU_TAINT, POOL_TAINT]},
]


def _gpu_profile(display_name: str, slug: str, description: str, **override) -> dict:
    return {"display_name": display_name, "slug": slug, "description": description,
            "kubespawner_override": {"workspace_kind": "container", "ide": "jupyterlab", "cpu_limit": 4,
                                     "mem_limit": "16G", **override}}


#: The profiles the demo adds to the sample list to show the GPU kinds its cluster has.
DEMO_GPU_PROFILES = [
    _gpu_profile("JupyterLab, 1 MIG slice (A100 1g.10gb)", "jupyterlab-mig",
                 "A seventh of an A100: its own 10 GB and compute slice.",
                 extra_resource_limits={"nvidia.com/mig-1g.10gb": 1}),
    _gpu_profile("JupyterLab, 1 shared T4 (time-sliced)", "jupyterlab-t4-shared",
                 "One of four time-sliced replicas of a T4: cheap, for small models and teaching.",
                 extra_resource_limits={"nvidia.com/gpu": 1},
                 node_selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
    _gpu_profile("JupyterLab, 1 GPU, the cheapest free", "jupyterlab-cheapest",
                 "Takes the cheapest free GPU (a T4 share, then a V100, then an A100); charged for the one it gets.",
                 extra_resource_limits={"nvidia.com/gpu": 1}, prefer_cheaper_gpus=True),
    _gpu_profile("Research pool, 8 GPUs (A100)", "research-pool",
                 "The research group's own 8-GPU node, shared among its members.",
                 extra_resource_limits={"nvidia.com/gpu": 8}, cpu_limit=30, mem_limit="240G", team_pool="research"),
]

#: The sample list's research profile (a whole shared 8-A100 node) that the demo's research pool replaces: on the demo's
#: cluster the research group has a node of its own, and a second "8 GPUs (A100)" card for the node students share
#: would nearly always be greyed out.
REPLACED_BY_POOL = "jupyterlab-8gpu"

#: Config the demo adds before the start-up check: the research pool and :data:`DEMO_GPU_PROFILES`.
DEMO_GPU_CONFIG = f"""# GPU kinds on the demo's cluster: MIG slices, a time-sliced T4, the cheapest free GPU, the research pool
# (in place of the sample list's 8-GPU profile on the shared node).
c.TeamGPUPools.pools = {{"research": {{"groups": ["research"], "node_selector": {{{POOL_LABEL!r}: "research"}},
                                     "taint": {POOL_TAINT!r}}}}}
c.KubeSpawner.profile_list = [*(p for p in c.KubeSpawner.profile_list if p["slug"] != {REPLACED_BY_POOL!r}),
                              *{pprint.pformat(DEMO_GPU_PROFILES, width=110, sort_dicts=False)}]"""

DEMO_PIECES = ("10-workspace-spawner.py", "20-profiles.py", "40-quota.py", "44-gpu-economy.py", "46-vm-root-disk-pool.py",
               "90-check-config.py")


def config_dir() -> Path:
    """Where the sample ``jupyterhub_config.d`` lives: the source checkout, else the installed data files."""
    candidates = [
        Path(__file__).resolve().parent.parent / "jupyterhub_config.d",
        Path(sysconfig.get_paths()["data"]) / "share" / "workspacespawner" / "jupyterhub_config.d",
        Path(sys.prefix) / "share" / "workspacespawner" / "jupyterhub_config.d",
    ]
    for path in candidates:
        if (path / DEMO_PIECES[0]).exists():
            return path
    raise FileNotFoundError("the sample jupyterhub_config.d was not found; reinstall workspacespawner")


#: Seconds the first run waits for npm to install configurable-http-proxy (a machine without network would wait forever).
NPM_INSTALL_TIMEOUT = 180


async def npm_proxy(state_dir: Path, *, timeout: float | None = None) -> list[str] | None:
    """The npm ``configurable-http-proxy`` command, installed under ``state_dir/proxy`` on first use; None without npm.

    JupyterHub's reference proxy streams the spawn page's progress events as
    they happen; the Python port that the ``demo`` extra installs delivers
    them in one burst when the server is ready, and forwards the browser's
    binary WebSocket frames as text frames (code-server closes the
    connection: VS Code's workbench stays blank), so the demo prefers npm's.
    An install that fails, or takes longer than ``timeout`` seconds
    (:data:`NPM_INSTALL_TIMEOUT`; npm retries for minutes without a network),
    is stopped and the Python proxy is used, with a warning that says so.
    """
    prefix = state_dir / "proxy"
    command = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if command.exists():
        return [str(command)]
    npm = shutil.which("npm")
    if npm is None:
        return None
    timeout = NPM_INSTALL_TIMEOUT if timeout is None else timeout
    print(f"Installing configurable-http-proxy from npm (once; at most {timeout:g} s) ...", flush=True)
    installer = await asyncio.create_subprocess_exec(
        npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), "configurable-http-proxy@4",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    try:
        _, err = await asyncio.wait_for(installer.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError) as e:
        with suppress(ProcessLookupError):
            os.killpg(installer.pid, signal.SIGKILL)  # npm and the node processes it started
        await installer.wait()
        if isinstance(e, asyncio.CancelledError):
            raise
        log.warning("npm did not install configurable-http-proxy within %g s (is the npm registry reachable?); "
                    "using the Python proxy, behind which VS Code's workbench stays blank. The next run tries npm "
                    "again; --proxy python skips it", timeout)
        return None
    if installer.returncode != 0 or not command.exists():
        log.warning("npm install of configurable-http-proxy failed (%s); using the Python proxy", err.decode()[-300:])
        return None
    return [str(command)]


def _npm_proxy_advice(proxy: str) -> str:
    """What to do for npm's configurable-http-proxy, when the demo runs the Python proxy (``proxy``: the option)."""
    if proxy == "python":
        return "drop --proxy python for npm's configurable-http-proxy"
    if shutil.which("npm") is None:
        return "install npm for its configurable-http-proxy"
    return "npm could not install configurable-http-proxy, see above; the next run tries again"


class DemoError(Exception):
    """The demo cannot start; the message says why (printed without a traceback, exit code 1)."""


class StateLock:
    """One demo per state directory: an exclusive ``flock`` on ``state_dir/demo.lock``, which holds the holder's PID.

    The kernel drops the lock when the holding process ends, however it
    ends, so a crashed demo never leaves a stale lock.
    """

    def __init__(self, state_dir: Path):
        self.path = state_dir / "demo.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our PID; raises :class:`DemoError` naming the holder's PID if another process has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DemoError(
                f"{self.path.parent} is in use by another demo (process {holder}, see {self.path}); "
                "stop it first, or give this one another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays; an unlocked file means no demo runs)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class DemoPorts:
    """The demo's ports on 127.0.0.1: ``public`` (the proxy, the URL users open), ``proxy_api``, ``hub`` (the hub's own),
    ``dashboard`` (the Workspaces dashboard service's)."""

    public: int = 8000
    proxy_api: int = 8001
    hub: int = 8081
    dashboard: int = 10101

    #: The command-line option of each port, for messages.
    OPTIONS = {"public": "--port", "proxy_api": "--proxy-api-port", "hub": "--hub-port", "dashboard": "--dashboard-port"}

    def checked(self) -> DemoPorts:
        """These ports with each 0 replaced by a free one; raises :class:`DemoError` naming every busy or repeated
        port at once."""
        chosen: dict[str, int] = {}
        problems = []
        for name, option in self.OPTIONS.items():
            port = getattr(self, name)
            if port == 0:
                port = free_port()
            elif port in chosen.values():
                problems.append(f"port {port} is given twice ({option} and another port option); give each its own")
            elif not port_is_free(port):
                problems.append(
                    f"port {port} on 127.0.0.1 ({option}) is in use by another program; "
                    f"choose another with {option} PORT, or {option} 0 for a free one"
                )
            chosen[name] = port
        if problems:
            raise DemoError("\n".join(problems))
        return DemoPorts(**chosen)


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now (the way the hub and the proxy will)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


#: What the demo's login page says above the form (JupyterHub's ``announcement_login``).
LOGIN_HINT = (
    "This is the workspacespawner demo: any user name logs in, with any password. "
    "<b>researcher</b> is in the research group and also sees its pool's 8-GPU profile; <b>admin</b> is an administrator."
)


#: The demo's JupyterHub service whose token Prometheus scrapes ``/hub/metrics`` with (its role: ``read:metrics``).
METRICS_SERVICE = "demo-prometheus"
#: Seconds between two scrapes of the demo's Prometheus.
SCRAPE_INTERVAL = 5.0
#: Seconds the demo's Prometheus has to answer ``/-/ready`` (else the demo runs without it).
PROMETHEUS_READY_TIMEOUT = 60.0
#: What a GPU held by a running workspace reports in the demo (a constant load; free GPUs are idle, 0 % and 60 W).
HELD_GPU = GPUReading(util=65.0, fb_used_mib=24576.0, power_watts=310.0)


#: The paths the demo's Prometheus scrapes every :data:`SCRAPE_INTERVAL` seconds (the hub's, the node agent's).
SCRAPED_PATHS = ("/hub/metrics", "/metrics", "/kubelet/metrics")


def quiet_scrapes(record: logging.LogRecord) -> bool:
    """A ``tornado.access`` log filter: False for a successful scrape of :data:`SCRAPED_PATHS` (a line every 5 s
    was all a person saw of a healthy demo), True for everything else, a failed scrape included."""
    return record.levelno > logging.INFO or not any(f" {path} " in record.getMessage() for path in SCRAPED_PATHS)


def metrics_config(prometheus_url: str, token_file: Path) -> str:
    """The demo config's lines for metrics: the hub's ``prometheus_url`` (the dashboard's and the idle-GPU pass's) and
    the service, with the token in ``token_file``, whose role lets Prometheus read ``/hub/metrics`` (JupyterHub asks
    for ``read:metrics`` there), and a filter that keeps its successful scrapes out of the hub's log."""
    return f"""# GPU metrics and disk fill: the demo's Prometheus, which scrapes /hub/metrics with this service's token.
from pathlib import Path
c.GPUIdle.prometheus_url = {prometheus_url!r}
c.JupyterHub.services.append({{"name": {METRICS_SERVICE!r}, "api_token": Path({str(token_file)!r}).read_text().strip()}})
c.JupyterHub.load_roles.append({{"name": {METRICS_SERVICE!r}, "scopes": ["read:metrics"], "services": [{METRICS_SERVICE!r}]}})
# It scrapes every {SCRAPE_INTERVAL:g} s: its successful scrapes stay out of the terminal (a failed one is still logged).
import logging
from workspacespawner.demo import quiet_scrapes
logging.getLogger("tornado.access").addFilter(quiet_scrapes)
"""


def demo_config(
    state_dir: Path, pieces_dir: Path, port: int, proxy_command: list[str] | None = None, *, proxy_api_port: int = 8001,
    hub_port: int = 8081, dashboard_port: int = 10101, prometheus_url: str | None = None, metrics_token: Path | None = None,
    real_guest: str | None = None,
) -> str:
    """The text of the demo's ``jupyterhub_config.py`` (loads the sample pieces, then demo settings).

    ``port``: the public port; ``proxy_api_port`` and ``hub_port``: the
    proxy's API and the hub's own (all on 127.0.0.1); ``dashboard_port``: the Workspaces dashboard service's. ``proxy_command``
    replaces JupyterHub's ``configurable-http-proxy`` command when given.
    ``prometheus_url`` and ``metrics_token`` (the file of the token
    Prometheus scrapes the hub with): the demo's Prometheus, both or
    neither (:func:`metrics_config`); None: no GPU metrics. ``real_guest``:
    the DataSource of the real guest the JupyterLab VM profile boots (None:
    every VM profile boots the emulated guest; :mod:`.demoguest`).
    """
    if (prometheus_url is None) != (metrics_token is None):
        raise ValueError("demo_config needs both prometheus_url and metrics_token, or neither")
    *pieces, check = DEMO_PIECES
    loads = "\n".join(f"load_subconfig({str(pieces_dir / piece)!r})" for piece in pieces)
    proxy = f"c.ConfigurableHTTPProxy.command = {proxy_command!r}\n" if proxy_command else ""
    metrics = metrics_config(prometheus_url, metrics_token) if prometheus_url and metrics_token else ""
    return f"""# Written by `workspacespawner demo`; edit jupyterhub_config.d/ instead.
{loads}
{DEMO_GPU_CONFIG}
{guest_config(real_guest, hub_port)}
load_subconfig({str(pieces_dir / check)!r})

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{state_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(state_dir / 'jupyterhub_cookie_secret')!r}
c.ConfigurableHTTPProxy.pid_file = {str(state_dir / 'proxy.pid')!r}
# Demo login: any user name, no password, loopback only. Never use this on a real hub.
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}
c.JupyterHub.load_groups = {{"research": {{"users": ["researcher"]}}}}
c.JupyterHub.template_vars = {{**c.JupyterHub.template_vars, "announcement_login": {LOGIN_HINT!r}}}
c.KubeSpawner.namespace = "default"
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 60
# The Workspaces dashboard (/services/workspaces/), as jupyterhub_config.d/50-workspaces-dashboard.py makes it:
# research's members see each other's workspaces; the Reports view counts research under Physics.
from workspacespawner.dashboard.settings import configure_hub
c.WorkspacesDashboard.team_groups = ["research"]
c.WorkspacesDashboard.departments = {{"Physics": ["research"]}}
c.WorkspacesDashboard.port = {dashboard_port}
{metrics}configure_hub(c)
{proxy}"""


def metrics_token(state_dir: Path) -> Path:
    """The file (``prometheus/hub-token`` in ``state_dir``, mode 0600) of the token Prometheus scrapes the hub with;
    made on first use, then kept (the hub's database keeps the token's hash)."""
    path = state_dir / "prometheus" / "hub-token"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or not path.read_text().strip():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    return path


def prometheus_targets(hub_port: int, node_metrics_url: str, token_file: Path) -> dict[str, Target]:
    """The demo Prometheus's scrape jobs: ``jupyterhub`` (the hub's own ``/hub/metrics`` on ``hub_port``, with the
    token in ``token_file``), ``dcgm-exporter`` and ``kubelet`` (the local cluster's node agent at ``node_metrics_url``)."""
    base = node_metrics_url.rstrip("/")
    return {
        "jupyterhub": Target(f"http://127.0.0.1:{hub_port}/hub/metrics", token_file),
        "dcgm-exporter": Target(f"{base}/metrics"),
        "kubelet": Target(f"{base}/kubelet/metrics"),
    }


async def start_prometheus(state_dir: Path, cluster: LocalCluster, hub_port: int, mode: str = "auto") -> PrometheusServer | None:
    """The demo's Prometheus, started and ready (see the module docstring), or None: ``mode`` ``off``, no program,
    or a server that did not get ready (each said in one line on stdout, with how to get GPU metrics)."""
    if mode == "off":
        return None
    if demoprometheus.find_program() is None:
        print(f"Prometheus is not installed, so the dashboard shows no GPU utilisation or disk fill; "
              f"for GPU metrics, {demoprometheus.INSTALL_HINT}", flush=True)
        return None
    agent = cluster.controllers["nodeagent"]
    agent.metrics.held = HELD_GPU
    node_metrics = await agent.metrics.serve()
    token = metrics_token(state_dir)
    server = PrometheusServer(prometheus_targets(hub_port, node_metrics, token), state_dir / "prometheus",
                              interval=SCRAPE_INTERVAL)
    await server.start()
    try:
        await server.wait_ready(PROMETHEUS_READY_TIMEOUT)
    except demoprometheus.NotReady as e:
        await server.stop()
        print(f"The demo runs without GPU metrics: {e}", flush=True)
        return None
    except BaseException:  # cancelled while waiting: no Prometheus left running
        await asyncio.shield(server.stop())
        raise
    print(f"Prometheus at {server.url} scrapes the hub, the GPUs (dcgm-exporter format) and the disks every "
          f"{SCRAPE_INTERVAL:g} s; its log: {server.log_path}", flush=True)
    return server


#: Seconds the hub has to answer on the public URL after it starts.
HUB_ANSWER_TIMEOUT = 120.0


async def run_demo(state_dir: Path, ports: DemoPorts | int = DemoPorts(), proxy: str = "auto",
                   prometheus: str = "auto", control_plane: str = "local") -> int:
    """Run cluster and hub until the hub exits or the process gets SIGINT/SIGTERM; returns the exit code.

    Refuses with :class:`DemoError` (before anything changes) when another
    demo holds ``state_dir`` or a port is busy. ``ports``: a
    :class:`DemoPorts`, or the public port alone. ``prometheus``: ``auto``
    (run Prometheus when installed) or ``off``. ``control_plane``: ``local``
    or ``real`` (:func:`start_cluster`).
    """
    if prometheus not in ("auto", "off"):
        raise DemoError(f"--prometheus must be auto or off, not {prometheus!r}")
    if isinstance(ports, int):
        ports = DemoPorts(public=ports)
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = StateLock(state_dir)
    lock.acquire()
    try:
        return await _run_locked(state_dir, ports.checked(), proxy, prometheus, control_plane)
    finally:
        lock.release()


@dataclass
class DemoCluster:
    """The demo's cluster, started and holding the golden image: its ``kubeconfig``, how to ``stop`` it, and the
    embedded cluster itself (``local``; None on the real control plane) for the GPU metrics."""

    kubeconfig: Path
    stop: Callable[[], Awaitable[None]]
    local: LocalCluster | None = None
    #: the DataSource of the real guest (:mod:`.demoguest`), None when VMs boot the emulated guest
    real_guest: str | None = None


async def start_cluster(state_dir: Path, control_plane: str = "local") -> DemoCluster:
    """Start the demo's cluster in ``state_dir`` and seed the golden image.

    ``local``: the embedded cluster, its objects kept in ``cluster/``.
    ``real``: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
    built by tools/k8s/build.sh, with KubeVirt's and CDI's own controllers
    when tools/kubevirt/build.sh has built them
    (``$WORKSPACESPAWNER_KUBEVIRT_BIN``, else its newest build), in ``real/``.
    """
    if control_plane == "local":
        cluster = LocalCluster(state_dir / "cluster", port=0, persist=True, nodes=DEMO_NODES)
        await cluster.start()
        try:
            await make_golden_image(cluster, GOLDEN_IMAGE[0], GOLDEN_IMAGE[1], GOLDEN_FILES)
            real_guest = await publish_real_guest(cluster)
        except BaseException:
            await cluster.stop()
            raise
        return DemoCluster(cluster.kubeconfig, cluster.stop, cluster, real_guest)
    from localcluster.realplane.agents import RealCluster
    from localcluster.realplane.plane import find_bin_dir, find_kubevirt_bin

    if find_bin_dir() is None:
        raise DemoError("--control-plane real needs Kubernetes' servers: build them with `bash tools/k8s/build.sh` "
                        "(about 11 minutes), or name their folder in WORKSPACESPAWNER_K8S_BIN")
    kubevirt_bin = find_kubevirt_bin()
    if kubevirt_bin is None:
        print("KubeVirt's and CDI's own controllers are not built (bash tools/kubevirt/build.sh), so the local "
              "cluster's imitations of them move the VMs", flush=True)
    real = RealCluster(state_dir / "real", kubevirt_bin=str(kubevirt_bin) if kubevirt_bin else None)
    await asyncio.to_thread(real.start)
    try:
        await asyncio.to_thread(real.thread.call, make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES, timeout=120)
        real_guest = await asyncio.to_thread(real.thread.call, publish_real_guest, timeout=120)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(real.stop))
        raise
    return DemoCluster(real.kubeconfig, lambda: asyncio.to_thread(real.stop), real_guest=real_guest)


async def _run_locked(state_dir: Path, ports: DemoPorts, proxy: str, prometheus: str, control_plane: str = "local") -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    code_server = use_code_server()
    cluster: DemoCluster | None = None
    hub: asyncio.subprocess.Process | None = None
    metrics: PrometheusServer | None = None
    try:
        cluster = await start_cluster(state_dir, control_plane)
        if cluster.local is not None:
            metrics = await start_prometheus(state_dir, cluster.local, ports.hub, prometheus)
        elif prometheus == "auto":
            print("On the real control plane the demo runs without GPU metrics (the node agent's metrics are the "
                  "embedded cluster's)", flush=True)
        config_file = state_dir / "jupyterhub_config.py"
        proxy_command = None
        if proxy == "auto":
            installing = asyncio.create_task(npm_proxy(state_dir))  # Ctrl-C stops it (and npm), as it stops the rest
            await asyncio.wait([installing, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                installing.cancel()
                with suppress(asyncio.CancelledError):
                    await installing
                return 130
            proxy_command = installing.result()
        if proxy_command is None and code_server is not None:
            print("The Python proxy forwards WebSocket frames VS Code cannot read: the code-server profiles will show "
                  f"a blank page ({_npm_proxy_advice(proxy)})", flush=True)
        config_file.write_text(
            demo_config(state_dir, config_dir(), ports.public, proxy_command, proxy_api_port=ports.proxy_api, hub_port=ports.hub,
                        dashboard_port=ports.dashboard, prometheus_url=metrics.url if metrics else None,
                        metrics_token=metrics_token(state_dir) if metrics else None, real_guest=cluster.real_guest)
        )
        # the proxy's API token is ours, so the demo can see when the hub's route is in place
        proxy_token = secrets.token_hex(32)
        env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), CONFIGPROXY_AUTH_TOKEN=proxy_token)
        # its own process group: the proxy it starts goes with it, whatever happens to the hub
        hub = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jupyterhub", "-f", str(config_file), cwd=str(state_dir), env=env, start_new_session=True
        )
        waiter = asyncio.create_task(hub.wait())
        url = f"http://127.0.0.1:{ports.public}"
        # through the proxy only once the proxy routes to the hub: asking before makes the proxy log errors
        answers = (_hub_route_in(f"http://127.0.0.1:{ports.proxy_api}", proxy_token), _answers(f"{url}/hub/api/"))
        if not await _wait_until(answers, waiter, stop):
            if stop.is_set():
                return 130
            if hub.returncode is not None:
                raise DemoError(f"the hub exited with code {hub.returncode} before answering at {url}; its log is above")
            raise DemoError(f"the hub did not answer at {url} within {HUB_ANSWER_TIMEOUT:.0f} s; its log is above")
        print(f"\nworkspacespawner demo: JupyterHub at {url} (any user name logs in)")
        print(f"local cluster: export KUBECONFIG={cluster.kubeconfig}\n", flush=True)
        await asyncio.wait([waiter, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if hub.returncode is not None and not stop.is_set():
            raise DemoError(f"the hub exited with code {hub.returncode}; its log is above")
        return 0
    finally:
        if hub is not None:
            await _stop_process_group(hub)
            await _stop_leftover_proxy(state_dir / "proxy.pid", ports.public)
        if metrics is not None:
            await metrics.stop()
        if cluster is not None:
            await cluster.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def use_code_server() -> Path | None:
    """Put the real code-server's bin folder first on this process's PATH, which every Pod's PATH ends with.

    Prints one line either way: where code-server is, or that the
    code-server profiles will not open VS Code and how to install it.
    Returns the folder, or None when code-server is not installed.
    """
    try:
        bin_dir = code_server_bin()
    except FileNotFoundError as e:
        raise DemoError(str(e)) from None
    if bin_dir is None:
        print(f"code-server is not installed, so the code-server profiles will not open VS Code; {INSTALL_HINT}", flush=True)
        return None
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    print(f"code-server for the code-server profiles: {bin_dir / 'code-server'}", flush=True)
    return bin_dir


def _answers(url: str):
    """A probe for :func:`_wait_until`: whether GET ``url`` answers 200."""
    async def probe(http) -> bool:
        return (await http.fetch(url, raise_error=False, request_timeout=5)).code == 200
    return probe


def _hub_route_in(proxy_api: str, token: str):
    """A probe for :func:`_wait_until`: whether the proxy (its API at ``proxy_api``) routes ``/`` (to the hub)."""
    async def probe(http) -> bool:
        response = await http.fetch(f"{proxy_api}/api/routes", headers={"Authorization": f"token {token}"},
                                    raise_error=False, request_timeout=5)
        return response.code == 200 and "/" in json.loads(response.body or b"{}")
    return probe


async def _wait_until(probes, hub_exited: asyncio.Task, stop: asyncio.Event) -> bool:
    """Wait until each of ``probes`` (in turn) says True (True), or the hub exits, ``stop`` is set or
    :data:`HUB_ANSWER_TIMEOUT` passes (False). A probe that cannot connect yet counts as False."""
    from tornado.httpclient import AsyncHTTPClient

    http = AsyncHTTPClient(force_instance=True)
    deadline = asyncio.get_running_loop().time() + HUB_ANSWER_TIMEOUT
    pending = list(probes)
    try:
        while not hub_exited.done() and not stop.is_set() and asyncio.get_running_loop().time() < deadline:
            try:
                while pending and await pending[0](http):
                    pending.pop(0)
                if not pending:
                    return True
            except OSError:
                pass  # nobody listens yet
            await asyncio.wait([hub_exited, asyncio.create_task(stop.wait())], timeout=0.5)
        return False
    finally:
        http.close()


async def _stop_process_group(process: asyncio.subprocess.Process, timeout: float = 30) -> None:
    """SIGTERM ``process`` (the hub stops its servers and proxy); then SIGKILL what is left of its process group."""
    if process.returncode is None:
        with suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            pass
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the group keeps the leader's PID as its id
    await process.wait()


async def _stop_leftover_proxy(pid_file: Path, port: int, timeout: float = 10) -> None:
    """Stop the proxy a hub that died left running (JupyterHub starts it in a session of its own, with a PID file).

    Only a live process whose command line is ``configurable-http-proxy``
    on ``port`` is signalled (the PID may have been reused); SIGTERM, then SIGKILL.
    """
    try:
        pid = int(pid_file.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"configurable-http-proxy" not in command or f"\0--port\0{port}\0".encode() not in command:
        return
    log.warning("stopping the proxy (PID %d) the hub left running", pid)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + timeout
        while Path(f"/proc/{pid}").exists() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def main(argv=None) -> int:
    """Entry point of ``workspacespawner demo [--state-dir DIR] [--port N] [--proxy-api-port N] [--hub-port N]
    [--dashboard-port N] [--proxy auto|python] [--prometheus auto|off]``."""
    parser = argparse.ArgumentParser(prog="workspacespawner demo", description=summary(__doc__))
    parser.add_argument("--state-dir", default=".workspacespawner-demo", help="hub database, cluster state and home volumes (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="the public port on 127.0.0.1, 0 for a free one (default: %(default)s)")
    parser.add_argument("--proxy-api-port", type=int, default=8001, help="the proxy's API port, 0 for a free one (default: %(default)s)")
    parser.add_argument("--hub-port", type=int, default=8081, help="the hub's own port, 0 for a free one (default: %(default)s)")
    parser.add_argument("--dashboard-port", type=int, default=10101,
                        help="the Workspaces dashboard service's port, 0 for a free one (default: %(default)s)")
    parser.add_argument(
        "--proxy",
        choices=("auto", "python"),
        default="auto",
        help="auto: npm's configurable-http-proxy when npm is there (live progress; the only one VS Code works behind), "
        "else the Python one (default: %(default)s)",
    )
    parser.add_argument(
        "--prometheus",
        choices=("auto", "off"),
        default="auto",
        help="auto: run Debian's prometheus, when installed, for GPU metrics and disk fill on the dashboard; "
        "off: none (default: %(default)s)",
    )
    parser.add_argument(
        "--control-plane",
        choices=("local", "real"),
        default="local",
        help="local: the embedded cluster; real: Kubernetes' own servers built by tools/k8s/build.sh, with KubeVirt's "
        "and CDI's own controllers when tools/kubevirt/build.sh built them (default: %(default)s)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("tornado.access").addFilter(quiet_scrapes)
    ports = DemoPorts(public=args.port, proxy_api=args.proxy_api_port, hub=args.hub_port, dashboard=args.dashboard_port)
    try:
        return asyncio.run(run_demo(Path(args.state_dir).resolve(), ports, args.proxy, args.prometheus, args.control_plane))
    except DemoError as e:
        for line in str(e).splitlines():
            print(f"workspacespawner demo: {line}", file=sys.stderr)
        return 1
