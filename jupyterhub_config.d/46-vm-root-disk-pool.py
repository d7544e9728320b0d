# Root disks cloned ahead of time (c.RootDiskPool.*): a VM workspace's first
# start otherwise waits for CDI to clone its golden image (minutes for 30-200
# GiB). The hub keeps this many ready, unassigned root DataVolumes per golden
# image (DataSource) in the users' namespace; a first start whose profile
# clones that image at the same size, StorageClass and volumeMode takes one
# and skips the clone, and the hub clones a replacement. A pool disk belongs
# to nobody until then: no quota counts it and no purge selects it. Keys left
# out take the c.WorkspaceSpawner.vm_* settings. A golden image no longer
# listed, or a DataSource pointed at a new source, retires its pool disks.
c.RootDiskPool.ready_disks = {
    "ubuntu-22.04-gpu-2026-11": 1,  # the sample VM profiles' image, at vm_root_disk_size
}
