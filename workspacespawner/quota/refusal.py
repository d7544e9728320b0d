"""The exception a start refused by the quota raises, and keeping it out of the hub's failure count.

JupyterHub shows a refused start's ``jupyterhub_message`` to the user. A
quota refusal is the user's limit, not a hub failure, so it must not count
toward ``Spawner.consecutive_failure_limit`` (z2jh sets 5; the hub exits
when it is reached):

the spawner raises it as a handled failure (see
:mod:`workspacespawner.hubcompat`), which JupyterHub 6 never counts and
JupyterHub 5.5 takes back off its count.
"""

from __future__ import annotations

from workspacespawner.core.errors import WorkspaceError
from workspacespawner.quota.policy import Decision

#: HTTP status per refusal reason: the user's limit (403), or the ledger down (503).
STATUS = {"ledger-down": 503}


class QuotaRefused(WorkspaceError):
    """A start refused by the quota; ``decision`` holds the numbers, ``reason`` its word."""

    def __init__(self, decision: Decision, contact: str = "an administrator"):
        reason = decision.reason or "quota"
        super().__init__(decision.message(contact), reason=reason, status_code=STATUS.get(reason, 403))
        self.decision = decision
