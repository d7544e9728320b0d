"""Collect what the home page shows for one user: their servers from JupyterHub, one ledger read, disks from the watch.

``user``: JupyterHub's ``User`` (``jupyterhub.user.User``), whose
``all_spawners()`` yields the running servers' spawners and, for the
others, their database rows (``orm.Spawner``: ``name`` and the ``state``
:meth:`WorkspaceSpawner.get_state` saved, which holds the last profile).
The user's PersistentVolumeClaims and DataVolumes come from the hub's
watches through :class:`~workspacespawner.k8s.cachedkube.CachedKube`.
"""

from __future__ import annotations

from jupyterhub.spawner import Spawner

from workspacespawner import useroptions
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.homepage.model import disk_line, home_data, idle_lines, quota_warning, retained_disks, server_row
from workspacespawner.idle.notices import IDLE_NOTICES
from workspacespawner.lifecycle import disks
from workspacespawner.quota.announce import ANNOUNCEMENTS


def saved_profile(spawner) -> ResolvedProfile | None:
    """The profile a server runs or last ran: the live spawner's, else the one its saved state holds (None: none)."""
    profile = getattr(spawner, "profile", None)
    if isinstance(profile, ResolvedProfile):
        return profile
    saved = (getattr(spawner, "state", None) or {}).get("profile")
    try:
        return ResolvedProfile.from_state(saved) if isinstance(saved, dict) else None
    except TypeError:
        return None


async def user_disks(spawner, user_name: str) -> list[dict]:
    """``user_name``'s PersistentVolumeClaims and DataVolumes (:func:`~workspacespawner.lifecycle.disks.user_disks`)."""
    pvcs, dvs = await disks.user_disks(spawner.services.kube, spawner.namespace, user_name)
    return pvcs + dvs


async def gather(user, spawner) -> dict:
    """The home page's data (:func:`.model.home_data`) of ``user``; ``spawner``: any WorkspaceSpawner of theirs (its
    services, namespace and groups are the user's)."""
    month = await spawner.services.quota.balance(user=user.name, groups=useroptions.group_names(spawner))
    rows = []
    for each in user.all_spawners():
        live = isinstance(each, Spawner)  # else the database row of a server not loaded (not running)
        rows.append(server_row(
            name=each.name,
            active=live and bool(each.active),
            ready=live and bool(each.ready),
            pending=each.pending if live else None,
            profile=saved_profile(each),
            url=user.server_url(each.name),
            month=month,
            shown=spawner.services.economy.display_name,
        ))
    warning = quota_warning(month, ANNOUNCEMENTS.get(user.name))
    disks = await user_disks(spawner, user.name)
    limit = month.limits.max_disk if month is not None else None
    data = home_data(rows, warning, retained_disks(disks), disk_line(disks, limit))
    data["idle"] = idle_lines(IDLE_NOTICES.of(user.name))
    return data
