"""Prometheus metrics of the quota, on the default registry, so the hub's ``/hub/metrics`` serves them.

- ``workspacespawner_card_hours_used{user}``: this month's card-hours per
  user, for the top N users by use (``WorkspaceQuota.metrics_top_users``);
  everyone else adds up in ``user="other"`` (a real user named ``other``
  is counted there too), so the label's cardinality stays at N + 1.
- ``workspacespawner_running_gpus``: GPUs held by open runs.
- ``workspacespawner_spawns_refused_total{reason}``: refused starts by reason word.

The two gauges are a snapshot the enforcer refreshes on each pass; a
collector yields exactly the current snapshot, so a user who drops out of
the top N leaves no stale series behind.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily

OTHER = "other"

REFUSED = Counter(
    "workspacespawner_spawns_refused",
    "Starts refused by the quota, by reason (card-hours, concurrency, instance-size, disk, ledger-down)",
    ["reason"],
)


def top_users(used: dict[str, float], n: int) -> list[tuple[str, float]]:
    """``(label, card-hours)``: the ``n`` largest users (ties by name), then ``other`` for the rest if any."""
    ranked = sorted(
        ((user, hours) for user, hours in used.items() if user != OTHER), key=lambda item: (-item[1], item[0])
    )
    shown = ranked[:n]
    rest = sum(hours for _user, hours in ranked[n:]) + used.get(OTHER, 0.0)
    if len(ranked) > n or OTHER in used:
        shown.append((OTHER, rest))
    return shown


class _QuotaCollector:
    def __init__(self):
        self.used: list[tuple[str, float]] = []
        self.running_gpus = 0

    def collect(self):
        used = GaugeMetricFamily(
            "workspacespawner_card_hours_used",
            "Card-hours used this month (top users by use; the rest as user=other)",
            labels=["user"],
        )
        for user, hours in self.used:
            used.add_metric([user], hours)
        yield used
        yield GaugeMetricFamily(
            "workspacespawner_running_gpus", "GPUs held by running workspaces", value=self.running_gpus
        )


_COLLECTOR = _QuotaCollector()
REGISTRY.register(_COLLECTOR)


def record_refusal(reason: str) -> None:
    """Count one refused start."""
    REFUSED.labels(reason=reason).inc()


def set_snapshot(used: dict[str, float], running_gpus: int, top_n: int) -> None:
    """Replace the gauges' values: card-hours per user this month, GPUs running now."""
    _COLLECTOR.used = top_users(used, top_n)
    _COLLECTOR.running_gpus = running_gpus
