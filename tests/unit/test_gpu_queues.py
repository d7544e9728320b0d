"""GPU queues (issue #41): ``c.GPUQueues.queues`` checked when loaded, and the Kueue objects rendered from it.

Two courses in one cohort, one of them with MIG slices beside whole GPUs: a ResourceFlavor per GPU product (its node
label the product, as the GPU economy reads it), a ClusterQueue per course admitting only the workspaces'
namespace, one resource group covering every GPU resource with a flavor per product (0 where the course has none),
the cohort and the borrowing limit; preemption of lower priority only (interactive workspaces are never preempted);
a LocalQueue per course. Bad settings are refused with the setting's name and the bad value; ``workspacespawner
queues`` prints the objects as YAML for kubectl, and says so when there are no queues. The objects as Kueue itself
takes them: localcluster/tests/realplane/test_realplane_kueue.py and tests/cluster/realplane/test_realplane_queues.py.
"""

from __future__ import annotations

import pytest
import yaml
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.admin.queues import main
from workspacespawner.queue.config import GPUQueues
from workspacespawner.queue.kueueobjects import INTERACTIVE, QUEUE_LABEL, flavor_name, render
from workspacespawner.spawner import check_hub_config

A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
QUEUES = {
    "ml101": {"groups": ["ml101"], "gpus": {"nvidia.com/gpu": {A100: 4}}, "cohort": "university",
              "borrowing_limit": 2, "max_wait_seconds": 1800},
    "vision": {"groups": ["vision-lab", "vision-staff"],
               "gpus": {"nvidia.com/gpu": {A100: 2, H100: 1}, "nvidia.com/mig-1g.10gb": {A100: 14}},
               "cohort": "university"},
}


def queues(value) -> GPUQueues:
    config = Config()
    config.GPUQueues.queues = value
    return GPUQueues(config=config)


def test_the_queues_render_as_kueue_objects_for_the_workspaces_namespace():
    objects = render(queues(QUEUES).all(), "jhub")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("WorkloadPriorityClass", INTERACTIVE), ("WorkloadPriorityClass", "workspacespawner-batch"),
        ("ResourceFlavor", "nvidia-a100-sxm4-80gb"), ("ResourceFlavor", "nvidia-h100-80gb-hbm3"),
        ("ClusterQueue", "workspaces-ml101"), ("ClusterQueue", "workspaces-vision"),
        ("LocalQueue", "ml101"), ("LocalQueue", "vision"),
    ]
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert by_name[("ResourceFlavor", "nvidia-a100-sxm4-80gb")]["spec"] == {"nodeLabels": {"nvidia.com/gpu.product": A100}}
    ml101 = by_name[("ClusterQueue", "workspaces-ml101")]["spec"]
    assert ml101["cohortName"] == "university"
    assert ml101["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "jhub"}}
    assert ml101["resourceGroups"] == [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "nvidia-a100-sxm4-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 2}]}]}]
    assert ml101["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
    vision = by_name[("ClusterQueue", "workspaces-vision")]["spec"]["resourceGroups"]
    # one group: a flavor may be in one resource group only, and each flavor lists every covered resource
    assert vision == [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"], "flavors": [
        {"name": "nvidia-a100-sxm4-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2},
                                                        {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 14}]},
        {"name": "nvidia-h100-80gb-hbm3", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1},
                                                        {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 0}]}]}]
    assert by_name[("LocalQueue", "vision")]["metadata"]["namespace"] == "jhub"
    assert by_name[("LocalQueue", "vision")]["spec"] == {"clusterQueue": "workspaces-vision"}
    assert all(o["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "workspacespawner"} for o in objects)
    assert QUEUE_LABEL == "kueue.x-k8s.io/queue-name"


def test_a_users_groups_name_their_queue():
    configured = queues(QUEUES)
    assert configured.queue_of(["students", "vision-staff"]).name == "vision"
    assert configured.queue_of(["ml101"]).max_wait_seconds == 1800
    assert configured.queue_of(["students"]) is None
    assert flavor_name("*") == "any-gpu"
    assert render({}, "jhub") == []


@pytest.mark.parametrize(("value", "words"), [
    ({"ML101": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: 1}}}}, "'ML101' is not a queue name"),
    ({"q": {"groups": [], "gpus": {"nvidia.com/gpu": {A100: 1}}}}, "GPUQueues.queues['q']['groups'] must be a non-empty list"),
    ({"q": {"groups": ["a"], "gpus": {"nvidia.com/gpus": {A100: 1}}}}, "'nvidia.com/gpus' is not a GPU resource name"),
    ({"q": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: -1}}}}, "['nvidia.com/gpu']['NVIDIA-A100-SXM4-80GB'] must be a whole number >= 0, not -1"),
    ({"q": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: 1}}, "borrowing_limit": 1}}, "needs a 'cohort'"),
    ({"q": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: 1}}, "max_wait": 5}}, "unknown keys ['max_wait']"),
    ({"q": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: 1}}},
      "r": {"groups": ["a"], "gpus": {"nvidia.com/gpu": {A100: 1}}}}, "group 'a' is in queue 'q' and in 'r'"),
])
def test_a_bad_setting_is_refused_naming_it_and_its_value(value, words):
    with pytest.raises(TraitError) as refused:
        queues(value)
    assert words in str(refused.value)


def test_the_hubs_start_up_check_refuses_a_bad_queue_naming_it():
    config = Config()
    config.GPUQueues.queues = {"ml101": {**QUEUES["ml101"], "cohort": None}}
    with pytest.raises(TraitError, match=r"GPUQueues.queues\['ml101'\]\['borrowing_limit'\] needs a 'cohort'"):
        check_hub_config(config)
    config.GPUQueues.queues = QUEUES
    config.KubeSpawner.start_timeout = 1800  # covers the wait in line and the start after it: not enough
    with pytest.raises(TraitError, match=r"GPUQueues.queues\['ml101'\]\['max_wait_seconds'\] = 1800 is not below "
                                         r"KubeSpawner.start_timeout = 1800, which covers the wait in line"):
        check_hub_config(config)
    config.KubeSpawner.start_timeout = 2100
    check_hub_config(config)


def test_the_command_prints_the_objects_for_kubectl_and_refuses_an_empty_setting(tmp_path, capsys):
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(f"c.KubeSpawner.namespace = 'jhub'\nc.GPUQueues.queues = {QUEUES!r}\n")
    assert main(["-f", str(config)]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert documents == render(queues(QUEUES).all(), "jhub")
    config.write_text("c.KubeSpawner.namespace = 'jhub'\n")
    assert main(["-f", str(config)]) == 1
    assert "has no GPU queues" in capsys.readouterr().err
    config.write_text("c.GPUQueues.queues = {'q': {'groups': 'a'}}\n")
    assert main(["-f", str(config)]) == 1
    assert "GPUQueues.queues['q']['groups'] must be" in capsys.readouterr().err


def test_the_how_to_gives_kueue_the_configuration_the_queues_need():
    """The Kueue configuration section an operator copies from the how-to is the one the tests run Kueue with."""
    import re

    from tests.support.paths import REPO
    from workspacespawner.queue.kueueobjects import KUEUE_CONFIG

    text = (REPO / "docs" / "source" / "howto" / "gpu-queues.md").read_text()
    block = re.search(r"```yaml\n(resources:.*?)```", text, re.S).group(1)
    assert yaml.safe_load(block)["resources"] == KUEUE_CONFIG["resources"]
