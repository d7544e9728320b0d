"""The VM profile that boots the real guest, for the tests and benchmarks that boot one (tools/golden-image's Debian 12).

:data:`GOLDEN` is the golden image's DataSource (``planes.running(..., real_golden=(*GOLDEN, image))`` publishes it);
:func:`vm_profile` is a ``profile_list`` entry, as hub config text, whose VM clones it: a small guest, the profile's
own ``start_timeout`` (a boot under TCG takes minutes), and the hub reached through QEMU's user network (the hub
listens on the host's loopback; the config names its port ``hub_port``, which tests/support/hubharness.py defines).
"""

from __future__ import annotations

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


def vm_profile(slug: str, display_name: str, **fields) -> str:
    """A ``profile_list`` entry (hub config text) booting the real guest; ``fields``: more of the entry's keys."""
    entry = {"display_name": display_name, "slug": slug, **fields}
    hub_url = f'f"http://{HOST_LOOPBACK_IN_GUEST}:{{hub_port}}"'
    return f'{{**{entry!r}, "kubespawner_override": {{**{OVERRIDE!r}, "hub_connect_url": {hub_url}}}}}'
