"""Fixtures and builders shared by the lifecycle, retention, disk and fence tests against the local cluster.

The fixtures they use are in ``conftest.py``: ``kube_objects`` (a
:class:`workspacespawner.k8s.api.Kube` on the test's own local cluster, all
controllers) and ``audit_log`` (an empty audit log in a SQLite file).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

from localcluster.goldenimage import make_golden_image

from workspacespawner.core import names
from workspacespawner.k8s.api import Kube
from workspacespawner.k8s.kinds import DATA_VOLUME, POD, PVC, VIRTUAL_MACHINE, VMI
from workspacespawner.storage import home

NS = "default"
#: What a container "runs": sleeps, and stops at once on SIGTERM.
SLEEPER = ["python3", "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(600)"]
#: A container that ignores SIGTERM (it goes only when its grace period ends), then listens on 8888:
#: with :data:`STUBBORN_PROBE` it reads Ready only once SIGTERM is ignored.
STUBBORN = [
    "python3", "-c",
    "import signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "s = socket.socket(); s.bind(('0.0.0.0', 8888)); s.listen(); time.sleep(600)",
]
STUBBORN_PROBE = {"tcpSocket": {"port": 8888}, "periodSeconds": 1}


def home_manifest(user: str, name: str | None = None, size: str = "1Gi") -> dict:
    """The spawner's home PVC for ``user`` (name ``home-<user>`` unless given)."""
    return home.make_home_pvc(
        name=name or f"home-{user}", namespace=NS, user_name=user, kubespawner_username=names.dns_label(user),
        storage_class="ceph-rbd", size=size, access_modes=["ReadWriteOnce"],
    )


async def make_home(kube: Kube, user: str, name: str | None = None, size: str = "1Gi") -> dict:
    """Create ``user``'s home PVC as the spawner does; returns it."""
    return await home.ensure_home_pvc(kube.core_api, home_manifest(user, name, size), user)


def pod_manifest(user: str, name: str, claim: str, *, node: str | None = None, grace: int = 5, owner: bool = True,
                 stubborn: bool = False) -> dict:
    """A Pod like a container workspace's: ``user``'s owner labels, ``claim`` mounted at /home/jovyan, sleeping.

    ``stubborn``: it ignores SIGTERM (see :data:`STUBBORN`), so a graceful
    deletion takes its whole grace period (the node agent caps it at 10 s
    unless told otherwise).
    """
    meta: dict = {"name": name, "namespace": NS}
    if owner:
        meta["labels"] = {**names.owner_labels(user), names.COMPONENT_LABEL: names.SERVER_COMPONENT}
        meta["annotations"] = names.owner_annotations(user)
    spec: dict = {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:2024-05-27", "command": SLEEPER,
                        "volumeMounts": [home.home_volume_mount("/home/jovyan")]}],
        "volumes": [home.home_volume(claim)],
    }
    if stubborn:
        container = spec["containers"][0]
        container.update(command=STUBBORN, ports=[{"name": "probe", "containerPort": 8888}], readinessProbe=STUBBORN_PROBE)
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def start_pod(kube: Kube, user: str, name: str, claim: str, **kwargs) -> dict:
    """Create the Pod of :func:`pod_manifest` and wait until it runs (and, if stubborn, is Ready); returns it."""
    await kube.create(POD, NS, pod_manifest(user, name, claim, **kwargs))
    found = {}

    async def running():
        found["pod"] = pod = await kube.get(POD, NS, name)
        status = pod.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return status.get("phase") == "Running" and (ready or not kwargs.get("stubborn"))

    await wait_async(running)
    return found["pod"]


async def wait_async(predicate, timeout: float = 20, interval: float = 0.1):
    """Await until the coroutine function ``predicate()`` returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {getattr(predicate, '__name__', predicate)}")
        await asyncio.sleep(interval)


async def run_strategy(kube: Kube, vm: str, strategy: str) -> None:
    """Set VirtualMachine ``vm``'s runStrategy and wait until its VMI exists (``Always``) or is gone (else)."""
    await kube.patch(VIRTUAL_MACHINE, NS, vm, [{"op": "replace", "path": "/spec/runStrategy", "value": strategy}])

    async def settled():
        return (await kube.get(VMI, NS, vm) is not None) == (strategy == "Always")

    await wait_async(settled)


async def phase_label(kube: Kube, name: str, kind=PVC) -> str | None:
    """The lifecycle phase label of object ``name``."""
    obj = await kube.get(kind, NS, name)
    return None if obj is None else (obj["metadata"].get("labels") or {}).get(names.PHASE_LABEL)


async def make_root_and_vm(kube: Kube, cluster_thread, user: str, vm: str, *, clone_seconds: float = 0.2, secret: str | None = None) -> None:
    """A VM workspace's root DataVolume ``<vm>-root`` (cloned from a small golden image) and its Halted VirtualMachine ``vm``.

    ``secret``: a cloud-init Secret the VM names (not created here).
    """
    cluster_thread.cluster.controllers["cdi"].clone_seconds = clone_seconds
    await cluster_thread.acall(partial(make_golden_image, size="1Gi"), "golden-images", "ubuntu", {"etc/os-release": "ID=ubuntu\n"})
    meta = {"namespace": NS, "labels": names.disk_labels(user, names.dns_label(user), names.ROOT_DISK), "annotations": names.owner_annotations(user)}
    await kube.create(DATA_VOLUME, NS, {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": f"{vm}-root", **meta},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "ubuntu", "namespace": "golden-images"},
                 "storage": {"resources": {"requests": {"storage": "2Gi"}}}},
    })
    volumes = [{"name": "root", "dataVolume": {"name": f"{vm}-root"}}]
    if secret:
        volumes.append({"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": secret}}})
    await kube.create(VIRTUAL_MACHINE, NS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": vm, "namespace": NS, "labels": names.owner_labels(user), "annotations": names.owner_annotations(user)},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}, "memory": {"guest": "1Gi"}},
            "volumes": volumes,
        }}},
    })


async def with_kube(kubeconfig, work):
    """Run ``await work(kube)`` with a :class:`Kube` of its own on ``kubeconfig`` (for sync tests, through ``ClusterThread.call``)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        return await work(Kube(client.CoreV1Api(api), client.CustomObjectsApi(api)))


def admin_command_args(tmp_path, cluster, settings: str = "") -> tuple[list[str], str]:
    """Arguments for an admin command against ``cluster``, and the ledger URL its hub config names.

    Writes ``tmp_path/jupyterhub_config.py`` with the ledger in ``tmp_path``,
    the namespace and ``settings`` (more config lines); the actor is ``root``.
    """
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub_config = tmp_path / "jupyterhub_config.py"
    hub_config.write_text(f"c.WorkspaceQuota.ledger_url = {url!r}\nc.KubeSpawner.namespace = {NS!r}\n{settings}")
    return ["-f", str(hub_config), "--kubeconfig", str(cluster.kubeconfig), "--actor", "root"], url


def kind_for(ref):
    """The backend's KindStatus of ``ref``'s workspace kind (what a spawner's backend passes to the lifecycle)."""
    from workspacespawner.backends.container.podstatus import ContainerStatus
    from workspacespawner.backends.vm.vmstatus import VMKindStatus

    return VMKindStatus() if ref.is_vm else ContainerStatus()
