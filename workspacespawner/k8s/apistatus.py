"""What an API error says: the ``Status`` object (meta/v1) in its body, read for people.

kube-apiserver (and aggregated servers such as KubeVirt's virt-api) answer a
refused request with a ``Status`` object whose ``message`` explains it
("persistentvolumeclaims "home-ann" is forbidden: exceeded quota: ...").
``kubernetes_asyncio`` keeps that body as the text of ``ApiException.body``;
these helpers read it back, and never fail on a body that is not JSON.
"""

from __future__ import annotations

import json

#: The longest message quoted in one line (characters).
MESSAGE_LIMIT = 300


def status_message(error: BaseException) -> str:
    """The ``message`` of the Status object in ``error.body`` ('' when there is none or it is not JSON)."""
    body = getattr(error, "body", None)
    if not body:
        return ""
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return ""
    return str(status.get("message") or "") if isinstance(status, dict) else ""


def one_line(error: BaseException) -> str:
    """``403 Forbidden (message)``: the HTTP status, reason and Status message of ``error`` on one line."""
    message = status_message(error)[:MESSAGE_LIMIT]
    line = f"{getattr(error, 'status', '')} {getattr(error, 'reason', '') or ''}" + (f" ({message})" if message else "")
    return " ".join(line.split())
