"""profile_list validation, group filtering, owner names and labels: pure functions, no cluster."""

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.config.profiles import ProfileConfigError, profiles_for_user, validate_profile_list
from workspacespawner.core import names
from workspacespawner.spawner import WorkspaceSpawner, check_hub_config

TRAITS = WorkspaceSpawner.class_trait_names()


def profile(slug, **override):
    return {"display_name": slug.title(), "slug": slug, "kubespawner_override": override}


def test_sample_profiles_are_valid():
    validate_profile_list(
        [
            profile("cpu", workspace_kind="container", ide="jupyterlab"),
            profile("gpu", extra_resource_limits={"nvidia.com/gpu": 8}, node_selector={"nvidia.com/gpu.product": "A100"}),
            dict(profile("code", ide="code-server"), allowed_groups=["research"]),
        ],
        TRAITS,
    )


@pytest.mark.parametrize(
    "bad, slug, field",
    [
        ([dict(profile("a"), colour="red")], "a", "colour"),
        ([profile("a", workspace_kind="lxc")], "a", "kubespawner_override.workspace_kind"),
        ([profile("a", ide="emacs")], "a", "kubespawner_override.ide"),
        ([profile("a", extra_resource_limits={"nvidia.com/gpu": -1})], "a", "nvidia.com/gpu"),
        ([profile("a", extra_resource_limits={"nvidia.com/gpu": "1.5"})], "a", "nvidia.com/gpu"),
        ([profile("a", cpu_limitt=2)], "a", "kubespawner_override.cpu_limitt"),
        ([profile("a"), profile("a")], "a", "slug"),
        ([dict(profile("a"), allowed_groups="research")], "a", "allowed_groups"),
        (
            [dict(profile("a"), profile_options={"image": {"display_name": "Image", "choices": {"x": {"display_name": "X", "kubespawner_override": {"ide": "vim"}}}}})],
            "a",
            "profile_options.image.choices.x.kubespawner_override.ide",
        ),
        (
            [dict(profile("a"), profile_options={"image": {"display_name": "Image", "unlisted_choice": {"enabled": True, "validation_regex": "(["}}})],
            "a",
            "validation_regex",
        ),
    ],
)
def test_bad_profiles_name_slug_and_field(bad, slug, field):
    with pytest.raises(ProfileConfigError) as info:
        validate_profile_list(bad, TRAITS)
    assert f"profile {slug!r}" in str(info.value)
    assert field in str(info.value)


def test_hub_config_check_names_setting_and_value():
    c = Config()
    c.WorkspaceSpawner.home_size = "lots"
    with pytest.raises(TraitError, match=r"c.WorkspaceSpawner.home_size = 'lots'"):
        check_hub_config(c)
    c = Config()
    c.KubeSpawner.profile_list = [profile("gpu", extra_resource_limits={"nvidia.com/gpu": -2})]
    with pytest.raises(TraitError, match="profile 'gpu'"):
        check_hub_config(c)
    c = Config()
    c.KubeSpawner.profile_list = [profile("ok")]
    c.WorkspaceSpawner.ide = "code-server"
    check_hub_config(c)


def test_profiles_for_user_filters_by_group():
    everyone = profile("cpu")
    research = dict(profile("big"), allowed_groups=["research"])
    assert profiles_for_user([everyone, research], {"students"}) == [everyone]
    assert profiles_for_user([everyone, research], {"research"}) == [everyone, research]
    assert profiles_for_user([everyone, research], set(), is_admin=True) == [everyone, research]


@pytest.mark.parametrize("user", ["ann", "anna", "Ann", "ann.b", "ann@example.edu", "zoë", "x" * 80])
def test_owner_labels_are_valid_distinct_and_stable(user):
    import re

    value = names.owner_id(user)
    assert re.fullmatch(r"[0-9a-f]{40}", value)
    assert value == names.owner_id(user)
    others = {names.owner_id(u) for u in ["ann", "anna", "Ann", "ann.b", "ann@example.edu", "zoë", "x" * 80] if u != user}
    assert value not in others
    meta = {"labels": names.owner_labels(user), "annotations": names.owner_annotations(user)}
    assert names.owned_by(meta, user)
    assert not names.owned_by(meta, user + "x")
