"""Who in the team holds a team pool's GPUs now, in numbers and in a sentence. Pure.

Built from the Nodes (the shared Node list of
:class:`~workspacespawner.gpu.capacity.GPUCapacity`) and the Pods and VMIs
of the hub's shared watch caches, never from an API call per view: the
pool's nodes are those carrying its label
(:meth:`~workspacespawner.config.teampools.TeamPool.holds`); a workspace
holds what :func:`~workspacespawner.gpu.capacity.units_held` counts on
such a node (a VMI and its virt-launcher Pod once), its owner is the
owner annotation (:func:`~workspacespawner.core.names.owner_name`) and its
server kubespawner's server-name annotation. Compute of no one we know (no
owner annotation: another tenant's) counts against the free units but is
named by nobody.
"""

from __future__ import annotations

from dataclasses import dataclass

from workspacespawner.config.profiles import GPU_RESOURCE
from workspacespawner.config.teampools import TeamPool
from workspacespawner.core import names
from workspacespawner.core.gpuresources import DEVICE, GPUResource, parse_gpu_resource
from workspacespawner.gpu.capacity import gpu_pools, pool_for, units_held
from workspacespawner.k8s.objects import counted_once, node_of


@dataclass(frozen=True)
class Holder:
    """One user holding GPUs of a pool: ``user`` (JupyterHub name), ``units`` (GPU units of every resource), and
    ``servers`` (the named servers holding them, in order; a default server is not named)."""

    user: str
    units: int
    servers: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolUse:
    """A team pool now: ``pool`` (its name), ``resource`` (the GPU resource counted), ``total``/``free`` units of it on
    the pool's usable nodes, and ``holders`` (most units first)."""

    pool: str
    resource: str
    total: int
    free: int
    holders: tuple[Holder, ...] = ()


def pool_use(pool: TeamPool, nodes: list[dict], compute: list[dict], resource: str = GPU_RESOURCE,
             declared: tuple[str, ...] = ()) -> PoolUse:
    """The :class:`PoolUse` of ``pool`` from ``nodes`` (core/v1 Node dicts) and ``compute`` (Pod and VMI dicts).

    ``resource``: the GPU resource whose units ``total`` and ``free`` count
    (a pool profile's); ``declared``: the site's VM device names
    (:meth:`~workspacespawner.config.gpueconomy.GPUEconomy.declared`).
    """
    mine = [n for n in nodes if pool.holds(n)]
    counted = pool_for(gpu_pools(mine, compute, declared), None, resource)
    on_pool = {(n.get("metadata") or {}).get("name") for n in mine}
    units: dict[str, int] = {}
    servers: dict[str, list[str]] = {}
    for obj in counted_once(compute):
        if node_of(obj) not in on_pool:
            continue
        held = sum(units_held(obj, declared).values())
        meta = obj.get("metadata") or {}
        user = names.owner_name(meta)
        if not held or user is None:
            continue
        units[user] = units.get(user, 0) + held
        server = (names.server_of(meta) or (user, ""))[1]
        if server and server not in servers.setdefault(user, []):
            servers[user].append(server)
    holders = tuple(Holder(user, count, tuple(servers.get(user, ())))
                    for user, count in sorted(units.items(), key=lambda item: (-item[1], item[0])))
    return PoolUse(pool.name, resource, counted.total, counted.free, holders)


def _held_by(holder: Holder) -> str:
    if not holder.servers:
        return f"{holder.user} ({holder.units})"
    word = "server" if len(holder.servers) == 1 else "servers"
    return f"{holder.user} ({holder.units}, {word} {', '.join(repr(s) for s in holder.servers)})"


def describe(use: PoolUse) -> str:
    """``Your team's pool 'vision': 3 of 8 GPUs free; held by ann (4, server 'train'), bob (1).``"""
    known = parse_gpu_resource(use.resource) or GPUResource(use.resource, DEVICE)
    head = f"Your team's pool {use.pool!r}: {use.free} of {known.describe(use.total)} free"
    if not use.holders:
        return head + "."
    return f"{head}; held by {', '.join(map(_held_by, use.holders))}."
