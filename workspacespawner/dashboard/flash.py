"""What an action did, carried from its POST to the page it comes back to: a signed, one-time cookie, never the URL.

A form's POST (:class:`~.views.workspaces.ActionApi`) ends in a redirect;
the sentence it leaves for the page (what was done, or why not) is ours,
and it travels in a cookie signed with the service's secret
(:meth:`tornado.web.RequestHandler.set_signed_cookie`) for the viewer who
posted, read once by the next page and cleared. A link can carry no words
onto the page's green or red banner: ``?done=`` and ``?error=`` mean
nothing, and a cookie that is unsigned, older than :data:`MAX_AGE_SECONDS`
or meant for another viewer shows nothing.
"""

from __future__ import annotations

import json

#: The cookie's name.
COOKIE = "workspaces-flash"
#: How long a flash waits for its page, in seconds; an older one shows nothing.
MAX_AGE_SECONDS = 120
#: The banners a flash may fill: ``done`` (green) and ``error`` (red).
KINDS = ("done", "error")


def encode(viewer: str, kind: str, message: str) -> str:
    """The cookie's value (before signing) of ``message`` on the ``kind`` banner, for ``viewer`` only."""
    if kind not in KINDS:
        raise ValueError(f"a flash is one of {KINDS}, not {kind!r}")
    return json.dumps({"to": viewer, "kind": kind, "text": message})


def decode(value: bytes | None, viewer: str) -> dict[str, str]:
    """``{kind: message}`` of a signed cookie's ``value`` (None: none, or a bad signature) if it is ``viewer``'s;
    ``{}`` otherwise."""
    if not value:
        return {}
    try:
        found = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(found, dict) or found.get("to") != viewer or found.get("kind") not in KINDS:
        return {}
    text = found.get("text")
    return {found["kind"]: text} if isinstance(text, str) and text else {}
