"""Collect what the spawn page shows for one user, from the hub's caches and one ledger read.

- the profiles the user may start (:func:`workspacespawner.useroptions.profile_list`,
  filtered by ``allowed_groups`` and team pools);
- their usage and limits (:meth:`QuotaService.balance`: one ledger read on
  the database thread; none when quotas are off);
- their disks (PersistentVolumeClaims and root DataVolumes they own, from the hub's watches
  through :class:`~workspacespawner.k8s.cachedkube.CachedKube`: no API call
  while the watch runs);
- the GPUs free now (:class:`~workspacespawner.gpu.capacity.GPUCapacity`:
  the Pod and VMI watches, and one Node LIST per ``node_ttl`` for the whole hub);
- the card-hour weights (the hub's ``c.GPUEconomy``, read once per process);
- for VM profiles, the golden image this server's root disk was cloned from
  (the VM and DataVolume watches, :meth:`~workspacespawner.spawner.WorkspaceSpawner.cached_root_disk`).

:class:`PageCache` keeps each user's result for a few seconds, so the page's
live refresh reads nothing at all on most requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from workspacespawner import useroptions
from workspacespawner.config.goldenimages import cloned_from
from workspacespawner.config.teampools import pool_of_profile
from workspacespawner.lifecycle.disks import user_disk_bytes, user_disks
from workspacespawner.quota import policy
from workspacespawner.spawnpage import placementnotes
from workspacespawner.spawnpage.model import Balance, Card, balance, card, page_data

#: Spawner settings a profile's ``kubespawner_override`` may set, which a card shows when it does not.
CARD_DEFAULTS = ("workspace_kind", "ide", "cpu_limit", "mem_limit", "vm_gpu_device_name", "vm_golden_image",
                 "vm_golden_image_namespace")


@dataclass(frozen=True)
class SpawnPage:
    """One user's spawn page: ``profiles`` (the profile_list entries they may start, in order), a card per profile,
    and their :class:`~.model.Balance`."""

    profiles: list[dict]
    cards: list[Card]
    balance: Balance

    def to_json(self) -> dict:
        return page_data(self.cards, self.balance, policy.utcnow())


async def disk_bytes(spawner) -> int:
    """The bytes the user's disks ask for together (:func:`~workspacespawner.lifecycle.disks.user_disks`: the PVC watch, one LIST if it
    is down, and the root DataVolumes a running DataVolume watch holds), each disk once."""
    user = spawner.user.name
    return sum(user_disk_bytes(*await user_disks(spawner.services.kube, spawner.namespace, user), user).values())


async def root_disk_image(spawner, profiles: list[dict], defaults: dict) -> str | None:
    """``namespace/name`` of the golden image this server's VM root disk was cloned from
    (:func:`~workspacespawner.config.goldenimages.cloned_from`), from the shared VM and DataVolume watches; None when
    it has no root disk, or none of ``profiles`` is a VM profile (then no VM watch is started)."""
    kinds = {(p.get("kubespawner_override") or {}).get("workspace_kind", defaults["workspace_kind"]) for p in profiles}
    return cloned_from(await spawner.cached_root_disk()) if "vm" in kinds else None


def servers_allowed(user) -> int | None:
    """How many servers JupyterHub lets ``user`` have: 1 with named servers off (``c.JupyterHub.allow_named_servers``);
    the default and ``c.JupyterHub.named_server_limit_per_user`` named ones when that is a number above 0; None: no
    limit of the hub's (or a callable one, which needs a request to answer)."""
    if not getattr(user, "allow_named_servers", False):
        return 1
    limit = (getattr(user, "settings", None) or {}).get("named_server_limit_per_user", 0)
    return limit + 1 if isinstance(limit, int) and limit > 0 else None


async def gather(spawner) -> SpawnPage:
    """The :class:`SpawnPage` of ``spawner``'s user now (profiles, GPUs free, usage, disks)."""
    groups = useroptions.group_names(spawner)
    profiles = useroptions.visible_profiles(spawner, await useroptions.profile_list(spawner))
    found, pools = await asyncio.gather(
        spawner.services.quota.balance(user=spawner.user.name, groups=groups), spawner.gpu_view.free()
    )
    usage, limits = (found.usage, found.limits) if found is not None else (None, None)
    used_disk = await disk_bytes(spawner) if found is not None else 0
    defaults = {name: getattr(spawner, name) for name in CARD_DEFAULTS}
    team = await placementnotes.team_gpu_pools(spawner, profiles)
    economy = spawner.services.economy
    root_image = await root_disk_image(spawner, profiles, defaults)
    cards = [replace(card(profile, defaults, team.get(pool_of_profile(profile), pools), usage, limits, economy,
                          root_image), **await placementnotes.notes(spawner, profile, groups)) for profile in profiles]
    return SpawnPage(profiles, cards, balance(usage, limits, used_disk, servers_allowed=servers_allowed(spawner.user)))


class PageCache:
    """Each key's answer (a :class:`SpawnPage`, a home page's dict) for ``ttl`` seconds; callers asking at once share
    one gathering.

    ``clock``: monotonic seconds (tests pass their own).
    """

    def __init__(self, ttl: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._pages: dict[str, tuple[float, asyncio.Future]] = {}

    async def get(self, key: str, make: Callable[[], Awaitable]):
        """The cached page of ``key``, or ``await make()`` when it is older than ``ttl`` (or failed)."""
        now = self.clock()
        for old in [k for k, (at, _) in self._pages.items() if now - at >= self.ttl]:
            del self._pages[old]
        entry = self._pages.get(key)
        if entry is None:
            entry = (now, asyncio.ensure_future(make()))
            self._pages[key] = entry
        try:
            return await asyncio.shield(entry[1])
        except Exception:
            if self._pages.get(key) is entry:
                del self._pages[key]  # a failure is not kept: the next request tries again
            raise
