"""The Workspaces dashboard's tornado app as a JupyterHub-managed service, and its run (:mod:`.command` parses the
command line and binds the address first).

The hub starts it (``c.JupyterHub.services``, see
``jupyterhub_config.d/50-workspaces-dashboard.py``) with
``JUPYTERHUB_SERVICE_PREFIX`` (``/services/workspaces/``),
``JUPYTERHUB_SERVICE_URL`` (where the proxy reaches it), ``JUPYTERHUB_API_URL``,
``JUPYTERHUB_API_TOKEN`` and the OAuth client's variables. ``-f`` names
the hub's own ``jupyterhub_config.py``: the dashboard reads its
``c.WorkspacesDashboard`` settings, the quota's ledger and the spawner's
namespace from it, as the admin commands do. Logs go to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer

from workspacespawner.admin import common
from workspacespawner.core.times import parse_time
from workspacespawner.dashboard import views
from workspacespawner.dashboard.command import CannotListen, bind
from workspacespawner.dashboard.context import DashboardContext, open_context
from workspacespawner.dashboard.reports import NO_DEPARTMENT
from workspacespawner.quota.policy import number

log = logging.getLogger("workspacespawner.dashboard")

HERE = Path(__file__).parent


def service_prefix() -> str:
    """The service's URL prefix from the hub (``JUPYTERHUB_SERVICE_PREFIX``), ending in ``/``."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/workspaces/")
    return prefix if prefix.endswith("/") else prefix + "/"


class OAuthCallback(HubOAuthCallbackHandler):
    """The hub's OAuth callback, on the application's one :class:`HubOAuth` (it keeps the OAuth states in memory)."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]


def _number(value) -> str:
    return number(round(float(value), 2))


def _moment(text: str) -> str:
    """``2026-12-04T10:59:41Z`` as ``2026-12-04 10:59 UTC``; anything else as it is."""
    moment = parse_time(text) if text else None
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else (text or "")


def templates() -> Environment:
    """The Jinja2 environment of ``templates/`` (autoescaped), with the filters ``number`` (``12.5``, ``50``) and
    ``moment`` (an RFC 3339 time for people), and ``NO_DEPARTMENT`` (the report's row of users in no department)."""
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape())
    env.filters.update(number=_number, moment=_moment)
    env.globals.update(NO_DEPARTMENT=NO_DEPARTMENT)
    return env


def make_app(ctx: DashboardContext, *, prefix: str | None = None, hub_auth: HubOAuth | None = None) -> web.Application:
    """The tornado Application: every view's routes under ``prefix``, the OAuth callback, ``static/``."""
    prefix = prefix or service_prefix()
    hub_auth = hub_auth or HubOAuth(cache_max_age=60)
    handlers = [(url_path_join(prefix, "oauth_callback"), OAuthCallback)]
    handlers += [(prefix + path, handler, {"ctx": ctx}) for path, handler in views.routes()]
    handlers.append((prefix.rstrip("/"), web.RedirectHandler, {"url": prefix}))
    hub_prefix = os.environ.get("JUPYTERHUB_BASE_URL", "/").rstrip("/") + "/hub/"
    return web.Application(
        handlers,
        hub_auth=hub_auth,
        service_prefix=prefix,
        hub_prefix=hub_prefix,
        cookie_secret=os.urandom(32),
        xsrf_cookies=True,
        static_path=str(HERE / "static"),
        static_url_prefix=url_path_join(prefix, "static/"),
        jinja_env=templates(),
    )


async def serve(config, *, kubeconfig: str | None = None, namespace: str | None = None, ip: str | None = None,
                port: int | None = None, sockets: list | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit code. It listens on ``sockets`` when the command bound
    them (:mod:`.command`), else at ``ip`` and ``port``, else at ``c.WorkspacesDashboard.ip`` and ``port`` (the hub's
    ``JUPYTERHUB_SERVICE_URL`` names where the proxy reaches the service, which may be a Kubernetes Service's name,
    not an address to bind)."""
    async with open_context(config, kubeconfig=kubeconfig, namespace=namespace) as ctx:
        app = make_app(ctx)
        ip, port = ip or ctx.settings.ip, port or ctx.settings.port
        server = HTTPServer(app)
        server.add_sockets(sockets or bind(ip, port))
        log.info("Workspaces dashboard on http://%s:%s%s (namespace %s)", ip, port, service_prefix(), ctx.namespace)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.stop()
    return 0


def run(args, sockets: list | None = None) -> int:
    """The command (:mod:`.command`) once its arguments are parsed and, when it could, its address bound."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s")
    try:
        config = common.load_config(args)
    except (FileNotFoundError, ValueError) as e:
        return common.fail(str(e))
    try:
        return common.run(serve(config, kubeconfig=common.kubeconfig_of(args), namespace=args.namespace, ip=args.ip,
                                port=args.port, sockets=sockets))
    except CannotListen as e:  # the address, bound only now
        return common.fail(str(e))
    finally:
        for sock in sockets or ():
            sock.close()
