"""The spawn page's live endpoint: ``GET /hub/spawn-page-data/<user>/<server>``, the page's numbers as JSON.

A JupyterHub page handler in the hub process (it reads the hub's own watch
caches, which a separate service could not), registered with::

    from workspacespawner.spawnpage.handler import HANDLERS
    c.JupyterHub.extra_handlers = HANDLERS

(JupyterHub 3.1+ logs that ``extra_handlers`` is deprecated in favour of
services; a service has no access to the hub's caches, so this one stays
in the hub.) Logged in by the hub's cookie; a user reads their own page, an
admin anyone's; others get 403, an unknown user 404. The body is
:meth:`.gather.SpawnPage.to_json`, kept per user and server for 5 seconds
(:data:`.gather.PAGES`): page views never make Kubernetes API calls, and
the ledger is read at most once per user per 5 seconds.
"""

from __future__ import annotations

import json

from jupyterhub.handlers.base import BaseHandler
from tornado import web

from workspacespawner.spawnpage.gather import PAGES, gather


class SpawnPageDataHandler(BaseHandler):
    """``GET`` the spawn page's data of ``user_name``'s server ``server_name`` (``""``: the default server)."""

    @web.authenticated
    async def get(self, user_name: str, server_name: str = ""):
        current = self.current_user
        if current.name != user_name and not current.admin:
            raise web.HTTPError(403, f"{current.name} may not read the spawn page of {user_name}")
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        spawner = user.get_spawner(server_name, replace_failed=True)
        if not hasattr(spawner, "services"):
            raise web.HTTPError(404, f"{user_name}'s server {server_name!r} is not a WorkspaceSpawner")
        page = await PAGES.get(f"{user_name}/{server_name}", lambda: gather(spawner))
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(page.to_json()))


#: What ``c.JupyterHub.extra_handlers`` takes (routes under the hub's prefix, ``/hub/``).
HANDLERS = [(r"/spawn-page-data/([^/]+)/([^/]*)", SpawnPageDataHandler)]
