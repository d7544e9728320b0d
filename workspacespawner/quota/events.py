"""Kubernetes Events about a user's quota, attached to their workspace's object (``kubectl describe`` shows them).

A pure manifest builder plus one call; the hub's ServiceAccount needs
``create`` on ``events`` (kubespawner's RBAC only reads them).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def make_quota_event(*, namespace: str, involved: dict, reason: str, message: str, now: datetime) -> dict:
    """A core/v1 Event of type Warning about ``involved`` (``{"kind", "name", "apiVersion", "uid"?}``).

    ``reason``: a CamelCase word (``QuotaLow``, ``QuotaExhausted``,
    ``QuotaStop``); ``message``: the same words the user sees.
    """
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {"namespace": namespace, **involved},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning",
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": "workspacespawner"},
        "reportingComponent": "workspacespawner",
    }


async def post_event(core_api, manifest: dict) -> None:
    """Create the Event with a kubernetes_asyncio ``CoreV1Api`` (kubespawner's ``spawner.api``)."""
    await core_api.create_namespaced_event(manifest["metadata"]["namespace"], manifest)
