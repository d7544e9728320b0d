"""The quota request of one start: the resolved profile's size and the disks the start would add.

Built once per start, before anything is created, from the user's disks as
the cluster has them (PersistentVolumeClaims found by owner label, never by
name pattern).
"""

from __future__ import annotations

from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.kinds import PVC
from workspacespawner.quota.policy import Request
from workspacespawner.workspace.disks import requested_bytes


async def quota_request(
    kube, *, namespace: str, user_name: str, profile: ResolvedProfile, server_name: str, home_pvc: str, home_size: str, backend
) -> Request:
    """The :class:`~workspacespawner.quota.policy.Request` of a start (sizes in bytes).

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``backend``: the
    start's backend, which says what disk its kind adds
    (``new_disk_bytes``, a VM's root disk when it does not exist yet);
    ``home_size``: the home's size as a quantity, counted when the home
    PVC ``home_pvc`` does not exist yet.
    """
    claims = await kube.list(PVC, namespace, labels=names.owner_selector(user_name))
    mine = [c for c in claims if names.owned_by(c["metadata"], user_name)]
    existing = {c["metadata"]["name"] for c in mine}
    disk_new = 0 if home_pvc in existing else int(parse_quantity(home_size))
    disk_new += backend.new_disk_bytes(existing)
    return Request(
        gpus=profile.gpus,
        cpu=profile.cpu,
        memory=profile.memory,
        workspace_kind=profile.workspace_kind,
        server_name=server_name,
        profile=profile.slug,
        disk_existing=sum(requested_bytes(c) for c in mine),
        disk_new=disk_new,
    )
