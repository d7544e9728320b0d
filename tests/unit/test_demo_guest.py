"""Which guest the demo's VM profiles boot (workspacespawner/demoguest.py), as configuration.

With a real guest, every VM profile boots it: the sample's JupyterLab VM profile (and a code-server card beside it,
added) boots the DataSource named for the image's build month and
reaches the hub at the host's loopback as QEMU's user network shows it (``hub_connect_url``), has minutes to
boot (its own ``start_timeout``), its card naming
Debian and the slow boot without KVM; the GPU VM card says its GPU is not passed through; without a real guest every
VM card says its guest is emulated; container profiles are untouched. The demo's whole hub config with the real guest passes the start-up
check. The boot itself: tests/hub/test_real_guest_hub.py.
"""

from __future__ import annotations

from localcluster.guestimage import MARKER, GuestImage
from traitlets.config.loader import PyFileConfigLoader

from workspacespawner.demo import config_dir, demo_config
from workspacespawner.demoguest import (
    EMULATED_NOTE,
    REAL_GUEST_CODE_PROFILE,
    REAL_GUEST_NOTE,
    REAL_GUEST_PROFILE,
    real_image_name,
    with_guests,
)

PROFILES = [
    {"display_name": "JupyterLab", "slug": "lab", "kubespawner_override": {"workspace_kind": "container"}},
    {"display_name": "Ubuntu VM", "slug": REAL_GUEST_PROFILE, "description": "A whole VM.",
     "kubespawner_override": {"workspace_kind": "vm", "vm_golden_image": "ubuntu-22.04-gpu-2026-11"}},
    {"display_name": "GPU VM", "slug": "gpu-vm", "kubespawner_override": {"workspace_kind": "vm"}},
]


def test_the_jupyterlab_vm_boots_the_real_guest_and_reaches_the_hub_through_qemus_network():
    lab, real, code, gpu = with_guests(PROFILES, "debian-12-2026-12", 18081)
    assert lab == PROFILES[0]
    assert real["kubespawner_override"] == {"workspace_kind": "vm", "vm_golden_image": "debian-12-2026-12",
                                            "hub_connect_url": "http://10.0.2.2:18081", "start_timeout": 600}
    assert real["display_name"].startswith("Debian 12 VM") and "KVM" in real["description"]
    # beside it, the same guest opening code-server (the golden image carries it)
    assert code["slug"] == REAL_GUEST_CODE_PROFILE and code["slug"] != real["slug"]
    assert code["kubespawner_override"] == {**real["kubespawner_override"], "ide": "code-server"}
    assert code["display_name"] == "Debian 12 VM, code-server" and "KVM" in code["description"]
    # the GPU VM boots the same real guest, its card saying what a QEMU guest here does not get
    assert gpu["kubespawner_override"] == {**PROFILES[2]["kubespawner_override"], "vm_golden_image": "debian-12-2026-12",
                                           "hub_connect_url": "http://10.0.2.2:18081", "start_timeout": 600}
    assert gpu["description"] == REAL_GUEST_NOTE and "no GPU" in gpu["description"]


def test_without_a_real_guest_every_vm_card_says_its_guest_is_emulated():
    lab, vm, gpu = with_guests(PROFILES, None, 18081)
    assert lab == PROFILES[0]
    assert vm["kubespawner_override"] == PROFILES[1]["kubespawner_override"]
    assert vm["description"] == f"A whole VM. {EMULATED_NOTE}"
    assert gpu["description"] == EMULATED_NOTE


def test_the_real_guests_datasource_is_named_for_its_build_month(tmp_path):
    (tmp_path / MARKER).write_text("suite=bookworm\nbuilt=2026-12-05T10:11:12Z\nstamp=abc\n")
    assert real_image_name(GuestImage(tmp_path)) == "debian-12-2026-12"


def test_the_demo_config_with_a_real_guest_passes_the_start_up_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the check makes the demo's ledger in the cwd
    (tmp_path / "jupyterhub_config.py").write_text(demo_config(tmp_path, config_dir(), 8000, hub_port=18081,
                                                               real_guest="debian-12-2026-12"))
    c = PyFileConfigLoader("jupyterhub_config.py", path=str(tmp_path)).load_config()
    [real] = [p for p in c.KubeSpawner.profile_list if p["slug"] == REAL_GUEST_PROFILE]
    assert real["kubespawner_override"]["hub_connect_url"] == "http://10.0.2.2:18081"
    [code] = [p for p in c.KubeSpawner.profile_list if p["slug"] == REAL_GUEST_CODE_PROFILE]
    assert code["kubespawner_override"]["ide"] == "code-server"
