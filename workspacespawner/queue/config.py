"""GPU queues: ``c.GPUQueues.queues``, which groups wait in which line for which GPUs, checked when loaded (issue #41).

A queue is a course's or a team's share of the GPUs, as Kueue keeps it: a
ClusterQueue with a nominal quota of each GPU resource per GPU product (a
ResourceFlavor per product, matching the nodes' ``nvidia.com/gpu.product``
label, as the GPU economy prices them), optionally in a cohort whose queues
lend each other what they do not use (up to a borrowing limit), and a
LocalQueue of the same name in the workspaces' namespace. A GPU workspace of
a member of one of the queue's JupyterHub groups names that LocalQueue, so
Kueue holds its Pod until the queue has the GPUs, instead of the start being
refused. :mod:`.kueueobjects` renders the Kueue objects from this setting;
``workspacespawner queues`` prints them for an operator to apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from traitlets import Dict, TraitError, validate
from traitlets.config import Configurable

from workspacespawner.core.gpuresources import parse_gpu_resource

QUEUE_KEYS = {"groups", "gpus", "cohort", "borrowing_limit", "max_wait_seconds"}
#: A queue's name: a DNS label (it names the LocalQueue and, prefixed, the ClusterQueue).
QUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
#: The product key that stands for any product: a flavor without node labels.
ANY_PRODUCT = "*"


@dataclass(frozen=True)
class GPUQueue:
    """One queue: ``name``; ``groups`` (JupyterHub groups whose GPU workspaces wait in it); ``gpus``: ``{(resource,
    product): nominal quota}``; ``cohort`` (or None); ``borrowing_limit`` (units of each resource it may borrow from
    its cohort, None: no limit); ``max_wait_seconds`` (how long a start may wait in it, None: the start timeout)."""

    name: str
    groups: tuple[str, ...]
    gpus: dict[tuple[str, str], int]
    cohort: str | None = None
    borrowing_limit: int | None = None
    max_wait_seconds: int | None = None

    def member(self, group_names: Iterable[str]) -> bool:
        """Whether a user in ``group_names`` waits in this queue."""
        return bool(set(self.groups) & set(group_names))

    def resources(self) -> list[str]:
        """The GPU resources the queue holds, in the configured order."""
        return list(dict.fromkeys(resource for resource, _product in self.gpus))


def _count(where: str, value, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        raise TraitError(f"{where} must be a whole number {'> 0' if positive else '>= 0'}, not {value!r}")
    return value


def _queue(name, spec) -> GPUQueue:
    where = f"GPUQueues.queues[{name!r}]"
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise TraitError(f"GPUQueues.queues: {name!r} is not a queue name (lower-case letters, digits and '-', "
                         "at most 42 characters, such as ml101)")
    if not isinstance(spec, dict):
        raise TraitError(f"{where} must be a dict with 'groups' and 'gpus', not {spec!r}")
    unknown = sorted(set(spec) - QUEUE_KEYS)
    if unknown:
        raise TraitError(f"{where} has unknown keys {unknown}; a queue takes {sorted(QUEUE_KEYS)}")
    groups = spec.get("groups")
    if not isinstance(groups, (list, tuple)) or not groups or not all(isinstance(g, str) and g for g in groups):
        raise TraitError(f"{where}['groups'] must be a non-empty list of JupyterHub group names, not {groups!r}")
    gpus = spec.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise TraitError(f"{where}['gpus'] must be {{resource: {{product: GPUs}}}}, such as "
                         f"{{'nvidia.com/gpu': {{'NVIDIA-A100-SXM4-80GB': 4}}}}, not {gpus!r}")
    quotas: dict[tuple[str, str], int] = {}
    for resource, products in gpus.items():
        if not isinstance(resource, str) or parse_gpu_resource(resource) is None:
            raise TraitError(f"{where}['gpus']: {resource!r} is not a GPU resource name (such as nvidia.com/gpu, "
                             "nvidia.com/mig-1g.10gb or nvidia.com/gpu.shared)")
        if not isinstance(products, dict) or not products:
            raise TraitError(f"{where}['gpus'][{resource!r}] must be {{product: GPUs}} (the node label "
                             f"nvidia.com/gpu.product, or {ANY_PRODUCT!r} for any), not {products!r}")
        for product, quota in products.items():
            if not isinstance(product, str) or not product:
                raise TraitError(f"{where}['gpus'][{resource!r}]: {product!r} is not a GPU product")
            quotas[(resource, product)] = _count(f"{where}['gpus'][{resource!r}][{product!r}]", quota)
    cohort = spec.get("cohort")
    if cohort is not None and not (isinstance(cohort, str) and QUEUE_NAME.match(cohort)):
        raise TraitError(f"{where}['cohort'] must be a cohort name (lower-case letters, digits and '-'), not {cohort!r}")
    limit = spec.get("borrowing_limit")
    if limit is not None:
        if cohort is None:
            raise TraitError(f"{where}['borrowing_limit'] needs a 'cohort' to borrow from")
        limit = _count(f"{where}['borrowing_limit']", limit)
    wait = spec.get("max_wait_seconds")
    if wait is not None:
        wait = _count(f"{where}['max_wait_seconds']", wait, positive=True)
    return GPUQueue(name, tuple(groups), quotas, cohort, limit, wait)


def check_queues(value) -> dict:
    """``value`` checked as ``GPUQueues.queues``; raises ``traitlets.TraitError`` naming the queue and the bad value.
    A group waits in one queue at most."""
    if not isinstance(value, dict):
        raise TraitError(f"GPUQueues.queues must be a dict of queue names to queues, not {value!r}")
    seen: dict[str, str] = {}
    for name, spec in value.items():
        queue = _queue(name, spec)
        for group in queue.groups:
            other = seen.setdefault(group, name)
            if other != name:
                raise TraitError(f"GPUQueues.queues: group {group!r} is in queue {other!r} and in {name!r}; "
                                 "a group waits in one queue")
    return dict(value)


def check_queue_waits(queues: dict[str, GPUQueue], start_timeout: float) -> None:
    """Raise ``traitlets.TraitError`` for a queue whose ``max_wait_seconds`` is not below the spawner's
    ``start_timeout``, which covers the wait in line and the start after it."""
    for queue in queues.values():
        if queue.max_wait_seconds is not None and queue.max_wait_seconds >= start_timeout:
            raise TraitError(
                f"GPUQueues.queues[{queue.name!r}]['max_wait_seconds'] = {queue.max_wait_seconds} is not below "
                f"KubeSpawner.start_timeout = {start_timeout:g}, which covers the wait in line and the start after "
                "it: a start would time out in line without its place. Raise start_timeout above the wait plus "
                "the time a start takes, or lower max_wait_seconds.")


class GPUQueues(Configurable):
    """The site's GPU queues (``c.GPUQueues.queues``); see the module docstring."""

    queues = Dict(
        config=True,
        help="""GPU queues, by name: who waits in line for which GPUs when they are all taken (Kueue).

        ``{queue: {"groups": [...], "gpus": {resource: {product: GPUs}}, "cohort": ..., "borrowing_limit": N,
        "max_wait_seconds": S}}``: ``groups`` are the JupyterHub groups (a
        course, a team) whose GPU workspaces wait in this queue; ``gpus`` the
        queue's nominal quota of each GPU resource (``nvidia.com/gpu``, a MIG
        slice, a time-sliced share) per GPU product, the nodes'
        ``nvidia.com/gpu.product`` label (``"*"``: any product); ``cohort``
        (optional) the cohort whose queues lend each other what they do not
        use, and ``borrowing_limit`` how many units of each resource this
        queue may borrow there (default: as many as the cohort has free);
        ``max_wait_seconds`` (optional) how long a start may wait in line,
        below the spawner's ``start_timeout``, which covers the wait and the
        start after it (default: the start timeout less 30 seconds); past
        it the start ends with its place in line. ``workspacespawner queues``
        prints the Kueue objects (ResourceFlavors, ClusterQueues,
        LocalQueues) for an operator to apply. A container workspace of a GPU
        profile of a member names its queue; Kueue holds its Pod until the
        queue has the GPUs, and the spawn page shows its place in line. Empty
        (the default): no queues; a GPU start that cannot be placed fails at
        once with the numbers. Example::

            c.GPUQueues.queues = {
                "ml101": {
                    "groups": ["ml101"],
                    "gpus": {"nvidia.com/gpu": {"NVIDIA-A100-SXM4-80GB": 4}},
                    "cohort": "university",
                    "borrowing_limit": 2,
                    "max_wait_seconds": 1800,
                },
            }
        """,
    )

    @validate("queues")
    def _check_queues(self, proposal):
        return check_queues(proposal.value)

    def all(self) -> dict[str, GPUQueue]:
        """``{name: GPUQueue}`` of every queue, in the configured order."""
        return {name: _queue(name, spec) for name, spec in self.queues.items()}

    def queue_of(self, group_names: Iterable[str]) -> GPUQueue | None:
        """The queue a user in ``group_names`` waits in, or None."""
        return next((queue for queue in self.all().values() if queue.member(group_names)), None)
