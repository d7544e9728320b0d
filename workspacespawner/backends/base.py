"""The contract every workspace kind implements: what a start, stop and poll ask of a backend.

The spawner picks one backend per start, once the profile has resolved
(``workspace_kind``: ``container`` or ``vm``, :mod:`.kinds`); that is the
only place the kind is switched on, and what differs by kind is a method here. The generic steps stay in the spawner and the
services: the lifecycle (:mod:`workspacespawner.lifecycle.tracker`), the
quota reservation, the home PersistentVolumeClaim and the storage tiers.

A backend is also the lifecycle's
:class:`~workspacespawner.lifecycle.phases.KindStatus`: it says which
phase its own objects show. Modelled on dask-gateway's ``Backend``: a small
async contract, each method documented with what it may raise.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from workspacespawner.core.milestones import Say
from workspacespawner.lifecycle.phases import Observed, Status, WorkspaceRef
from workspacespawner.storage.prepare import PreparedTiers


@dataclass(frozen=True)
class StartContext:
    """What a start hands its backend, all resolved before any compute is made.

    ``env()``: the server's environment (kubespawner's ``get_env()`` plus the
    tiers'); ``command()``: the singleuser command, ``args()``: its arguments
    (kubespawner's ``get_args()``; a VM writes these into its guest, with
    where to listen; a container's Pod gets them from kubespawner's own
    manifest, so a container start never calls these three); ``tiers``: the
    start's storage tiers; ``home_mount_path``: where the home appears;
    ``extra_labels``: labels every object of the start carries (z2jh's
    network-access labels among them); ``say(message, milestone)``: a progress
    step (:class:`~workspacespawner.core.milestones.Say`);
    ``claim_disks()``: takes the attach claim on the workspace's disks again,
    for a backend that creates a disk in its start (a VM's first root disk),
    before any compute can use it (raises the claim's 409 ``disk-attached``);
    ``new_disk_annotations``: what a disk made in the start is created with
    (the attach claim of this start, so that claim needs no write);
    ``recorded``: the lifecycle status an object made in the start is
    created in (``Stopped``: its compute shows the rest), so no write
    records it later.
    """

    env: Callable[[], Mapping[str, str]]
    command: Callable[[], Sequence[str]]
    args: Callable[[], Sequence[str]]
    tiers: PreparedTiers
    home_mount_path: str
    say: Say
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    claim_disks: Callable[[], Awaitable[None]] | None = None
    new_disk_annotations: Mapping[str, str] = field(default_factory=dict)
    recorded: Status | None = None


class Backend(abc.ABC):
    """One workspace kind's start, stop and poll (see the module docstring)."""

    #: The ``workspace_kind`` this backend runs.
    kind: str = ""

    @abc.abstractmethod
    def ref(self, *, home_pvc: str | None, fresh: bool = False) -> WorkspaceRef:
        """The workspace's objects: home PVC ``home_pvc`` plus this kind's (a Pod; a VM and its root disk).

        ``fresh``: names as a new start makes them (from the current
        templates), not as the last start saved them.
        """

    @abc.abstractmethod
    def new_disk_bytes(self, existing: set[str]) -> int:
        """Bytes of disk a start would add besides the home (a VM's root disk when not in ``existing`` PVC names)."""

    @abc.abstractmethod
    def compute_status(self, observed: Observed) -> Status | None:
        """The phase this kind's compute shows in ``observed``, or None when it has none."""

    @abc.abstractmethod
    def root_disk_status(self, observed: Observed) -> Status | None:
        """Degraded for a failed root disk, ProvisioningDisk for one being prepared, else None."""

    @abc.abstractmethod
    async def fence(self, say=None) -> None:
        """Refuse or clean up this kind's own leftover compute before a start (the generic fence covers Pods);
        ``say(message)`` shows a waiting step.

        Raises a 409 :class:`~workspacespawner.core.errors.WorkspaceError`
        (``node-unreachable``, ``already-running``, ``still-stopping``).
        """

    @abc.abstractmethod
    async def start(self, ctx: StartContext) -> str:
        """Make the compute and wait until the server answers; return its URL.

        Raises :class:`~workspacespawner.core.errors.WorkspaceError` on a
        refusal, a failure or a timeout; never deletes a disk.
        """

    @abc.abstractmethod
    async def stop(self, now: bool = False) -> None:
        """Stop the compute only; disks (and a VM object) stay."""

    @abc.abstractmethod
    async def poll(self) -> int | None:
        """``Spawner.poll()``: None while the server runs or starts, else an exit status."""

    @abc.abstractmethod
    def compute_events(self) -> list[dict]:
        """The core/v1 Events (dicts, from the shared watch caches, no API call) about this workspace's compute:
        its Pod's, its current VMI's; the spawn page's progress shows those of the current start."""

    @abc.abstractmethod
    def event_object(self) -> dict:
        """The core/v1 ``ObjectReference`` (``apiVersion``, ``kind``, ``name``) Events about this workspace go on."""

    async def watch(self) -> None:
        """Start (or join) this kind's own shared watches, besides the namespace's Pod, VMI and PVC watches every start
        reads (:func:`~workspacespawner.hubtasks.watch_workspaces`); none by default."""

    def start_hub_tasks(self) -> None:
        """Start this kind's hub-wide background tasks, once per hub process (a VM's root-disk pools); none by default."""

    def tier_env(self, tiers: PreparedTiers) -> dict[str, str]:
        """The storage tiers' environment variables as this kind's server sees them (:meth:`.PreparedTiers.env`)."""
        return tiers.env()

    @abc.abstractmethod
    def image(self) -> str:
        """The server's image as a sentence to an administrator names it (a container image, a VM's golden image)."""

    def keeps_disks(self) -> bool:
        """Whether an earlier start of this kind left disks of its own (a VM's root disk), which a deletion retains too."""
        return False

    async def server_log(self, lines: int) -> str | None:
        """The server's own output, its last ``lines`` lines as the API serves it; None when this kind has none the
        API serves (a VM's guest keeps its own). Read only to explain a failed start (:mod:`.codeserver`)."""
        return None

    def state(self) -> dict:
        """What ``get_state()`` keeps for this kind (JSON only)."""
        return {}

    def load_state(self, state: dict) -> None:
        """Read back :meth:`state` from the spawner's whole state dict."""
