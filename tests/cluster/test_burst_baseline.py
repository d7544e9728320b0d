"""The burst benchmark's baseline (benchmarks/burst.py): KubeSpawner makes the Pod WorkspaceSpawner's default profile makes.

The benchmark compares the two spawners' costs per server; a Pod with more
in it (environment variables, containers, volumes) costs both the hub and
the API server more to build, send and check, whoever builds it. So
KubeSpawner is configured to make the same Pod, and this test fails when
the shipped config changes what WorkspaceSpawner's Pod holds and the
baseline does not follow. Only the owner labels and annotations differ.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kubespawner import KubeSpawner
from traitlets.config import Config, PyFileConfigLoader

from tests.support.hubharness import CONFIG_D
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.spawner import WorkspaceSpawner

BURST = Path(__file__).resolve().parents[2] / "benchmarks" / "burst.py"

#: Set per hub and server (URLs, tokens, the server's name and the image's own variables), not by a spawner's config.
PER_HUB = ("JUPYTERHUB_", "JPY_", "JUPYTER_IMAGE")


def burst_module():
    spec = importlib.util.spec_from_file_location("burst_benchmark", BURST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def pod_of(spawner) -> dict:
    await spawner.load_user_options()
    pod = spawner.api.api_client.sanitize_for_serialization(await spawner.get_pod_manifest())
    notebook = pod["spec"]["containers"][0]
    notebook["env"] = sorted((e for e in notebook["env"] if not e["name"].startswith(PER_HUB)), key=lambda e: e["name"])
    return pod


def common_config(burst) -> Config:
    """The settings of both hubs in the burst (the singleuser command, limits, timeouts)."""
    config = Config()
    exec(burst.COMMON.format(tiny=burst.TINY_SERVER, proxy_token="unused"), {"c": config})
    return config


def shipped_config(burst) -> Config:
    """WorkspaceSpawner's hub config in the burst: the common settings and the shipped pieces it loads."""
    config = common_config(burst)
    for piece in ("10-workspace-spawner.py", "20-profiles.py"):
        config.merge(PyFileConfigLoader(piece, path=str(CONFIG_D)).load_config())
    return config


async def test_kubespawner_in_the_burst_makes_the_pod_workspacespawners_default_profile_makes(kube_env):
    burst = burst_module()
    ours = shipped_config(burst)
    baseline = common_config(burst)
    exec(burst.KUBESPAWNER, {"c": baseline})
    workspace = await pod_of(WorkspaceSpawner(config=ours, _mock=True))
    kube = await pod_of(KubeSpawner(config=baseline, _mock=True))
    assert kube["spec"]["containers"] == workspace["spec"]["containers"]
    assert kube["spec"]["initContainers"] == workspace["spec"]["initContainers"]
    assert sorted(kube["spec"]["volumes"], key=lambda v: v["name"]) == sorted(workspace["spec"]["volumes"], key=lambda v: v["name"])
    for field in set(kube["spec"]) | set(workspace["spec"]):
        assert kube["spec"].get(field) == workspace["spec"].get(field), field


def test_quotas_off_turns_off_workspacespawners_quotas_only():
    """``--quotas off`` measures what the quotas cost: the shipped config with them off; KubeSpawner's is unchanged."""
    burst = burst_module()
    assert burst.spawner_config("KubeSpawner", quotas=False) == burst.KUBESPAWNER
    shipped, off = burst.spawner_config("WorkspaceSpawner"), burst.spawner_config("WorkspaceSpawner", quotas=False)
    assert off.startswith(shipped) and off != shipped
    config = shipped_config(burst)
    assert WorkspaceQuota(config=config).enabled
    exec(off[len(shipped):], {"c": config})
    assert not WorkspaceQuota(config=config).enabled


def test_each_without_turns_its_helper_off():
    """``--without HELPER`` measures what one helper of the watch caches buys: its patch, run as the hub runs its
    config, must turn that helper off and leave the rest as shipped (else the ratio measures nothing)."""
    import subprocess
    import sys

    burst = burst_module()
    shipped = burst.spawner_config("WorkspaceSpawner")
    # each probe prints True when its helper works; run once as shipped, once after the patch
    probes = {
        "interning": "from workspacespawner.k8s import interning\n"
                     "key = ''.join(['meta', 'data']); print(next(iter(interning.interned({key: 1}))) is not key)",
        "cached-reads": "import asyncio, types\n"
                        "from workspacespawner.k8s import cachedkube, watches\n"
                        "from workspacespawner.k8s.kinds import POD\n"
                        "async def main():\n"
                        "    loaded = asyncio.get_running_loop().create_future(); loaded.set_result(None)\n"
                        "    fake = types.SimpleNamespace(first_load_future=loaded, resources={'ns/p': {}})\n"
                        "    watches.pod_reflector = lambda namespace: fake\n"
                        "    watches.alive = lambda reflector: True\n"
                        "    print(cachedkube.CachedKube(None, None)._cache(POD, 'ns') is fake.resources)\n"
                        "asyncio.run(main())",
    }
    assert set(probes) == set(burst.WITHOUT)
    for helper, probe in probes.items():
        without = burst.spawner_config(burst.WITHOUT_PREFIX + helper)
        assert without.startswith(shipped), helper
        for patch, works in (("", "True"), (without[len(shipped):], "False")):
            done = subprocess.run([sys.executable, "-c", patch + probe], capture_output=True, text=True, timeout=120)
            assert done.stdout.strip() == works, (helper, patch, done.stdout, done.stderr)
