"""My workspaces: the page at the service's prefix, its JSON, and the actions (POST, XSRF-checked for a browser).

``GET  <prefix>``                              the viewer's page (``?user=U``: U's, if the viewer may read them)
``GET  <prefix>api/workspaces[/<user>]``       the same as JSON (:func:`~..workspaces.my_workspaces`); 403 if not readable
``POST <prefix>api/workspaces/<user>/<action>`` stop (``server``), snapshot (``pvc``), expand (``pvc``, ``size``),
                                               restore (``snapshot``), rebuild (``server``, ``image``: a stopped VM's
                                               system disk), give-back (``disk``); 403 if not theirs;
                                               publish (``server``, ``name``): admins, teachers their own

A POST from the page's forms (``next`` given) comes back to the page with
what happened, or why not, in our sentence, carried by a signed one-time
cookie (:mod:`~..flash`), never by the URL; an API POST answers JSON
``{"message", "name"}`` or ``{"status", "message"}``.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from workspacespawner.core.prometheus import PrometheusClient, PrometheusError
from workspacespawner.dashboard import actions, cardhours, charts
from workspacespawner.dashboard.base import DashboardHandler
from workspacespawner.dashboard.workspaces import my_workspaces
from workspacespawner.gpu.metrics import read_volume_usage
from workspacespawner.lifecycle.phases import rfc3339
from workspacespawner.quota.ledger import LedgerUnavailable

log = logging.getLogger("workspacespawner.dashboard")

USER = r"(?P<user>[^/]+)"

#: Seconds a page waits for Prometheus's disk readings before it shows the rest without them.
PROMETHEUS_TIMEOUT = 5.0
#: The page's refusals of a user the viewer asked for (``?user=``): they do not repeat the request's text, so a link
#: cannot put its words on the page's red banner.
NOT_YOURS = "You may not see that user's workspaces."
NO_SUCH_USER = "There is no such user."
#: What the page says when Prometheus is configured but did not answer.
NO_DISK_FILL = "How full each disk is cannot be shown just now: Prometheus did not answer."


async def disk_fill(handler: DashboardHandler) -> tuple[dict[str, int] | None, str]:
    """``({PersistentVolumeClaim name: used bytes}, "")`` of the workspaces' namespace from the kubelets' volume stats
    in Prometheus (``kubelet_volume_stats_used_bytes``); ``(None, "")`` without ``c.GPUIdle.prometheus_url``; ``(None, sentence)``
    when Prometheus fails (logged; the page shows the rest)."""
    ctx = handler.ctx
    url = ctx.settings.prometheus()
    if not url:
        return None, ""
    try:
        usage = await read_volume_usage(PrometheusClient(url, timeout=PROMETHEUS_TIMEOUT))
    except PrometheusError as e:
        log.warning("disk fill unknown: %s", e)
        return None, NO_DISK_FILL
    return {claim: int(u.used_bytes) for (namespace, claim), u in usage.items() if namespace == ctx.namespace}, ""


async def gather(handler: DashboardHandler, user: str) -> dict:
    """``user``'s My workspaces data from the hub's model, the caches, one ledger read and, with ``prometheus_url``,
    the disks' fill (:func:`disk_fill`); ``disk_fill_note``: why the fill is missing (``""``). 404 if no such user."""
    ctx = handler.ctx
    model = await ctx.hub.user(user)
    if model is None:
        handler.refuse(404, NO_SUCH_USER)
    objects = [o for objs in (await ctx.caches.snapshot()).values() for o in objs]
    now = ctx.now()
    month = await ctx.month(user, model.get("groups") or (), now)
    used, note = await disk_fill(handler)
    data = {**my_workspaces(user, model, objects, month, used, now, ctx.economy.display_name), "disk_fill_note": note}
    data["cardhours"] = await my_cardhours(handler, user, model.get("groups") or (), now)  # My card-hours
    return data


# -- My card-hours: this month per day and the last six months, per server ---------------------------------------


async def my_cardhours(handler: DashboardHandler, user: str, groups, now) -> dict | None:
    """``user``'s "My card-hours" as JSON (:meth:`~..cardhours.CardHoursView.to_json`: ``balance``, ``days``,
    ``months``; card-hours per server), from one ledger read on the database thread; None when quotas are off or
    the ledger cannot be read (logged). ``groups``: the user's JupyterHub groups (their limit)."""
    ctx = handler.ctx
    if ctx.ledger is None:
        return None
    limit = float(ctx.quota.limits_for(user, groups).card_hours_per_month)
    try:
        found = await cardhours.load(ctx.ledger, ctx.audit.executor, user, limit, now, ctx.quota.timezone)
    except LedgerUnavailable as e:
        log.error("Could not read %s's card-hours history: %s", user, e)
        return None
    return found.to_json()


def cardhours_charts(data: dict | None) -> dict[str, str]:
    """The SVG charts of :func:`my_cardhours`' JSON (pure): ``days`` (stacked bars per day of this month, per
    server) and ``months`` (bars per month of the last six and this one so far, per server); ``{}`` for None."""
    if not data:
        return {}

    def labelled(series: dict) -> dict[str, list[float]]:
        return {cardhours.server_label(name): series["values"][name] for name in series["servers"]}

    def with_this_month(months: dict, days: dict) -> dict[str, list[float]]:
        def row(series: dict, name: str) -> list[float]:
            return series["values"].get(name) or [0.0] * len(series["labels"])

        servers = dict.fromkeys([*months["servers"], *days["servers"]])
        return {cardhours.server_label(name): row(months, name) + [sum(row(days, name))] for name in servers}

    days, months = data["days"], data["months"]
    this_month = data["balance"]["period_start"][:7]
    return {
        "days": charts.stacked_bars(days["labels"], labelled(days), title=f"Card-hours per day, {this_month}",
                                    x_title="Day of the month", width=460),
        "months": charts.grouped_bars(months["labels"] + [this_month], with_this_month(months, days),
                                      title="Card-hours per month: the last six and this one so far", x_title="Month",
                                      width=460),
    }


# -- pages -------------------------------------------------------------------------------------------------------


class WorkspacesPage(DashboardHandler):
    """The My workspaces page."""

    async def get(self):
        user = self.get_argument("user", None) or self.viewer.name
        if not self.viewer.can_read(user):
            self.refuse(403, NOT_YOURS)
        data = await gather(self, user)
        others = []
        if self.viewer.sees_all or self.viewer.teams:
            names = [u["name"] for u in await self.ctx.hub.users()]
            others = sorted(self.viewer.readable_users(names))
        self.render_page("workspaces.html", title="My workspaces" if user == self.viewer.name else f"{user}'s workspaces",
                         data=data, owner=user, can_act=self.viewer.can_act(user), others=others,
                         can_publish=actions.may_publish(self.ctx, self.viewer, user),
                         cardhours_charts=cardhours_charts(data.get("cardhours")),
                         old_disk_kept_until=rfc3339(self.ctx.now() + timedelta(days=self.ctx.lifecycle.retention_days)))


class WorkspacesApi(DashboardHandler):
    """``GET api/workspaces[/<user>]``."""

    async def get(self, user: str | None = None):
        user = user or self.viewer.name
        if not self.viewer.can_read(user):  # JSON, not a page's banner: it names whom
            self.refuse(403, f"You may not see {user}'s workspaces.")
        self.write_json(await gather(self, user))


#: Arguments an action may leave empty: the default server, the image a disk was cloned from.
OPTIONAL = ("server", "image")
#: Actions that take the owner's JupyterHub groups (their disk quota) after their arguments.
WITH_GROUPS = ("expand", "restore", "rebuild")

#: action name -> (function, the request's argument names it takes after the owner)
ACTIONS = {
    "stop": (actions.stop, ("server",)),
    "snapshot": (actions.snapshot, ("pvc",)),
    "expand": (actions.expand, ("pvc", "size")),
    "restore": (actions.restore, ("snapshot",)),
    "rebuild": (actions.rebuild, ("server", "image")),
    "give-back": (actions.give_back, ("disk",)),
    "publish": (actions.publish, ("server", "name")),
}


class ActionApi(DashboardHandler):
    """``POST api/workspaces/<user>/<action>``: arguments as a form or a JSON object."""

    def _arguments(self) -> dict:
        if self.request.headers.get("Content-Type", "").startswith("application/json") and self.request.body:
            try:
                body = json.loads(self.request.body)
            except ValueError:
                self.refuse(400, "The request body is not JSON.")
            return body if isinstance(body, dict) else {}
        return {k: self.get_body_argument(k) for k in self.request.body_arguments}

    async def post(self, user: str, action: str):
        args = self._arguments()
        page = args.get("next")
        if action not in ACTIONS:
            self.refuse(404, f"There is no action {action}.")
        fn, wanted = ACTIONS[action]
        values = [str(args.get(name, "")) for name in wanted]
        if any(not v for v, name in zip(values, wanted, strict=True) if name not in OPTIONAL):
            self.refuse(400, f"{action} needs {', '.join(wanted)}.")
        try:
            if action in WITH_GROUPS:
                model = await self.ctx.hub.user(user) if self.viewer.can_act(user) else None
                done = await fn(self.ctx, self.viewer, user, *values, groups=(model or {}).get("groups") or ())
            else:
                done = await fn(self.ctx, self.viewer, user, *values)
        except actions.ActionRefused as e:
            if page and e.code != 403:
                self.flash("error", str(e))
                return self.redirect(self._back(page))
            self.refuse(e.code, str(e))
        if page:
            self.flash("done", done.message)
            return self.redirect(self._back(page))
        self.write_json({"message": done.message, "name": done.name})

    def _back(self, page: str) -> str:
        """The page to come back to: ``page`` if it is one of the service's, else the service's first page."""
        prefix = self.settings["service_prefix"]
        return page if page.startswith(prefix) else prefix


ROUTES = [
    (r"", WorkspacesPage),
    (r"api/workspaces", WorkspacesApi),
    (rf"api/workspaces/{USER}", WorkspacesApi),
    (rf"api/workspaces/{USER}/(?P<action>[a-z-]+)", ActionApi),
]
