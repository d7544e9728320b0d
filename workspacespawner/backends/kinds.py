"""The backend of each ``workspace_kind``: ``container`` (a Pod, kubespawner's) and ``vm`` (a KubeVirt VM).

The spawner builds them once (:func:`backends_for`) and picks one per start
by the profile's kind; nothing outside the backends names a kind otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from workspacespawner.backends.base import Backend
from workspacespawner.backends.container.backend import ContainerBackend
from workspacespawner.backends.vm import backend as vm

#: The kind a start runs when its profile names none the backends know (the Pod).
DEFAULT_KIND = ContainerBackend.kind


def backends_for(spawner, *, placement: Callable[[], object]) -> dict[str, Backend]:
    """``{kind: backend}`` of ``spawner`` (a WorkspaceSpawner); ``placement()``: where a start's compute may and
    should run (a :class:`~workspacespawner.gpu.placement.Placement`), which a VM's settings carry."""
    return {ContainerBackend.kind: ContainerBackend(spawner), vm.VMBackend.kind: vm.for_spawner(spawner, placement=placement)}
