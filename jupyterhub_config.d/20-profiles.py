# The profiles users pick from on the spawn page (kubespawner's profile_list
# schema plus `allowed_groups`). Our settings ride in kubespawner_override so
# z2jh's singleuser.profileList can carry the same list:
#   workspace_kind: container | vm         ide: jupyterlab | code-server
#   extra_resource_limits: {"nvidia.com/gpu": N}   (N GPUs)
#   node_selector: {"nvidia.com/gpu.product": ...} (which GPU type)
# The whole list is checked when the hub starts: an unknown key, kind or IDE,
# a negative GPU count or a duplicate slug stops the hub with a message that
# names the profile and the field.

c.KubeSpawner.profile_list = [
    {
        "display_name": "JupyterLab (CPU)",
        "slug": "jupyterlab-cpu",
        "description": "2 CPU cores, 4 GiB memory. Your home folder is kept between sessions.",
        "default": True,
        "kubespawner_override": {
            "workspace_kind": "container",
            "ide": "jupyterlab",
            "cpu_limit": 2,
            "mem_limit": "4G",
        },
    },
    {
        "display_name": "JupyterLab, 1 GPU (A100)",
        "slug": "jupyterlab-1gpu",
        "description": "1 NVIDIA A100, 8 CPU cores, 32 GiB memory.",
        "kubespawner_override": {
            "workspace_kind": "container",
            "ide": "jupyterlab",
            "cpu_limit": 8,
            "mem_limit": "32G",
            "extra_resource_limits": {"nvidia.com/gpu": 1},
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        },
    },
    {
        "display_name": "JupyterLab, 8 GPUs (A100)",
        "slug": "jupyterlab-8gpu",
        "description": "A whole 8-GPU node, for the research group.",
        "allowed_groups": ["research"],
        "kubespawner_override": {
            "workspace_kind": "container",
            "ide": "jupyterlab",
            "cpu_limit": 30,
            "mem_limit": "240G",
            "extra_resource_limits": {"nvidia.com/gpu": 8},
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        },
    },
    {
        "display_name": "code-server (CPU)",
        "slug": "code-server-cpu",
        "description": "VS Code in the browser, behind your JupyterHub login.",
        "kubespawner_override": {
            "workspace_kind": "container",
            "ide": "code-server",
            "cpu_limit": 2,
            "mem_limit": "4G",
        },
    },
    {
        "display_name": "Ubuntu VM, JupyterLab",
        "slug": "ubuntu-vm",
        "description": "A whole Ubuntu 22.04 virtual machine: apt packages, /etc and /opt are kept between sessions.",
        "kubespawner_override": {
            "workspace_kind": "vm",
            "ide": "jupyterlab",
            "cpu_limit": 2,
            "mem_limit": "4G",
            "vm_golden_image": "ubuntu-22.04-gpu-2026-11",
        },
    },
    {
        "display_name": "Ubuntu VM, 1 GPU, code-server",
        "slug": "ubuntu-vm-gpu-code",
        "description": "An Ubuntu 22.04 VM with one A100 passed through, opening code-server.",
        "kubespawner_override": {
            "workspace_kind": "vm",
            "ide": "code-server",
            "cpu_limit": 8,
            "mem_limit": "32G",
            "extra_resource_limits": {"nvidia.com/gpu": 1},
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "vm_golden_image": "ubuntu-22.04-gpu-2026-11",
        },
    },
]
