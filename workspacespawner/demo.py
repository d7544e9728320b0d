"""``workspacespawner demo``: the local cluster and a JupyterHub using WorkspaceSpawner, on loopback.

Starts the embedded Kubernetes API server with its controllers (PVC binder,
scheduler with a CPU node and an 8-GPU node, node agent that runs each Pod's
``jupyterhub-singleuser`` as a local process), then runs ``jupyterhub`` with
the sample config pieces from ``jupyterhub_config.d/`` plus demo settings: a
login that accepts any user name, reachable only on 127.0.0.1, the hub at
http://127.0.0.1:8000. The cluster also holds a golden image
(``golden-images/ubuntu-22.04-gpu``) for the VM profiles: their guests run
from cloud-init on the same node agent. Ctrl-C stops the hub, every server
and the cluster.

Everything lives in the state directory (``--state-dir``), so a second run
picks up where the first stopped: the hub's database, and the cluster's
objects, saved in ``cluster/objects.json`` while it runs and when it stops
and loaded when it starts again. Each user's home volume (PVC, PV and its
directory under ``cluster/volumes``), VM root disks and VirtualMachines come
back as they were, and the golden image is reused. Running servers do not:
their Pods and VMIs are gone, as after a node restart, and users start them
again. Delete the state directory to start from scratch.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
import sysconfig
from pathlib import Path

from workspacespawner.localcluster import LocalCluster
from workspacespawner.localcluster.goldenimage import make_golden_image

log = logging.getLogger("workspacespawner.demo")

#: (namespace, name) of the demo's golden-image DataSource, the default of ``vm_golden_image``.
GOLDEN_IMAGE = ("golden-images", "ubuntu-22.04-gpu")
#: What the demo's golden image holds: enough of a root filesystem to recognise.
GOLDEN_FILES = {
    "etc/os-release": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04 (workspacespawner demo image)"\n',
    "etc/hostname": "workspace\n",
}

#: Config pieces the demo loads, in order (the school-OAuth piece is for real deployments).
DEMO_PIECES = ("10-workspace-spawner.py", "20-profiles.py", "40-quota.py", "90-check-config.py")


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


async def npm_proxy(state_dir: Path) -> list[str] | None:
    """The npm ``configurable-http-proxy`` command, installed under ``state_dir/proxy`` on first use; None without npm.

    JupyterHub's reference proxy streams the spawn page's progress events as
    they happen; the Python port that the ``demo`` extra installs delivers
    them in one burst when the server is ready, so the demo prefers npm's.
    """
    prefix = state_dir / "proxy"
    command = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if command.exists():
        return [str(command)]
    npm = shutil.which("npm")
    if npm is None:
        return None
    print("Installing configurable-http-proxy from npm (once) ...", flush=True)
    installer = await asyncio.create_subprocess_exec(
        npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), "configurable-http-proxy@4",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await installer.communicate()
    if installer.returncode != 0 or not command.exists():
        log.warning("npm install of configurable-http-proxy failed (%s); using the Python proxy", err.decode()[-300:])
        return None
    return [str(command)]


def demo_config(state_dir: Path, pieces_dir: Path, port: int, proxy_command: list[str] | None = None) -> str:
    """The text of the demo's ``jupyterhub_config.py`` (loads the sample pieces, then demo settings).

    ``proxy_command`` replaces JupyterHub's ``configurable-http-proxy`` command when given.
    """
    loads = "\n".join(f"load_subconfig({str(pieces_dir / piece)!r})" for piece in DEMO_PIECES)
    proxy = f"c.ConfigurableHTTPProxy.command = {proxy_command!r}\n" if proxy_command else ""
    return f"""# Written by `workspacespawner demo`; edit jupyterhub_config.d/ instead.
{loads}

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.db_url = "sqlite:///{state_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(state_dir / 'jupyterhub_cookie_secret')!r}
c.ConfigurableHTTPProxy.pid_file = {str(state_dir / 'proxy.pid')!r}
# Demo login: any user name, no password, loopback only. Never use this on a real hub.
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.load_groups = {{"research": {{"users": ["researcher"]}}}}
c.KubeSpawner.namespace = "default"
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 60
{proxy}"""


async def run_demo(state_dir: Path, port: int, proxy: str = "auto") -> int:
    """Run cluster and hub until the hub exits or the process gets SIGINT/SIGTERM; returns the hub's exit code."""
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(state_dir / "cluster", port=0, persist=True)
    await cluster.start()
    await make_golden_image(cluster, GOLDEN_IMAGE[0], GOLDEN_IMAGE[1], GOLDEN_FILES)
    config_file = state_dir / "jupyterhub_config.py"
    proxy_command = await npm_proxy(state_dir) if proxy == "auto" else None
    config_file.write_text(demo_config(state_dir, config_dir(), port, proxy_command))
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    hub = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jupyterhub", "-f", str(config_file), cwd=str(state_dir), env=env
    )
    print(f"\nworkspacespawner demo: JupyterHub at http://127.0.0.1:{port} (any user name logs in)")
    print(f"local cluster: export KUBECONFIG={cluster.kubeconfig}\n", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(hub.wait())
    await asyncio.wait([waiter, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if hub.returncode is None:
        hub.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(waiter, 30)
        except TimeoutError:
            hub.kill()
            await waiter
    await cluster.stop()
    return hub.returncode or 0


def main(argv=None) -> int:
    """Entry point of ``workspacespawner demo [--state-dir DIR] [--port N]``."""
    parser = argparse.ArgumentParser(prog="workspacespawner demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", default=".workspacespawner-demo", help="hub database, cluster state and home volumes (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="JupyterHub's port on 127.0.0.1 (default: %(default)s)")
    parser.add_argument(
        "--proxy",
        choices=("auto", "python"),
        default="auto",
        help="auto: npm's configurable-http-proxy when npm is there (live progress), else the Python one (default: %(default)s)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(run_demo(Path(args.state_dir).resolve(), args.port, args.proxy))
