"""A VM workspace on a real guest against a container workspace, in the same run: first start and second start.

On the embedded local cluster holding tools/golden-image's Debian 12 as a
golden image, a real JupyterHub starts, for each of ``--users`` fresh users,
a container workspace (JupyterLab in a Pod: on the local cluster, the host's
``jupyterhub-singleuser`` as a process) and a VM workspace (CDI clones the
root disk from the golden image, QEMU boots Debian, cloud-init starts
JupyterLab in the guest), each started, stopped and started again. It prints
the seconds from the spawn request to the server answering through the hub
for each first and second start, their medians, the VM / container ratios,
and the accelerator QEMU used: KVM where this machine runs a guest under it,
TCG (software emulation) otherwise. There is no KubeSpawner column:
KubeSpawner has no VM workspaces, and its container start is the container
column's (``benchmarks/spawn_cost.py`` compares the two).

    python benchmarks/vm_guest.py              # 1 user: four starts, about 5 minutes under TCG
    python benchmarks/vm_guest.py --users 3

Needs what a real guest needs (QEMU, the golden image, virtiofsd:
``localcluster.guestimage.why_no_real_guest`` says what is missing).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.support

from localcluster.guestimage import newest_guest_image, why_no_real_guest  # noqa: E402
from localcluster.qemu import accelerator  # noqa: E402

from tests.support import planes  # noqa: E402
from tests.support.hubharness import CONFIG_D, Hub  # noqa: E402
from tests.support.realguest import golden, vm_profile  # noqa: E402

CONFIG = f"""
load_subconfig({str(CONFIG_D / '10-workspace-spawner.py')!r})
c.KubeSpawner.profile_list = [
    {{"display_name": "JupyterLab", "slug": "container", "default": True,
      "kubespawner_override": {{"workspace_kind": "container", "cpu_limit": 2, "mem_limit": "2G"}}}},
    {vm_profile("vm", "Debian 12 VM")},
]
"""
KINDS = ("container", "vm")


def timed_start(hub: Hub, user: str, profile: str) -> float:
    began = time.perf_counter()
    hub.start_server(user, {"profile": profile})
    return time.perf_counter() - began


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1, help="fresh users, each starting both kinds twice (default: %(default)s)")
    args = parser.parse_args(argv)
    reason = why_no_real_guest()
    image = newest_guest_image()
    if reason is not None or image is None:
        print(f"no real guest on this machine: {reason}")
        return 2
    accel = asyncio.run(accelerator(image.kernel))
    seconds: dict[tuple[str, str], list[float]] = {(kind, which): [] for kind in KINDS for which in ("first", "second")}
    with tempfile.TemporaryDirectory(prefix="vm-guest-") as tmp, \
            planes.running("embedded", Path(tmp) / "cluster", real_golden=[golden(image)]) as cluster:
        hub = Hub(Path(tmp) / "hub", cluster.kubeconfig, CONFIG, start_timeout=600).start()
        try:
            for i in range(args.users):
                for kind in KINDS:
                    user = f"bench-{kind}-{i}"
                    hub.create_user(user)
                    for which in ("first", "second"):
                        seconds[kind, which].append(timed_start(hub, user, kind))
                        print(f"{user}: {which} start {seconds[kind, which][-1]:.1f} s", flush=True)
                        hub.stop_server(user, timeout=180)
        finally:
            hub.stop()
    print(f"\nQEMU accelerator: {accel.upper()}" + ("" if accel == "kvm" else " (software emulation: no KVM guest runs here)"))
    print(f"{'':12}{'first start s':>15}{'second start s':>16}")
    medians = {key: statistics.median(values) for key, values in seconds.items()}
    for kind in KINDS:
        print(f"{kind:12}{medians[kind, 'first']:>15.1f}{medians[kind, 'second']:>16.1f}")
    print(f"{'vm/container':12}{medians['vm', 'first'] / medians['container', 'first']:>15.1f}"
          f"{medians['vm', 'second'] / medians['container', 'second']:>16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
