"""The guest the demo's VM workspaces boot: a real Debian 12 under QEMU where this machine can, else the emulated one.

A real guest needs QEMU, the cloud-init seed's tools, debugfs and the golden
image tools/golden-image builds (:func:`localcluster.guestimage.why_no_real_guest`
says which is missing). With all of them, :func:`publish_real_guest` publishes
that image as the DataSource ``golden-images/debian-12-<yyyy>-<mm>`` (its build
month as the version) and :func:`guest_config` points the sample list's
JupyterLab VM profile (:data:`REAL_GUEST_PROFILE`) at it. The guest reaches the
hub, which listens on the host's loopback, through QEMU's user network
(``10.0.2.2``): that profile's ``hub_connect_url``, JupyterHub's own per-spawner
setting. A second card beside it, :data:`REAL_GUEST_CODE_PROFILE`, boots the
same image opening code-server (the image carries it), and so does every other
VM profile (the GPU VM's card says its GPU is not passed through: a QEMU guest
here gets none). Every VM card says which guest it boots and, for the real
one, why it starts slowly without KVM.
"""

from __future__ import annotations

from localcluster.goldenimage import make_golden_image
from localcluster.guestimage import GuestImage, newest_guest_image, why_no_real_guest
from localcluster.qemu import HOST_LOOPBACK_IN_GUEST

from workspacespawner.core.names import GOLDEN_IMAGE_NAMESPACE

#: The family of the real guest's DataSource name (its version is the build month).
REAL_GUEST_FAMILY = "debian-12"
#: The sample profile that boots the real guest.
REAL_GUEST_PROFILE = "ubuntu-vm"
#: The card the demo adds beside it: the same real guest, opening code-server.
REAL_GUEST_CODE_PROFILE = "debian-vm-code"
#: Its start timeout (seconds; the demo's is 120): a first start under TCG took 100 to 180 s here.
REAL_GUEST_START_TIMEOUT = 600

REAL_GUEST_CARD = {
    "display_name": "Debian 12 VM, JupyterLab",
    "description": "A whole Debian 12 virtual machine, booted by QEMU: apt packages, /etc and /opt are kept between "
                   "sessions, and you have sudo. Without hardware virtualization (KVM) the operating system takes a "
                   "minute or two to boot.",
}
REAL_GUEST_CODE_CARD = {
    "slug": REAL_GUEST_CODE_PROFILE,
    "display_name": "Debian 12 VM, code-server",
    "description": "The same Debian 12 virtual machine, opening VS Code in the browser (code-server). Without hardware "
                   "virtualization (KVM) the operating system takes a minute or two to boot.",
}
#: What the other VM cards add when they boot the real guest too: what a QEMU guest here does not get.
REAL_GUEST_NOTE = ("In this demo it boots the same real Debian 12 under QEMU, without the GPU: a QEMU guest here gets "
                   "no GPU, and at most this machine's CPUs and half its memory.")
#: What every VM card adds when this machine cannot boot a real guest: it is the local cluster's stand-in.
EMULATED_NOTE = ("In this demo its guest is emulated: the local cluster runs its cloud-init and server on this machine. "
                 "A real guest needs QEMU and the golden image (docs: Run the demo).")


def real_image_name(image: GuestImage) -> str:
    """``debian-12-<yyyy>-<mm>``: the DataSource name of ``image``, its build month as the version."""
    return f"{REAL_GUEST_FAMILY}-{image.built()[:7] or 'unknown'}"


async def publish_real_guest(cluster) -> str | None:
    """Publish the newest built golden image on ``cluster`` (a started :class:`~localcluster.LocalCluster`, or a real
    plane's agents) as a
    DataSource; its name, or None (with one line saying why) when this machine cannot boot a real guest."""
    reason = why_no_real_guest()
    image = newest_guest_image()
    if reason is not None or image is None:
        print(f"VM workspaces boot the local cluster's emulated guest: {reason}", flush=True)
        return None
    name = real_image_name(image)
    await make_golden_image(cluster, GOLDEN_IMAGE_NAMESPACE, name, {}, size=image.claim_size, disk_image=image.disk)
    print(f"The Debian 12 VM profile boots {name} (tools/golden-image) under QEMU", flush=True)
    return name


def guest_config(real_image: str | None, hub_port: int) -> str:
    """Config (after the sample profiles) that puts the profiles on their guests: :func:`with_guests`."""
    return f"""# Which guest each VM profile boots (workspacespawner/demoguest.py)
from workspacespawner.demoguest import with_guests
c.KubeSpawner.profile_list = with_guests(c.KubeSpawner.profile_list, {real_image!r}, {hub_port})"""


def with_guests(profiles: list[dict], real_image: str | None, hub_port: int) -> list[dict]:
    """``profiles`` with every VM profile on the real guest ``real_image``, which reaches the hub at ``hub_port`` on
    the host's loopback and has :data:`REAL_GUEST_START_TIMEOUT` to boot: :data:`REAL_GUEST_PROFILE` as the Debian 12
    card, followed by :data:`REAL_GUEST_CODE_PROFILE`, the same guest opening code-server, and every other VM card
    saying what its guest does not get here (:data:`REAL_GUEST_NOTE`). Without a real guest (``real_image`` None),
    every VM card says its guest is emulated."""
    result = []
    for profile in profiles:
        override = profile.get("kubespawner_override") or {}
        if override.get("workspace_kind") != "vm":
            result.append(profile)
            continue
        if real_image is None:
            result.append({**profile, "description": _with_note(profile, EMULATED_NOTE)})
            continue
        guest = {**override, "vm_golden_image": real_image, "start_timeout": REAL_GUEST_START_TIMEOUT,
                 "hub_connect_url": f"http://{HOST_LOOPBACK_IN_GUEST}:{hub_port}"}
        if profile.get("slug") == REAL_GUEST_PROFILE:
            result.append({**profile, **REAL_GUEST_CARD, "kubespawner_override": guest})
            result.append({**profile, **REAL_GUEST_CODE_CARD, "kubespawner_override": {**guest, "ide": "code-server"}})
        else:
            result.append({**profile, "description": _with_note(profile, REAL_GUEST_NOTE), "kubespawner_override": guest})
    return result


def _with_note(profile: dict, note: str) -> str:
    return " ".join(filter(None, (profile.get("description"), note)))
