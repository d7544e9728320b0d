"""Errors a user must read, carried to the spawn page and the REST API.

:class:`WorkspaceError` is a tornado ``HTTPError`` whose ``status_code`` the
REST API answers with and whose ``jupyterhub_message`` JupyterHub shows on
the spawn-pending and not-running pages (the only attribute it shows). It
does not depend on JupyterHub, so the admin commands and the services raise
it too; the spawner hands it to JupyterHub as a handled spawn failure
(:mod:`workspacespawner.hubcompat`).
"""

from __future__ import annotations

from tornado import web


class WorkspaceError(web.HTTPError):
    """A refused or failed start, in words for the user.

    ``message`` is shown to the user as is; ``reason`` is a fixed word for
    metrics and logs (``forbidden``, ``invalid-options``, ``unschedulable``,
    ``image-pull``, ``crash-loop``, ``home-volume``, ``code-server-missing``, ``code-server-failed``, ``queue-wait``, ``queue-left``, ``webhook-down``); ``status_code`` is the
    HTTP status the REST API answers (400 by default, 403 for a forbidden
    profile).
    """

    def __init__(self, message: str, *, reason: str, status_code: int = 400, log_message: str = ""):
        web.HTTPError.__init__(self, status_code, "%s", message, reason=reason)
        self.status_code = status_code
        self.message = message
        self.reason = reason
        self.detail = log_message or message
        self.message_html = ""
        self.jupyterhub_message = message

    def __str__(self) -> str:
        return self.message
