"""The hub's JSON endpoints behind the student pages, served by the hub process itself.

- ``GET /hub/spawn-page-data/<user>/<server>``: the spawn page's numbers
  (:meth:`workspacespawner.spawnpage.gather.SpawnPage.to_json`), which the
  page refreshes every 5 seconds;
- ``GET /hub/workspaces-data/<user>``: the home page's "Your workspaces"
  panel (:func:`workspacespawner.homepage.gather.gather`).

They read the hub's own watch caches, which a separate service could not,
so they are page handlers of the hub, registered with::

    from workspacespawner.hubhandlers import HANDLERS
    c.JupyterHub.extra_handlers.extend(HANDLERS)

(JupyterHub 3.1+ logs that ``extra_handlers`` is deprecated in favour of
services.) Logged in by the hub's cookie; a user reads their own, an admin
anyone's; others get 403, an unknown user 404. Answers are kept per user
(and server) for 5 seconds (:class:`~workspacespawner.spawnpage.gather.PageCache`):
page views make no Kubernetes API call, and the ledger is read at most once
per user per 5 seconds.
"""

from __future__ import annotations

import json

from jupyterhub.handlers.base import BaseHandler
from tornado import web

from workspacespawner.homepage import gather as home
from workspacespawner.spawnpage import gather as spawn

#: Each user's (and server's) answers, for 5 seconds.
PAGES = spawn.PageCache()


class _OwnDataHandler(BaseHandler):
    """Shared by the endpoints: who may read, and how the JSON goes out."""

    def workspace_spawner(self, user_name: str, server_name: str = ""):
        """``(user, spawner)`` of ``user_name``'s ``server_name``; 403 unless it is the caller or the caller is an admin,
        404 for an unknown user or a spawner that is not a WorkspaceSpawner."""
        current = self.current_user
        if current.name != user_name and not current.admin:
            raise web.HTTPError(403, f"{current.name} may not read the pages of {user_name}")
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        spawner = user.get_spawner(server_name, replace_failed=True)
        if not hasattr(spawner, "services"):
            raise web.HTTPError(404, f"{user_name}'s server {server_name!r} is not a WorkspaceSpawner")
        return user, spawner

    def send_json(self, body: dict) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))


class SpawnPageDataHandler(_OwnDataHandler):
    """``GET`` the spawn page's data of ``user_name``'s server ``server_name`` (``""``: the default server)."""

    @web.authenticated
    async def get(self, user_name: str, server_name: str = ""):
        _user, spawner = self.workspace_spawner(user_name, server_name)
        page = await PAGES.get(f"spawn:{user_name}/{server_name}", lambda: spawn.gather(spawner))
        self.send_json(page.to_json())


class WorkspacesDataHandler(_OwnDataHandler):
    """``GET`` the home page's data of ``user_name``: servers, the quota warning, Retained disks."""

    @web.authenticated
    async def get(self, user_name: str):
        user, spawner = self.workspace_spawner(user_name)
        self.send_json(await PAGES.get(f"home:{user_name}", lambda: home.gather(user, spawner)))


#: What ``c.JupyterHub.extra_handlers`` takes (routes under the hub's prefix, ``/hub/``).
HANDLERS = [
    (r"/spawn-page-data/([^/]+)/([^/]*)", SpawnPageDataHandler),
    (r"/workspaces-data/([^/]+)", WorkspacesDataHandler),
]
