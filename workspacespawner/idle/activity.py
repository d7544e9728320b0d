"""What an idle-GPU pass reads: the hub's view of every server, GPU utilisation, the GPU servers the cluster holds.

One pass makes one paginated ``GET /hub/api/users?state=active`` (not one
request per user) and, with Prometheus, one query; the GPU servers come
from the hub's shared watch caches (no API request).

Activity sources, all arriving in JupyterHub's ``last_activity`` of the server:

- JupyterLab: jupyterhub-singleuser posts the server's newest kernel,
  terminal and API activity to ``POST /hub/api/users/{name}/activity``
  (every 5 minutes by default); the hub also takes the proxy's per-route
  activity. A VM guest runs jupyterhub-singleuser too, so its activity
  arrives the same way.
- code-server: its own heartbeat (``code-server`` 4.x, ``src/node/heart.ts``
  and ``src/node/routes/index.ts``) writes the empty file
  ``$XDG_DATA_HOME/code-server/heartbeat`` (``~/.local/share/code-server/heartbeat``)
  on an HTTP request or WebSocket upgrade (``/healthz`` excepted) at most
  once a minute, and again every minute for as long as its HTTP server has
  any connection open. An open browser tab keeps its WebSocket open, so
  the file keeps being touched with nobody at the keyboard: the heartbeat
  tells "a client is connected", not "someone is working". It stops within
  about a minute of the last tab closing. :mod:`.serverext` (a
  jupyter-server extension in the workspace image) reads the file's mtime
  and hands it to jupyterhub-singleuser's activity report, so it arrives
  in the same ``last_activity`` without the hub reaching into the Pod.
  jupyter-server-proxy also records every proxied WebSocket message and
  ping as activity. Hence an open code-server tab counts as activity in
  every source but one: GPU utilisation, which is why only a measured idle
  GPU makes such a server idle while a tab is open.
- With Prometheus: dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL`` per GPU, its
  highest value over the last ``gpu_idle_timeout``
  (``max_over_time``: under the threshold means under it for the whole
  window), joined to the workspace by Pod (a VM's virt-launcher Pod) with
  :func:`~workspacespawner.gpu.metrics.join_gpus`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from workspacespawner.core import names
from workspacespawner.core.prometheus import PrometheusClient
from workspacespawner.core.times import parse_time
from workspacespawner.gpu.capacity import units_held
from workspacespawner.gpu.metrics import UTIL, GPUStat, join_gpus, utilisation_over
from workspacespawner.idle.decision import GPUServer
from workspacespawner.idle.settings import IDLE_READING

#: Users asked for per page of the hub's user list.
PAGE = 200


@dataclass(frozen=True)
class HubServer:
    """A server as the hub's REST API shows it: ``last_activity`` and ``started`` (aware UTC or None), ``pending``
    (``spawn``, ``stop`` or None), ``profile`` (the ``profile`` of its ``user_options``, ``""`` when none)."""

    last_activity: datetime | None
    started: datetime | None
    pending: str | None
    profile: str


@dataclass(frozen=True)
class HubView:
    """The hub's users now: ``servers`` ``{(user, server): HubServer}`` and ``groups`` ``{user: frozenset}``."""

    servers: dict[tuple[str, str], HubServer]
    groups: dict[str, frozenset[str]]


def _time(text) -> datetime | None:
    try:
        return parse_time(text) if isinstance(text, str) else None
    except ValueError:
        return None


def hub_view(users: list[dict]) -> HubView:
    """The :class:`HubView` of the user models of ``GET /hub/api/users`` (JupyterHub's REST API user model).

    A server model without ``last_activity`` or ``started`` keeps None there.
    """
    servers: dict[tuple[str, str], HubServer] = {}
    groups: dict[str, frozenset[str]] = {}
    for user in users:
        name = user.get("name")
        if not isinstance(name, str):
            continue
        groups[name] = frozenset(g for g in user.get("groups") or [] if isinstance(g, str))
        for server, model in (user.get("servers") or {}).items():
            options = model.get("user_options") or {}
            profile = options.get("profile") if isinstance(options, dict) else None
            servers[(name, server)] = HubServer(
                last_activity=_time(model.get("last_activity")),
                started=_time(model.get("started")),
                pending=model.get("pending") or None,
                profile=profile if isinstance(profile, str) else "",
            )
    return HubView(servers, groups)


class HubUsers:
    """Reads every active user with their servers through the hub's REST API, page by page.

    ``api_url``: the hub's API (``http://hub:8081/hub/api``); ``token``: a
    service token with ``list:users``, ``read:users:groups``,
    ``read:users:activity`` and ``read:servers``. Mirrors ``GET
    /hub/api/users?state=active`` with JupyterHub's pagination
    (``Accept: application/jupyterhub-pagination+json``, JupyterHub 2.0+).
    Raises ``tornado.httpclient.HTTPClientError`` or ``OSError`` when the hub
    does not answer.
    """

    def __init__(self, api_url: str, token: str, *, timeout: float = 30.0):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    async def __call__(self) -> HubView:
        users: list[dict] = []
        offset = 0
        while True:
            request = HTTPRequest(
                f"{self.api_url}/users?state=active&limit={PAGE}&offset={offset}",
                headers={"Authorization": f"token {self.token}",
                         "Accept": "application/jupyterhub-pagination+json"},
                request_timeout=self.timeout,
            )
            body = json.loads((await AsyncHTTPClient().fetch(request)).body)
            if isinstance(body, list):  # a hub without pagination answers the whole list
                users += body
                break
            users += body.get("items") or []
            following = (body.get("_pagination") or {}).get("next")
            if not following:
                break
            offset = following.get("offset", offset + PAGE)
        return hub_view(users)

    def user_url(self, user: str) -> str:
        return f"{self.api_url}/users/{quote(user, safe='')}"


def gpu_servers_held(objects: list[dict], declared=()) -> dict[tuple[str, str], int]:
    """``{(user, server): GPU units}`` of the workspaces (Pods and VMIs as the watch caches hold them, ``kind`` set)
    that hold GPUs; ``declared``: the site's VM device names (``GPUEconomy.declared()``).

    Owner by :func:`~workspacespawner.core.names.server_of`; units of every
    GPU resource added up (:func:`~workspacespawner.gpu.capacity.units_held`).
    """
    held: dict[tuple[str, str], int] = {}
    for obj in objects:
        owner = names.server_of(obj.get("metadata") or {})
        units = sum(units_held(obj, declared).values()) if owner is not None else 0
        if units > 0:
            held[owner] = held.get(owner, 0) + units
    return held


def utilisation_by_server(gpus: list[GPUStat]) -> dict[tuple[str, str], float]:
    """``{(user, server): percent}``: the highest of each workspace's GPUs' readings in ``gpus`` (:func:`read_idle_readings`)."""
    found: dict[tuple[str, str], float] = {}
    for gpu in gpus:
        if gpu.holder is None or gpu.util is None:
            continue
        key = (gpu.holder.user, gpu.holder.server)
        found[key] = max(found.get(key, 0.0), gpu.util)
    return found


async def read_idle_readings(prometheus: PrometheusClient, pods: list[dict], vmis: list[dict], *,
                             window_seconds: float) -> list[GPUStat]:
    """Each GPU's reading for "idle" (:data:`~workspacespawner.idle.settings.IDLE_READING` of
    ``DCGM_FI_DEV_GPU_UTIL`` over the window; for a MIG slice, which has no ``DCGM_FI_DEV_GPU_UTIL``, its
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100: :func:`~workspacespawner.gpu.metrics.utilisation_over`),
    joined to ``pods``/``vmis`` (the watch caches', virt-launcher Pods included); one query. The idle-GPU pass
    and the dashboard's Cluster view both judge from it (:func:`~workspacespawner.idle.settings.gpu_is_idle`).

    Raises :class:`~workspacespawner.core.prometheus.PrometheusError`.
    """
    samples = await prometheus.query(utilisation_over(IDLE_READING, max(1, int(window_seconds))))
    return join_gpus({UTIL: samples}, pods, vmis)


async def read_utilisation(prometheus: PrometheusClient, pods: list[dict], vmis: list[dict], *,
                           window_seconds: float) -> dict[tuple[str, str], float]:
    """:func:`utilisation_by_server` of :func:`read_idle_readings`. Raises PrometheusError."""
    return utilisation_by_server(await read_idle_readings(prometheus, pods, vmis, window_seconds=window_seconds))


def gpu_servers(held: dict[tuple[str, str], int], hub: HubView, utilisation: dict[tuple[str, str], float] | None,
                display: dict[str, str] | None = None) -> list[GPUServer]:
    """The :class:`~workspacespawner.idle.decision.GPUServer` of each server both the cluster holds GPUs for
    (``held``) and the hub runs (``hub``); ``utilisation`` None: not read. ``display``: profile slug -> name."""
    found = []
    for key, units in sorted(held.items()):
        model = hub.servers.get(key)
        if model is None:
            continue  # not (or no longer) a server of the hub: the quota reconciliation handles stray compute
        found.append(GPUServer(
            user=key[0], server=key[1], profile=model.profile,
            display=(display or {}).get(model.profile, model.profile),
            groups=hub.groups.get(key[0], frozenset()), gpus=units, started=model.started,
            last_activity=model.last_activity,
            gpu_util=None if utilisation is None else utilisation.get(key), pending=model.pending,
        ))
    return found
