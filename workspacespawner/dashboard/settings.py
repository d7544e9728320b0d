"""The dashboard's settings, ``c.WorkspacesDashboard.*`` in the hub's ``jupyterhub_config.py``."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

from traitlets import Dict, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from workspacespawner.config.teampools import TeamGPUPools, pool_of_node
from workspacespawner.config.traittypes import warn_once
from workspacespawner.idle.settings import GPUIdle

log = logging.getLogger("workspacespawner.dashboard")

#: What a JupyterHub service name may be: it becomes a URL segment and an OAuth client id.
_SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

#: A Kubernetes label key: an optional DNS-subdomain prefix and ``/``, then a name of up to 63 characters.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class WorkspacesDashboard(Configurable):
    """Settings of the Workspaces dashboard service; read from the hub's config file (:func:`dashboard_settings`).

    What an idle GPU is and which Prometheus to ask are the hub's idle-GPU
    settings (:meth:`gpu_idle`), and a node's team pool is
    ``c.TeamGPUPools.pools``'s (:meth:`pool_of`): the dashboard shows what
    the hub acts on.
    """

    _gpu_idle: GPUIdle | None = None

    service_name = Unicode(
        "workspaces",
        help="""The JupyterHub service's name: its pages are at /services/<name>/ and its custom scopes
        read custom:<name>:... (lower-case letters, digits, '.', '_', '-'). Example: "workspaces".""",
    ).tag(config=True)

    team_groups = List(
        Unicode(),
        help="""JupyterHub groups that are teams: a member of one sees the workspaces of every member of
        that group and the Cluster view. Empty: no teams (users see their own; admins all).
        Example: ["research", "vision-lab"].""",
    ).tag(config=True)

    prometheus_url = Unicode(
        None,
        allow_none=True,
        help="""Deprecated: use c.GPUIdle.prometheus_url, the one Prometheus of the dashboard and the idle-GPU
        pass (this value applies there when that is not set, with a warning).""",
    ).tag(config=True)

    departments = Dict(
        value_trait=List(Unicode()),
        help="""Department name -> the JupyterHub groups that make it up, for the Reports view. Empty: no
        departments (reports by group and user). Example: {"Physics": ["students-phys", "research"]}.""",
    ).tag(config=True)

    ip = Unicode(
        "127.0.0.1",
        help="""The address the service listens on. Example: "0.0.0.0" in the hub's Pod, where the proxy's
        Pod reaches it through the hub's Kubernetes Service.""",
    ).tag(config=True)

    port = Integer(
        10101,
        help="""The TCP port the service listens on (1-65535). Example: 10101.""",
    ).tag(config=True)

    url = Unicode(
        None,
        allow_none=True,
        help="""Where the proxy reaches the service (the JupyterHub service's url). None: http://<ip>:<port>.
        Example: "http://hub:10101" (z2jh: the hub's Service, with the port added to hub.service.extraPorts).""",
    ).tag(config=True)

    gpu_pool_label = Unicode(
        None,
        allow_none=True,
        help="""Deprecated: the Cluster view groups nodes by the team pools of c.TeamGPUPools.pools, as the
        spawner places workspaces. Only without any pool there, the node label whose value names a node's
        pool (with a warning). None: none.""",
    ).tag(config=True)

    idle_gpu_threshold = Float(
        5.0,
        help="""Deprecated: use c.GPUIdle.utilisation_threshold, the one definition of an idle GPU (this value
        applies there when that is not set, with a warning). A percentage, 0-100.""",
    ).tag(config=True)

    idle_gpu_window = Integer(
        3600,
        help="""Deprecated: use c.GPUIdle.gpu_idle_timeout, the window of the one definition of an idle GPU
        (this value applies there when that is not set, with a warning). Seconds, at least 60.""",
    ).tag(config=True)

    prometheus_timeout = Float(
        10.0,
        help="""Seconds (more than 0, at most 300) the dashboard waits for one Prometheus query before showing
        the page without its readings. Example: 10.""",
    ).tag(config=True)

    @validate("gpu_pool_label")
    def _check_gpu_pool_label(self, proposal):
        value = proposal["value"]
        if value is not None and (len(value) > 317 or not _LABEL_KEY.match(value)):
            raise TraitError(f"WorkspacesDashboard.gpu_pool_label must be a Kubernetes label key or None, not {value!r}")
        return value

    @validate("idle_gpu_threshold")
    def _check_idle_gpu_threshold(self, proposal):
        value = proposal["value"]
        if not 0 <= value <= 100:
            raise TraitError(f"WorkspacesDashboard.idle_gpu_threshold must be a percentage 0-100, not {value!r}")
        return value

    @validate("idle_gpu_window")
    def _check_idle_gpu_window(self, proposal):
        value = proposal["value"]
        if value < 60:
            raise TraitError(f"WorkspacesDashboard.idle_gpu_window must be at least 60 seconds, not {value!r}")
        return value

    @validate("prometheus_timeout")
    def _check_prometheus_timeout(self, proposal):
        value = proposal["value"]
        if not 0 < value <= 300:
            raise TraitError(f"WorkspacesDashboard.prometheus_timeout must be more than 0 and at most 300 seconds, "
                             f"not {value!r}")
        return value

    @validate("url")
    def _check_url(self, proposal):
        value = proposal["value"]
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise TraitError(f"WorkspacesDashboard.url must be an http(s) URL or None, not {value!r}")
        return value

    def gpu_idle(self) -> GPUIdle:
        """The hub's idle-GPU settings (``c.GPUIdle``) from the same config: the one definition of an idle GPU
        (its threshold and window) and the one Prometheus URL, shared with the hub's idle-GPU pass."""
        if self._gpu_idle is None:
            self._gpu_idle = GPUIdle(config=self.config)
        return self._gpu_idle

    def prometheus(self) -> str | None:
        """The Prometheus URL to ask (``c.GPUIdle.prometheus_url``), or None."""
        return self.gpu_idle().prometheus()

    def pool_of(self) -> Callable[[dict], str | None] | None:
        """A node's team pool as the spawner places workspaces (``c.TeamGPUPools.pools``,
        :func:`~workspacespawner.config.teampools.pool_of_node`); without pools, the deprecated
        :attr:`gpu_pool_label`'s value; None: no pools."""
        pools = TeamGPUPools(config=self.config).all()
        if pools:
            return lambda node: pool_of_node(node, pools)
        if self.gpu_pool_label:
            warn_once(log, "WorkspacesDashboard.gpu_pool_label is deprecated; use c.TeamGPUPools.pools (the Cluster "
                           "view then groups nodes by the team pools the spawner places workspaces on)")
            label = self.gpu_pool_label
            return lambda node: ((node.get("metadata") or {}).get("labels") or {}).get(label)
        return None

    def service_url(self) -> str:
        """Where the proxy reaches the service: :attr:`url`, else ``http://<ip>:<port>``."""
        return self.url or f"http://{self.ip}:{self.port}"

    @validate("service_name")
    def _check_service_name(self, proposal):
        value = proposal["value"]
        if not _SERVICE_NAME.match(value or ""):
            raise TraitError(f"WorkspacesDashboard.service_name must be a lower-case name such as 'workspaces', not {value!r}")
        return value

    @validate("team_groups")
    def _check_team_groups(self, proposal):
        value = list(proposal["value"])
        bad = [g for g in value if not g.strip()]
        if bad:
            raise TraitError(f"WorkspacesDashboard.team_groups must list JupyterHub group names, not {value!r}")
        return value

    @validate("prometheus_url")
    def _check_prometheus_url(self, proposal):
        value = proposal["value"]
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise TraitError(f"WorkspacesDashboard.prometheus_url must be an http(s) URL or None, not {value!r}")
        return value.rstrip("/") if value else value

    @validate("port")
    def _check_port(self, proposal):
        value = proposal["value"]
        if not 0 < value < 65536:
            raise TraitError(f"WorkspacesDashboard.port must be a TCP port 1-65535, not {value!r}")
        return value

    @validate("departments")
    def _check_departments(self, proposal):
        value = proposal["value"]
        for name, groups in value.items():
            if not str(name).strip() or not all(isinstance(g, str) and g.strip() for g in groups):
                raise TraitError(
                    f"WorkspacesDashboard.departments must map a department name to JupyterHub group names, "
                    f"not {name!r}: {groups!r}")
        return value

    def scope(self, what: str) -> str:
        """The custom scope ``custom:<service_name>:<what>`` (``what``: read, act, cluster, reports)."""
        return f"custom:{self.service_name}:{what}"


def dashboard_settings(config) -> WorkspacesDashboard:
    """The ``WorkspacesDashboard`` section of the hub's ``config`` (a traitlets ``Config``), checked.

    Raises ``TraitError`` naming the setting and the bad value.
    """
    return WorkspacesDashboard(config=config)


# -- what the hub's config gets (jupyterhub_config.d/50-workspaces-dashboard.py, helm-values) ---------------------

#: The custom scopes (after ``custom:<service_name>:``) and what each lets a holder do.
SCOPES = {
    "read": "Read workspaces, disks and card-hours on the Workspaces dashboard (filter !user= or !group=).",
    "act": "Stop, snapshot, expand, restore and give back disks of workspaces on the Workspaces dashboard.",
    "cluster": "See the Cluster view of the Workspaces dashboard (nodes, GPUs, who holds them).",
    "reports": "See the Reports view of the Workspaces dashboard (card-hours and disk per department, group, user).",
}

#: The hub API scopes the service's own token needs: users and groups to list, servers to stop.
SERVICE_SCOPES = ["list:users", "read:users", "list:groups", "read:groups", "read:servers", "delete:servers"]


#: The hub's environment variables the service needs too (the hub passes few of its own to a service).
PASSED_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HOME")


def custom_scopes(settings: WorkspacesDashboard) -> dict:
    """``c.JupyterHub.custom_scopes`` entries: scope -> ``{"description": ...}``."""
    return {settings.scope(what): {"description": text} for what, text in SCOPES.items()}


def oauth_scopes(settings: WorkspacesDashboard) -> list[str]:
    """The service's ``oauth_client_allowed_scopes``: its custom scopes and the user's own model (its admin flag)."""
    return [settings.scope(what) for what in SCOPES] + ["read:users:name!user", "read:users:groups!user", "read:users!user"]


def user_scopes(settings: WorkspacesDashboard) -> list[str]:
    """``c.JupyterHub.extra_user_scopes`` for every user: reach the service, read and act on their own."""
    return [f"access:services!service={settings.service_name}", settings.scope("read") + "!user",
            settings.scope("act") + "!user"]


def roles(settings: WorkspacesDashboard) -> list[dict]:
    """``c.JupyterHub.load_roles`` entries: the service's own role, one per team group (read the team, the
    Cluster view), and one for admins to list under ``users``/``groups`` if hub admins are not enough."""
    name = settings.service_name
    found = [{"name": f"{name}-service", "description": "The Workspaces dashboard service's hub API access.",
              "scopes": list(SERVICE_SCOPES), "services": [name]}]
    for group in settings.team_groups:
        found.append({
            "name": f"{name}-team-{group}",
            "description": f"Members of {group} see their team's workspaces and the Cluster view.",
            "scopes": [f"{settings.scope('read')}!group={group}", settings.scope("cluster")],
            "groups": [group],
        })
    return found


def service(settings: WorkspacesDashboard, *, python: str, hub_config: str | None, cwd: str) -> dict:
    """The ``c.JupyterHub.services`` entry: the hub runs ``python -m workspacespawner dashboard -f hub_config --ip IP
    --port PORT`` in ``cwd`` (the hub's, so a relative ledger URL means the same file), reached at
    :meth:`WorkspacesDashboard.service_url`. The address on the command line is bound before the config loads
    (:mod:`.command`)."""
    command = [python, "-m", "workspacespawner", "dashboard"] + (["-f", hub_config] if hub_config else [])
    command += ["--ip", settings.ip, "--port", str(settings.port)]
    return {
        "name": settings.service_name,
        "url": settings.service_url(),
        "command": command,
        "cwd": cwd,
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": oauth_scopes(settings),
        "environment": {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith("WORKSPACESPAWNER_")},
        "display": True,
        "info": {"description": "Your workspaces, card-hours and disks; the cluster's GPUs for team leads."},
    }


def running_hub_config_file() -> str | None:
    """The config file of the JupyterHub being configured (absolute), which the service reads with ``-f``; None
    outside a hub (a test or the service itself loading the config)."""
    try:
        from jupyterhub.app import JupyterHub

        if JupyterHub.initialized():
            return os.path.abspath(JupyterHub.instance().config_file)
    except ImportError:
        pass
    return None


def grant_every_user(c, scopes: list[str]) -> None:
    """Give every user of the hub ``scopes``: ``c.JupyterHub.extra_user_scopes`` on JupyterHub 6 and newer; before it
    (5.x, which the zero-to-jupyterhub chart 4 runs) by adding them to the default ``user`` role in
    ``c.JupyterHub.load_roles`` (its scopes, ``self`` by default, are kept; an entry already there is extended)."""
    from jupyterhub.app import JupyterHub

    if "extra_user_scopes" in JupyterHub.class_trait_names():
        c.JupyterHub.extra_user_scopes.update(scopes)  # a Set: update, not extend
        return
    roles_now = c.JupyterHub.load_roles
    for role in roles_now if isinstance(roles_now, list) else ():
        if role.get("name") == "user":
            role["scopes"] = list(dict.fromkeys([*role.get("scopes", ["self"]), *scopes]))
            return
    roles_now.append({"name": "user", "scopes": ["self", *scopes]})


def configure_hub(c) -> WorkspacesDashboard:
    """Add the dashboard to the hub's config ``c``: the managed service, its custom scopes, every user's own scopes,
    the service's and the team groups' roles, all from ``c.WorkspacesDashboard`` (checked; raises ``TraitError``).

    Call it in the file that sets ``c.WorkspacesDashboard``: a file loaded with ``load_subconfig`` starts from an
    empty ``c`` (traitlets merges it afterwards), so it sees only its own settings. Returns the settings used.
    """
    import sys

    settings = dashboard_settings(c)
    c.JupyterHub.services.append(service(settings, python=sys.executable, hub_config=running_hub_config_file(),
                                         cwd=os.getcwd()))
    c.JupyterHub.custom_scopes.update(custom_scopes(settings))
    grant_every_user(c, user_scopes(settings))
    c.JupyterHub.load_roles.extend(roles(settings))
    return settings
