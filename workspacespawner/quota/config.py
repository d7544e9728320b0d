"""The quota settings: ``c.WorkspaceQuota.*`` in ``jupyterhub_config.py``, checked when loaded.

One traitlets ``Configurable`` holds the policy (limits, overrides per
group and per user, the month's timezone, graces), where the ledger lives
and how the hub reaches its own REST API to stop servers. The hub and the
``workspacespawner usage`` command read the same settings from the same
config file. A bad value raises ``traitlets.TraitError`` naming the setting
and the value, at hub start-up when ``90-check-config.py`` builds it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traitlets import Bool, Dict, Float, Integer, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from workspacespawner.config.traittypes import DeprecatedAlias, in_minutes, minutes
from workspacespawner.db.engine import DatabaseUnavailable
from workspacespawner.db.location import resolved_url, sqlite_file
from workspacespawner.quota import policy
from workspacespawner.quota.policy import LIMIT_NAMES, Limits


def config_folder(config) -> Path:
    """The folder of the hub's config file, which relative SQLite paths of the ledger are resolved against.

    ``config.JupyterHub.config_file`` when set (``jupyterhub -f FILE`` puts
    it there, and so do the admin commands' ``-f``), else that of the
    JupyterHub application running in this process (a config file's own
    ``c`` lacks the command line), else JupyterHub's default
    ``jupyterhub_config.py``: the working directory. A relative config file
    is relative to the working directory, as for JupyterHub.
    """
    section = config.get("JupyterHub", {}) if config is not None else {}
    config_file = section.get("config_file") if hasattr(section, "get") else None
    app = sys.modules.get("jupyterhub.app")  # looked up, never imported: the admin commands run without JupyterHub
    if not config_file and app is not None and app.JupyterHub.initialized():
        config_file = app.JupyterHub.instance().config_file
    return Path(config_file or "jupyterhub_config.py").absolute().parent


class WorkspaceQuota(Configurable):
    """Card-hour quotas, workspace limits and their enforcement (``c.WorkspaceQuota.*``)."""

    enabled = Bool(
        True,
        config=True,
        help="""Check and meter every start. ``False`` turns quotas off: no checks, no ledger, no enforcement.""",
    )

    card_hours_per_month = Float(
        50.0,
        min=0,
        config=True,
        help="""GPU time each user may use per calendar month, in card-hours (one reference GPU for one hour).

        A server with 2 GPUs running 90 minutes uses 3 card-hours at weight
        1.0; each GPU unit is weighted by ``c.GPUEconomy.card_hour_weights``
        for the GPU the server was placed on (2 V100s at 0.5 for 90 minutes:
        1.5 card-hours; a ``1g.10gb`` MIG slice 1/7 unless set). 0 allows no
        GPU profile at all; CPU profiles never use card-hours.
        """,
    )

    max_concurrent = Integer(
        2,
        min=0,
        config=True,
        help="""Workspaces a user may have starting, running or stopping at once (default and named servers, containers and VMs).""",
    )

    max_cpu = Float(
        None,
        allow_none=True,
        min=0,
        config=True,
        help="""Largest CPU limit of a single workspace, in cores. ``None``: no limit.""",
    )

    max_memory = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""Largest memory limit of a single workspace, a Kubernetes quantity such as ``"64Gi"``. ``None``: no limit.""",
    )

    max_gpus = Integer(
        None,
        allow_none=True,
        min=0,
        config=True,
        help="""Most GPUs in a single workspace. ``None``: no limit.""",
    )

    max_disk = Unicode(
        "50Gi",
        allow_none=True,
        config=True,
        help="""Disk a user's workspaces may hold together (home plus VM root disks), a Kubernetes quantity.

        Only a start that would create new disk beyond it is refused; existing
        disks are never touched. ``None``: no limit.
        """,
    )

    group_limits = Dict(
        {},
        config=True,
        help="""Limits per JupyterHub group, replacing the defaults above for its members.

        A user in several groups gets, limit by limit, the most generous value
        among their groups. Keys are the settings above. Example::

            c.WorkspaceQuota.group_limits = {
                "students": {"card_hours_per_month": 20, "max_gpus": 1},
                "research": {"card_hours_per_month": 500, "max_concurrent": 4, "max_disk": "500Gi"},
            }
        """,
    )

    user_limits = Dict(
        {},
        config=True,
        help="""Limits per user name, winning over the defaults and every group.

        Keys as in ``group_limits``. Example::

            c.WorkspaceQuota.user_limits = {"ann": {"card_hours_per_month": 120}}
        """,
    )

    timezone = Unicode(
        "UTC",
        config=True,
        help="""IANA timezone whose calendar months card-hours count in (``"Europe/Berlin"``); they reset at its midnight of the 1st.""",
    )

    min_gpu_start_time = Float(
        900.0,
        min=0,
        max=86400,
        config=True,
        help="""Seconds of GPU time a GPU start needs left, for all the user's GPU workspaces together.

        A user with 2 GPUs running who asks for 1 more needs 3 × 900 seconds =
        0.75 card-hours left. 0: any card-hours left will do (two racing
        starts may then both take the last of them).
        """,
    )

    warn_before = Float(
        1800.0,
        min=0,
        max=86400,
        config=True,
        help="""Warn a user this many seconds (at their current GPU use) before their card-hours run out. 0: no early warning.""",
    )

    grace_period = Float(
        900.0,
        min=0,
        max=604800,
        config=True,
        help="""Seconds GPU servers keep running after the card-hours ran out, before they are stopped. 0: stopped at once.""",
    )

    min_gpu_start_minutes = DeprecatedAlias("min_gpu_start_time", section="WorkspaceQuota", to_new=minutes, from_new=in_minutes,
                                            help="Deprecated: use ``c.WorkspaceQuota.min_gpu_start_time``, in seconds.")
    warn_minutes = DeprecatedAlias("warn_before", section="WorkspaceQuota", to_new=minutes, from_new=in_minutes,
                                   help="Deprecated: use ``c.WorkspaceQuota.warn_before``, in seconds.")
    grace_minutes = DeprecatedAlias("grace_period", section="WorkspaceQuota", to_new=minutes, from_new=in_minutes,
                                    help="Deprecated: use ``c.WorkspaceQuota.grace_period``, in seconds.")

    grace_card_hours = Float(
        0.0,
        min=0,
        config=True,
        help="""Card-hours of overrun allowed after the month's card-hours ran out, before GPU servers are stopped.

        Together with ``grace_period``, the more generous grace applies.
        """,
    )

    enforce_interval = Float(
        60.0,
        min=1,
        max=3600,
        config=True,
        help="""Seconds between two passes of the enforcer (warnings, stops, reconciliation with the cluster, metrics).""",
    )

    reservation_timeout = Float(
        1800.0,
        min=60,
        config=True,
        help="""Seconds after which a start's reservation that never reached Running is cleaned up.

        Keep it above the spawner's ``start_timeout``.
        """,
    )

    ledger_url = Unicode(
        "sqlite:///workspacespawner-ledger.sqlite",
        config=True,
        help="""SQLAlchemy URL of the usage ledger (and the audit trail). The default is a SQLite file next to the hub's config file.

        A relative SQLite path is relative to the folder of the hub's config
        file (``JupyterHub.config_file``), not the working directory, for the
        hub and the admin commands (``-f``) alike.
        z2jh mounts its config read-only: give an absolute path on
        the hub's database volume there (``sqlite:////srv/jupyterhub/...``).
        :meth:`database_url` is the URL resolved.
        Any SQLAlchemy URL works, e.g. the hub's own PostgreSQL database
        (``postgresql+psycopg://...``): the ledger's tables and version
        table are prefixed ``workspacespawner_``.
        """,
    )

    ledger_timeout = Float(
        10.0,
        min=0.1,
        max=300,
        config=True,
        help="""Seconds to wait for the ledger's lock or connection before it counts as unreachable.""",
    )

    allow_cpu_when_ledger_down = Bool(
        True,
        config=True,
        help="""Let CPU-only starts proceed, unmetered, while the ledger cannot be reached. GPU starts always fail closed.""",
    )

    contact = Unicode(
        "an administrator",
        config=True,
        help="""Whom a refused user should ask for more, as words in a sentence (``"the GPU team at gpu@example.edu"``).""",
    )

    hub_api_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""URL of the hub's REST API the enforcer stops servers through. ``None``: the hub's own (``Hub.api_url``).""",
    )

    hub_api_token = Unicode(
        config=True,
        help="""API token the enforcer stops servers with; it needs the ``delete:servers`` scope (a service's token).

        Default: the environment variable ``WORKSPACESPAWNER_QUOTA_TOKEN``.
        Empty: the enforcer warns users but cannot stop servers.
        """,
    )

    metrics_top_users = Integer(
        20,
        min=0,
        max=1000,
        config=True,
        help="""How many users get their own ``user`` label in the card-hours metric; the rest add up in ``user="other"``.""",
    )

    @default("hub_api_token")
    def _default_hub_api_token(self):
        return os.environ.get("WORKSPACESPAWNER_QUOTA_TOKEN", "")

    def database_url(self) -> str:
        """:attr:`ledger_url` with a relative SQLite path made absolute against :func:`config_folder`.

        ``sqlite:///workspacespawner-ledger.sqlite`` of a hub started with
        ``-f /srv/hub/jupyterhub_config.py`` is
        ``sqlite:////srv/hub/workspacespawner-ledger.sqlite``; other URLs are unchanged.
        """
        return resolved_url(self.ledger_url, config_folder(self.config))

    def existing_ledger_url(self) -> str:
        """:meth:`database_url`, for a command that only reads: raises if it names a SQLite file that does not exist.

        Opening a SQLite URL creates an empty database, which would answer
        "no users" instead of saying the path is wrong. Raises
        :class:`~workspacespawner.db.engine.DatabaseUnavailable` (the
        ledger's ``LedgerUnavailable``) naming the path and the setting.
        """
        url = self.database_url()
        path = sqlite_file(url)
        if path is not None and not path.exists():
            raise DatabaseUnavailable(f"no ledger at {path}; is WorkspaceQuota.ledger_url right? (an admin command "
                                      "reads it from the hub's config: -f jupyterhub_config.py)")
        return url

    # -- checks ----------------------------------------------------------

    def _quantity(self, name: str, value):
        try:
            return policy.check_limit(name, value)
        except ValueError as e:
            raise TraitError(f"WorkspaceQuota.{name} {e}") from None

    @validate("max_memory")
    def _check_max_memory(self, proposal):
        return self._quantity("max_memory", proposal.value)

    @validate("max_disk")
    def _check_max_disk(self, proposal):
        return self._quantity("max_disk", proposal.value)

    @validate("timezone")
    def _check_timezone(self, proposal):
        try:
            policy.zone(proposal.value)
        except ValueError as e:
            raise TraitError(f"WorkspaceQuota.timezone {e}") from None
        return proposal.value

    @validate("ledger_url")
    def _check_ledger_url(self, proposal):
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(proposal.value)
        except ArgumentError:
            raise TraitError(
                f"WorkspaceQuota.ledger_url must be a SQLAlchemy URL such as 'sqlite:///ledger.sqlite', not {proposal.value!r}"
            ) from None
        return proposal.value

    def _check_overrides(self, setting: str, value) -> dict:
        if not isinstance(value, dict):
            raise TraitError(f"WorkspaceQuota.{setting} must be a dict of names to limit dicts, not {value!r}")
        checked = {}
        for who, limits in value.items():
            where = f"WorkspaceQuota.{setting}[{who!r}]"
            if not isinstance(limits, dict):
                raise TraitError(f"{where} must be a dict such as {{'card_hours_per_month': 100}}, not {limits!r}")
            entry = {}
            for name, limit in limits.items():
                try:
                    entry[name] = policy.check_limit(name, limit)
                except ValueError as e:
                    raise TraitError(f"{where}[{name!r}] {e}") from None
            checked[who] = entry
        return checked

    @validate("group_limits")
    def _check_group_limits(self, proposal):
        return self._check_overrides("group_limits", proposal.value)

    @validate("user_limits")
    def _check_user_limits(self, proposal):
        return self._check_overrides("user_limits", proposal.value)

    # -- use -------------------------------------------------------------

    def default_limits(self) -> Limits:
        """The limits of a user in no overriding group and without an override of their own."""
        return Limits(**{name: getattr(self, name) for name in LIMIT_NAMES})

    def limits_for(self, user: str, groups) -> Limits:
        """The effective :class:`Limits` of ``user`` in JupyterHub ``groups`` (names)."""
        return policy.effective_limits(self.default_limits(), self.group_limits, self.user_limits, user, groups)

    @property
    def min_start_hours(self) -> float:
        return self.min_gpu_start_time / 3600
