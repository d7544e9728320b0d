"""Where a workspace runs, per profile: ``team_pool``, ``prefer_cheaper_gpus``, ``cpu_prefers_cpu_nodes`` and
``spread_gpu_workspaces``.

A trait-only class (``HasTraits``) mixed into WorkspaceSpawner, so these are
``c.WorkspaceSpawner.*`` settings, usually set per profile in
``kubespawner_override``. What they put on a workspace's Pod or VM is
:mod:`workspacespawner.gpu.placement`; the pools themselves are
``c.TeamGPUPools.pools`` (:mod:`workspacespawner.config.teampools`).
"""

from __future__ import annotations

from traitlets import Bool, HasTraits, TraitError, Unicode, validate

from workspacespawner.config.teampools import POOL_NAME


class PlacementTraits(HasTraits):
    """The team pool a profile runs in, whether it prefers cheaper GPUs, and whether one user's GPU workspaces spread."""

    team_pool = Unicode(
        "",
        config=True,
        help="""The team GPU pool (a name of ``c.TeamGPUPools.pools``) this profile's workspaces run in.

        Set per profile in ``kubespawner_override``: only members of the
        pool's JupyterHub groups (and admins) see the profile (a start of it
        by anyone else is refused with 403), and its workspaces run only on
        the pool's nodes, tolerating the pool's taint. ``""`` (the default):
        no pool; such workspaces never run on any pool's nodes. A name that
        is not a configured pool is refused at start-up. Example:
        ``"kubespawner_override": {"team_pool": "vision", "extra_resource_limits": {"nvidia.com/gpu": "8"}}``.
        """,
    )

    @validate("team_pool")
    def _check_team_pool(self, proposal):
        if proposal.value and not POOL_NAME.match(proposal.value):
            raise TraitError(f"team_pool must be a pool name of c.TeamGPUPools.pools, not {proposal.value!r}")
        return proposal.value

    prefer_cheaper_gpus = Bool(
        False,
        config=True,
        help="""Place a GPU workspace on the cheapest GPU type that is free, older cards first.

        For a GPU profile that selects no ``nvidia.com/gpu.product``: a
        preferred node affinity per product ``c.GPUEconomy.card_hour_weights``
        prices for the profile's GPU resource, the cheapest weighted highest,
        so the scheduler takes a P4 before a V100 before an A100 while one is
        free and falls back to the next otherwise. The spawn page says so
        ("Prefers older GPUs: Tesla-P4, then ..."). Usually set per profile;
        False (the default): no preference.
        """,
    )

    cpu_prefers_cpu_nodes = Bool(
        True,
        config=True,
        help="""Place a CPU workspace (one that asks for no GPU) on a node without GPUs while one can take it.

        True (the default): a preferred node affinity (weight 100) for nodes
        without the ``nvidia.com/gpu.product`` label, so CPU work leaves a
        GPU node's CPU and memory to the GPU workspaces there; with no CPU
        node free it still runs on a GPU node. False: no such preference
        (say, per profile, for CPU work that should sit next to GPU data).
        """,
    )

    spread_gpu_workspaces = Bool(
        True,
        config=True,
        help="""Spread one user's GPU workspaces over nodes.

        True (the default): a GPU workspace gets a preferred pod
        anti-affinity (weight 100, per ``kubernetes.io/hostname``) on its
        owner's label, so a second heavy workspace goes to another node when
        one can take it (and to the same node when none other can). False:
        no such preference. CPU workspaces never get it, nor do workspaces
        that prefer cheaper GPUs (``prefer_cheaper_gpus``): the cheaper card
        comes first.
        """,
    )
