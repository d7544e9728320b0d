"""GPU resource names and card-hour weights as configured: the catalogue, ``c.GPUEconomy.card_hour_weights`` and the
profile_list check that refuses unknown GPU resources at start-up with the setting named."""

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.profiles import ProfileConfigError, ResolvedProfile, gpu_limit, validate_profile_list
from workspacespawner.core.gpuresources import DEVICE, MIG, SHARED, WHOLE, parse_gpu_resource
from workspacespawner.spawner import WorkspaceSpawner, check_hub_config

TRAITS = WorkspaceSpawner.class_trait_names()
A100, V100, P4 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB", "Tesla-P4"
WEIGHTS = {
    "nvidia.com/gpu": {A100: 1.0, V100: 0.5, P4: 0.25, "Tesla-T4-SHARED": 0.25},
    "nvidia.com/mig-1g.10gb": 0.15,
    "nvidia.com/gpu.shared": 0.25,
    "nvidia.com/GA100_A100_PCIE_80GB": 1.0,
}


def profile(slug, **override):
    return {"display_name": slug.title(), "slug": slug, "kubespawner_override": override}


def test_the_catalogue_knows_whole_gpus_mig_slices_shares_and_declared_devices():
    assert parse_gpu_resource("nvidia.com/gpu").kind == WHOLE
    assert parse_gpu_resource("nvidia.com/gpu.shared").kind == SHARED
    slice_ = parse_gpu_resource("nvidia.com/mig-3g.40gb")
    assert (slice_.kind, slice_.compute_slices, slice_.memory_gb) == (MIG, 3, 40)
    assert slice_.default_weight == pytest.approx(3 / 7)
    assert parse_gpu_resource("nvidia.com/mig-1g.10gb+me").kind == MIG
    assert parse_gpu_resource("nvidia.com/mig-8g.80gb") is None  # a card has 7 compute slices
    assert parse_gpu_resource("nvidia.com/gpus") is None
    assert parse_gpu_resource("nvidia.com/GRID_T4-4Q") is None  # a site's device name is unknown until declared
    assert parse_gpu_resource("nvidia.com/GRID_T4-4Q", ("nvidia.com/GRID_T4-4Q",)).kind == DEVICE
    assert parse_gpu_resource("nvidia.com/mig-1g.10gb").describe(2) == "2 MIG slices 1g.10gb"


def test_weights_by_product_star_and_defaults():
    economy = GPUEconomy(config=Config({"GPUEconomy": {"card_hour_weights": WEIGHTS}}))
    assert economy.weight("nvidia.com/gpu", V100) == 0.5
    assert economy.weight("nvidia.com/gpu", "NVIDIA-L4") == 1.0  # unlisted product, no "*": the resource's default
    assert economy.weight("nvidia.com/mig-1g.10gb", A100) == 0.15
    assert economy.weight("nvidia.com/mig-2g.20gb") == pytest.approx(2 / 7)  # unlisted slice: its share of the card
    assert economy.highest_weight("nvidia.com/gpu") == 1.0
    assert economy.products_by_cost("nvidia.com/gpu")[:2] == [(P4, 0.25), ("Tesla-T4-SHARED", 0.25)]
    assert economy.declared() == ("nvidia.com/GA100_A100_PCIE_80GB",)
    cheap = GPUEconomy(config=Config({"GPUEconomy": {"card_hour_weights": {"nvidia.com/gpu": {"*": 0.5, A100: 2.0}}}}))
    assert (cheap.weight("nvidia.com/gpu", "NVIDIA-L4"), cheap.highest_weight("nvidia.com/gpu")) == (0.5, 2.0)


@pytest.mark.parametrize("weights, named", [
    ({"nvidia.com/gpu": -1}, "card_hour_weights['nvidia.com/gpu']"),
    ({"nvidia.com/gpu": {A100: "cheap"}}, f"card_hour_weights['nvidia.com/gpu'][{A100!r}]"),
    ({"a100": 1.0}, "'a100' is not a GPU resource name"),
    ({"nvidia.com/gpu": True}, "card_hour_weights['nvidia.com/gpu']"),
])
def test_a_bad_weight_names_the_entry(weights, named):
    with pytest.raises(TraitError) as info:
        GPUEconomy(config=Config({"GPUEconomy": {"card_hour_weights": weights}}))
    assert named in str(info.value)


@pytest.mark.parametrize("override, field", [
    ({"extra_resource_limits": {"nvidia.com/gpus": 1}}, "extra_resource_limits.nvidia.com/gpus"),
    ({"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "half"}}, "extra_resource_limits.nvidia.com/mig-1g.10gb"),
    ({"extra_resource_limits": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}}, "asks for 2 GPU resources"),
    ({"workspace_kind": "vm", "vm_gpu_device_name": "nvidia.com/GRID_T4-4Q"}, "kubespawner_override.vm_gpu_device_name"),
])
def test_unknown_gpu_resources_are_refused_with_the_field_named(override, field):
    with pytest.raises(ProfileConfigError) as info:
        validate_profile_list([profile("a", **override)], TRAITS)
    assert "profile 'a'" in str(info.value) and field in str(info.value)


def test_declared_devices_and_known_names_pass_and_the_hub_check_reads_the_weights():
    profiles = [profile("mig", extra_resource_limits={"nvidia.com/mig-1g.10gb": 1}),
                profile("shared", extra_resource_limits={"nvidia.com/gpu.shared": "1"}),
                profile("vgpu", workspace_kind="vm", vm_gpu_device_name="nvidia.com/GA100_A100_PCIE_80GB",
                        extra_resource_limits={"nvidia.com/gpu": 1}),
                profile("fpga", extra_resource_limits={"xilinx.com/fpga": 1})]  # not a GPU vendor: not ours to judge
    validate_profile_list(profiles, TRAITS, ("nvidia.com/GA100_A100_PCIE_80GB",))
    c = Config()
    c.WorkspaceSpawner.profile_list = profiles
    with pytest.raises(TraitError, match="vm_gpu_device_name"):
        check_hub_config(c)
    c.GPUEconomy.card_hour_weights = WEIGHTS
    check_hub_config(c)
    assert gpu_limit({"memory": "1Gi", "nvidia.com/mig-1g.10gb": "2"}) == ("nvidia.com/mig-1g.10gb", 2)
    assert gpu_limit({}) == ("nvidia.com/gpu", 0)


def test_a_saved_profile_of_an_older_version_loads_with_the_new_fields_defaulted():
    old = dict(slug="one", display_name="One", workspace_kind="container", ide="jupyterlab", gpus=2, gpu_product=A100,
               cpu=None, memory=None, image="i", default_url="", retired_field=1)
    loaded = ResolvedProfile.from_state(old)
    assert (loaded.gpu_resource, loaded.gpu_weight, loaded.card_hours_per_hour) == ("nvidia.com/gpu", 1.0, 2.0)
