"""Stopping a user's server through the hub's own REST API, as an admin or the idle culler would.

Why the REST API and not the hub's objects: ``DELETE
/hub/api/users/{name}/server`` (``/servers/{server}`` for a named one) is
the one way to stop a server that is public and the same in JupyterHub 5.5
and 6.x, and it does the whole stop: proxy route removed, spawner stopped,
state saved, events and metrics. The in-process ``User.stop()`` skips the
proxy and the handler's bookkeeping. The token needs the ``delete:servers``
and ``read:servers`` scopes.

A server whose spawn is still pending is not stopped (JupyterHub would
interrupt the spawn and answer the user's start with a 500):
:class:`SpawnPending` is raised instead, and the enforcer asks again at its
next pass, once the spawn is done. The server is metered meanwhile.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from jupyterhub.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError


class SpawnPending(Exception):
    """The server's spawn is still pending; ask again later."""


class HubApiStopper:
    """``await stopper(user, server_name)`` stops that server; a server already stopped is fine."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 30.0):
        self.api_url = api_url
        self.token = token
        self.timeout = timeout

    def url(self, user: str, server_name: str) -> str:
        """The REST URL of ``user``'s server ``server_name`` (``""``: the default server)."""
        base = url_path_join(self.api_url, "users", quote(user, safe=""))
        return (
            url_path_join(base, "servers", quote(server_name, safe=""))
            if server_name
            else url_path_join(base, "server")
        )

    async def _pending(self, user: str, server_name: str) -> str | None:
        """The server's ``pending`` action (``spawn``, ``stop``...) from ``GET /users/{name}``; None when none or unknown."""
        try:
            response = await AsyncHTTPClient().fetch(
                url_path_join(self.api_url, "users", quote(user, safe="")),
                headers={"Authorization": f"token {self.token}"},
                request_timeout=self.timeout,
            )
        except HTTPClientError as e:
            if e.code in (403, 404):
                return None
            raise
        server = (json.loads(response.body).get("servers") or {}).get(server_name) or {}
        return server.get("pending")

    async def __call__(self, user: str, server_name: str) -> bool:
        """Ask the hub to stop the server; True if asked, False if it was not running (400/404).

        Raises :class:`SpawnPending` while the server's spawn is pending.
        """
        if await self._pending(user, server_name) == "spawn":
            raise SpawnPending(f"{user}'s server {server_name!r} is still starting")
        try:
            await AsyncHTTPClient().fetch(
                self.url(user, server_name),
                method="DELETE",
                headers={"Authorization": f"token {self.token}"},
                request_timeout=self.timeout,
            )
        except HTTPClientError as e:
            if e.code in (400, 404):
                return False
            raise
        return True
