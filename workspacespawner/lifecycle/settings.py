"""The lifecycle settings of WorkspaceSpawner: retention, reclaim, the disk limit without quotas, the fence's wait.

A trait-only class (``HasTraits``): mixed into WorkspaceSpawner these are
``c.WorkspaceSpawner.*``; the admin commands read the same traits from the
hub's config (:func:`workspacespawner.config.check.traits_from_config`).
"""

from __future__ import annotations

from traitlets import Enum, Float, HasTraits

from workspacespawner.config.traittypes import DeprecatedAlias, Quantity, days, in_days
from workspacespawner.lifecycle import retention


class LifecycleTraits(HasTraits):
    """How long disks of deleted workspaces are kept, who gives them back, and how a start waits for old compute."""

    retention_period = Float(
        30 * 86400.0,
        min=0,
        config=True,
        help="""Seconds the disks of a deleted user or named server are kept (``Retained``) before the purge may delete them.

        The default is 30 days (``30 * 86400``). 0: the next purge
        (``workspacespawner retention purge``) deletes them.
        """,
    )

    retention_days = DeprecatedAlias("retention_period", section="WorkspaceSpawner", to_new=days, from_new=in_days,
                                     help="Deprecated: use ``c.WorkspaceSpawner.retention_period``, in seconds.")

    reclaim_policy = Enum(
        list(retention.RECLAIM_POLICIES),
        default_value="automatic",
        config=True,
        help="""Who gives a recreated user their retained disks back: ``automatic`` (at their next start) or ``admin-only``.

        ``automatic`` suits SSO identities that are never reused. With
        ``admin-only`` the start is refused until an admin runs
        ``workspacespawner retention reclaim USER``.
        """,
    )

    disk_limit = Quantity(
        None,
        allow_none=True,
        config=True,
        help="""Disk a user's workspaces may hold together, a Kubernetes quantity (``"100Gi"``), when quotas are off.

        With ``WorkspaceQuota.enabled`` its ``max_disk`` applies instead.
        Checked when a disk grows (``disk expand``, or a profile asking for
        a bigger home). ``None``: no limit.
        """,
    )

    fence_timeout = Float(
        120.0,
        min=0,
        max=3600,
        config=True,
        help="""Seconds a start waits for the workspace's previous Pod or VMI, still shutting down, to go before refusing.""",
    )

    fence_wait_seconds = DeprecatedAlias("fence_timeout", section="WorkspaceSpawner",
                                         help="Deprecated: use ``c.WorkspaceSpawner.fence_timeout`` (seconds too).")

    reconcile_interval = Float(
        30.0,
        min=1,
        max=3600,
        config=True,
        help="""Seconds between passes of the compute reconciler, from the shared watch caches (no per-user polling).

        Each pass removes the Pods and VMIs of servers the hub shows stopped
        (a stop whose DELETE kept failing) and reports those of no server of
        the hub (orphans: log, the ``workspacespawner_orphan_compute`` gauge).
        """,
    )
