"""The quota step of one start: its request (the resolved profile's size and the disks it would add), checked and reserved.

Built once per start, before anything is created, from the user's disks as
the cluster has them (PersistentVolumeClaims and root DataVolumes found by
owner label, never by name pattern: :func:`~workspacespawner.lifecycle.disks.user_disks`);
with quotas off, nothing is asked of the cluster (:func:`reserve_start`).
"""

from __future__ import annotations

from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.lifecycle.disks import user_disk_bytes, user_disks
from workspacespawner.queue.start import queue_of
from workspacespawner.quota.policy import Request, Reservation
from workspacespawner.quota.service import TrackedWorkspace


async def quota_request(
    kube, *, namespace: str, user_name: str, profile: ResolvedProfile, server_name: str, home_pvc: str, home_size: str, backend
) -> Request:
    """The :class:`~workspacespawner.quota.policy.Request` of a start (sizes in bytes; GPU resource, product and
    provisional weight from the resolved profile).

    ``kube``: a :class:`~workspacespawner.k8s.api.Kube`; ``backend``: the
    start's backend, which says what disk its kind adds
    (``new_disk_bytes``, a VM's root disk when it does not exist yet);
    ``home_size``: the home's size as a quantity, counted when the home
    PVC ``home_pvc`` does not exist yet.
    """
    sizes = user_disk_bytes(*await user_disks(kube, namespace, user_name), user_name)
    existing = set(sizes)
    disk_new = 0 if home_pvc in existing else int(parse_quantity(home_size))
    disk_new += backend.new_disk_bytes(existing)
    return Request(
        gpus=profile.gpus,
        cpu=profile.cpu,
        memory=profile.memory,
        workspace_kind=profile.workspace_kind,
        server_name=server_name,
        profile=profile.slug,
        disk_existing=sum(sizes.values()),
        disk_new=disk_new,
        gpu_resource=profile.gpu_resource,
        gpu_product=profile.gpu_product or "",
        gpu_weight=profile.gpu_weight,
    )


async def reserve_start(
    quota, kube, *, namespace: str, user_name: str, groups, profile: ResolvedProfile, server_name: str, home_pvc: str,
    home_size: str, backend
) -> Reservation | None:
    """The pre-spawn quota step: :func:`quota_request`, then ``quota.reserve``; None at once when quotas are off.

    ``quota``: the hub's :class:`~workspacespawner.quota.service.QuotaService`;
    ``groups``: the user's JupyterHub group names; the rest as
    :func:`quota_request`. Quotas off: no Kubernetes call at all (the PVC
    list is the request's). Raises
    :class:`~workspacespawner.quota.refusal.QuotaRefused` when refused.
    """
    if not quota.enabled:
        return None
    request = await quota_request(
        kube, namespace=namespace, user_name=user_name, profile=profile, server_name=server_name, home_pvc=home_pvc,
        home_size=home_size, backend=backend,
    )
    return await quota.reserve(user=user_name, groups=groups, request=request)


async def reserve_for(spawner, groups: list[str]) -> Reservation | None:
    """The pre-spawn quota step of ``spawner`` (a WorkspaceSpawner whose home is found and whose backend names a new
    start): the server tracked for the enforcer (:class:`~.service.TrackedWorkspace`), then :func:`reserve_start`
    with the user's JupyterHub ``groups``; a start that waits in a GPU queue (:func:`~workspacespawner.queue.start.queue_of`)
    is metered from when the queue admits it (:meth:`~.service.QuotaService.in_line`)."""
    s, quota = spawner, spawner.services.quota
    quota.track(TrackedWorkspace(s.user.name, s.name or "", s.namespace, s.backend.event_object(), frozenset(groups), s.api))
    reservation = await reserve_start(quota, s.services.kube, namespace=s.namespace, user_name=s.user.name, groups=groups,
                                      profile=s.profile, server_name=s.name, home_pvc=s.home_pvc_name,
                                      home_size=s.home_size, backend=s.backend)
    quota.in_line(s.user.name, s.name or "", waits=queue_of(s, groups) is not None)
    return reservation
