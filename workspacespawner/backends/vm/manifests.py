"""Manifests of a VM workspace: root DataVolume, VirtualMachine, Service and cloud-init Secret.

Pure functions returning plain dicts, as kubespawner's ``objects.py`` does.
Each takes keyword-only arguments and two small frozen values: a
:class:`VMIdentity` (namespace, owner and object names) and, where sizes
matter, :class:`VMSettings` (what the profile resolved to). The APIs
mirrored:

* ``cdi.kubevirt.io/v1beta1`` ``DataVolume``: ``spec.sourceRef`` (a
  ``DataSource``, cross-namespace allowed) and ``spec.storage``
  (``storageClassName``, ``accessModes``, ``volumeMode``,
  ``resources.requests.storage``). Created on its own, never inside the VM's
  ``dataVolumeTemplates`` and never with an ownerReference, so that deleting
  or recreating the VM never takes the disk.
* ``kubevirt.io/v1`` ``VirtualMachine``: ``spec.runStrategy``,
  ``spec.template`` (a ``VirtualMachineInstanceSpec``: ``domain.cpu``,
  ``domain.memory.guest``, ``domain.firmware`` (``uuid``, ``bootloader.bios.useSerial``), ``domain.devices``
  disks/interfaces/gpus, ``networks``, ``volumes``, ``evictionStrategy``,
  ``affinity``, ``tolerations``,
  ``terminationGracePeriodSeconds``, ``readinessProbe``, ``nodeSelector``).
* core/v1 ``Service`` and ``Secret``.

The guest contract (what a cloud-init image, and the local cluster's node
agent, do with the Secret's ``userdata``) is described on
:func:`make_cloudinit_secret`.
"""

from __future__ import annotations

import base64
import copy
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from workspacespawner.backends.vm.guestconsole import IDE_MISSING
from workspacespawner.backends.vm.tiers import VMTiers, add_tiers_to_cloud_config, add_tiers_to_vm, virtiofs_mount
from workspacespawner.config.profiles import ResolvedProfile
from workspacespawner.core import names
from workspacespawner.core.gpuresources import GPU_PRODUCT_LABEL
from workspacespawner.gpu.placement import Placement
from workspacespawner.gpu.placement import apply as apply_placement
from workspacespawner.vmdisk.rootdisk import DATAVOLUME_ANNOTATIONS, ROOT_VOLUME

#: The singleuser server's port in the guest (Service port ``jupyter``).
JUPYTER_PORT = 8888
#: code-server's port in the guest (Service port ``code-server``), for images that serve it directly.
CODE_SERVER_PORT = 8080
#: Where the guest keeps the JupyterHub environment (systemd ``EnvironmentFile=``, mode 0600).
ENV_FILE = "/etc/workspacespawner/jupyterhub.env"
#: The systemd unit that runs the IDE in the guest.
UNIT_NAME = "workspace-ide.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT_NAME}"
#: virtio serial of the home disk; the guest finds it as ``/dev/disk/by-id/virtio-home``.
HOME_SERIAL = "home"
HOME_DEVICE = f"/dev/disk/by-id/virtio-{HOME_SERIAL}"
#: The virtiofs tag (the filesystem's name) of the home PVC when it is shared, not attached as a disk.
HOME_VIRTIOFS_TAG = "home"
#: KubeVirt's feature gate for a PVC in ``domain.devices.filesystems`` (older releases: ``ExperimentalVirtiofsSupport``).
VIRTIOFS_FEATURE_GATE = "EnableVirtioFsStorageVolumes"
#: How a VM gets the user's home PVC (``VMSettings.home_via``, the ``vm_home_via`` trait).
HOME_VIA = ("disk", "virtiofs")
#: Key of the user data in the cloud-init Secret (KubeVirt reads ``userdata`` or ``userData``).
USERDATA_KEY = "userdata"

#: cloud-init's init-stage modules (Ubuntu's list) with ``write_files`` run on every boot.
#: KubeVirt's NoCloud instance-id is stable per VM, so per-instance modules run on the
#: first boot only; the env file must be rewritten on each start to carry the fresh API
#: token. User data replaces the image's list, hence the whole list.
CLOUD_INIT_MODULES = (
    "seed_random",
    "bootcmd",
    ["write_files", "always"],
    "growpart",
    "resizefs",
    "disk_setup",
    "mounts",
    "set_hostname",
    "update_hostname",
    "update_etc_hosts",
    "ca_certs",
    "rsyslog",
    "users_groups",
    "ssh",
    "set_passwords",
)

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


@dataclass(frozen=True)
class VMIdentity:
    """Where a VM workspace lives, whose it is, and the names of its objects.

    ``user_name`` is the exact JupyterHub name (owner label and annotation);
    ``kubespawner_username`` kubespawner's safe slug of it (the
    ``hub.jupyter.org/username`` label). ``vm`` names the VirtualMachine (and
    its VMI and the ``kubevirt.io/domain`` label), ``root_disk`` the
    DataVolume (and the PVC CDI fills), ``cloudinit_secret`` and ``service``
    the Secret and Service; ``home_pvc`` the user's home PVC.
    """

    namespace: str
    user_name: str
    kubespawner_username: str
    vm: str
    root_disk: str
    cloudinit_secret: str
    service: str
    home_pvc: str
    server_name: str = ""

    @classmethod
    def for_workspace(
        cls,
        *,
        namespace: str,
        user_name: str,
        kubespawner_username: str,
        base_name: str,
        home_pvc: str,
        server_name: str = "",
    ) -> VMIdentity:
        """Names derived from one ``base_name`` (e.g. the expanded ``vm-{username}{servername}``).

        The VM and Service take the base (made an RFC 1035 label of at most
        50 characters, see :func:`names.dns_label`), the disk
        ``<base>-root`` and the Secret ``<base>-cloudinit``.
        """
        base = names.dns_label(base_name, 50)
        return cls(
            namespace=namespace,
            user_name=user_name,
            kubespawner_username=kubespawner_username,
            vm=base,
            root_disk=f"{base}-root",
            cloudinit_secret=f"{base}-cloudinit",
            service=base,
            home_pvc=home_pvc,
            server_name=server_name,
        )


    def to_state(self) -> dict:
        """A JSON-safe dict for spawner state (:meth:`from_state` reads it back)."""
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state: dict) -> VMIdentity:
        """The identity :meth:`to_state` saved."""
        return cls(**{field: state[field] for field in cls.__dataclass_fields__ if field in state})


@dataclass(frozen=True)
class VMSettings:
    """What one start of a VM workspace asks for (resolved from the profile and site settings).

    ``golden_image`` / ``golden_image_namespace``: the CDI ``DataSource`` the
    root disk is cloned from. ``root_disk_size``: a Kubernetes quantity
    (``"50Gi"``). ``storage_class``: None leaves the cluster default.
    ``volume_mode``: ``Block`` (RBD's raw device, the default) or
    ``Filesystem``. ``cpu_cores``: virtual CPU cores. ``memory``: guest
    memory, a quantity. ``gpus``: how many GPUs to pass through, each as
    ``gpu_device_name`` (the KubeVirt ``permittedHostDevices`` resource
    name, e.g. ``nvidia.com/GA100_A100_SXM4_80GB``). ``node_selector``:
    ``(label, value)`` pairs the VM's node must carry. ``attach_home``:
    give the VM the home PVC, ``home_via`` one of :data:`HOME_VIA`: shared
    through virtiofs (the container's files, the default) or as a second
    disk (an image of its own; see the ``vm_home_via`` trait). ``termination_grace_seconds``:
    how long a stop waits for the guest to shut down before it is killed.
    ``placement``: the team pool, GPU preference and spread rules of the
    VMI template (:mod:`workspacespawner.gpu.placement`; None: none).
    ``ready_path``: the singleuser server's API path
    (``<JUPYTERHUB_SERVICE_PREFIX>api``), which answers once the IDE serves:
    the VMI's readiness probe asks it.
    KubeVirt copies the template's ``affinity`` and ``tolerations`` to the
    virt-launcher Pod, and its labels (the owner label the spread rule
    selects on) too.
    """

    golden_image: str
    golden_image_namespace: str
    root_disk_size: str = "50Gi"
    storage_class: str | None = "ceph-rbd"
    volume_mode: str = "Block"
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)
    cpu_cores: int = 2
    memory: str = "8Gi"
    gpus: int = 0
    gpu_device_name: str = "nvidia.com/gpu"
    node_selector: tuple[tuple[str, str], ...] = ()
    attach_home: bool = True
    home_via: str = "virtiofs"
    termination_grace_seconds: int = 180
    storage: VMTiers | None = None
    placement: Placement | None = None
    ready_path: str = "/api"

    @classmethod
    def for_profile(cls, profile: ResolvedProfile, *, golden_image: str, golden_image_namespace: str, **site) -> VMSettings:
        """Settings for ``profile``: its GPUs, CPU (rounded up to whole cores), memory and GPU product.

        ``site`` gives the other fields (``root_disk_size``, ``storage_class``,
        ...); the profile's values win over ``cpu_cores``, ``memory`` and
        ``gpus`` given there.
        """
        values = dict(site)
        if profile.cpu:
            values["cpu_cores"] = max(1, math.ceil(profile.cpu))
        if profile.memory:
            values["memory"] = profile.memory
        values["gpus"] = profile.gpus
        selector = dict(values.get("node_selector") or ())
        if profile.gpu_product:
            selector[GPU_PRODUCT_LABEL] = profile.gpu_product
        values["node_selector"] = tuple(sorted(selector.items()))
        return cls(golden_image=golden_image, golden_image_namespace=golden_image_namespace, **values)


def firmware_uuid(ident: VMIdentity) -> str:
    """A stable SMBIOS UUID for the VM (the same on every start: one machine, one identity)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"workspacespawner:{ident.namespace}/{ident.vm}"))


def _meta(ident: VMIdentity, name: str, labels: dict) -> dict:
    return {
        "name": name,
        "namespace": ident.namespace,
        "labels": labels,
        "annotations": names.owner_annotations(ident.user_name),
    }


def workspace_labels(ident: VMIdentity) -> dict[str, str]:
    """Labels of the VM, its template (so its VMI and virt-launcher Pod), the Secret and Service."""
    labels = names.owner_labels(ident.user_name)
    labels[names.KUBESPAWNER_USERNAME_LABEL] = ident.kubespawner_username
    labels[names.COMPONENT_LABEL] = names.SERVER_COMPONENT
    return labels


def template_annotations(ident: VMIdentity) -> dict[str, str]:
    """Annotations KubeVirt copies onto the VMI: the exact user and server names (kubespawner's keys on Pods).

    They let hub-side bookkeeping (the quota's reconciliation) tell whose
    and which server a running VMI is, as it does for Pods.
    """
    return {
        **names.owner_annotations(ident.user_name),
        "hub.jupyter.org/username": ident.user_name,
        "hub.jupyter.org/servername": ident.server_name,
    }


def datavolume_storage(*, size: str, storage_class: str | None, volume_mode: str,
                       access_modes: Sequence[str] = ("ReadWriteOnce",)) -> dict:
    """A DataVolume's ``spec.storage``: ``size`` a quantity, ``storage_class`` None for the cluster default."""
    storage = {
        "accessModes": list(access_modes),
        "volumeMode": volume_mode,
        "resources": {"requests": {"storage": size}},
    }
    if storage_class is not None:
        storage["storageClassName"] = storage_class
    return storage


def make_root_datavolume(*, ident: VMIdentity, settings: VMSettings) -> dict:
    """The root disk: a DataVolume cloning the golden-image DataSource into a PVC of its own name.

    Labelled as a ``root`` disk of the owner (:func:`names.disk_labels`; CDI
    copies them to the PVC). Annotations: the owner's exact name under our
    prefix, which CDI does not read, the VM it serves (its slot,
    :data:`~.names.ROOT_SLOT_ANNOTATION`), the golden image it is cloned from
    (:data:`~.names.GOLDEN_IMAGE_ANNOTATION`, ``namespace/name``) and the
    constants of :data:`DATAVOLUME_ANNOTATIONS`; nothing a user chooses.
    """
    storage = datavolume_storage(size=settings.root_disk_size, storage_class=settings.storage_class,
                                 volume_mode=settings.volume_mode, access_modes=settings.access_modes)
    meta = _meta(ident, ident.root_disk, names.disk_labels(ident.user_name, ident.kubespawner_username, names.ROOT_DISK))
    meta["annotations"].update(DATAVOLUME_ANNOTATIONS)
    meta["annotations"][names.ROOT_SLOT_ANNOTATION] = ident.vm
    meta["annotations"][names.GOLDEN_IMAGE_ANNOTATION] = f"{settings.golden_image_namespace}/{settings.golden_image}"
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": meta,
        "spec": {
            "sourceRef": {
                "kind": "DataSource",
                "name": settings.golden_image,
                "namespace": settings.golden_image_namespace,
            },
            "storage": storage,
        },
    }


def _disks_and_volumes(ident: VMIdentity, settings: VMSettings) -> tuple[list[dict], list[dict], list[dict]]:
    """The domain's disks (root first: the guest boots from it), its virtiofs filesystems, and the volumes behind them."""
    virtio = {"bus": "virtio"}
    disks = [{"name": ROOT_VOLUME, "disk": dict(virtio), "bootOrder": 1}]
    filesystems: list[dict] = []
    volumes = [{"name": ROOT_VOLUME, "dataVolume": {"name": ident.root_disk}}]
    if settings.attach_home and settings.home_via == "virtiofs":
        filesystems.append({"name": HOME_VIRTIOFS_TAG, "virtiofs": {}})
        volumes.append({"name": HOME_VIRTIOFS_TAG, "persistentVolumeClaim": {"claimName": ident.home_pvc}})
    elif settings.attach_home:
        disks.append({"name": "homedisk", "disk": dict(virtio), "serial": HOME_SERIAL})
        volumes.append({"name": "homedisk", "persistentVolumeClaim": {"claimName": ident.home_pvc}})
    disks.append({"name": "cloudinitdisk", "disk": dict(virtio)})
    volumes.append({"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": ident.cloudinit_secret}}})
    return disks, filesystems, volumes


def make_virtual_machine(*, ident: VMIdentity, settings: VMSettings, extra_labels: Mapping[str, str] | None = None) -> dict:
    """The VirtualMachine, created ``Halted``: started and stopped through KubeVirt's subresources.

    The template carries the workspace labels plus ``kubevirt.io/domain:
    <vm>`` (what the Service selects) and ``extra_labels`` (e.g. the hub's
    common labels, for network policies). Networking: masquerade on the pod
    network, forwarding only the IDE ports. The VMI is Ready once the
    singleuser server in the guest answers at ``settings.ready_path``
    (``readinessProbe``, an ``httpGet``: the IDE serves, not only a port
    that accepts, which QEMU's user network does for a guest still
    booting). VMs
    with GPUs get ``evictionStrategy: None``: a GPU guest cannot be live
    migrated, so a node drain stops it instead of waiting forever.
    """
    disks, filesystems, volumes = _disks_and_volumes(ident, settings)
    devices: dict = {
        "disks": disks,
        **({"filesystems": filesystems} if filesystems else {}),
        "interfaces": [
            {
                "name": "default",
                "masquerade": {},
                "ports": [
                    {"name": "jupyter", "port": JUPYTER_PORT, "protocol": "TCP"},
                    {"name": "code-server", "port": CODE_SERVER_PORT, "protocol": "TCP"},
                ],
            }
        ],
    }
    if settings.gpus:
        devices["gpus"] = [{"name": f"gpu{i}", "deviceName": settings.gpu_device_name} for i in range(settings.gpus)]
    template_spec: dict = {
        "domain": {
            "cpu": {"cores": settings.cpu_cores, "sockets": 1, "threads": 1},
            "memory": {"guest": settings.memory},
            # the BIOS writes to the serial console too, so the hub reads a disk it cannot boot (backends/vm/guestconsole)
            "firmware": {"uuid": firmware_uuid(ident), "bootloader": {"bios": {"useSerial": True}}},
            "devices": devices,
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": volumes,
        "terminationGracePeriodSeconds": settings.termination_grace_seconds,
        "readinessProbe": {
            "httpGet": {"port": JUPYTER_PORT, "path": settings.ready_path},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
    }
    if settings.gpus:
        template_spec["evictionStrategy"] = "None"
    if settings.node_selector:
        template_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.placement is not None:
        template_spec = apply_placement(template_spec, settings.placement)
    template_labels = {**dict(extra_labels or {}), **workspace_labels(ident), names.DOMAIN_LABEL: ident.vm}
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": _meta(ident, ident.vm, workspace_labels(ident)),
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": template_labels, "annotations": template_annotations(ident)},
                "spec": template_spec,
            },
        },
    }
    return add_tiers_to_vm(vm, settings.storage) if settings.storage else vm


def make_vm_service(*, ident: VMIdentity) -> dict:
    """The ClusterIP Service in front of the VM: ports ``jupyter`` 8888 and ``code-server`` 8080.

    It selects the VMI (really its virt-launcher Pod) by ``kubevirt.io/domain``
    and the owner label, so no other VM of that name can answer for it.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ident, ident.service, workspace_labels(ident)),
        "spec": {
            "type": "ClusterIP",
            "selector": {names.DOMAIN_LABEL: ident.vm, names.OWNER_LABEL: names.owner_id(ident.user_name)},
            "ports": [
                {"name": "jupyter", "port": JUPYTER_PORT, "targetPort": JUPYTER_PORT, "protocol": "TCP"},
                {"name": "code-server", "port": CODE_SERVER_PORT, "targetPort": CODE_SERVER_PORT, "protocol": "TCP"},
            ],
        },
    }


# -- bringing an existing VirtualMachine to its manifest ------------------------------------------

#: Template fields we set only sometimes: present on the VM but absent from the profile means "changed".
OPTIONAL_TEMPLATE_FIELDS = (
    ("nodeSelector",),
    ("affinity",),
    ("tolerations",),
    ("evictionStrategy",),
    ("domain", "devices", "gpus"),
    ("domain", "devices", "filesystems"),
)
#: The metadata fields :func:`vm_update_body` merges the manifest's values onto.
MERGED_METADATA = ("labels", "annotations")


def covers(actual, desired) -> bool:
    """Whether ``actual`` holds everything ``desired`` says (dicts may have more keys; lists match item by item).

    What the API server or KubeVirt adds (defaults, status) does not count as a difference.
    """
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and covers(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(actual) == len(desired) and all(map(covers, actual, desired))
    return actual == desired


def _dig(obj: dict, path: Sequence[str]):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


#: The prefix of the template labels the manifest holds exactly: Kueue's (a GPU queue's, :mod:`~workspacespawner.queue`),
#: which a start that waits in no queue must not leave on the VMI.
EXACT_TEMPLATE_LABELS = "kueue.x-k8s.io/"


def _exact_labels(spec: dict) -> dict:
    labels = _dig(spec, ("template", "metadata", "labels")) or {}
    return {key: value for key, value in labels.items() if key.startswith(EXACT_TEMPLATE_LABELS)}


def vm_spec_current(vm: dict, manifest: dict) -> bool:
    """Whether the existing ``vm`` already runs the profile of ``manifest`` (run strategy included; the template's
    Kueue labels exactly the manifest's)."""
    actual, desired = vm.get("spec") or {}, manifest["spec"]
    if not covers(actual, desired) or _exact_labels(actual) != _exact_labels(desired):
        return False
    template, wanted = _dig(actual, ("template", "spec")) or {}, desired["template"]["spec"]
    return all(_dig(wanted, path) is not None or _dig(template, path) is None for path in OPTIONAL_TEMPLATE_FIELDS)


def vm_update_body(vm: dict, manifest: dict) -> dict | None:
    """The replace body that brings ``vm`` (a VirtualMachine as read from the API) to ``manifest``; None if it is current.

    The body is ``vm`` without ``status``, with ``manifest``'s spec, and its
    labels and annotations merged onto ``vm``'s (the manifest's values win;
    other keys, such as the lifecycle phase, stay). The rest of ``vm``'s
    metadata is kept, ``resourceVersion`` included, so the replace fails
    with 409 if the VM changed since it was read. None when ``vm``'s spec
    is current (:func:`vm_spec_current`) and its labels and annotations
    already hold the manifest's. ``vm`` and ``manifest`` are not changed.
    """
    meta, wanted = vm.get("metadata") or {}, manifest["metadata"]
    merged = {field: {**(meta.get(field) or {}), **(wanted.get(field) or {})} for field in MERGED_METADATA}
    if vm_spec_current(vm, manifest) and all(merged[field] == (meta.get(field) or {}) for field in MERGED_METADATA):
        return None
    body = copy.deepcopy({key: value for key, value in vm.items() if key not in ("spec", "status")})
    body["metadata"] = {**body.get("metadata", {}), **copy.deepcopy(merged)}
    body["spec"] = copy.deepcopy(manifest["spec"])
    return body


# -- the guest's cloud-init user data ------------------------------------------------------------


def singleuser_command(cmd: Sequence[str], args: Sequence[str] = (), *, port: int = JUPYTER_PORT) -> list[str]:
    """``cmd`` listening on every guest address at ``port``, then ``args`` (the spawner's ``get_args()``)."""
    return [*cmd, "--ip=0.0.0.0", f"--port={port}", *args]


def env_file_line(key: str, value: str) -> str:
    """One ``KEY=value`` line of a systemd ``EnvironmentFile=``, quoted so systemd reads ``value`` back exactly.

    Single quotes take everything literally; a value holding ``'`` is
    double-quoted with ``\\``, ``"``, ``$`` and backquote escaped. Inside
    either quotes systemd keeps line breaks (src/basic/env-file.c), so a
    multi-line value is one quoted assignment over several lines. Keys must
    be environment variable names and values may not hold NUL (a C string
    cannot carry it); ValueError otherwise.
    """
    if not _ENV_KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not an environment variable name")
    if "\0" in value:
        raise ValueError(f"the value of {key} holds a NUL character")
    if "'" not in value:
        return f"{key}='{value}'"
    escaped = re.sub(r'([\\"$`])', r"\\\1", value)
    return f'{key}="{escaped}"'


def exec_start(argv: Sequence[str]) -> str:
    """``argv`` as a systemd ``ExecStart=`` command line.

    Plain words stay bare; others are double-quoted with ``\\`` and ``"``
    escaped, ``%`` doubled (systemd specifiers) and ``$`` doubled (no
    variable expansion). Raises ValueError for an empty ``argv`` or a word
    with a line break or NUL.
    """
    if not argv:
        raise ValueError("the IDE command is empty")
    words = []
    for word in argv:
        if "\n" in word or "\r" in word or "\0" in word:
            raise ValueError(f"command word {word!r} holds a line break or NUL")
        if _PLAIN_WORD.fullmatch(word):
            words.append(word)
        else:
            escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
            words.append(f'"{escaped}"')
    return " ".join(words)


#: Where systemd looks up an ``ExecStart=`` command that is not an absolute path (its compiled-in search path).
SYSTEMD_EXEC_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def ide_check(command: str) -> list[str]:
    """The command line that exits 1, after writing :data:`.guestconsole.IDE_MISSING` and ``command`` to the
    console, when ``command`` is not an executable of the image."""
    script = (f'PATH={SYSTEMD_EXEC_PATH}; command -v -- "$1" >/dev/null && exit 0; '
              f'echo "{IDE_MISSING}: $1" >/dev/console; exit 1')
    return ["/bin/sh", "-c", script, "workspace-ide-check", command]


def ide_unit(*, command: Sequence[str], unix_user: str, working_directory: str) -> str:
    """The ``workspace-ide.service`` unit: the IDE command with the JupyterHub environment, restarted on failure.

    Ordered after cloud-init's init stage, which rewrites the env file on
    every boot, and the network. Before the IDE, a check as root (``+``)
    looks the command up where systemd looks an ``ExecStart=`` command up
    and, when the image lacks it, writes :data:`.guestconsole.IDE_MISSING`
    to the serial console, which the hub reads (:mod:`.guestconsole`).
    """
    return "\n".join(
        [
            "[Unit]",
            "Description=JupyterHub workspace server (managed by workspacespawner)",
            "Wants=network-online.target",
            "After=network-online.target cloud-init.service cloud-init-network.service cloud-config.service",
            "",
            "[Service]",
            "Type=simple",
            f"User={unix_user}",
            f"EnvironmentFile={ENV_FILE}",
            f"WorkingDirectory=-{working_directory}",
            f"ExecStartPre=+{exec_start(ide_check(command[0]))}",
            f"ExecStart={exec_start(command)}",
            "Restart=on-failure",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def cloud_config(
    *,
    env: Mapping[str, str],
    command: Sequence[str],
    home_mount_path: str,
    attach_home: bool,
    unix_user: str = "jovyan",
    unix_uid: int = 1000,
    storage: VMTiers | None = None,
    home_via: str = "virtiofs",
) -> dict:
    """The ``#cloud-config`` document (as a dict) that runs the IDE in the guest; see :func:`make_cloudinit_secret`."""
    env_text = "".join(env_file_line(key, str(value)) + "\n" for key, value in sorted(env.items()))
    config: dict = {
        "cloud_init_modules": [list(m) if isinstance(m, list) else m for m in CLOUD_INIT_MODULES],
        "users": [
            "default",
            {
                "name": unix_user,
                "uid": unix_uid,
                "homedir": home_mount_path,
                "shell": "/bin/bash",
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "lock_passwd": True,
            },
        ],
        "write_files": [
            {"path": ENV_FILE, "content": env_text, "permissions": "0600", "owner": "root:root"},
            {
                "path": UNIT_FILE,
                "content": ide_unit(command=command, unix_user=unix_user, working_directory=home_mount_path),
                "permissions": "0644",
                "owner": "root:root",
            },
        ],
        "runcmd": ["systemctl daemon-reload", f"systemctl enable --now {UNIT_NAME}"],
    }
    if attach_home and home_via == "virtiofs":
        # The home PVC's own files, shared by virtiofs: nothing to format.
        config["mounts"] = [list(virtiofs_mount(HOME_VIRTIOFS_TAG, home_mount_path))]
    elif attach_home:
        # A blank home disk gets a filesystem once; an existing one is never overwritten. A new filesystem's root is
        # root's: the first boot gives it to the workspace user (runcmd runs once per instance, before the unit).
        config["fs_setup"] = [{"label": "home", "filesystem": "ext4", "device": HOME_DEVICE, "overwrite": False}]
        config["mounts"] = [[HOME_DEVICE, home_mount_path, "auto", "defaults,nofail"]]
        config["runcmd"] = [["chown", f"{unix_uid}:{unix_uid}", home_mount_path], *config["runcmd"]]
    return add_tiers_to_cloud_config(config, storage) if storage else config


def userdata_text(config: dict) -> str:
    """The ``#cloud-config`` user data of a :func:`cloud_config` document."""
    return "#cloud-config\n" + yaml.dump(config, Dumper=_CloudConfigDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1_000_000)


class _CloudConfigDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` writing multi-line strings (file contents) as literal blocks, for a readable document."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CloudConfigDumper.add_representer(str, _represent_str)


def make_cloudinit_secret(
    *,
    ident: VMIdentity,
    env: Mapping[str, str],
    command: Sequence[str],
    home_mount_path: str = "/home/jovyan",
    attach_home: bool = True,
    unix_user: str = "jovyan",
    unix_uid: int = 1000,
    storage: VMTiers | None = None,
    home_via: str = "virtiofs",
) -> dict:
    """The per-start cloud-init Secret (type Opaque, key ``userdata``): the guest's JupyterHub settings.

    The user data is a ``#cloud-config`` document (YAML written by
    PyYAML's safe dumper, no value pasted into YAML text) that, in the guest:

    * creates ``unix_user`` (uid ``unix_uid``, the docker-stacks ``jovyan``
      by default, so files in the home keep their owner) with
      passwordless sudo: the whole system is the user's;
    * writes ``env`` (the spawner's ``get_env()``: API token, URLs, service
      prefix, OAuth client) to :data:`ENV_FILE` (mode 0600, systemd
      ``EnvironmentFile`` quoting) and the :data:`UNIT_NAME` unit running
      ``command`` (see :func:`singleuser_command`) in ``home_mount_path``;
      both on every boot (:data:`CLOUD_INIT_MODULES`), so each start brings
      a fresh token;
    * with ``attach_home``, mounts the virtiofs tag :data:`HOME_VIRTIOFS_TAG`
      at ``home_mount_path`` (``nofail``; ``home_via="virtiofs"``, the
      default); with ``home_via="disk"`` instead, formats a blank home disk
      once, mounts the disk with virtio serial ``home`` there and, on the
      first boot, gives its root to ``unix_user``;
    * on the first boot, enables and starts the unit (``runcmd``); later
      boots start it as an enabled unit.

    The Secret holds the API token: never log it or its user data.
    """
    config = cloud_config(
        env=env,
        command=command,
        home_mount_path=home_mount_path,
        attach_home=attach_home,
        unix_user=unix_user,
        unix_uid=unix_uid,
        storage=storage,
        home_via=home_via,
    )
    text = userdata_text(config)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(ident, ident.cloudinit_secret, workspace_labels(ident)),
        "data": {USERDATA_KEY: base64.b64encode(text.encode("utf-8")).decode("ascii")},
    }

