"""The exception a start refused by the quota raises, and keeping it out of the hub's failure count.

JupyterHub shows a refused start's ``jupyterhub_message`` to the user. A
quota refusal is the user's limit, not a hub failure, so it must not count
toward ``Spawner.consecutive_failure_limit`` (z2jh sets 5; the hub exits
when it is reached):

- JupyterHub 6 counts only errors: a ``SpawnException`` (what
  :class:`~workspacespawner.core.errors.WorkspaceError` is there) is a handled
  failure, never counted.
- JupyterHub 5.5 counts every failed spawn. :func:`uncount_failure` takes
  one off the count the hub is about to add, through the request handler
  JupyterHub 5.5 hands the spawner during ``start`` (``spawner.handler``).
"""

from __future__ import annotations

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.quota.policy import Decision

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException as _SpawnException

    HUB_SKIPS_HANDLED_FAILURES = True
except ImportError:  # JupyterHub 5.5
    _SpawnException = None
    HUB_SKIPS_HANDLED_FAILURES = False

#: HTTP status per refusal reason: the user's limit (403), or the ledger down (503).
STATUS = {"ledger-down": 503}


class QuotaRefused(WorkspaceError):
    """A start refused by the quota; ``decision`` holds the numbers, ``reason`` its word."""

    def __init__(self, decision: Decision, contact: str = "an administrator"):
        reason = decision.reason or "quota"
        super().__init__(decision.message(contact), reason=reason, status_code=STATUS.get(reason, 403))
        self.decision = decision


def uncount_failure(spawner) -> None:
    """On JupyterHub 5.5, keep the refusal about to be raised out of the consecutive-failure count.

    Call it right before raising :class:`QuotaRefused` from ``start``. It
    lowers the hub's ``failure_count`` by one, which the hub raises by one
    when the start fails: the count is left as it was. Does nothing on
    JupyterHub 6 (which does not count handled failures) or without a
    request handler (a start not made by a request).
    """
    if HUB_SKIPS_HANDLED_FAILURES:
        return
    settings = getattr(getattr(spawner, "handler", None), "settings", None)
    if isinstance(settings, dict):
        settings["failure_count"] = settings.get("failure_count", 0) - 1
