"""The check of a user's profile choice (useroptions.check_user_options): unlisted choices and what refusals echo."""

from __future__ import annotations

import pytest
from kubespawner import KubeSpawner

from workspacespawner.config.profiles import (
    IMAGE_REFERENCE_REGEX,
    ProfileConfigError,
    validate_profile_list,
    with_unlisted_defaults,
)
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.services import HubServices
from workspacespawner.spawner import WorkspaceSpawner
from workspacespawner.useroptions import check_unlisted_choice, check_user_options

TRAITS = WorkspaceSpawner.class_trait_names()

PROFILES = [
    {"display_name": "CPU", "slug": "cpu"},
    {
        "display_name": "Any image",
        "slug": "any-image",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {"scipy": {"display_name": "SciPy", "kubespawner_override": {"image": "quay.io/jupyter/scipy-notebook:2025-10-20"}}},
                "unlisted_choice": {"enabled": True, "display_name": "Other image", "kubespawner_override": {"image": "{value}"}},
            }
        },
    },
    {
        "display_name": "Jupyter images",
        "slug": "jupyter-image",
        "profile_options": {
            "image": {
                "display_name": "Image",
                "unlisted_choice": {"enabled": True, "validation_regex": "^jupyter/.+:.+$", "kubespawner_override": {"image": "{value}"}},
            }
        },
    },
    {
        "display_name": "Greeting",
        "slug": "greeting",
        "profile_options": {
            "greeting": {
                "display_name": "Greeting",
                "unlisted_choice": {"enabled": True, "kubespawner_override": {"environment": {"GREETING": "{value}"}}},
            }
        },
    },
]


class Spawner:
    """Just what check_user_options reads of a spawner (no team pools); kubespawner's own check borrowed unchanged."""

    _validate_user_options = KubeSpawner._validate_user_options
    _get_profile = KubeSpawner._get_profile
    _get_initialized_profile_list = KubeSpawner._get_initialized_profile_list

    def __init__(self, user_options):
        self.user_options = user_options
        self.user = type("User", (), {"groups": [], "admin": False, "name": "ann"})()
        self.services = HubServices()


def check(options):
    spawner = Spawner(options)
    return check_user_options(spawner, spawner._get_initialized_profile_list(PROFILES))


def refusal(options) -> WorkspaceError:
    with pytest.raises(WorkspaceError) as info:
        check(options)
    assert info.value.status_code == 400 and info.value.reason == "invalid-options"
    return info.value


@pytest.mark.parametrize(
    "image",
    [
        "quay.io/jupyter/scipy-notebook:2025-10-20",
        "jupyter/base-notebook",
        "registry.example.edu:5000/team/sub_dir/img-x:v1.2_rc",
        "ghcr.io/org/img@sha256:" + "a" * 64,
        "localhost/img:latest@sha256:" + "0f" * 32,
    ],
)
def test_unlisted_image_that_is_an_image_reference_passes(image):
    assert check({"profile": "any-image", "image--unlisted-choice": image})["slug"] == "any-image"


@pytest.mark.parametrize(
    "image, words",
    [
        ("quay.io/jupyter/scipy-notebook:1\n", "control character"),
        ("quay.io/x:1\r\nX-Evil: 1", "control character"),
        ("quay.io/x:1\x00", "control character"),
        ("quay.io/x:1\u202e", "control character"),
        ("; rm -rf /", "image reference"),
        ("quay.io/x:1; rm -rf /", "image reference"),
        ("$(reboot)", "image reference"),
        ("`reboot`", "image reference"),
        ("Quay.io/UPPER/case", "image reference"),
        ("quay.io/x:" + "t" * 200, "image reference"),
        ("a" * 100_000, "at most 1000 characters"),
    ],
)
def test_unlisted_image_without_admin_regex_must_be_an_image_reference(image, words):
    error = refusal({"profile": "any-image", "image--unlisted-choice": image})
    assert words in error.message
    assert "'Image'" in error.message


def test_admin_regex_must_match_the_whole_value():
    assert check({"profile": "jupyter-image", "image--unlisted-choice": "jupyter/scipy-notebook:1"})
    for value in ("jupyter/scipy-notebook:1\n", "jupyter/scipy-notebook", "quay.io/jupyter/x:1"):
        error = refusal({"profile": "jupyter-image", "image--unlisted-choice": value})
        assert "Image" in error.message


def test_admin_validation_message_is_the_reason_given():
    option = {"display_name": "Image", "unlisted_choice": {"enabled": True, "validation_regex": "jupyter/.+",
                                                          "validation_message": "Only images from jupyter/."}}
    with pytest.raises(WorkspaceError) as info:
        check_unlisted_choice(option, "image", "quay.io/x")
    assert info.value.message == "The value typed for 'Image' is not allowed: Only images from jupyter/."


#: What a link to /hub/spawn?... would have the spawn page's error box say.
WORDS = "Your quota was revoked: contact admin@evil.example"


@pytest.mark.parametrize("options", [
    {"profile": WORDS},
    {"profile": "any-image", "image": WORDS},
    {"profile": "any-image", "image--unlisted-choice": WORDS},
    {"profile": "jupyter-image", "image--unlisted-choice": WORDS},
])
def test_a_refusal_does_not_repeat_the_requests_words(options):
    """/hub/spawn?profile=... (a link anyone can send) shows the refusal on the spawn page: our words only."""
    message = refusal(options).message
    assert "quota" not in message and "evil" not in message, message


def test_unlisted_choice_that_is_no_image_is_still_checked():
    assert check({"profile": "greeting", "greeting--unlisted-choice": "hello, world; it's me"})
    assert "control character" in refusal({"profile": "greeting", "greeting--unlisted-choice": "hi\x1b[2J"}).message
    assert "at most 1000 characters" in refusal({"profile": "greeting", "greeting--unlisted-choice": "x" * 1001}).message
    assert check({"profile": "greeting", "greeting--unlisted-choice": "x" * 1000})


@pytest.mark.parametrize("value", [["quay.io/x:1"], {"a": 1}, 7])
def test_unlisted_choice_must_be_text(value):
    assert "text" in refusal({"profile": "any-image", "image--unlisted-choice": value}).message


@pytest.mark.parametrize("choice", [["scipy"], {"scipy": 1}, 3])
def test_a_choice_that_is_no_name_is_400_not_a_crash(choice):
    assert "by its name" in refusal({"profile": "any-image", "image": choice}).message


def test_form_choice_of_the_unlisted_field_is_accepted_with_its_value():
    # kubespawner's form sends the option as "unlisted-choice" next to the typed value
    assert check({"profile": "any-image", "image": "unlisted-choice", "image--unlisted-choice": "quay.io/x:1"})
    refusal({"profile": "any-image", "image": "unlisted-choice"})


def test_unlisted_choice_of_an_option_that_does_not_allow_one_is_refused():
    profiles = [dict(PROFILES[1], profile_options={"image": {"display_name": "Image", "choices": PROFILES[1]["profile_options"]["image"]["choices"]}})]
    spawner = Spawner({"profile": "any-image", "image--unlisted-choice": "quay.io/x:1"})
    with pytest.raises(WorkspaceError) as info:
        check_user_options(spawner, spawner._get_initialized_profile_list(profiles))
    assert info.value.status_code == 400 and "Image" in info.value.message


@pytest.mark.parametrize(
    "options",
    [
        {"profile": "s" * 200_000},
        {"profile": "any-image", "image": "c" * 200_000},
        {"profile": "any-image", "image--unlisted-choice": "quay.io/x:" + "t" * 900},
        {"profile": "jupyter-image", "image--unlisted-choice": "x" * 999},
    ],
)
def test_refusals_of_long_input_are_short_and_echo_none_of_it(options):
    error = refusal(options)
    assert len(error.message) < 200
    assert "ttt" not in error.message and "xxx" not in error.message and "sss" not in error.message


@pytest.mark.parametrize(
    "unlisted, field",
    [
        ({"enabled": "yes"}, "unlisted_choice.enabled"),
        ({"enabled": True, "validation_regex": 5}, "unlisted_choice.validation_regex"),
        ({"enabled": True, "validation_message": ["x"]}, "unlisted_choice.validation_message"),
        ({"enabled": True, "kubespawner_override": {"imagee": "{value}"}}, "unlisted_choice.kubespawner_override.imagee"),
        ({"enabled": True, "kubespawner_override": {"ide": "vim"}}, "unlisted_choice.kubespawner_override.ide"),
    ],
)
def test_start_up_check_of_unlisted_choices(unlisted, field):
    profiles = [{"display_name": "A", "slug": "a", "profile_options": {"image": {"display_name": "Image", "unlisted_choice": unlisted}}}]
    with pytest.raises(ProfileConfigError) as info:
        validate_profile_list(profiles, TRAITS)
    assert field in str(info.value)


def test_form_and_kubespawner_get_the_image_rule_where_the_admin_set_none():
    profiles = with_unlisted_defaults(KubeSpawner._get_initialized_profile_list(None, PROFILES))
    image, greeting = profiles[1]["profile_options"]["image"], profiles[3]["profile_options"]["greeting"]
    assert image["unlisted_choice"]["validation_regex"] == IMAGE_REFERENCE_REGEX
    assert "image reference" in image["unlisted_choice"]["validation_message"]
    assert profiles[2]["profile_options"]["image"]["unlisted_choice"]["validation_regex"] == "^jupyter/.+:.+$"
    assert not greeting["unlisted_choice"].get("validation_regex")
    assert "validation_regex" not in PROFILES[1]["profile_options"]["image"]["unlisted_choice"]


def test_start_up_check_accepts_the_sample_unlisted_choices():
    validate_profile_list(PROFILES, TRAITS)


@pytest.mark.parametrize("options", [
    {"profile": "cpu", "cpu_limit": "64"},  # a trait's name, sent through the REST API
    {"profile": "any-image", "image": "scipy", "gpus": "8"},  # what a tampered form's profile-option-any-image--gpus gives
    {"cpu_limit": "64"},  # the default profile, with an option it does not have
])
def test_options_no_profile_option_defines_are_refused_before_they_are_stored(options):
    """Issue #38 item 6: kubespawner ignores them, JupyterHub would store them as if they applied. The refusal names the
    options the profile has (the site's words), never what the request sent."""
    e = refusal(options)
    takes = "image" if options.get("profile") == "any-image" else "no options"
    assert e.message.startswith("The start asked for an option that profile ") and takes in e.message, e.message
    assert "cpu_limit" not in e.message and "gpus" not in e.message


def test_an_options_free_field_with_its_choice_is_known():
    assert check({"profile": "any-image", "image": "unlisted-choice", "image--unlisted-choice": "quay.io/a/b:1"})["slug"] == "any-image"
