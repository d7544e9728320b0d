"""Prometheus metrics of the quota, on the default registry, so the hub's ``/hub/metrics`` serves them.

- ``workspacespawner_card_hours_used{user}``: this month's weighted
  card-hours per user (GPU units × weight × hours), for the top N users by
  use (``WorkspaceQuota.metrics_top_users``); everyone else adds up in
  ``user="other"`` (a real user named ``other`` is counted there too), so
  the label's cardinality stays at N + 1.
- ``workspacespawner_running_gpus``: GPU units (of any resource) held by open runs.
- ``workspacespawner_gpu_hours{resource, product}``: this month's raw
  unit-hours (units × hours, unweighted) per GPU resource
  (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ...) and product (the
  node's ``nvidia.com/gpu.product``; ``""`` when not known); one series per
  kind of GPU the site has, whatever the number of users.
- ``workspacespawner_running_gpu_units{resource, product}``: units held by
  open runs now, per GPU resource and product.
- ``workspacespawner_spawns_refused_total{reason}``: refused starts by reason word.

The gauges are a snapshot the enforcer refreshes on each pass; a
collector yields exactly the current snapshot, so a user who drops out of
the top N, or a GPU type no longer running, leaves no stale series behind.
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


def _by_type(name: str, documentation: str, values: dict[tuple[str, str], float]) -> GaugeMetricFamily:
    """A gauge labelled ``{resource, product}`` with one sample per key of ``values``."""
    gauge = GaugeMetricFamily(name, documentation, labels=["resource", "product"])
    for (resource, product), value in sorted(values.items()):
        gauge.add_metric([resource, product], value)
    return gauge


class _QuotaCollector:
    def __init__(self):
        self.used: list[tuple[str, float]] = []
        self.running_gpus = 0
        self.gpu_hours: dict[tuple[str, str], float] = {}
        self.running_units: dict[tuple[str, str], int] = {}

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
            "workspacespawner_running_gpus", "GPU units held by running workspaces", value=self.running_gpus
        )
        yield _by_type("workspacespawner_gpu_hours",
                       "Unit-hours (GPU units x hours, not weighted) used this month, by GPU resource and product",
                       self.gpu_hours)
        yield _by_type("workspacespawner_running_gpu_units",
                       "GPU units held by running workspaces, by GPU resource and product", self.running_units)


_COLLECTOR = _QuotaCollector()
REGISTRY.register(_COLLECTOR)


def record_refusal(reason: str) -> None:
    """Count one refused start."""
    REFUSED.labels(reason=reason).inc()


def set_snapshot(
    used: dict[str, float],
    running_gpus: int,
    top_n: int,
    *,
    gpu_hours: dict[tuple[str, str], float] | None = None,
    running_units: dict[tuple[str, str], int] | None = None,
) -> None:
    """Replace the gauges' values: weighted card-hours per user this month, GPU units running now, and (by
    ``(resource, product)``) this month's raw unit-hours and the units running now."""
    _COLLECTOR.used = top_users(used, top_n)
    _COLLECTOR.running_gpus = running_gpus
    _COLLECTOR.gpu_hours = dict(gpu_hours or {})
    _COLLECTOR.running_units = dict(running_units or {})
