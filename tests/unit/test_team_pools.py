"""Team GPU pools: c.TeamGPUPools.pools checked at start-up, profiles joining a pool, who sees them, and who holds a pool.

Covers config.teampools (the setting's validation naming the bad entry, the
start-up check of profiles' team_pool), useroptions' visibility of pool
profiles and the 403 for a tampered choice, and workspace.poolholders'
numbers and sentence from Nodes and compute objects.
"""

from __future__ import annotations

import pytest
from kubespawner import KubeSpawner
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.config.teampools import TeamGPUPools, check_pools, check_profile_pools, pool_allows
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.gpu import poolholders
from workspacespawner.services import HubServices
from workspacespawner.spawner import check_hub_config
from workspacespawner.useroptions import check_user_options, visible_profiles

LABEL = "example.org/team-pool"
VISION = {"groups": ["vision-lab"], "node_selector": {LABEL: "vision"},
          "taint": {"key": LABEL, "value": "vision", "effect": "NoSchedule"}}
POOLS = TeamGPUPools(pools={"vision": VISION, "nlp": {"groups": ["nlp"], "node_selector": {LABEL: "nlp"}}}).all()

PROFILES = [
    {"display_name": "CPU", "slug": "cpu"},
    {"display_name": "Vision pool, 8 GPUs", "slug": "vision-8",
     "kubespawner_override": {"team_pool": "vision", "extra_resource_limits": {"nvidia.com/gpu": "8"}}},
    {"display_name": "NLP pool", "slug": "nlp-1", "kubespawner_override": {"team_pool": "nlp"}},
]


@pytest.mark.parametrize(("pools", "says"), [
    ({"vision": {**VISION, "groups": "vision-lab"}}, "['groups'] must be a non-empty list"),
    ({"vision": {**VISION, "groups": []}}, "['groups'] must be a non-empty list"),
    ({"vision": {**VISION, "node_selector": {}}}, "['node_selector'] must be one node label"),
    ({"vision": {**VISION, "node_selector": {LABEL: "vision", "b": "c"}}}, "['node_selector'] must be one node label"),
    ({"vision": {**VISION, "node_selector": {"bad key!": "x"}}}, "not a valid node label"),
    ({"vision": {**VISION, "taint": {"key": LABEL, "effect": "Sometimes"}}}, "['taint']['effect'] must be one of"),
    ({"vision": {**VISION, "taint": {"value": "x", "effect": "NoSchedule"}}}, "['taint'] must be"),
    ({"vision": {**VISION, "taint": "vision"}}, "['taint'] must be"),
    ({"vision": {**VISION, "colour": "red"}}, "unknown key 'colour'"),
    ({"Vision Lab": VISION}, "is not a pool name"),
    ({"vision": VISION, "vision2": {**VISION}}, "selects the same nodes as pool 'vision'"),
    (["vision"], "must be a dict"),
])
def test_a_bad_pool_is_refused_naming_the_setting(pools, says):
    with pytest.raises(TraitError) as info:
        check_pools(pools)
    assert "TeamGPUPools.pools" in str(info.value) and says in str(info.value)


def test_a_pool_reads_back_with_its_label_taint_and_toleration():
    pool = POOLS["vision"]
    assert (pool.groups, pool.label, pool.value) == (("vision-lab",), LABEL, "vision")
    assert pool.toleration() == {"key": LABEL, "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
    assert POOLS["nlp"].toleration() is None
    assert pool.holds({"metadata": {"labels": {LABEL: "vision"}}}) and not pool.holds({"metadata": {"labels": {LABEL: "nlp"}}})


def test_the_start_up_check_refuses_a_profile_naming_an_unknown_pool():
    config = Config()
    config.TeamGPUPools.pools = {"vision": VISION}
    config.KubeSpawner.profile_list = PROFILES  # nlp-1 names a pool that is not configured
    with pytest.raises(TraitError) as info:
        check_hub_config(config)
    assert "profile 'nlp-1'" in str(info.value) and "'nlp' is not a pool of c.TeamGPUPools.pools" in str(info.value)
    config.TeamGPUPools.pools = {"vision": VISION, "nlp": {"groups": ["nlp"], "node_selector": {LABEL: "nlp"}}}
    check_hub_config(config)


def test_a_pool_is_joined_by_the_profile_not_by_a_choice():
    profile = {"display_name": "X", "slug": "x", "profile_options": {"size": {"display_name": "Size", "choices": {
        "big": {"display_name": "Big", "kubespawner_override": {"team_pool": "vision"}}}}}}
    with pytest.raises(TraitError, match="joined by the profile's own kubespawner_override"):
        check_profile_pools([profile], POOLS)


def test_a_bad_pool_setting_in_the_hub_config_names_it():
    config = Config()
    config.TeamGPUPools.pools = {"vision": {**VISION, "groups": "vision-lab"}}
    with pytest.raises(TraitError, match=r"TeamGPUPools.pools\['vision'\]\['groups'\]"):
        check_hub_config(config)


class Spawner:
    """What useroptions reads of a spawner: its user, options and the hub's services (built from its config);
    kubespawner's own check borrowed."""

    _validate_user_options = KubeSpawner._validate_user_options
    _get_profile = KubeSpawner._get_profile
    _get_initialized_profile_list = KubeSpawner._get_initialized_profile_list

    def __init__(self, groups, admin=False, options=None):
        self.user_options = options or {}
        group = type("Group", (), {})
        self.user = type("User", (), {"groups": [type("G", (group,), {"name": g})() for g in groups], "admin": admin,
                                      "name": "ann"})()
        self.config = Config()
        self.config.TeamGPUPools.pools = {"vision": VISION, "nlp": {"groups": ["nlp"], "node_selector": {LABEL: "nlp"}}}
        self.services = HubServices(self.config)


def slugs(spawner) -> list[str]:
    return [p["slug"] for p in visible_profiles(spawner, spawner._get_initialized_profile_list(PROFILES))]


def test_members_see_their_pools_profiles_others_never_and_admins_all():
    assert slugs(Spawner(["vision-lab"])) == ["cpu", "vision-8"]
    assert slugs(Spawner(["nlp", "vision-lab"])) == ["cpu", "vision-8", "nlp-1"]
    assert slugs(Spawner(["students"])) == ["cpu"]
    assert slugs(Spawner([], admin=True)) == ["cpu", "vision-8", "nlp-1"]
    assert not pool_allows(PROFILES[1], {}, ["vision-lab"])  # a pool that is not configured: no one but admins


def test_a_non_member_choosing_a_pool_profile_is_refused_with_403():
    spawner = Spawner(["students"], options={"profile": "vision-8"})
    with pytest.raises(WorkspaceError) as info:
        check_user_options(spawner, spawner._get_initialized_profile_list(PROFILES))
    assert info.value.status_code == 403 and "team GPU pool 'vision'" in str(info.value)
    member = Spawner(["vision-lab"], options={"profile": "vision-8"})
    assert check_user_options(member, member._get_initialized_profile_list(PROFILES))["slug"] == "vision-8"


def node(name: str, pool: str | None, gpus: int = 8) -> dict:
    labels = {LABEL: pool} if pool else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(user: str | None, server: str, node_name: str, gpus: int, name: str | None = None) -> dict:
    meta: dict = {"name": name or f"jupyter-{user}-{server}", "namespace": "hub"}
    if user:
        meta["labels"] = names.owner_labels(user)
        meta["annotations"] = {**names.owner_annotations(user), "hub.jupyter.org/servername": server}
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node_name, "containers": [
        {"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}, "status": {"phase": "Running"}}


def test_who_holds_a_pool_counts_its_nodes_only_and_names_the_servers():
    nodes = [node("vision-1", "vision"), node("vision-2", "vision"), node("shared-1", None)]
    compute = [
        pod("ann", "train", "vision-1", 4), pod("bob", "", "vision-2", 1), pod("ann", "", "shared-1", 2),
        pod(None, "", "vision-2", 3, name="someone-elses"),  # no owner annotation: counted, named by nobody
    ]
    use = poolholders.pool_use(POOLS["vision"], nodes, compute)
    assert (use.total, use.free) == (16, 8)
    assert use.holders == (poolholders.Holder("ann", 4, ("train",)), poolholders.Holder("bob", 1))
    assert poolholders.describe(use) == "Your team's pool 'vision': 8 of 16 GPUs free; held by ann (4, server 'train'), bob (1)."


def test_an_idle_pool_says_all_free_and_names_no_one():
    use = poolholders.pool_use(POOLS["vision"], [node("vision-1", "vision")], [])
    assert poolholders.describe(use) == "Your team's pool 'vision': 8 of 8 GPUs free."


def test_which_node_pool_a_card_names():
    from workspacespawner.spawnpage.placementnotes import nodes_sentence

    assert nodes_sentence("vision", 2, True, True) == "Runs on your team's pool 'vision': nodes only its members use."
    assert nodes_sentence("", 1, True, True) == "Runs on the shared GPU nodes everyone uses, not on a team's pool."
    assert nodes_sentence("", 0, True, True) == "Runs on the shared nodes, CPU-only ones first."
    assert nodes_sentence("", 0, False, True) == "Runs on the shared nodes."
    assert nodes_sentence("", 1, True, False) is None  # no team pools: every node is shared, nothing to tell apart
