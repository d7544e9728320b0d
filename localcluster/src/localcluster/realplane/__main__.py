"""``python -m localcluster.realplane --state DIR``: run the
real control plane, with our agents as its API clients (see :mod:`.agents`),
in the foreground until Ctrl-C or SIGTERM. With ``--kubevirt-bin`` (default
``$WORKSPACESPAWNER_KUBEVIRT_BIN``, else the newest tools/kubevirt/build.sh
build), KubeVirt's own virt-api and virt-controller and CDI's own
cdi-apiserver and cdi-controller run in place of our imitations
(:mod:`.kubevirt`, :mod:`.cdicontroller`, :mod:`.virthandler`)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .agents import RealCluster
from .plane import DEFAULT_SERVICE_CIDR, find_kubevirt_bin


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bin",
        dest="bin_dir",
        help="folder of etcd, kube-apiserver, kube-controller-manager, kube-scheduler "
        "(default: $WORKSPACESPAWNER_K8S_BIN, else the newest tools/k8s/build.sh build in the cache)",
    )
    parser.add_argument(
        "--kubevirt-bin",
        help="folder of KubeVirt's and CDI's binaries (tools/kubevirt/build.sh), run in place of our imitations "
        "(default: $WORKSPACESPAWNER_KUBEVIRT_BIN, else the newest build in the cache, else none)",
    )
    parser.add_argument(
        "--service-cidr", default=DEFAULT_SERVICE_CIDR, help="--service-cluster-ip-range (default: %(default)s)"
    )


def serve(state_dir, bin_dir=None, service_cidr=DEFAULT_SERVICE_CIDR, kubeconfig_copy=None, kubevirt_bin=None) -> int:
    """Start the plane and the agents, print the kubeconfig, wait for SIGINT/SIGTERM, stop. ``kubevirt_bin``
    (default :func:`.plane.find_kubevirt_bin`): run KubeVirt's and CDI's own components."""
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    found = kubevirt_bin or find_kubevirt_bin()
    kubevirt_bin = str(found) if found else None
    cluster = RealCluster(state_dir, bin_dir, service_cidr=service_cidr, kubevirt_bin=kubevirt_bin)
    plane = cluster.plane
    try:
        cluster.start()
        kubeconfig = plane.kubeconfig
        if kubeconfig_copy:
            import shutil

            kubeconfig = shutil.copy(plane.kubeconfig, kubeconfig_copy)
        print(f"real control plane at {plane.url}")
        print(f"kubeconfig: {kubeconfig}")
        print(f"export KUBECONFIG={kubeconfig}", flush=True)
        stop.wait()
    finally:
        print("stopping real control plane", file=sys.stderr)
        cluster.stop()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.realplane", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--state", required=True, help="state folder (pki, etcd data, logs, kubeconfig)")
    parser.add_argument("--kubeconfig", help="also copy the admin kubeconfig here")
    add_arguments(parser)
    parser.add_argument("--log-level", default="INFO", type=str.upper)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve(args.state, args.bin_dir, args.service_cidr, args.kubeconfig, args.kubevirt_bin)


if __name__ == "__main__":
    sys.exit(main())
