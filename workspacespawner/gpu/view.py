"""One server's view of the GPUs: what its spawn page shows free, where its start may run, what its run costs, and a
refusal for want of GPUs in numbers.

Everything is read from the hub's shared caches (the Pod and VMI watches,
the hub's Node list: :class:`~.capacity.GPUCapacity`), never with an API call
of its own; the settings are the spawner's (the profile applied now, its
``team_pool``, ``prefer_cheaper_gpus``, ``spread_gpu_workspaces``) and the
hub's services (team pools, card-hour weights, the quota).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.gpu import capacity, placement, poolholders
from workspacespawner.k8s import watches
from workspacespawner.k8s.objects import node_of


class GPUView:
    """The GPUs as ``spawner`` (a WorkspaceSpawner: its ``services``, ``profile``, settings and user) sees them.

    ``watch()``: starts (or joins) the namespace's shared watches the view
    reads, False when they cannot start (then nothing is known); ``label()``:
    the server's name in log lines.
    """

    def __init__(self, spawner, *, watch: Callable[[], Awaitable[bool]], label: Callable[[], str]):
        self.spawner = spawner
        self.watch = watch
        self.label = label

    def _capacity(self) -> capacity.GPUCapacity | None:
        return self.spawner.services.gpu_capacity(watches.compute_objects)

    async def free(self, pool: str = "") -> dict[tuple[str, str], capacity.GPUPool] | None:
        """The GPUs free now by resource and type (:class:`~.capacity.GPUCapacity`), or None when that cannot be known.

        ``pool``: a team pool's name: its nodes' GPUs only; ``""``: the GPUs
        outside every team pool (what a profile of no pool may use). The
        namespace's Pod and VMI watches start here if no start has started
        them yet (after a hub restart, the first page view), so a running
        VM's GPUs are never missed.
        """
        inventory = self._capacity()
        if inventory is None or not await self.watch():
            return None
        pools = self.spawner.services.team_pools
        if pool:
            return await inventory.pools(pools[pool].holds) if pool in pools else None
        return await inventory.pools(lambda node: not any(p.holds(node) for p in pools.values()))

    async def pool_use(self, pool: str, resource: str) -> poolholders.PoolUse | None:
        """Team pool ``pool`` now: its units of GPU ``resource`` free and who holds them
        (:func:`~.poolholders.pool_use`, from the shared caches), or None when that cannot be known."""
        inventory = self._capacity()
        found = self.spawner.services.team_pools.get(pool)
        if found is None or inventory is None or not await self.watch():
            return None
        compute, nodes = inventory.compute(), await inventory.nodes()
        if compute is None or nodes is None:
            return None
        return poolholders.pool_use(found, nodes, compute, resource, inventory.declared)

    def placement(self) -> placement.Placement:
        """Where this start's compute may and should run (:func:`~.placement.placement`), from the profile applied now:
        its team pool, ``prefer_cheaper_gpus`` and ``spread_gpu_workspaces``.

        Raises :class:`~workspacespawner.core.errors.WorkspaceError` (500) for a ``team_pool`` that is not a
        configured pool (a callable profile_list the start-up check could not see).
        """
        s = self.spawner
        pools = s.services.team_pools
        if s.team_pool and s.team_pool not in pools:
            raise WorkspaceError(f"The profile's team pool {s.team_pool!r} is not configured; please tell an "
                                 "administrator (c.TeamGPUPools.pools).", reason="misconfigured", status_code=500)
        profile = s.profile
        gpu_count = profile.gpus if profile else 0
        resource = profile.gpu_resource if profile else capacity.GPU_RESOURCE
        return placement.placement(
            user_name=s.user.name, gpus=gpu_count, pool=pools.get(s.team_pool), pools=pools.values(),
            product=profile.gpu_product if profile else None,
            products_by_cost=s.services.economy.products_by_cost(resource),
            prefer_cheaper=s.prefer_cheaper_gpus, spread=s.spread_gpu_workspaces,
            keep_off_gpu_nodes=s.cpu_prefers_cpu_nodes,
        )

    async def price_on_node(self) -> None:
        """The compute is placed: price this start's run at its node's GPU type (``QuotaService.placed``).

        The node is the Pod's ``spec.nodeName`` or the VMI's
        ``status.nodeName`` as the shared watch caches hold them, its type the
        ``nvidia.com/gpu.product`` label in the hub's shared Node list: no API
        call of its own. A profile that names its product was priced when
        reserved; a failure here leaves the provisional weight and never
        fails the start.
        """
        s = self.spawner
        profile, quota = s.profile, s.services.quota
        if not (profile and profile.gpus) or profile.gpu_product or not quota.enabled:
            return
        server = s.name or ""
        try:
            mine = (obj for obj in watches.compute_objects() or () if names.server_of(obj.get("metadata") or {}) == (s.user.name, server))
            node = next(filter(None, map(node_of, mine)), None)
            inventory = self._capacity()
            if node is not None and inventory is not None:
                await quota.placed(s.user.name, server, await inventory.product_of(node))
        except Exception as e:  # the price stays provisional (the most it may cost); the start goes on
            s.log.warning("Could not price the run of %s at its node's GPU type: %s", self.label(), e)

    async def in_numbers(self, error: BaseException) -> BaseException:
        """A refusal for want of a node, for a GPU profile whose GPUs are taken, reworded with the numbers
        (:func:`.capacity.shortage`; the scheduler's words stay in the log); any other error as it is."""
        s = self.spawner
        profile = s.profile
        if not (isinstance(error, WorkspaceError) and error.reason == "unschedulable" and profile and profile.gpus):
            return error
        pools = await self.free(s.team_pool)
        pool = capacity.pool_for(pools, profile.gpu_product, profile.gpu_resource) if pools is not None else None
        sentence = capacity.shortage(pool, profile.gpus, s.services.economy.display_name) if pool is not None else None
        if sentence is None:
            return error
        s.log.info("%s: %s (the scheduler: %s)", self.label(), sentence, error.detail)
        advice = "Try a CPU profile or one with fewer GPUs, or try again later."
        if s.team_pool and (use := await self.pool_use(s.team_pool, profile.gpu_resource)) is not None:
            advice = f"{poolholders.describe(use)} Ask them, or try again later."
        return WorkspaceError(f"{sentence} {advice}", reason=error.reason, status_code=error.status_code,
                              log_message=error.detail)
