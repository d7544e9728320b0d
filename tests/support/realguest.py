"""The VM profile that boots the real guest, for the tests and benchmarks that boot one (tools/golden-image's Debian 12).

:data:`GOLDEN` is the golden image's DataSource (``planes.running(..., real_golden=[golden(image)])`` publishes it);
:func:`vm_profile` is a ``profile_list`` entry, as hub config text, whose VM clones it: a small guest, the profile's
own ``start_timeout`` (a boot under TCG takes minutes), and the hub reached through QEMU's user network (the hub
listens on the host's loopback; the config names its port ``hub_port``, which tests/support/hubharness.py defines).
"""

from __future__ import annotations

from pathlib import Path

from localcluster.guestimage import GuestImage
from localcluster.qemu import HOST_LOOPBACK_IN_GUEST

GOLDEN = ("golden-images", "debian-12")
#: The VM's settings in the profile's ``kubespawner_override`` (the hub's URL aside).
OVERRIDE = {
    "workspace_kind": "vm",
    "vm_golden_image": GOLDEN[1],
    "vm_root_disk_size": "4Gi",
    "vm_cpu_cores": 2,
    "vm_memory": "2Gi",
    "vm_termination_grace_period": 60,
    "start_timeout": 600,
}


def golden(image: GuestImage, name: str = GOLDEN[1], disk: Path | None = None) -> tuple[str, str, Path, str]:
    """``planes.running``'s ``real_golden`` entry publishing ``image`` (or another raw ``disk`` of its size) as the
    DataSource ``name`` in :data:`GOLDEN`'s namespace."""
    return GOLDEN[0], name, disk or image.disk, image.claim_size


def vm_profile(slug: str, display_name: str, image: str = GOLDEN[1], override: dict | None = None, **fields) -> str:
    """A ``profile_list`` entry (hub config text) booting the real guest (the golden image ``image``); ``override``:
    more of its ``kubespawner_override``; ``fields``: more of the entry's keys."""
    entry = {"display_name": display_name, "slug": slug, **fields}
    hub_url = f'f"http://{HOST_LOOPBACK_IN_GUEST}:{{hub_port}}"'
    override = {**OVERRIDE, "vm_golden_image": image, **(override or {})}
    return f'{{**{entry!r}, "kubespawner_override": {{**{override!r}, "hub_connect_url": {hub_url}}}}}'


def vm_objects(cluster, user: str) -> dict[str, list[str]]:
    """The names of ``user``'s VirtualMachines, VMIs and DataVolumes in ``default``, and of every PVC there."""
    from tests.support.hubharness import core_and_custom
    from workspacespawner.core import names

    with core_and_custom(cluster) as (core, custom):
        selector = names.owner_selector(user)
        found = {plural: [o["metadata"]["name"] for o in custom.list_namespaced_custom_object(
            group, "v1" if group == "kubevirt.io" else "v1beta1", "default", plural, label_selector=selector)["items"]]
            for group, plural in (("kubevirt.io", "virtualmachines"), ("kubevirt.io", "virtualmachineinstances"),
                                  ("cdi.kubevirt.io", "datavolumes"))}  # fmt: skip
        found["persistentvolumeclaims"] = [p.metadata.name for p in core.list_namespaced_persistent_volume_claim("default").items]
    return found
