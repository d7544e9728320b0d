"""The dashboard's Prometheus client: :mod:`workspacespawner.core.prometheus`, which the hub's idle-GPU pass also uses.

Kept so the dashboard's imports read as before; the client itself lives
in ``core`` since the hub (below the dashboard's layer) asks Prometheus too.
"""

from workspacespawner.core.prometheus import PrometheusClient, PrometheusError, Sample, Series

__all__ = ["PrometheusClient", "PrometheusError", "Sample", "Series"]
