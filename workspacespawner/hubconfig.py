"""The start-up check of a hub's settings: every WorkspaceSpawner setting and the site's sections, before it serves.

Called through :func:`workspacespawner.spawner.check_hub_config` (from
``jupyterhub_config.d/90-check-config.py``), without contacting Kubernetes.
"""

from __future__ import annotations

from workspacespawner.config.check import check_spawner_config, merged_settings
from workspacespawner.config.goldenimages import GoldenImages
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.imagepublish import publish_settings
from workspacespawner.config.rootdiskpool import RootDiskPool
from workspacespawner.config.teampools import TeamGPUPools, check_profile_pools
from workspacespawner.idle.settings import GPUIdle
from workspacespawner.queue.config import GPUQueues, check_queue_waits
from workspacespawner.storage.startcheck import check_storage_config


def check_hub_config(config, spawner_class) -> None:
    """Validate a hub's ``spawner_class`` settings at start-up; raise ``traitlets.TraitError`` naming the bad setting.

    ``config`` is the traitlets Config of ``jupyterhub_config.py`` (``c``):
    every ``c.Spawner``/``c.KubeSpawner``/``c.WorkspaceSpawner`` value goes
    through the trait it sets, the profile_list and the storage tiers are
    checked whole, and so is every site section (GPU economy, team pools,
    GPU queues, idle GPUs, root-disk pool), without contacting Kubernetes. The VM profiles' golden
    images are checked against the naming convention
    (:class:`~.config.goldenimages.GoldenImages`: a warning each, or an
    error with ``c.GoldenImages.require_versioned``).
    """
    check_spawner_config(config, spawner_class)
    check_storage_config(config)
    GPUEconomy(config=config)
    publish_settings(config)
    profiles = merged_settings(config).get("profile_list")
    check_profile_pools(profiles, TeamGPUPools(config=config).all())
    GPUIdle(config=config)
    RootDiskPool(config=config)
    traits, settings = spawner_class.class_traits(), merged_settings(config)
    check_queue_waits(GPUQueues(config=config).all(), settings.get("start_timeout", traits["start_timeout"].default_value))
    kind, image = (settings.get(name, traits[name].default_value) for name in ("workspace_kind", "vm_golden_image"))
    GoldenImages(config=config).check_profiles(profiles, default_kind=kind, default_image=image)
