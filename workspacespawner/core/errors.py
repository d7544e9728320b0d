"""Errors a user must read, carried to the spawn page.

JupyterHub shows only an exception's ``jupyterhub_message`` on the
spawn-pending and not-running pages, and (JupyterHub 6) does not count a
``jupyterhub.spawner.SpawnException`` toward the consecutive-failure limit.
:class:`WorkspaceError` is that exception where it exists (JupyterHub 6) and
a tornado ``HTTPError`` with the same attributes on JupyterHub 5.5.
"""

from __future__ import annotations

from tornado import web

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException as _Base
except ImportError:  # JupyterHub 5.5
    _Base = web.HTTPError


class WorkspaceError(_Base):
    """A refused or failed start, in words for the user.

    ``message`` is shown to the user as is; ``reason`` is a fixed word for
    metrics and logs (``forbidden``, ``invalid-options``, ``unschedulable``,
    ``image-pull``, ``crash-loop``, ``home-volume``); ``status_code`` is the
    HTTP status the REST API answers (400 by default, 403 for a forbidden
    profile).
    """

    def __init__(self, message: str, *, reason: str, status_code: int = 400, log_message: str = ""):
        web.HTTPError.__init__(self, status_code, "%s", message, reason=reason)
        self.status_code = status_code
        self.message = message
        self.reason = reason
        if _Base is not web.HTTPError:
            # JupyterHub 6's SpawnException keeps log_message as a plain attribute. On 5.5 it is
            # tornado's read-only property (tornado >= 6.5), which already yields the message.
            self.log_message = log_message or message
        self.message_html = ""
        self.jupyterhub_message = message

    def __str__(self) -> str:
        return self.message
