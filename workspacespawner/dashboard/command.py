"""``workspacespawner dashboard [-f jupyterhub_config.py] [--ip A --port N] [--kubeconfig F] [--namespace NS]``.

The command binds its address before anything slow when the command line names it (the hub's command does:
:func:`.settings.service` passes ``--ip`` and ``--port``). JupyterHub waits only so long for a managed service to
answer (5.5: ten one-second tries; 6: the service's ``timeout``, 30 s) and exits with "Cannot connect to workspaces
service managed" after that. The service's imports, the hub's config and its caches' first lists took longer than
ten seconds on a busy machine. With the socket bound, the hub's request waits in its queue until the app serves it,
and a start that fails closes it. This module imports only what binding needs; :mod:`.app` is imported afterwards.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from workspacespawner.admin.arguments import add_common_arguments


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workspacespawner dashboard",
                                description="The Workspaces dashboard, a JupyterHub service the hub starts.")
    add_common_arguments(p, actor=False)
    p.add_argument("--ip", help="listen on this address (default: c.WorkspacesDashboard.ip)")
    p.add_argument("--port", type=int, help="listen on this port (default: c.WorkspacesDashboard.port)")
    return p


class CannotListen(Exception):
    """The address could not be bound (taken, or not this machine's); the message names it."""


def bind(ip: str, port: int) -> list:
    """Listening sockets at ``ip:port``, as tornado's ``listen`` binds them; :class:`CannotListen` if it cannot."""
    from tornado.netutil import bind_sockets

    try:
        return bind_sockets(port, ip)
    except OSError as e:
        raise CannotListen(f"cannot listen on {ip}:{port}: {e.strerror or e}") from None


def die_with_the_hub() -> None:
    """Ask Linux to send this process SIGTERM when its parent (the hub that started it) dies, so a hub that was
    killed leaves no service behind (JupyterHub starts services in their own session). Elsewhere: nothing."""
    if not sys.platform.startswith("linux") or "JUPYTERHUB_SERVICE_NAME" not in os.environ:
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the hub died before the call
        raise SystemExit(0)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    die_with_the_hub()
    try:
        sockets = bind(args.ip, args.port) if args.ip and args.port else None
    except CannotListen as e:
        print(f"workspacespawner: {e}", file=sys.stderr)
        return 1
    from workspacespawner.dashboard import app

    return app.run(args, sockets)
