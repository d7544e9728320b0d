"""The idle-GPU settings: ``c.GPUIdle.*`` in ``jupyterhub_config.py``, checked when loaded.

A GPU server that shows no activity for :attr:`GPUIdle.gpu_idle_timeout`
is warned on the hub's home page; :attr:`GPUIdle.gpu_idle_grace` later it
is stopped (its disks kept), if the hub can read GPU utilisation from
Prometheus or :attr:`GPUIdle.stop_without_prometheus` says to stop anyway.
A bad value raises ``traitlets.TraitError`` naming the setting and the value.

These settings are also the one definition of an idle GPU and the one
Prometheus URL, shared by the hub's idle-GPU pass and the Workspaces
dashboard (its Cluster view flags the GPUs the pass would find idle): a
GPU is idle when its highest utilisation over the last ``gpu_idle_timeout``
(:data:`IDLE_READING`) stayed under ``utilisation_threshold``
(:func:`gpu_is_idle`). The dashboard's former ``prometheus_url``,
``idle_gpu_threshold`` and ``idle_gpu_window`` are deprecated aliases of
``prometheus_url``, ``utilisation_threshold`` and ``gpu_idle_timeout``
(:data:`DASHBOARD_ALIASES`).
"""

from __future__ import annotations

import logging
import re

from traitlets import Bool, Float, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from workspacespawner.config.traittypes import warn_once

log = logging.getLogger("workspacespawner")

#: The settings' section: ``c.GPUIdle``.
SECTION = "GPUIdle"
#: The Workspaces dashboard's section, whose older copies of these settings are read as deprecated aliases.
DASHBOARD_SECTION = "WorkspacesDashboard"
#: ``c.WorkspacesDashboard.<old>`` -> ``c.GPUIdle.<new>``: the dashboard's copies, now these settings.
DASHBOARD_ALIASES = {"prometheus_url": "prometheus_url", "idle_gpu_threshold": "utilisation_threshold",
                     "idle_gpu_window": "gpu_idle_timeout"}
#: How a GPU's utilisation over the window is read for "idle" (PromQL range function): its highest reading, so
#: under the threshold means under it for the whole window.
IDLE_READING = "max_over_time"


def gpu_is_idle(utilisation: float | None, threshold: float) -> bool:
    """Whether a GPU whose :data:`IDLE_READING` over the window is ``utilisation`` (percent; None: not read) is idle
    at ``threshold`` (percent; 0: utilisation is not used, so no GPU is idle by it)."""
    return threshold > 0 and utilisation is not None and utilisation < threshold


class GPUIdle(Configurable):
    """When an idle GPU server is warned and stopped (see the module docstring)."""

    gpu_idle_timeout = Float(
        3600.0,
        min=0,
        max=7 * 86400,
        config=True,
        help="""Seconds a GPU server may show no activity before its owner is warned, in seconds. 0: off (no
        warning, no stop).

        Activity is the newest of: JupyterHub's ``last_activity`` of the server
        (kernels and terminals that jupyterhub-singleuser reports, a VM guest's
        singleuser server alike, and proxied traffic), code-server's heartbeat
        as the workspace reports it, and, with Prometheus, GPU utilisation at or
        above ``utilisation_threshold``. GPU utilisation under the threshold for
        the whole timeout makes a server idle even with a browser tab open.
        Example: ``c.GPUIdle.gpu_idle_timeout = 2 * 3600``.""",
    )

    gpu_idle_grace = Float(
        1800.0,
        min=0,
        max=7 * 86400,
        config=True,
        help="""Seconds between the idle warning and the stop, in seconds. 0: stop at the first pass that finds the
        server idle (the home page still says why).""",
    )

    utilisation_threshold = Float(
        5.0,
        min=0,
        max=100,
        config=True,
        help="""GPU utilisation, in percent (dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL``), under which a GPU counts as
        idle. A GPU whose utilisation stayed under it for the whole ``gpu_idle_timeout`` is idle; one that reached
        it within that window is busy, even without any other activity. 0: utilisation is not used (activity alone decides).""",
    )

    prometheus_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""Base URL of the Prometheus that scrapes dcgm-exporter and the kubelets (an http or https URL), for
        the idle-GPU pass and the Workspaces dashboard alike. None: no Prometheus (only activity counts, and
        ``stop_without_prometheus`` decides whether idle servers are stopped; the dashboard shows what the cluster
        and the ledger know). Example: ``"http://prometheus-server.monitoring:9090"``.""",
    )

    stop_without_prometheus = Bool(
        False,
        config=True,
        help="""Stop idle GPU servers even when GPU utilisation cannot be read (no Prometheus configured).

        False (the default): without Prometheus idle servers are only warned, since a script started with
        ``nohup`` can be using its GPU while nobody touches the notebook. True: activity alone decides.""",
    )

    exempt_groups = List(
        Unicode(),
        [],
        config=True,
        help="""JupyterHub groups whose members' GPU servers are never warned or stopped for being idle.
        Example: ``["research"]``.""",
    )

    exempt_profiles = List(
        Unicode(),
        [],
        config=True,
        help="""Profile slugs whose GPU servers are never warned or stopped for being idle (a long training
        profile, for example). Example: ``["gpu-8-batch"]``.""",
    )

    interval = Float(
        60.0,
        min=5,
        max=3600,
        config=True,
        help="""Seconds between two idle-GPU passes, in seconds. Each pass reads every server's activity once (one
        hub API request, one Prometheus query), so warnings and stops come up to this late.""",
    )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        own = self.config.get(SECTION, {})
        dashboard = self.config.get(DASHBOARD_SECTION, {})
        for old, new in DASHBOARD_ALIASES.items():
            if old not in dashboard or new in own or dashboard[old] is None:
                continue
            warn_once(log, f"{DASHBOARD_SECTION}.{old} is deprecated; use c.{SECTION}.{new} "
                           "(the dashboard and the idle-GPU pass share it)")
            try:
                setattr(self, new, dashboard[old])
            except TraitError as e:
                raise TraitError(f"c.{DASHBOARD_SECTION}.{old} = {dashboard[old]!r} is invalid: {e}") from None

    @validate("prometheus_url")
    def _check_prometheus_url(self, proposal):
        value = proposal["value"]
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise TraitError(f"GPUIdle.prometheus_url must be an http(s) URL or None, not {value!r}")
        return value.rstrip("/") if value else value

    @validate("exempt_groups", "exempt_profiles")
    def _check_names(self, proposal):
        name = proposal["trait"].name
        for each in proposal["value"]:
            if not each.strip():
                raise TraitError(f"GPUIdle.{name} holds an empty name: {proposal['value']!r}")
        return proposal["value"]

    @property
    def enabled(self) -> bool:
        """Whether idle GPU servers are looked for at all (``gpu_idle_timeout`` > 0)."""
        return self.gpu_idle_timeout > 0

    def prometheus(self) -> str | None:
        """The Prometheus URL to ask (:attr:`prometheus_url`, the deprecated dashboard copy applied); None: none."""
        return self.prometheus_url

    def stops(self) -> bool:
        """Whether idle servers are stopped after the grace (Prometheus known, or ``stop_without_prometheus``)."""
        return self.prometheus() is not None or self.stop_without_prometheus
