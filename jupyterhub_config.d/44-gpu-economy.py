# What an hour of each kind of GPU costs in card-hours (c.GPUEconomy.*): one
# unit of a GPU resource (a whole GPU of a product, a MIG slice, a time-sliced
# share, a VM's host or mediated device), per hour. Quotas, `workspacespawner
# usage`, the metrics and the spawn page count these weighted card-hours; the
# raw GPU-hours per resource and product are kept beside them. A run is
# charged at the weight of the GPU it is placed on, fixed then: a changed
# weight prices later runs and never rewrites a closed month.
# Products are the nodes' nvidia.com/gpu.product labels (GPU feature
# discovery); "*" prices the products not listed. A MIG slice not listed costs
# its share of the card (1g: 1/7); anything else not listed costs 1.
c.GPUEconomy.card_hour_weights = {
    "nvidia.com/gpu": {
        "NVIDIA-A100-SXM4-80GB": 1.0,
        "Tesla-V100-SXM2-16GB": 0.5,
        "Tesla-P4": 0.25,
        "Tesla-T4-SHARED": 0.25,  # one of 4 time-sliced replicas of a T4
    },
    "nvidia.com/mig-1g.10gb": 0.15,
    "nvidia.com/gpu.shared": 0.25,  # time-slicing with renameByDefault: true
}

# Team GPU pools (c.TeamGPUPools.pools): a group that owns GPU nodes shares
# them among its members. Label the nodes (and taint them, if you like), then
# let a profile join the pool with kubespawner_override {"team_pool": ...}:
# c.TeamGPUPools.pools = {
#     "research": {
#         "groups": ["research"],
#         "node_selector": {"workspacespawner.io/team-pool": "research"},
#         "taint": {"key": "workspacespawner.io/team-pool", "value": "research", "effect": "NoSchedule"},
#     },
# }
