"""The dashboard's GPU and disk metrics: :mod:`workspacespawner.workspace.gpumetrics`, which the idle-GPU pass also uses.

Kept so the dashboard's imports read as before; the join lives in the
``workspace`` layer since the hub's idle-GPU pass joins the same series.
"""

from workspacespawner.workspace.gpumetrics import (
    CONTAINER,
    FB_FREE,
    FB_USED,
    GPU_METRICS,
    POWER,
    UTIL,
    VM,
    VOLUME_CAPACITY,
    VOLUME_USED,
    GPUStat,
    Holder,
    VolumeUsage,
    holders,
    join_gpus,
    join_volumes,
    read_gpu_metrics,
    read_volume_usage,
)

__all__ = [
    "CONTAINER", "FB_FREE", "FB_USED", "GPU_METRICS", "POWER", "UTIL", "VM", "VOLUME_CAPACITY", "VOLUME_USED",
    "GPUStat", "Holder", "VolumeUsage", "holders", "join_gpus", "join_volumes", "read_gpu_metrics",
    "read_volume_usage",
]
