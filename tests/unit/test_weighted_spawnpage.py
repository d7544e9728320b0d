"""Spawn page cards of weighted GPU profiles: the GPU kind in words, free units of its own resource and type, the cost.

Covers: a MIG profile (its slices counted from its own pool, not the whole
GPUs of the same card type; its cost the slice's weight); a V100 profile
naming its product (its weight); a profile naming no product on a cluster
of A100s and V100s (a range "from ... to ...", over the types the cluster
has, the types the weights list when the cluster's are unknown); a
time-sliced share; a VM's device; the form and the live JSON carrying the
same words.
"""

from __future__ import annotations

from datetime import UTC, datetime

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.gpu.capacity import GPUPool
from workspacespawner.spawnpage.form import render_form
from workspacespawner.spawnpage.gather import SpawnPage
from workspacespawner.spawnpage.model import Balance, card, page_data

A100, V100 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB"
GPU, MIG, SHARED = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"
DEVICE = "nvidia.com/GA100_A100_PCIE_80GB"
ECONOMY = GPUEconomy(card_hour_weights={GPU: {A100: 1.0, V100: 0.5, "Tesla-P4": 0.25}, SHARED: 0.25, DEVICE: 0.8})
DEFAULTS = {"workspace_kind": "container", "ide": "jupyterlab", "cpu_limit": 1, "mem_limit": "2G",
            "vm_gpu_device_name": DEVICE}
POOLS = {
    (GPU, A100): GPUPool(A100, 8, 6, 8, 6, GPU),
    (GPU, V100): GPUPool(V100, 4, 1, 4, 1, GPU),
    (MIG, A100): GPUPool(A100, 14, 9, 7, 5, MIG),
    (SHARED, "Tesla-T4-SHARED"): GPUPool("Tesla-T4-SHARED", 4, 4, 4, 4, SHARED),
}


def profile(slug, resource, count, product=None, **override):
    selector = {"node_selector": {"nvidia.com/gpu.product": product}} if product else {}
    return {"slug": slug, "display_name": slug, "kubespawner_override": {
        "extra_resource_limits": {resource: count}, **selector, **override}}


def test_a_mig_profile_counts_its_own_slices_and_costs_its_share():
    mig = card(profile("mig", MIG, 2), DEFAULTS, POOLS, None, None, ECONOMY)
    assert (mig.gpus, mig.gpu_resource, mig.gpu_kind) == (2, MIG, "2 MIG slices 1g.10gb")
    assert (mig.gpus_free, mig.gpus_total, mig.free_unit) == (9, 14, "MIG slices 1g.10gb")  # not the A100s' 6 of 8
    assert mig.card_hours_per_hour == mig.card_hours_from == 2 / 7  # unlisted: its 1 of 7 compute slices
    assert mig.cost == "Costs 0.29 card-hours per hour"
    big = card(profile("mig6", MIG, 6), DEFAULTS, POOLS, None, None, ECONOMY)
    assert big.blocked == ("9 of 14 MIG slices 1g.10gb are free right now, but at most 5 on one node; "
                           "this profile needs 6 MIG slices 1g.10gb on one node.")


def test_a_profile_naming_its_product_costs_that_products_weight():
    v100 = card(profile("v100", GPU, 2, V100), DEFAULTS, POOLS, None, None, ECONOMY)
    # the type by its name for people (#38 item 13); the card's gpu_type stays the label a node selector uses
    assert (v100.gpu_kind, v100.gpus_free, v100.gpus_total, v100.free_unit) == ("2 NVIDIA V100 16GB GPUs", 1, 4,
                                                                                   "NVIDIA V100 16GB")
    assert (v100.gpu_type, v100.gpu_type_shown) == (V100, "NVIDIA V100 16GB")
    assert (v100.card_hours_per_hour, v100.cost) == (1.0, "Costs 1 card-hour per hour")


def test_a_profile_naming_no_product_shows_the_range_of_what_it_may_get():
    any_gpu = card(profile("any", GPU, 1), DEFAULTS, POOLS, None, None, ECONOMY)
    assert (any_gpu.gpus_free, any_gpu.gpus_total, any_gpu.free_unit) == (7, 12, "GPUs")  # A100s and V100s
    assert (any_gpu.card_hours_from, any_gpu.card_hours_per_hour) == (0.5, 1.0)  # the P4 is not in this cluster
    assert any_gpu.cost == "Costs from 0.5 to 1 card-hours per hour, depending on the GPU it gets"
    unknown = card(profile("any", GPU, 2), DEFAULTS, None, None, None, ECONOMY)  # free GPUs unknown: the weights' types
    assert unknown.cost == "Costs from 0.5 to 2 card-hours per hour, depending on the GPU it gets"
    flat = card(profile("any", GPU, 1), DEFAULTS, POOLS, None, None, GPUEconomy())  # no weights set: one price
    assert flat.cost == "Costs 1 card-hour per hour"


def test_a_time_sliced_share_and_a_vm_device():
    shared = card(profile("share", SHARED, 1), DEFAULTS, POOLS, None, None, ECONOMY)
    assert (shared.gpu_kind, shared.gpus_free, shared.free_unit, shared.cost) == (
        "1 shared GPU", 4, "shared GPUs", "Costs 0.25 card-hours per hour")
    vm = card(profile("vm", GPU, 1, workspace_kind="vm"), DEFAULTS, POOLS, None, None, ECONOMY)
    assert (vm.gpu_resource, vm.gpu_kind, vm.cost) == (DEVICE, f"1 × {DEVICE}", "Costs 0.8 card-hours per hour")
    assert (vm.gpus_total, vm.free_unit) == (0, DEVICE)


def test_the_form_and_the_live_data_say_the_same():
    profiles = [profile("mig", MIG, 1), profile("any", GPU, 1), {"slug": "cpu", "display_name": "CPU"}]
    cards = [card(p, DEFAULTS, POOLS, None, None, ECONOMY) for p in profiles]
    form = render_form(SpawnPage(profiles, cards, Balance()), live_url="/hub/spawn-page-data/ann/", user_options={})
    assert "1 MIG slice 1g.10gb" in form and "9 of 14 MIG slices 1g.10gb free now" in form
    assert "Costs 0.14 card-hours per hour" in form
    assert "Costs from 0.5 to 1 card-hours per hour, depending on the GPU it gets" in form
    assert "No GPU: costs no card-hours" in form
    data = page_data(cards, Balance(), datetime(2026, 6, 1, tzinfo=UTC))["cards"]
    assert data["any"]["cost"] == cards[1].cost and data["mig"]["free_unit"] == "MIG slices 1g.10gb"


def test_a_site_names_its_gpu_types_and_the_rest_read_from_their_labels():
    named = GPUEconomy(card_hour_weights=ECONOMY.card_hour_weights, product_names={V100: "V100 (Volta)"})
    v100 = card(profile("v100", GPU, 2, V100), DEFAULTS, POOLS, None, None, named)
    assert (v100.gpu_kind, v100.free_unit) == ("2 V100 (Volta) GPUs", "V100 (Volta)")
    assert [named.display_name(p) for p in (A100, "Tesla-T4-SHARED", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "")] == [
        "NVIDIA A100 80GB", "NVIDIA T4 (shared)", "NVIDIA A100 80GB MIG 1g.10gb", ""]
    assert named.display_name("AMD-Instinct-MI300X") == "AMD Instinct MI300X"  # another vendor's: only split


def test_an_empty_gpu_name_stops_the_hub_naming_the_setting():
    import pytest
    from traitlets import TraitError

    with pytest.raises(TraitError, match=r"c.GPUEconomy.product_names: 'Tesla-T4': ''"):
        GPUEconomy(product_names={"Tesla-T4": ""})
