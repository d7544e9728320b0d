"""The spawn form: the user's balance as a header and the profiles as cards, grouped by IDE and kind.

Rendered with Jinja2 (which JupyterHub ships) from ``templates/form.html``;
JupyterHub puts the result inside its own ``spawn.html`` (which extends
``page.html``), so the page keeps the hub's look, header and Start button.
The fields are kubespawner's (``profile``, ``profile-option-<slug>--<option>``
and its ``--unlisted-choice`` text field), so kubespawner's
``options_from_form`` reads them unchanged. The page refreshes its numbers
every 5 seconds from the live endpoint (:mod:`workspacespawner.hubhandlers`).
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from tornado.escape import url_escape

from workspacespawner.core.quantities import spawner_memory_for_people
from workspacespawner.quota.policy import number
from workspacespawner.spawnpage.gather import SpawnPage, gather

#: Where form.html lives.
TEMPLATES = Path(__file__).resolve().parent / "templates"

_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True))
_ENV.globals["number"] = number
_ENV.globals["memory"] = spawner_memory_for_people


def chosen_slug(page: SpawnPage, saved: str | None) -> str | None:
    """The profile selected when the page opens: the saved choice, else the configured default, else the first
    card; only selectable cards (None when none is)."""
    selectable = [c.slug for c in page.cards if c.selectable]
    defaults = [p.get("slug") for p in page.profiles if p.get("default")]
    for slug in (saved, *defaults, *selectable):
        if slug in selectable:
            return slug
    return None


def render_form(page: SpawnPage, *, live_url: str, user_options: dict | None = None) -> str:
    """The form's HTML for ``page``; ``live_url``: the live endpoint of this user and server; ``user_options``:
    the last start's choices (preselected when they still hold)."""
    saved = dict(user_options or {})
    groups: dict[str, list] = {}
    for profile, card in zip(page.profiles, page.cards, strict=True):
        groups.setdefault(card.group, []).append((profile, card))
    return _ENV.get_template("form.html").render(
        balance=page.balance,
        groups=list(groups.items()),
        chosen=chosen_slug(page, saved.get("profile")),
        saved=saved,
        live_url=live_url,
    )


def live_url(spawner) -> str:
    """The live endpoint of ``spawner``'s user and server: ``/hub/spawn-page-data/<user>/<server>`` under the hub's base URL."""
    user, server = url_escape(spawner.user.name, plus=False), url_escape(spawner.name or "", plus=False)
    return f"{spawner.hub.base_url}spawn-page-data/{user}/{server}"


async def options_form(spawner) -> str:
    """``Spawner.options_form`` of WorkspaceSpawner: the spawn page of ``spawner``'s user, gathered now (no cache)."""
    page = await gather(spawner)
    if not page.profiles:
        return "<p>No server profile is available to you. Please ask an administrator.</p>"
    return render_form(page, live_url=live_url(spawner), user_options=spawner.user_options)
