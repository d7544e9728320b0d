"""One start's storage tiers made ready: the user's team claims ensured, and what each tier gives the workspace.

:func:`prepare_tiers` runs once per start, after the profile resolved and
before the Pod or VM is built; the :class:`PreparedTiers` it returns is what
the backends mount (``pod_tiers`` for containers, ``vm_tiers`` for VMs) and
what the workspace's environment says (:meth:`PreparedTiers.env`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from workspacespawner.storage import tiers
from workspacespawner.storage.teamclaims import ensure_team_claims
from workspacespawner.storage.tiers import StorageSettings, TeamFolder


@dataclass(frozen=True)
class PreparedTiers:
    """The tiers of one start: ``settings`` (resolved), the user's ``groups``, and the claims found ``unavailable``."""

    settings: StorageSettings
    groups: frozenset[str] = frozenset()
    unavailable: frozenset[str] = frozenset()

    def mounted_teams(self, *, vm: bool = False) -> list[TeamFolder]:
        """The user's team folders this start mounts (a VM cannot mount a ``sub_path`` of a claim)."""
        mounted = [t for t in tiers.teams_for_user(self.groups, self.settings.team_folders) if t.claim not in self.unavailable]
        return [t for t in mounted if not t.sub_path] if vm else mounted

    def env(self, *, vm: bool = False) -> dict[str, str]:
        """The tiers' environment variables (cache locations, ``WORKSPACE_*``)."""
        return tiers.workspace_env(settings=self.settings, teams=self.mounted_teams(vm=vm))


async def prepare_tiers(
    core_api, *, namespace: str, settings: StorageSettings, groups: Iterable[str], say: Callable[[str], None]
) -> PreparedTiers:
    """Ensure the team claims of ``groups`` (kubernetes_asyncio ``CoreV1Api``); ``say(message)`` tells what each tier is.

    A team claim that cannot be used is left out of this start (with a step
    saying why); the start goes on.
    """
    groups = frozenset(groups)
    mine = tiers.teams_for_user(groups, settings.team_folders)
    statuses = await ensure_team_claims(core_api, namespace=namespace, folders=mine, all_folders=list(settings.team_folders.values()))
    for status in statuses:
        say(status.message)
    if settings.scratch is not None:
        say(tiers.scratch_notice(settings.scratch))
    return PreparedTiers(settings=settings, groups=groups, unavailable=frozenset(s.claim for s in statuses if not s.usable))
