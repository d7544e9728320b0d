"""The quota side of WorkspaceSpawner: check and reserve before a start, meter runs, feed the enforcer.

Glue between the spawner and :mod:`.quota` (settings ``c.WorkspaceQuota.*``):
the request is built from the resolved profile and the user's disks (found
by owner label), reserved atomically in the ledger before any Kubernetes
object is created, opened as a run when the server is up, released on a
failed start, and closed when the server stops or is found gone. The
enforcer (one task per hub) learns which workspaces are alive from the
shared watch caches, never by polling the cluster per user.
"""

from __future__ import annotations

from workspacespawner.core import names
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.k8s.watches import VirtualMachineInstanceReflector, shared_reflectors
from workspacespawner.quota.enforcer import alive_from_objects
from workspacespawner.quota.policy import Request
from workspacespawner.quota.service import quota_for


class QuotaSpawnerMixin:
    """Quota hooks for WorkspaceSpawner (which supplies profile, user, namespace, API clients and reflectors)."""

    def _quota_setup(self) -> None:
        """Join the process's quota service; start its enforcer once per hub process."""
        self._quota_reservation = None
        self.quota = quota_for(self.config)
        self.quota.track(self)

    def _quota_start_enforcer(self) -> None:
        if self.hub is not None:
            self.quota.start_enforcer(hub_api_url=self.hub.api_url, alive=type(self)._quota_alive)

    @classmethod
    def _quota_alive(cls) -> set[tuple[str, str]] | None:
        """(user, server) of every Pod and VMI the shared watch caches hold; None until they have loaded.

        Pods carry kubespawner's user and server annotations, VMIs the same
        ones from their VM's template (:func:`.vmmanifests.template_annotations`).
        """
        caches = [r for (kind, _ns), r in list(cls.reflectors.items()) if kind == "pods"]
        caches += shared_reflectors(VirtualMachineInstanceReflector)
        if not caches or not all(r.first_load_future.done() for r in caches):
            return None
        return alive_from_objects(obj for r in caches for obj in list(r.resources.values()))

    async def _quota_request(self) -> Request:
        """The quota request of this start: the resolved profile's size and the disks it would add (bytes)."""
        claims = await self.api.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector=names.owner_selector(self.user.name)
        )
        claims = [self.api.api_client.sanitize_for_serialization(c) for c in claims.items]
        mine = [c for c in claims if names.owned_by(c["metadata"], self.user.name)]
        existing = {c["metadata"]["name"] for c in mine}
        disk_new = 0 if self.home_pvc_name in existing else int(parse_quantity(self.home_size))
        if self.profile.workspace_kind == "vm" and f"{self._vm_identity().vm}-root" not in existing:
            disk_new += int(parse_quantity(self.vm_root_disk_size))
        profile = self.profile
        return Request(
            gpus=profile.gpus,
            cpu=profile.cpu,
            memory=profile.memory,
            workspace_kind=profile.workspace_kind,
            server_name=self.name,
            profile=profile.slug,
            disk_existing=sum(int(parse_quantity(c["spec"]["resources"]["requests"]["storage"])) for c in mine),
            disk_new=disk_new,
        )

    async def _quota_reserve(self) -> None:
        """Check and reserve this start; raises QuotaRefused (a WorkspaceError) with the numbers."""
        self._quota_start_enforcer()
        self._quota_reservation = await self.quota.reserve(
            user=self.user.name, groups=self._group_names(), request=await self._quota_request(), spawner=self
        )
