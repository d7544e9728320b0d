"""The hub's REST API as the dashboard service calls it (tornado's AsyncHTTPClient, the service's own token).

The service's role needs ``list:users``, ``read:users``, ``list:groups``,
``read:groups``, ``read:servers`` and ``delete:servers`` (to stop a server;
the stop itself is :class:`~workspacespawner.quota.hubapi.HubApiStopper`'s,
the same call the quota enforcer makes).
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from jupyterhub.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from workspacespawner.quota.hubapi import HubApiStopper, SpawnPending

__all__ = ["HubApi", "HubApiError", "SpawnPending"]


class HubApiError(Exception):
    """The hub answered a call with an error: ``code`` (HTTP status) and its message."""

    def __init__(self, message: str, code: int = 500):
        super().__init__(message)
        self.code = code


class HubApi:
    """The hub's REST API at ``api_url`` (``.../hub/api``) with ``token``; defaults from the service's environment
    (``JUPYTERHUB_API_URL``, ``JUPYTERHUB_API_TOKEN``). ``timeout``: seconds per request."""

    def __init__(self, api_url: str | None = None, token: str | None = None, *, timeout: float = 30.0):
        self.api_url = api_url or os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.timeout = timeout
        self._stopper = HubApiStopper(self.api_url, self.token, timeout=timeout)

    async def _get(self, path: str):
        try:
            response = await AsyncHTTPClient().fetch(
                url_path_join(self.api_url, path), headers={"Authorization": f"token {self.token}"},
                request_timeout=self.timeout)
        except HTTPClientError as e:
            raise HubApiError(f"the hub answered GET {path} with {e.code}", e.code) from e
        return json.loads(response.body)

    async def users(self) -> list[dict]:
        """Every user's model (``name``, ``admin``, ``groups``, ``servers``: name -> server model)."""
        return await self._get("users?include_stopped_servers=1")

    async def user(self, name: str) -> dict | None:
        """``name``'s model with every server, stopped ones too (``servers``: name -> ``ready``, ``pending``,
        ``started``, ``last_activity``, ``url``, ``user_options``, ``state``...); None if no such user."""
        try:
            return await self._get(f"users/{quote(name, safe='')}?include_stopped_servers=1")
        except HubApiError as e:
            if e.code == 404:
                return None
            raise

    async def group_members(self) -> dict[str, frozenset[str]]:
        """JupyterHub group name -> its members' names."""
        return {g["name"]: frozenset(g.get("users") or ()) for g in await self._get("groups")}

    async def stop_server(self, user: str, server_name: str) -> bool:
        """Ask the hub to stop ``user``'s server ``server_name`` (``""``: default); True if asked, False if it was not
        running. Raises :class:`SpawnPending` while its start is pending, ``HTTPClientError`` for other refusals."""
        return await self._stopper(user, server_name)
