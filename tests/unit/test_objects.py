"""Golden dicts for every pure manifest builder, and for the body that updates an existing VirtualMachine.

Covers, each as the whole returned dict compared to a literal one, for fixed
inputs with an odd user name (``Ann.O'Brien@school.example``): the home PVC
(with and without a storage class), its Pod volume and mount
(:mod:`workspacespawner.storage.home`); the root DataVolume, the
VirtualMachine (without GPUs, and with GPUs, a node selector and extra
labels), its Service and cloud-init Secret, whose base64 user data is
decoded and compared as the parsed cloud-config document
(:mod:`workspacespawner.backends.vm.manifests`); a team claim, scratch as an
``emptyDir`` and as a generic ephemeral volume, the model cache from a claim
and from a host path, the scratch notice init container
(:mod:`workspacespawner.storage.tiers`); a VolumeSnapshot of a home and of a
root disk, and a home restored from a snapshot
(:mod:`workspacespawner.lifecycle.disks`); a quota Event
(:mod:`workspacespawner.quota.events`); ``vm_update_body`` for a changed
spec, changed labels only, an optional template field to drop, nothing
changed (None), and ``status`` left out while ``resourceVersion`` stays.

Every core-kind object (and each volume, mount and init container, inside a
Pod) passes the local cluster's validator (kubernetes-validate strict);
KubeVirt, CDI and snapshot objects pass it against the OpenAPI schemas the
local cluster carries.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta, timezone

import pytest
import yaml
from localcluster.kinds import by_kind
from localcluster.validation import Validator

from workspacespawner.backends.vm.manifests import (
    VMIdentity,
    VMSettings,
    make_cloudinit_secret,
    make_root_datavolume,
    make_virtual_machine,
    make_vm_service,
    singleuser_command,
    vm_update_body,
)
from workspacespawner.lifecycle.disks import make_restored_pvc, make_volume_snapshot, shown_phase
from workspacespawner.lifecycle.phases import Phase, Status
from workspacespawner.quota import events
from workspacespawner.storage.home import home_volume, home_volume_mount, make_home_pvc
from workspacespawner.storage.tiers import (
    ModelCache,
    Scratch,
    TeamFolder,
    make_team_claim,
    model_cache_volume,
    scratch_notice_init_container,
    scratch_volume,
)

USER = "Ann.O'Brien@school.example"
#: kubespawner's slug of USER (an input: the ``hub.jupyter.org/username`` label value).
SLUG = "ann.o-brien-school.example"
#: names.owner_id(USER), written out so that a change of the owner hash shows here.
OWNER = "c310d4d2a801725304efc8c5ff5d4a090f52da87"
#: The VM's (and Service's) name: names.dns_label(f"vm-{USER}", 50).
VM = "vm-ann-o-brien-school-example-0a3c1695"
#: firmware_uuid of the VM: uuid5 of its namespace and name.
FIRMWARE_UUID = "9555eddd-7ad0-5363-803a-fca4f8af8151"
IMAGE = "quay.io/jupyter/base-notebook:2025-06-02"

IDENT = VMIdentity.for_workspace(
    namespace="jhub",
    user_name=USER,
    kubespawner_username=SLUG,
    base_name=f"vm-{USER}",
    home_pvc="home-ann",
    server_name="gpu",
)
SETTINGS = VMSettings(golden_image="ubuntu-2404-gpu", golden_image_namespace="golden-images", ready_path="/user/ann/api")
GPU_SETTINGS = VMSettings(
    golden_image="ubuntu-2404-gpu",
    golden_image_namespace="golden-images",
    cpu_cores=16,
    memory="120Gi",
    gpus=2,
    gpu_device_name="nvidia.com/GA100_A100_SXM4_80GB",
    ready_path="/user/ann/api",
    node_selector=(("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),),
)


def causes(obj: dict, old: dict | None = None) -> list[dict]:
    """What the local cluster's API server would refuse in ``obj`` (on create, or on update of ``old``)."""
    return Validator().causes(by_kind()[(obj["apiVersion"], obj["kind"])], obj, old)


def pod_with(*, volumes: list[dict], mounts: list[dict], init_containers: list[dict] = ()) -> dict:
    """A minimal Pod carrying Pod-spec fragments, so that they are validated where they are used."""
    spec = {
        "containers": [{"name": "notebook", "image": IMAGE, "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "jupyter-ann", "namespace": "jhub"}, "spec": spec}


# -- storage/home.py ----------------------------------------------------------------------------


def test_home_pvc():
    pvc = make_home_pvc(
        name="home-ann",
        namespace="jhub",
        user_name=USER,
        kubespawner_username=SLUG,
        storage_class="ceph-rbd",
        size="10Gi",
        access_modes=["ReadWriteOnce"],
    )
    assert pvc == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "home-ann",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-storage",
                "workspacespawner.io/disk": "home",
            },
            "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": "ceph-rbd",
        },
    }
    assert causes(pvc) == []


def test_home_pvc_without_storage_class_leaves_the_default():
    pvc = make_home_pvc(
        name="home-ann",
        namespace="jhub",
        user_name=USER,
        kubespawner_username=SLUG,
        storage_class=None,
        size="1Ti",
        access_modes=["ReadWriteOnce", "ReadWriteOncePod"],
    )
    assert pvc == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "home-ann",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-storage",
                "workspacespawner.io/disk": "home",
            },
            "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce", "ReadWriteOncePod"],
            "resources": {"requests": {"storage": "1Ti"}},
        },
    }
    assert causes(pvc) == []


def test_home_volume_and_mount():
    volume, mount = home_volume("home-ann"), home_volume_mount("/home/jovyan")
    assert volume == {"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}
    assert mount == {"name": "home", "mountPath": "/home/jovyan"}
    assert causes(pod_with(volumes=[volume], mounts=[mount])) == []


# -- backends/vm/manifests.py -------------------------------------------------------------------


def test_root_datavolume():
    dv = make_root_datavolume(ident=IDENT, settings=SETTINGS)
    assert dv == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": f"{VM}-root",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-storage",
                "workspacespawner.io/disk": "root",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "cdi.kubevirt.io/allowClaimAdoption": "true",
                "workspacespawner.io/root-slot": VM,
                "workspacespawner.io/golden-image": "golden-images/ubuntu-2404-gpu",
            },
        },
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": "ubuntu-2404-gpu", "namespace": "golden-images"},
            "storage": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "resources": {"requests": {"storage": "50Gi"}},
                "storageClassName": "ceph-rbd",
            },
        },
    }
    assert causes(dv) == []


#: make_virtual_machine(ident=IDENT, settings=SETTINGS): no GPUs, no extra labels.
VM_WITHOUT_GPUS = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": VM,
        "namespace": "jhub",
        "labels": {
            "app.kubernetes.io/managed-by": "workspacespawner",
            "workspacespawner.io/owner": OWNER,
            "hub.jupyter.org/username": SLUG,
            "component": "singleuser-server",
        },
        "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
    },
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "metadata": {
                "labels": {
                    "app.kubernetes.io/managed-by": "workspacespawner",
                    "workspacespawner.io/owner": OWNER,
                    "hub.jupyter.org/username": SLUG,
                    "component": "singleuser-server",
                    "kubevirt.io/domain": VM,
                },
                "annotations": {
                    "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                    "hub.jupyter.org/username": "Ann.O'Brien@school.example",
                    "hub.jupyter.org/servername": "gpu",
                },
            },
            "spec": {
                "domain": {
                    "cpu": {"cores": 2, "sockets": 1, "threads": 1},
                    "memory": {"guest": "8Gi"},
                    "firmware": {"uuid": FIRMWARE_UUID, "bootloader": {"bios": {"useSerial": True}}},
                    "devices": {
                        "disks": [
                            {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                        ],
                        "filesystems": [{"name": "home", "virtiofs": {}}],
                        "interfaces": [
                            {
                                "name": "default",
                                "masquerade": {},
                                "ports": [
                                    {"name": "jupyter", "port": 8888, "protocol": "TCP"},
                                    {"name": "code-server", "port": 8080, "protocol": "TCP"},
                                ],
                            }
                        ],
                    },
                },
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [
                    {"name": "rootdisk", "dataVolume": {"name": f"{VM}-root"}},
                    {"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}},
                    {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": f"{VM}-cloudinit"}}},
                ],
                "terminationGracePeriodSeconds": 180,
                "readinessProbe": {
                    "httpGet": {"port": 8888, "path": "/user/ann/api"},
                    "initialDelaySeconds": 5,
                    "periodSeconds": 5,
                    "failureThreshold": 3,
                },
            },
        },
    },
}

#: make_virtual_machine(ident=IDENT, settings=GPU_SETTINGS, extra_labels={"app": "jupyterhub", "release": "jhub"}).
VM_WITH_GPUS = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": VM,
        "namespace": "jhub",
        "labels": {
            "app.kubernetes.io/managed-by": "workspacespawner",
            "workspacespawner.io/owner": OWNER,
            "hub.jupyter.org/username": SLUG,
            "component": "singleuser-server",
        },
        "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
    },
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "metadata": {
                "labels": {
                    "app": "jupyterhub",
                    "release": "jhub",
                    "app.kubernetes.io/managed-by": "workspacespawner",
                    "workspacespawner.io/owner": OWNER,
                    "hub.jupyter.org/username": SLUG,
                    "component": "singleuser-server",
                    "kubevirt.io/domain": VM,
                },
                "annotations": {
                    "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                    "hub.jupyter.org/username": "Ann.O'Brien@school.example",
                    "hub.jupyter.org/servername": "gpu",
                },
            },
            "spec": {
                "domain": {
                    "cpu": {"cores": 16, "sockets": 1, "threads": 1},
                    "memory": {"guest": "120Gi"},
                    "firmware": {"uuid": FIRMWARE_UUID, "bootloader": {"bios": {"useSerial": True}}},
                    "devices": {
                        "disks": [
                            {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                        ],
                        "filesystems": [{"name": "home", "virtiofs": {}}],
                        "interfaces": [
                            {
                                "name": "default",
                                "masquerade": {},
                                "ports": [
                                    {"name": "jupyter", "port": 8888, "protocol": "TCP"},
                                    {"name": "code-server", "port": 8080, "protocol": "TCP"},
                                ],
                            }
                        ],
                        "gpus": [
                            {"name": "gpu0", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"},
                            {"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_SXM4_80GB"},
                        ],
                    },
                },
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [
                    {"name": "rootdisk", "dataVolume": {"name": f"{VM}-root"}},
                    {"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}},
                    {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": f"{VM}-cloudinit"}}},
                ],
                "terminationGracePeriodSeconds": 180,
                "readinessProbe": {
                    "httpGet": {"port": 8888, "path": "/user/ann/api"},
                    "initialDelaySeconds": 5,
                    "periodSeconds": 5,
                    "failureThreshold": 3,
                },
                "evictionStrategy": "None",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            },
        },
    },
}


def test_virtual_machine_without_gpus():
    vm = make_virtual_machine(ident=IDENT, settings=SETTINGS)
    assert vm == VM_WITHOUT_GPUS
    assert causes(vm) == []


def test_virtual_machine_with_gpus_and_extra_labels():
    vm = make_virtual_machine(ident=IDENT, settings=GPU_SETTINGS, extra_labels={"app": "jupyterhub", "release": "jhub"})
    assert vm == VM_WITH_GPUS
    assert causes(vm) == []


def test_extra_labels_never_override_the_workspace_labels():
    vm = make_virtual_machine(
        ident=IDENT, settings=SETTINGS, extra_labels={"workspacespawner.io/owner": "someone-else"}
    )
    assert vm == VM_WITHOUT_GPUS


def test_vm_service():
    service = make_vm_service(ident=IDENT)
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-server",
            },
            "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {"kubevirt.io/domain": VM, "workspacespawner.io/owner": OWNER},
            "ports": [
                {"name": "jupyter", "port": 8888, "targetPort": 8888, "protocol": "TCP"},
                {"name": "code-server", "port": 8080, "targetPort": 8080, "protocol": "TCP"},
            ],
        },
    }
    assert causes(service) == []


def test_cloudinit_secret():
    env = {
        "JUPYTERHUB_API_TOKEN": "0123456789abcdef",
        "JUPYTERHUB_USER": USER,
        "JUPYTERHUB_SERVICE_PREFIX": "/user/Ann.O'Brien@school.example/gpu/",
        "JUPYTERHUB_DEFAULT_URL": "/lab?reset",
    }
    command = singleuser_command(["jupyterhub-singleuser"], ["--debug", "--ServerApp.root_dir=/home/jovyan/100% sure"])
    secret = make_cloudinit_secret(ident=IDENT, env=env, command=command)
    assert causes(secret) == []
    text = base64.b64decode(secret["data"]["userdata"], validate=True).decode("utf-8")
    assert text.startswith("#cloud-config\n")
    decoded = dict(secret, data={key: yaml.safe_load(base64.b64decode(value)) for key, value in secret["data"].items()})
    assert decoded == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"{VM}-cloudinit",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-server",
            },
            "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
        },
        "data": {
            "userdata": {
                "cloud_init_modules": [
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
                ],
                "users": [
                    "default",
                    {
                        "name": "jovyan",
                        "uid": 1000,
                        "homedir": "/home/jovyan",
                        "shell": "/bin/bash",
                        "sudo": "ALL=(ALL) NOPASSWD:ALL",
                        "lock_passwd": True,
                    },
                ],
                "write_files": [
                    {
                        "path": "/etc/workspacespawner/jupyterhub.env",
                        "content": (
                            "JUPYTERHUB_API_TOKEN='0123456789abcdef'\n"
                            "JUPYTERHUB_DEFAULT_URL='/lab?reset'\n"
                            'JUPYTERHUB_SERVICE_PREFIX="/user/Ann.O\'Brien@school.example/gpu/"\n'
                            'JUPYTERHUB_USER="Ann.O\'Brien@school.example"\n'
                        ),
                        "permissions": "0600",
                        "owner": "root:root",
                    },
                    {
                        "path": "/etc/systemd/system/workspace-ide.service",
                        "content": (
                            "[Unit]\n"
                            "Description=JupyterHub workspace server (managed by workspacespawner)\n"
                            "Wants=network-online.target\n"
                            "After=network-online.target cloud-init.service cloud-init-network.service"
                            " cloud-config.service\n"
                            "\n"
                            "[Service]\n"
                            "Type=simple\n"
                            "User=jovyan\n"
                            "EnvironmentFile=/etc/workspacespawner/jupyterhub.env\n"
                            "WorkingDirectory=-/home/jovyan\n"
                            "ExecStartPre=+/bin/sh -c"
                            ' "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin;'
                            ' command -v -- \\"$$1\\" >/dev/null && exit 0;'
                            ' echo \\"workspacespawner: the IDE command is not in this image: $$1\\" >/dev/console;'
                            ' exit 1" workspace-ide-check jupyterhub-singleuser\n'
                            "ExecStart=jupyterhub-singleuser --ip=0.0.0.0 --port=8888 --debug"
                            ' "--ServerApp.root_dir=/home/jovyan/100%% sure"\n'
                            "Restart=on-failure\n"
                            "RestartSec=5\n"
                            "\n"
                            "[Install]\n"
                            "WantedBy=multi-user.target\n"
                        ),
                        "permissions": "0644",
                        "owner": "root:root",
                    },
                ],
                "runcmd": ["systemctl daemon-reload", "systemctl enable --now workspace-ide.service"],
                "mounts": [["home", "/home/jovyan", "virtiofs", "defaults,nofail", "0", "0"]],
            }
        },
    }


# -- storage/tiers.py ---------------------------------------------------------------------------


def test_team_claim():
    folder = TeamFolder(
        group="ML Lab",
        claim="team-ml-lab-f8500c19",
        sub_path="",
        read_only=False,
        size="100Gi",
        storage_class="cephfs",
        create=True,
        mount_path="/shared/ML Lab",
    )
    claim = make_team_claim(folder=folder, namespace="jhub", groups=["Ann's Übung", "ML Lab"])
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "team-ml-lab-f8500c19",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/disk": "team",
                "workspacespawner.io/team": "f8500c1917285fed4d4db6744d19683b4872acf6",
            },
            "annotations": {"workspacespawner.io/team-names": '["Ann\'s Übung", "ML Lab"]'},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "100Gi"}},
            "storageClassName": "cephfs",
        },
    }
    assert causes(claim) == []


def test_scratch_as_empty_dir():
    volume, mount = scratch_volume(scratch=Scratch(size="20Gi"))
    assert (volume, mount) == (
        {"name": "scratch", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "scratch", "mountPath": "/scratch"},
    )
    assert causes(pod_with(volumes=[volume], mounts=[mount])) == []


def test_scratch_as_ephemeral_volume():
    volume, mount = scratch_volume(scratch=Scratch(size="200Gi", storage_class="local-nvme", mount_path="/tmp/scratch"))
    assert (volume, mount) == (
        {
            "name": "scratch",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "metadata": {
                        "labels": {
                            "app.kubernetes.io/managed-by": "workspacespawner",
                            "workspacespawner.io/disk": "scratch",
                        }
                    },
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "local-nvme",
                        "resources": {"requests": {"storage": "200Gi"}},
                    },
                }
            },
        },
        {"name": "scratch", "mountPath": "/tmp/scratch"},
    )
    assert causes(pod_with(volumes=[volume], mounts=[mount])) == []


def test_model_cache_from_a_claim():
    volume, mount = model_cache_volume(cache=ModelCache(claim="model-cache", sub_path="hf"))
    assert (volume, mount) == (
        {"name": "models", "persistentVolumeClaim": {"claimName": "model-cache", "readOnly": True}},
        {"name": "models", "mountPath": "/models", "readOnly": True, "subPath": "hf"},
    )
    assert causes(pod_with(volumes=[volume], mounts=[mount])) == []


def test_model_cache_from_a_host_path():
    volume, mount = model_cache_volume(cache=ModelCache(host_path="/mnt/models", host_path_type="Directory"))
    assert (volume, mount) == (
        {"name": "models", "hostPath": {"path": "/mnt/models", "type": "Directory"}},
        {"name": "models", "mountPath": "/models", "readOnly": True},
    )
    assert causes(pod_with(volumes=[volume], mounts=[mount])) == []


def test_scratch_notice_init_container():
    scratch = Scratch(size="20Gi")
    container = scratch_notice_init_container(
        scratch=scratch, image=IMAGE, security_context={"runAsUser": 1000, "runAsGroup": 100}
    )
    assert container == {
        "name": "scratch-notice",
        "image": IMAGE,
        "command": ["sh", "-c", 'printf "%s\\n" "$NOTICE" > "$NOTICE_FILE"'],
        "env": [
            {
                "name": "NOTICE",
                "value": (
                    "/scratch is scratch space on this node's local disk (20Gi at most). Everything in it is deleted"
                    " when your server stops, restarts or moves to another node. Keep files you need in your home"
                    " directory or a team folder under /shared."
                ),
            },
            {"name": "NOTICE_FILE", "value": "/scratch/README-SCRATCH.txt"},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "securityContext": {"runAsUser": 1000, "runAsGroup": 100},
    }
    volume, mount = scratch_volume(scratch=scratch)
    assert causes(pod_with(volumes=[volume], mounts=[mount], init_containers=[container])) == []


# -- workspace/disks.py -------------------------------------------------------------------------

#: A home PVC as read from the API: restored once already (its name differs from its slot), Bound, Stopped.
HOME_AS_READ = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {
        "name": "home-ann-r20250501090000",
        "namespace": "jhub",
        "uid": "6f2c0a4e-1111-4c1e-9d2b-000000000001",
        "resourceVersion": "812",
        "creationTimestamp": "2025-05-01T09:00:00Z",
        "labels": {
            "app.kubernetes.io/managed-by": "workspacespawner",
            "workspacespawner.io/owner": OWNER,
            "hub.jupyter.org/username": SLUG,
            "component": "singleuser-storage",
            "workspacespawner.io/disk": "home",
            "workspacespawner.io/phase": "Stopped",
        },
        "annotations": {
            "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
            "workspacespawner.io/home-slot": "home-ann",
            "workspacespawner.io/lifecycle": '{"phase": "Stopped", "since": "2025-05-31T18:00:00Z", "server": "gpu"}',
            "pv.kubernetes.io/bind-completed": "yes",
        },
        "finalizers": ["kubernetes.io/pvc-protection"],
    },
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}},
        "storageClassName": "ceph-rbd",
        "volumeMode": "Filesystem",
        "volumeName": "pvc-6f2c0a4e-1111-4c1e-9d2b-000000000001",
    },
    "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]},
}


def test_volume_snapshot_of_a_home():
    snapshot = make_volume_snapshot(
        name="home-ann-s20250601120000", source=HOME_AS_READ, user_name=USER, snapshot_class="csi-rbdplugin-snapclass"
    )
    assert snapshot == {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "home-ann-s20250601120000",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/disk": "home",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "workspacespawner.io/source-pvc": "home-ann-r20250501090000",
                "workspacespawner.io/home-slot": "home-ann",
            },
        },
        "spec": {
            "source": {"persistentVolumeClaimName": "home-ann-r20250501090000"},
            "volumeSnapshotClassName": "csi-rbdplugin-snapclass",
        },
    }
    assert causes(snapshot) == []


def test_volume_snapshot_of_a_root_disk_with_the_default_class():
    root = make_root_datavolume(ident=IDENT, settings=SETTINGS)  # CDI copies its labels to the PVC of that name
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": root["metadata"], "spec": {}}
    snapshot = make_volume_snapshot(name=f"{VM}-root-s1", source=pvc, user_name=USER, snapshot_class=None)
    assert snapshot == {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": f"{VM}-root-s1",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/disk": "root",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "workspacespawner.io/source-pvc": f"{VM}-root",
            },
        },
        "spec": {"source": {"persistentVolumeClaimName": f"{VM}-root"}},
    }
    assert causes(snapshot) == []
    # given its DataVolume, the snapshot records where a restore puts it back: the VM, and the image it descends from
    with_vm = make_volume_snapshot(name=f"{VM}-root-s2", source=pvc, user_name=USER, snapshot_class=None, datavolume=root)
    assert {k: v for k, v in with_vm["metadata"]["annotations"].items() if k not in snapshot["metadata"]["annotations"]} == {
        "workspacespawner.io/root-slot": VM, "workspacespawner.io/golden-image": "golden-images/ubuntu-2404-gpu"}
    assert causes(with_vm) == []


@pytest.mark.parametrize(
    ("restore_size", "size"),
    [("12Gi", "12Gi"), ("9Gi", "10Gi"), (None, "10Gi")],
    ids=["snapshot-larger", "snapshot-smaller", "no-restore-size"],
)
def test_restored_pvc(restore_size, size):
    snapshot = make_volume_snapshot(
        name="home-ann-s20250601120000", source=HOME_AS_READ, user_name=USER, snapshot_class=None
    )
    snapshot["status"] = {"readyToUse": True, **({"restoreSize": restore_size} if restore_size else {})}
    status = Status(phase=Phase.PROVISIONING_DISK, since=datetime(2025, 6, 1, 12, 0, tzinfo=UTC), server="gpu")
    pvc = make_restored_pvc(name="home-ann-r20250601120000", old=HOME_AS_READ, snapshot=snapshot, status=status)
    assert pvc == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "home-ann-r20250601120000",
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-storage",
                "workspacespawner.io/disk": "home",
                "workspacespawner.io/phase": "ProvisioningDisk",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "workspacespawner.io/home-slot": "home-ann",
                "workspacespawner.io/restored-from": "home-ann-s20250601120000",
                "workspacespawner.io/lifecycle": (
                    '{"phase": "ProvisioningDisk", "since": "2025-06-01T12:00:00Z", "server": "gpu"}'
                ),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
            "dataSource": {
                "apiGroup": "snapshot.storage.k8s.io",
                "kind": "VolumeSnapshot",
                "name": "home-ann-s20250601120000",
            },
            "storageClassName": "ceph-rbd",
            "volumeMode": "Filesystem",
        },
    }
    assert causes(pvc) == []


# -- quota/events.py ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "stored"),
    [
        (
            "Ann.O'Brien@school.example has 0.5 of 10 card-hours left.",
            "Ann.O'Brien@school.example has 0.5 of 10 card-hours left.",
        ),
        ("ü" * 1500, "ü" * 1024),
    ],
    ids=["short", "cut-at-1024"],
)
def test_quota_event(monkeypatch, message, stored):
    monkeypatch.setattr(events.secrets, "token_hex", lambda nbytes: "0123456789abcdef"[: 2 * nbytes])
    event = events.make_quota_event(
        namespace="jhub",
        involved={
            "kind": "VirtualMachine",
            "name": VM,
            "apiVersion": "kubevirt.io/v1",
            "uid": "3b1f8e9a-0000-4000-8000-000000000001",
        },
        reason="QuotaLow",
        message=message,
        now=datetime(2025, 6, 1, 14, 0, 5, 999, tzinfo=timezone(timedelta(hours=2))),
    )
    assert event == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{VM}.0123456789abcdef", "namespace": "jhub"},
        "involvedObject": {
            "namespace": "jhub",
            "kind": "VirtualMachine",
            "name": VM,
            "apiVersion": "kubevirt.io/v1",
            "uid": "3b1f8e9a-0000-4000-8000-000000000001",
        },
        "reason": "QuotaLow",
        "message": stored,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2025-06-01T12:00:05Z",
        "lastTimestamp": "2025-06-01T12:00:05Z",
        "source": {"component": "workspacespawner"},
        "reportingComponent": "workspacespawner",
    }
    assert causes(event) == []


# -- vm_update_body -----------------------------------------------------------------------------

#: A small VirtualMachine manifest: what make_virtual_machine builds, trimmed to a few fields.
MANIFEST = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": VM,
        "namespace": "jhub",
        "labels": {"app.kubernetes.io/managed-by": "workspacespawner", "workspacespawner.io/owner": OWNER},
        "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
    },
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "metadata": {"labels": {"kubevirt.io/domain": VM}},
            "spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "8Gi"}, "devices": {}}},
        },
    },
}

#: MANIFEST as the API returns it: server-set metadata, defaults KubeVirt added, our phase label, a status.
AS_READ = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": VM,
        "namespace": "jhub",
        "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
        "resourceVersion": "4711",
        "generation": 3,
        "creationTimestamp": "2025-05-01T09:00:00Z",
        "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
        "labels": {
            "app.kubernetes.io/managed-by": "workspacespawner",
            "workspacespawner.io/owner": OWNER,
            "workspacespawner.io/phase": "Stopped",
        },
        "annotations": {
            "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
            "kubevirt.io/latest-observed-api-version": "v1",
        },
    },
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "metadata": {"labels": {"kubevirt.io/domain": VM}, "creationTimestamp": None},
            "spec": {
                "domain": {
                    "cpu": {"cores": 2},
                    "memory": {"guest": "8Gi"},
                    "devices": {},
                    "machine": {"type": "q35"},
                    "resources": {},
                },
            },
        },
    },
    "status": {"printableStatus": "Stopped", "volumeSnapshotStatuses": [{"name": "rootdisk", "enabled": True}]},
}


def unchanged(function, *args):
    """``function(*args)``, checking that it changes none of its arguments."""
    before = copy.deepcopy(args)
    result = function(*args)
    assert args == before
    return result


def test_vm_update_body_nothing_changed():
    assert unchanged(vm_update_body, AS_READ, MANIFEST) is None


def test_vm_update_body_changed_spec():
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["template"]["spec"]["domain"]["cpu"] = {"cores": 8}
    manifest["spec"]["template"]["spec"]["domain"]["devices"] = {
        "gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}]
    }
    body = unchanged(vm_update_body, AS_READ, manifest)
    assert body == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2025-05-01T09:00:00Z",
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/phase": "Stopped",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "kubevirt.io/latest-observed-api-version": "v1",
            },
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": VM}},
                "spec": {
                    "domain": {
                        "cpu": {"cores": 8},
                        "memory": {"guest": "8Gi"},
                        "devices": {"gpus": [{"name": "gpu0", "deviceName": "nvidia.com/gpu"}]},
                    }
                },
            },
        },
    }
    assert causes(body, old=AS_READ) == []


def test_vm_update_body_changed_labels_only():
    manifest = copy.deepcopy(MANIFEST)
    manifest["metadata"]["labels"]["hub.jupyter.org/username"] = SLUG
    manifest["metadata"]["annotations"]["kubevirt.io/latest-observed-api-version"] = "v1"  # already there: no change
    body = unchanged(vm_update_body, AS_READ, manifest)
    assert body == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2025-05-01T09:00:00Z",
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/phase": "Stopped",
                "hub.jupyter.org/username": SLUG,
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "kubevirt.io/latest-observed-api-version": "v1",
            },
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": VM}},
                "spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "8Gi"}, "devices": {}}},
            },
        },
    }
    assert causes(body, old=AS_READ) == []


def test_vm_update_body_puts_the_vmi_in_the_queue_of_this_start_and_out_of_one_it_no_longer_waits_in():
    """A start in a GPU queue labels the VMI template (KubeVirt copies the labels to the virt-launcher Pod, which
    Kueue holds); a later start that waits in none (the user left the course, or a CPU profile) must not leave them:
    Kueue would hold its Pod for a queue the hub does not follow, or that is gone."""
    queued = copy.deepcopy(AS_READ)
    queued["spec"]["template"]["metadata"]["labels"].update(
        {"kueue.x-k8s.io/queue-name": "ml101", "kueue.x-k8s.io/priority-class": "workspacespawner-interactive"})
    body = unchanged(vm_update_body, queued, MANIFEST)
    assert body is not None and body["spec"]["template"]["metadata"]["labels"] == {"kubevirt.io/domain": VM}
    in_queue = copy.deepcopy(MANIFEST)
    in_queue["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "vision"
    assert unchanged(vm_update_body, queued, in_queue)["spec"]["template"]["metadata"]["labels"] == {
        "kubevirt.io/domain": VM, "kueue.x-k8s.io/queue-name": "vision"}
    assert unchanged(vm_update_body, AS_READ, MANIFEST) is None  # no queue before or now: nothing to write


def test_vm_update_body_drops_an_optional_field_the_manifest_no_longer_sets():
    vm = copy.deepcopy(AS_READ)
    vm["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    del vm["status"]
    body = unchanged(vm_update_body, vm, MANIFEST)
    assert body == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2025-05-01T09:00:00Z",
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/phase": "Stopped",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "kubevirt.io/latest-observed-api-version": "v1",
            },
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": VM}},
                "spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "8Gi"}, "devices": {}}},
            },
        },
    }


def test_vm_update_body_leaves_status_out_and_keeps_resource_version():
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["runStrategy"] = "Always"
    body = unchanged(vm_update_body, AS_READ, manifest)
    assert body == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2025-05-01T09:00:00Z",
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "workspacespawner.io/phase": "Stopped",
            },
            "annotations": {
                "workspacespawner.io/owner-name": "Ann.O'Brien@school.example",
                "kubevirt.io/latest-observed-api-version": "v1",
            },
        },
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": VM}},
                "spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "8Gi"}, "devices": {}}},
            },
        },
    }
    assert "status" in AS_READ


def test_vm_update_body_of_the_builders_own_manifests():
    """A VM built without GPUs, as read back, is current for its own manifest and gets the GPU profile's whole spec."""
    as_read = copy.deepcopy(VM_WITHOUT_GPUS)
    as_read["metadata"].update(uid="0c7d1e2f-2222-4a3b-8c4d-000000000002", resourceVersion="4711", generation=1)
    as_read["spec"]["template"]["spec"]["domain"]["machine"] = {"type": "q35"}
    as_read["status"] = {"printableStatus": "Stopped"}
    assert unchanged(vm_update_body, as_read, make_virtual_machine(ident=IDENT, settings=SETTINGS)) is None
    gpu = make_virtual_machine(
        ident=IDENT, settings=GPU_SETTINGS, extra_labels={"app": "jupyterhub", "release": "jhub"}
    )
    body = unchanged(vm_update_body, as_read, gpu)
    assert body == {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": VM,
            "namespace": "jhub",
            "labels": {
                "app.kubernetes.io/managed-by": "workspacespawner",
                "workspacespawner.io/owner": OWNER,
                "hub.jupyter.org/username": SLUG,
                "component": "singleuser-server",
            },
            "annotations": {"workspacespawner.io/owner-name": "Ann.O'Brien@school.example"},
            "uid": "0c7d1e2f-2222-4a3b-8c4d-000000000002",
            "resourceVersion": "4711",
            "generation": 1,
        },
        "spec": VM_WITH_GPUS["spec"],
    }
    assert causes(body, old=as_read) == []
    assert unchanged(vm_update_body, dict(body, status={"printableStatus": "Stopped"}), gpu) is None


def test_a_listing_shows_what_the_compute_of_a_stopped_disk_shows():
    """A start and a stop write no phase (issue #15): ``disk list`` shows the phase of the compute using the disk."""
    running = {"metadata": {"name": "jupyter-ann"}, "status": {"phase": "Running"}}
    pending = {"metadata": {"name": "jupyter-ann"}, "status": {"phase": "Pending"}}
    leaving = {"metadata": {"name": "jupyter-ann", "deletionTimestamp": "2026-12-03T10:00:00Z"}, "status": {"phase": "Running"}}
    assert shown_phase("Stopped", []) == "Stopped"
    assert shown_phase("Stopped", [running]) == "Running"
    assert shown_phase("Stopped", [pending]) == "Starting"
    assert shown_phase("Stopped", [running, leaving]) == "Stopping"
    assert shown_phase(None, [running]) == "Running"  # made before the lifecycle recorded anything
    assert shown_phase("Retained", [running]) == "Retained"  # a recorded phase other than Stopped stands
    assert shown_phase(None, []) == ""
