"""Per-user messages on the hub's home page, through ``c.JupyterHub.template_vars``.

JupyterHub (5.5 and 6.x) renders every page with its ``template_vars``,
calling a callable value with the current user (``None`` when nobody is
logged in); ``home.html`` shows ``announcement_home`` in the page's
announcement banner when it is a string (as HTML). The enforcer writes a
user's message here; :func:`announcement_home` reads it, without I/O, on
every page view. Install it with::

    from workspacespawner.quota.announce import with_quota_announcements
    c.JupyterHub.template_vars = with_quota_announcements(c.JupyterHub.template_vars)
"""

from __future__ import annotations

import html

from traitlets.config.loader import LazyConfigValue


class Announcements:
    """The message each user should see now (plain text), in memory."""

    def __init__(self):
        self._messages: dict[str, str] = {}

    def set(self, user: str, text: str) -> None:
        self._messages[user] = text

    def clear(self, user: str) -> None:
        self._messages.pop(user, None)

    def get(self, user: str) -> str:
        return self._messages.get(user, "")

    def users(self) -> set[str]:
        return set(self._messages)


#: The hub process's announcements: the enforcer writes, pages read.
ANNOUNCEMENTS = Announcements()


def announcement_home(user) -> str:
    """``template_vars`` callable: the user's quota message as HTML, or ``""``."""
    name = getattr(user, "name", None)
    text = ANNOUNCEMENTS.get(name) if name else ""
    return html.escape(text)


def with_quota_announcements(template_vars) -> dict:
    """``template_vars`` with our per-user message joined to the site's own ``announcement_home`` (text or callable).

    ``template_vars`` may be a dict, None, or what ``c.JupyterHub.template_vars``
    holds before anything was set (a traitlets ``LazyConfigValue``).
    """
    if isinstance(template_vars, LazyConfigValue):
        template_vars = template_vars.get_value({})
    merged = dict(template_vars or {})
    site = merged.get("announcement_home")

    def combined(user) -> str:
        own = site(user) if callable(site) else site
        parts = [part for part in (own, announcement_home(user)) if isinstance(part, str) and part]
        return "<br>".join(parts)

    merged["announcement_home"] = combined if site else announcement_home
    return merged
