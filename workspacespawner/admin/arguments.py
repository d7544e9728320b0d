"""The arguments every admin command shares, in a module that imports nothing slow (the dashboard's command parses
them before it binds its port: :mod:`workspacespawner.dashboard.command`)."""

from __future__ import annotations

import argparse


def add_common_arguments(parser: argparse.ArgumentParser, *, cluster: bool = True, actor: bool = True) -> None:
    """``-f/--config`` and, with ``cluster``, ``--kubeconfig`` and ``--namespace``; with ``actor``, ``--actor``."""
    parser.add_argument("-f", "--config", help="the hub's jupyterhub_config.py (default: ./jupyterhub_config.py if there)")
    if cluster:
        parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
        parser.add_argument("--namespace", help="namespace of the workspaces (default: c.KubeSpawner.namespace)")
    if actor:
        parser.add_argument("--actor", help="your name for the audit trail (default: your login name)")
