"""The one table of Kubernetes kinds the product reads and writes: group, version, plural, kind.

Every module names a kind by its constant here (``PVC``, ``VIRTUAL_MACHINE``,
...), never by strings of its own. API followed: core/v1;
``cdi.kubevirt.io/v1beta1`` (CDI); ``kubevirt.io/v1`` (KubeVirt);
``snapshot.storage.k8s.io/v1`` (external-snapshotter).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One Kubernetes kind: ``group``/``version``/``plural`` and, for core kinds, CoreV1Api's snake-case ``core`` name."""

    group: str
    version: str
    plural: str
    kind: str
    core: str = ""
    namespaced: bool = True

    @property
    def gvp(self) -> tuple[str, str, str]:
        """``(group, version, plural)``, the first arguments of CustomObjectsApi's methods."""
        return (self.group, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PVC = Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "persistent_volume_claim")
POD = Kind("", "v1", "pods", "Pod", "pod")
SERVICE = Kind("", "v1", "services", "Service", "service")
SECRET = Kind("", "v1", "secrets", "Secret", "secret")
NODE = Kind("", "v1", "nodes", "Node", "node", namespaced=False)
DATA_VOLUME = Kind("cdi.kubevirt.io", "v1beta1", "datavolumes", "DataVolume")
DATA_SOURCE = Kind("cdi.kubevirt.io", "v1beta1", "datasources", "DataSource")
VIRTUAL_MACHINE = Kind("kubevirt.io", "v1", "virtualmachines", "VirtualMachine")
VMI = Kind("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance")
VOLUME_SNAPSHOT = Kind("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot")
