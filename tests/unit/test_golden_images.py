"""Golden-image versions: the naming convention read apart, which image a root DataVolume was cloned from, and the
start-up check of the profiles' images (a warning each, or an error with ``c.GoldenImages.require_versioned``)."""

import logging

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.config.goldenimages import (
    GoldenImages,
    ImageVersion,
    cloned_from,
    describe_image,
    parse_image_name,
    profile_golden_images,
    version_label,
)
from workspacespawner.core import names
from workspacespawner.spawner import check_hub_config


@pytest.mark.parametrize("name, parsed", [
    ("ubuntu-24.04-gpu-2026-11", ImageVersion("ubuntu-24.04-gpu", 2026, 11)),
    ("ubuntu-24.04-gpu-2026-11-r2", ImageVersion("ubuntu-24.04-gpu", 2026, 11, 2)),
    ("rocky9-2027-01", ImageVersion("rocky9", 2027, 1)),
    ("a-2026-11-2026-12", ImageVersion("a-2026-11", 2026, 12)),
])
def test_versioned_names_read_apart(name, parsed):
    assert parse_image_name(name) == parsed


@pytest.mark.parametrize("name", [
    "ubuntu-22.04-gpu",            # no version
    "ubuntu-24.04-gpu-2026-13",    # no such month
    "ubuntu-24.04-gpu-2026-1",     # month in two digits
    "ubuntu-24.04-gpu-2026-11-r1",  # the first image of a month has no respin suffix
    "ubuntu-24.04-gpu-2026-11-15",  # a day is not part of the convention
    "Ubuntu-2026-11",              # not a DNS-1123 subdomain
    "ubuntu.-2026-11",             # family not a subdomain
    "2026-11",                     # no family
    "x" * 250 + "-2026-11",        # longer than 253
])
def test_other_names_are_unversioned(name):
    assert parse_image_name(name) is None


def test_labels_say_the_version_or_that_there_is_none():
    assert version_label("ubuntu-24.04-gpu-2026-11-r2") == "2026-11-r2"
    assert describe_image("ubuntu-24.04-gpu-2026-11") == "ubuntu-24.04-gpu-2026-11 (version 2026-11)"
    assert describe_image("ubuntu-22.04-gpu") == "ubuntu-22.04-gpu (no version in its name)"


def test_a_root_disk_says_its_image_by_annotation_else_by_source_ref():
    annotated = {"metadata": {"namespace": "ws", "annotations": {names.GOLDEN_IMAGE_ANNOTATION: "golden-images/u-2026-09"}},
                 "spec": {"sourceRef": {"kind": "DataSource", "name": "u-2026-11", "namespace": "golden-images"}}}
    assert cloned_from(annotated) == "golden-images/u-2026-09"
    older = {"metadata": {"namespace": "ws"}, "spec": {"sourceRef": {"kind": "DataSource", "name": "u-2026-11"}}}
    assert cloned_from(older) == "ws/u-2026-11"
    assert cloned_from({"metadata": {}, "spec": {"source": {"blank": {}}}}) is None
    assert cloned_from(None) is None


def vm(slug, **override):
    return {"display_name": slug, "slug": slug, "kubespawner_override": {"workspace_kind": "vm", **override}}


def test_the_images_of_vm_profiles_their_own_or_the_default():
    profiles = [
        vm("own", vm_golden_image="u-2026-11"),
        vm("default"),
        {"display_name": "c", "slug": "container", "kubespawner_override": {"workspace_kind": "container"}},
        {"display_name": "o", "slug": "options", "profile_options": {"os": {"display_name": "OS", "choices": {
            "new": {"display_name": "new", "kubespawner_override": {"workspace_kind": "vm", "vm_golden_image": "u-2026-12"}},
        }}}},
    ]
    assert profile_golden_images(profiles, default_kind="container", default_image="u") == [
        ("own", "kubespawner_override.vm_golden_image", "u-2026-11"),
        ("default", "c.WorkspaceSpawner.vm_golden_image", "u"),
        ("options", "c.WorkspaceSpawner.vm_golden_image", "u"),
        ("options", "profile_options.os.choices.new.kubespawner_override.vm_golden_image", "u-2026-12"),
    ]
    assert profile_golden_images(None, default_kind="vm", default_image="u") == [("", "c.WorkspaceSpawner.vm_golden_image", "u")]
    assert profile_golden_images(None, default_kind="container", default_image="u") == []
    assert profile_golden_images(lambda spawner: [], default_kind="vm", default_image="u") == []


def test_unversioned_images_warn_by_default(caplog):
    config = Config()
    config.KubeSpawner.profile_list = [vm("old", vm_golden_image="ubuntu-22.04-gpu"), vm("new", vm_golden_image="u-2026-11")]
    with caplog.at_level(logging.WARNING):
        check_hub_config(config)
    warned = [r.getMessage() for r in caplog.records if "golden image" in r.getMessage()]
    assert warned == ["profile_list: profile 'old', field 'kubespawner_override.vm_golden_image': golden image "
                      "'ubuntu-22.04-gpu' has no version in its name (<family>-<YYYY>-<MM> with an optional -r<N> "
                      "respin, such as ubuntu-24.04-gpu-2026-11)"]


def test_require_versioned_refuses_the_hub_naming_profile_and_image():
    config = Config()
    config.GoldenImages.require_versioned = True
    config.WorkspaceSpawner.vm_golden_image = "ubuntu-22.04-gpu"
    config.KubeSpawner.profile_list = [vm("new", vm_golden_image="u-2026-11"), vm("plain")]
    with pytest.raises(TraitError, match=r"profile 'plain', field 'c.WorkspaceSpawner.vm_golden_image': golden image "
                                         r"'ubuntu-22.04-gpu' has no version"):
        check_hub_config(config)
    config.WorkspaceSpawner.vm_golden_image = "ubuntu-24.04-gpu-2026-11"
    check_hub_config(config)
    assert GoldenImages(config=config).check_profiles(config.KubeSpawner.profile_list, default_kind="container",
                                                      default_image="ubuntu-24.04-gpu-2026-11") == []
