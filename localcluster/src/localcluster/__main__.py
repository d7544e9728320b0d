"""``workspacespawner localcluster``: run the local Kubernetes cluster in the foreground.

Prints the kubeconfig path and an ``export KUBECONFIG=...`` line, then serves
until Ctrl-C (SIGINT) or SIGTERM, which stop the controllers (and the
processes the node agent started) and the API server cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .cluster import LocalCluster
from .controllers.scheduler import demo_nodes


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="workspacespawner localcluster",
        description="Run a local Kubernetes API server with the controllers of a small GPU cluster.",
    )
    parser.add_argument(
        "--state-dir",
        default=str(Path.home() / ".local/share/workspacespawner/localcluster"),
        help="where the kubeconfig, volume directories and process logs live (default: %(default)s)",
    )
    parser.add_argument("--kubeconfig", help="also write the kubeconfig here (default: STATE_DIR/kubeconfig)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 to listen on (default: a free port)")
    parser.add_argument(
        "--volume-binding-mode",
        choices=("Immediate", "WaitForFirstConsumer"),
        default="Immediate",
        help="volumeBindingMode of the default StorageClass (default: %(default)s)",
    )
    parser.add_argument(
        "--control-plane",
        choices=("local", "real"),
        default="local",
        help="local: the Python API server and controllers; real: etcd, kube-apiserver, "
        "kube-controller-manager and kube-scheduler built by tools/k8s/build.sh, with our node agent, "
        "provisioner, CDI and KubeVirt controllers as its API clients (default: %(default)s)",
    )
    parser.add_argument(
        "--cpu-nodes",
        type=int,
        default=1,
        help="how many CPU nodes (16 cores, 64Gi, 110 Pods each) beside the 8-GPU node; local control plane "
        "only (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level (default: %(default)s)",
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    """Start the cluster, announce its kubeconfig, and wait for SIGINT or SIGTERM."""
    cluster = LocalCluster(
        args.state_dir,
        port=args.port,
        volume_binding_mode=args.volume_binding_mode,
        nodes=demo_nodes(args.cpu_nodes),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await cluster.start()
        kubeconfig = cluster.kubeconfig
        if args.kubeconfig:
            from .kubeconfig import write_kubeconfig

            kubeconfig = write_kubeconfig(args.kubeconfig, cluster.url)
        print(f"local cluster at {cluster.url}")
        print(f"kubeconfig: {kubeconfig}")
        print(f"export KUBECONFIG={kubeconfig}", flush=True)
        await stop.wait()
    finally:
        print("stopping local cluster", file=sys.stderr)
        await cluster.stop()


def main(argv=None) -> int:
    """Entry point of ``workspacespawner localcluster`` and ``python -m localcluster``."""
    args = parse_args(argv)
    if args.cpu_nodes < 1:
        raise SystemExit(f"workspacespawner localcluster: --cpu-nodes must be at least 1, not {args.cpu_nodes}")
    if args.control_plane == "real" and args.cpu_nodes != 1:
        raise SystemExit("workspacespawner localcluster: --cpu-nodes is for the local control plane only")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.control_plane == "real":
        from .realplane.__main__ import serve

        # its own subfolder: the real plane keeps pki/, etcd/ and its own kubeconfig
        return serve(Path(args.state_dir) / "real", kubeconfig_copy=args.kubeconfig)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
