"""The local cluster's controllers, in start order; each plays one component of a real cluster."""

from .cdi import CDIController
from .ephemeral import EphemeralVolumeController
from .nodeagent import NodeAgent
from .protection import ProtectionController
from .scheduler import Scheduler
from .serviceproxy import ServiceProxy
from .snapshots import SnapshotController
from .storage import StorageController
from .virt import VirtController

#: name -> controller class; ``LocalCluster(controllers=(...))`` picks by these names.
CONTROLLERS = {
    "storage": StorageController,
    "ephemeral": EphemeralVolumeController,
    "protection": ProtectionController,
    "snapshots": SnapshotController,
    "cdi": CDIController,
    "scheduler": Scheduler,
    "virt": VirtController,
    "nodeagent": NodeAgent,
    "serviceproxy": ServiceProxy,
}
