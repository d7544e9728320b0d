"""Team-folder claims at start: create the missing ones from their template, never delete any.

For each claim a starting user's teams mount, :func:`ensure_team_claims`
reads it (one call when it exists, the common case) and, when it is missing
and a team of it says ``create``, creates it from :func:`tiers.make_team_claim`
(re-reading after a 409 from a concurrent start of another member). A claim
that is missing and not to be created, that is somebody's own disk
(:func:`tiers.claim_refusal`), or that the API refuses to read or create is
left out of this start with a message for the user; the workspace still
starts with the rest. Nothing here, nor anywhere else in workspacespawner,
deletes a team claim: not a stop, a user deletion or the retention purge
(those select owner labels, which team claims never carry).

API followed: core/v1 PersistentVolumeClaim (``read``/``create`` namespaced),
through :func:`owned.call`'s bounded retry of transient errors.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.owned import core_accessors
from workspacespawner.storage.tiers import TeamFolder, claim_refusal, make_team_claim

log = logging.getLogger("workspacespawner")


@dataclass(frozen=True)
class TeamClaimStatus:
    """What a start found for one claim: ``usable`` or not, ``created`` now, its ``phase`` and a ``message`` for the user."""

    claim: str
    teams: tuple[str, ...]
    usable: bool
    created: bool = False
    phase: str | None = None
    message: str = ""


def _describe(folders: Sequence[TeamFolder]) -> str:
    return " and ".join(f"{f.mount_path} ({'read-only' if f.read_only else 'read-write'}, {f.size})" for f in folders)


async def _ensure_one(core_api, namespace: str, folders: Sequence[TeamFolder], all_groups: Sequence[str]) -> TeamClaimStatus:
    claim, teams = folders[0].claim, tuple(f.group for f in folders)
    creator = next((f for f in folders if f.create), None)
    manifest = make_team_claim(folder=creator or folders[0], namespace=namespace, groups=all_groups)
    read, create = core_accessors(core_api, "persistent_volume_claim", manifest)
    created = False
    found = None
    try:
        for _attempt in range(2):
            try:
                found = await read()
                break
            except ApiException as e:
                if e.status != 404:
                    raise
            if creator is None:
                return TeamClaimStatus(claim, teams, usable=False, message=(
                    f"Team folder {_describe(folders)} is not mounted: its volume {claim!r} does not exist yet; "
                    "please ask an administrator."))
            try:
                found, created = await create(), True
                log.info("Created team claim %s/%s for %s", namespace, claim, ", ".join(all_groups))
                break
            except ApiException as e:
                if e.status != 409:
                    raise
    except (ApiException, aiohttp.ClientError, TimeoutError) as e:
        detail = f"{e.status} {e.reason}" if isinstance(e, ApiException) else type(e).__name__
        log.warning("Team claim %s/%s could not be read or created: %s", namespace, claim, detail)
        return TeamClaimStatus(claim, teams, usable=False, message=(
            f"Team folder {_describe(folders)} is not mounted: the cluster could not provide its volume ({detail})."))
    if found is None:
        return TeamClaimStatus(claim, teams, usable=False, message=f"Team folder {_describe(folders)} is not mounted; please try again.")
    refusal = claim_refusal(found)
    if refusal:
        log.error("Team folder of %s names claim %s/%s, but %s: not mounted", ", ".join(teams), namespace, claim, refusal)
        return TeamClaimStatus(claim, teams, usable=False, message=(
            f"Team folder {_describe(folders)} is not mounted: the volume {claim!r} {refusal}; please ask an administrator."))
    phase = (found.get("status") or {}).get("phase", "Pending")
    verb = "created" if created else "ready"
    return TeamClaimStatus(claim, teams, usable=True, created=created, phase=phase,
                           message=f"Team folder {_describe(folders)} {verb}")


async def ensure_team_claims(
    core_api, *, namespace: str, folders: Sequence[TeamFolder], all_folders: Sequence[TeamFolder] = ()
) -> list[TeamClaimStatus]:
    """Make sure the claims of ``folders`` (one user's teams) exist; one :class:`TeamClaimStatus` per claim.

    ``core_api`` is a kubernetes_asyncio ``CoreV1Api``. ``all_folders``
    (every configured team) names, in a created claim's annotation, all the
    groups that share it. Never raises for one claim's trouble: its status
    says ``usable=False`` with the reason, and the start goes on without it.
    """
    by_claim: dict[str, list[TeamFolder]] = {}
    for folder in folders:
        by_claim.setdefault(folder.claim, []).append(folder)
    statuses = []
    for claim, group in by_claim.items():
        sharing = sorted({f.group for f in (*all_folders, *group) if f.claim == claim})
        statuses.append(await _ensure_one(core_api, namespace, group, sharing))
    return statuses
