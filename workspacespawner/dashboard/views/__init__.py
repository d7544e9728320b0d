"""The dashboard's views: each module lists its routes; :data:`VIEW_MODULES` names the modules.

A view module has ``ROUTES``: a list of ``(path_regex, handler_class)``,
the regex relative to the service prefix (``r"cluster"`` is
``/services/workspaces/cluster``; ``r""`` the prefix itself), each
handler a :class:`~workspacespawner.dashboard.base.DashboardHandler`. To add
a view: add its module here and one line to :data:`VIEW_MODULES`.
"""

from __future__ import annotations

import importlib

#: The view modules, in the order their routes are tried.
VIEW_MODULES = [
    "workspacespawner.dashboard.views.workspaces",
    "workspacespawner.dashboard.views.reports",
    "workspacespawner.dashboard.views.cluster",
]


def routes() -> list[tuple[str, type]]:
    """Every view module's ``ROUTES``, in :data:`VIEW_MODULES` order."""
    found = []
    for name in VIEW_MODULES:
        found += list(importlib.import_module(name).ROUTES)
    return found
