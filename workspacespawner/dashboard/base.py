"""The handler every dashboard view derives from: hub OAuth, the :class:`~.access.Viewer`, templates, JSON errors.

A view handler (``class MyPage(DashboardHandler)``) gets:

``self.ctx``       the :class:`~.context.DashboardContext` (settings, caches, ledger, audit log, hub API, ``now``)
``self.viewer``    who is looking (:class:`~.access.Viewer`), set before ``get``/``post`` runs
``self.render_page(template, **ns)``  a Jinja2 template from ``templates/`` extending ``base.html``
``self.write_json(data)``             a JSON answer
``self.refuse(code, message)``        an error as JSON on ``api/`` paths, else as a page
``self.flash(kind, message)``         our sentence for the next page's ``done`` or ``error`` banner (:mod:`.flash`)

The user is found without blocking the event loop (the hub's OAuth token
check is awaited in :meth:`prepare`); a request with no user is sent to the
hub's login (a page) or answered 403 (an ``api/`` path, or a POST).
"""

from __future__ import annotations

import json
import logging
from datetime import date, datetime

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from tornado import web

from workspacespawner.dashboard import flash
from workspacespawner.dashboard.access import Viewer

log = logging.getLogger("workspacespawner.dashboard")


def _json_default(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


class DashboardHandler(HubOAuthenticated, web.RequestHandler):
    """Base of the dashboard's handlers (see the module docstring)."""

    def initialize(self, ctx):
        self.ctx = ctx
        self.viewer: Viewer | None = None

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    def check_xsrf_cookie(self):
        """A POST with a token in its Authorization header needs no XSRF token (no browser adds that header by
        itself); a cookie-authenticated one needs the page's ``_xsrf`` (JupyterHub's check)."""
        if self.hub_auth.get_token(self, in_cookie=False):
            return None
        return self.hub_auth.check_xsrf_cookie(self)

    @property
    def is_api(self) -> bool:
        """Whether the request is for a JSON path (``<prefix>api/...``)."""
        return self.request.path.startswith(self.settings["service_prefix"] + "api/")

    async def prepare(self):
        model = await self.hub_auth._get_user(self)
        if model:
            try:
                model = self.check_hub_user(model)
            except UserNotAllowed:
                model = None
        self._hub_auth_user_cache = model
        if model is None:
            if self.request.method == "GET" and not self.is_api:
                self.redirect(self.get_login_url())
                return
            raise web.HTTPError(403, "You are not logged in to the hub, or the hub does not allow you here.")
        members = await self.ctx.hub.group_members()
        self.viewer = Viewer.from_model(model, service_name=self.ctx.settings.service_name, members=members)

    def write_json(self, data, status: int = 200) -> None:
        """Answer ``data`` as JSON with ``status``."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(data, default=_json_default))

    def refuse(self, code: int, message: str):
        """Stop the request with ``code`` and ``message`` (JSON on api/ paths, a page otherwise)."""
        raise web.HTTPError(code, reason=None, log_message=message)

    def nav(self) -> list[dict]:
        """The navigation: My workspaces, Cluster (team leads, admins), Reports (admins); ``{"title", "url", "active"}``."""
        prefix = self.settings["service_prefix"]
        items = [("My workspaces", prefix, True)]
        if self.viewer is not None:
            items.append(("Cluster", prefix + "cluster", self.viewer.sees_cluster))
            items.append(("Reports", prefix + "reports", self.viewer.sees_reports))
        path = self.request.path
        return [{"title": t, "url": u, "active": path == u or (u != prefix and path.startswith(u))}
                for t, u, shown in items if shown]

    def flash(self, kind: str, message: str) -> None:
        """Leave ``message`` (our sentence) on the next page's ``kind`` banner (``done`` or ``error``) for this
        viewer: a signed cookie under the service's prefix, read once (:mod:`.flash`)."""
        self.set_signed_cookie(flash.COOKIE, flash.encode(self.viewer.name, kind, message), expires_days=None,
                               path=self.settings["service_prefix"], httponly=True, samesite="Lax")

    def take_flash(self) -> dict[str, str]:
        """``{"done" or "error": sentence}`` a POST of this viewer's left for this page (``{}``: none); cleared."""
        if self.get_cookie(flash.COOKIE) is None:
            return {}
        value = self.get_signed_cookie(flash.COOKIE, max_age_days=flash.MAX_AGE_SECONDS / 86400)
        self.clear_cookie(flash.COOKIE, path=self.settings["service_prefix"])
        return flash.decode(value, self.viewer.name) if self.viewer is not None else {}

    def render_page(self, template: str, **ns) -> None:
        """Render ``templates/<template>`` with ``ns`` plus ``viewer``, ``nav``, ``prefix``, ``hub_prefix``,
        ``xsrf_form_html``, ``static_url`` and the banners a POST left (:meth:`take_flash`; ``ns`` names its own
        ``error`` first); finishes the request."""
        env = self.settings["jinja_env"]
        html = env.get_template(template).render(
            viewer=self.viewer, nav=self.nav(), prefix=self.settings["service_prefix"],
            hub_prefix=self.settings["hub_prefix"], xsrf_form_html=self.xsrf_form_html, static_url=self.static_url,
            **{**self.take_flash(), **ns})
        self.finish(html)

    def write_error(self, status_code: int, **kwargs):
        error = kwargs.get("exc_info", (None, None, None))[1]
        message = getattr(error, "log_message", None) or self._reason
        if self.is_api or self.request.method != "GET":
            if self.is_api:
                self.set_header("Content-Type", "application/json; charset=UTF-8")
                self.finish(json.dumps({"status": status_code, "message": message}))
                return
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        try:
            self.render_page("base.html", title=f"Error {status_code}", error=message)
        except Exception:  # a page that cannot render still answers in words
            log.exception("Error page failed")
            self.finish(f"<h1>{status_code}</h1><p>{web.escape.xhtml_escape(message or '')}</p>")
