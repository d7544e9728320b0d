"""What a spawn-page card says of where its workspace runs: which node pool (a team's, or the shared nodes), the team
pool's free GPUs and who holds them, its GPU preference, and the GPU queue its start waits in and how many wait there.

Read from the profile as a start would apply it (its ``kubespawner_override``,
else the spawner's own settings) and from the hub's shared caches through the
spawner (:meth:`~workspacespawner.gpu.view.GPUView.pool_use`): no API
call per view; a queue's line is the hub's shared read of it
(:class:`~workspacespawner.queue.line.LineReader`, one request per queue
every few seconds however many look).
"""

from __future__ import annotations

from workspacespawner.config.profiles import gpu_limit
from workspacespawner.config.teampools import pool_of_profile
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL
from workspacespawner.gpu import placement, poolholders
from workspacespawner.queue import line


async def team_gpu_pools(spawner, profiles: list[dict]) -> dict:
    """``{pool name: {(resource, product): GPUPool} | None}``: the GPUs of each team pool ``profiles`` name, its nodes only."""
    names = sorted({pool_of_profile(p) for p in profiles} - {""})
    return {name: await spawner.gpu_view.free(name) for name in names}


def nodes_sentence(pool: str, gpus: int, cpu_nodes_first: bool, site_has_pools: bool) -> str | None:
    """Which node pool a card's workspace runs on, for a site with team pools (None on a site without: every node is
    shared, nothing to tell apart). ``pool``: the profile's team pool (``""``: none); ``gpus``: units it asks for;
    ``cpu_nodes_first``: a CPU profile prefers nodes without GPUs (``cpu_prefers_cpu_nodes``)."""
    if pool:
        return f"Runs on your team's pool {pool!r}: nodes only its members use."
    if not site_has_pools:
        return None
    if gpus:
        return "Runs on the shared GPU nodes everyone uses, not on a team's pool."
    return "Runs on the shared nodes, CPU-only ones first." if cpu_nodes_first else "Runs on the shared nodes."


async def queue_sentence(spawner, groups, *, gpus: int, resource: str, kind: str) -> str | None:
    """The card's line of the GPU queue a start of it waits in (:func:`~workspacespawner.queue.line.queue_note`), or
    None when it waits in none."""
    queue = line.queue_for(spawner.services.gpu_queues, groups, gpus=gpus, resource=resource, kind=kind)
    if queue is None:
        return None
    items = await spawner.services.line_reader(spawner.api.api_client).line(spawner.namespace, queue.name)
    return line.queue_note(queue.name, len(items) if items is not None else None)


async def notes(spawner, profile: dict, groups=()) -> dict[str, str | None]:
    """``{"nodes_note": ..., "pool_note": ..., "prefers_note": ..., "queue_note": ...}`` of a profile_list entry's card
    for a user in JupyterHub ``groups`` (see
    :class:`~.model.Card`); the preference names, cheapest first, the GPU types the profile's nodes have (all priced
    ones while that is unknown)."""
    override = profile.get("kubespawner_override") or {}
    economy = spawner.services.economy
    resource, gpus = gpu_limit(override.get("extra_resource_limits"), economy.declared())
    pool = pool_of_profile(profile)
    use = await spawner.gpu_view.pool_use(pool, resource) if pool else None
    prefer = override.get("prefer_cheaper_gpus", spawner.prefer_cheaper_gpus)
    product = (override.get("node_selector") or {}).get(GPU_PRODUCT_LABEL)
    prefers_note = None
    if gpus and prefer and not product:  # only the products its nodes have: a price list may name more
        products = [name for name, _ in economy.products_by_cost(resource)]
        present = await spawner.gpu_view.free(pool)
        if present is not None:
            products = [name for name in products if (resource, name) in present]
        prefers_note = placement.prefers_sentence([economy.display_name(name) for name in products])
    cpu_first = override.get("cpu_prefers_cpu_nodes", spawner.cpu_prefers_cpu_nodes)
    return {
        "nodes_note": nodes_sentence(pool, gpus, cpu_first, bool(spawner.services.team_pools)),
        "pool_note": poolholders.describe(use) if use is not None else None,
        "prefers_note": prefers_note,
        "queue_note": await queue_sentence(spawner, groups, gpus=gpus, resource=resource,
                                           kind=override.get("workspace_kind", spawner.workspace_kind)),
    }
