"""The spawn page as data and as HTML: cards grouped by IDE and kind, the card-hour header, what blocks a card.

The numbers a card shows come from its profile's ``kubespawner_override``
(the spawner's settings where it sets none); a card the user's own limits
refuse is marked and not selectable; a card short of GPUs is marked with the
scheduler-free sentence and stays selectable (an autoscaler may add a node).
The form keeps kubespawner's field names, so the submitted options are the
ones kubespawner's ``options_from_form`` reads.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from datetime import UTC, datetime

import pytest

from workspacespawner.gpu.capacity import GPUPool
from workspacespawner.quota.policy import OPEN, Limits, Run, Usage, month_bounds
from workspacespawner.spawnpage.form import chosen_slug, render_form
from workspacespawner.spawnpage.gather import PageCache, SpawnPage, servers_allowed
from workspacespawner.spawnpage.model import balance, card, page_data

A100 = "NVIDIA-A100-SXM4-80GB"
NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
DEFAULTS = {"workspace_kind": "container", "ide": "jupyterlab", "cpu_limit": 1, "mem_limit": "2G"}
PROFILES = [
    {"slug": "cpu", "display_name": "JupyterLab (CPU)", "default": True,
     "kubespawner_override": {"cpu_limit": 2, "mem_limit": "4G"}},
    {"slug": "one", "display_name": "JupyterLab, 1 GPU", "description": "1 A100 & friends <b>",
     "kubespawner_override": {"cpu_limit": 8, "mem_limit": "32G", "extra_resource_limits": {"nvidia.com/gpu": 1},
                              "node_selector": {"nvidia.com/gpu.product": A100}}},
    {"slug": "code", "display_name": "code-server (CPU)", "kubespawner_override": {"ide": "code-server"}},
    {"slug": "vm", "display_name": "Ubuntu VM", "kubespawner_override": {"workspace_kind": "vm"},
     "profile_options": {"image": {"display_name": "Image", "choices": {
         "jammy": {"display_name": "22.04", "default": True}, "noble": {"display_name": "24.04"}},
         "unlisted_choice": {"enabled": True, "display_name": "Image reference",
                             "display_name_in_choices": "Other..."}}}},
]


def usage(card_hours: float = 0.0, running: int = 0, tz: str = "Europe/Berlin") -> Usage:
    start, end = month_bounds(NOW, tz)
    active = tuple(Run(gpus=0, started=NOW, state=OPEN) for _ in range(running))
    return Usage(card_hours, start, end, active)


def cards(pools, spent: Usage | None = None, limits: Limits | None = None):
    return [card(p, DEFAULTS, pools, spent, limits) for p in PROFILES]


def page(pools=None, spent=None, limits=None, disk=0) -> SpawnPage:
    return SpawnPage(PROFILES, cards(pools, spent, limits), balance(spent, limits, disk))


def test_cards_read_the_profile_with_the_spawners_settings_where_it_sets_none():
    cpu, one, code, vm = cards({("nvidia.com/gpu", A100): GPUPool(A100, 8, 5, 8, 5)})
    assert (cpu.ide, cpu.kind, cpu.cpu, cpu.memory, cpu.gpus, cpu.gpus_free) == ("jupyterlab", "container", 2.0, "4G", 0, None)
    assert (one.gpus, one.gpu_type, one.card_hours_per_hour, one.gpus_free, one.gpus_total) == (1, A100, 1.0, 5, 8)
    assert (code.ide, code.cpu, code.memory, code.group) == ("code-server", 1.0, "2G", "code-server · Container")
    assert vm.group == "JupyterLab · Virtual machine"
    assert all(c.blocked is None and c.selectable for c in (cpu, one, code, vm))


def test_a_card_short_of_gpus_says_why_and_stays_selectable():
    one = cards({("nvidia.com/gpu", A100): GPUPool(A100, 8, 0, 8, 0)})[1]
    assert one.blocked == "All 8 NVIDIA A100 80GB GPUs are in use right now; this profile needs 1 GPU."
    assert one.selectable and one.gpus_free == 0
    assert cards(None)[1].gpus_free is None and cards(None)[1].blocked is None  # free GPUs unknown: nothing claimed


def test_the_users_own_limits_block_a_card_before_the_click():
    full = cards({("nvidia.com/gpu", A100): GPUPool(A100, 8, 8, 8, 8)}, usage(running=2), Limits(max_concurrent=2))
    assert all(not c.selectable for c in full)
    assert full[0].blocked == "You have 2 of your 2 workspaces running or starting; stop one to start another."
    spent = cards({("nvidia.com/gpu", A100): GPUPool(A100, 8, 8, 8, 8)}, usage(card_hours=20), Limits(card_hours_per_month=20))
    assert spent[0].selectable and spent[0].blocked is None  # CPU profiles never need card-hours
    assert not spent[1].selectable
    assert spent[1].blocked == ("You have used all 20 card-hours of this month; "
                                "they reset on 2027-01-01 00:00 (Europe/Berlin).")


def test_the_balance_has_used_left_reset_workspaces_and_disk():
    shown = balance(usage(card_hours=12.5, running=1), Limits(card_hours_per_month=50, max_disk="50Gi"), 10 * 1024**3)
    assert (shown.card_hours_used, shown.card_hours_left, shown.used_percent) == (12.5, 37.5, 25)
    assert shown.resets == "2027-01-01 00:00 (Europe/Berlin)"
    assert (shown.running, shown.running_limit, shown.disk_used_gib, shown.disk_limit_gib) == (1, 2, 10.0, 50.0)
    assert balance(usage(60), Limits(card_hours_per_month=50), 0).used_percent == 100
    assert balance(usage(0), Limits(card_hours_per_month=0), 0).used_percent == 100
    assert not balance(None, None, 0).known


def test_a_workspace_limit_no_one_can_reach_is_not_shown():
    """With JupyterHub's named servers off a user has one server: "0 of 2 in use" names a limit no one can reach."""
    limits = Limits(card_hours_per_month=50, max_concurrent=2)
    one = balance(usage(0), limits, 0, servers_allowed=1)
    assert one.running_limit is None and one.running == 0
    form = render_form(SpawnPage(PROFILES, cards(None, usage(0), limits), one), live_url="/x", user_options={})
    assert "Workspaces:" not in form.split("<script")[0] and "js-ws-running" not in form.split("<script")[0]
    many = balance(usage(running=1), limits, 0, servers_allowed=None)  # named servers on, no hub limit: the quota's
    assert many.running_limit == 2
    form = render_form(SpawnPage(PROFILES, cards(None, usage(running=1), limits), many), live_url="/x", user_options={})
    assert "Workspaces: 1 of 2 in use" in form
    assert balance(usage(0), limits, 0, servers_allowed=5).running_limit == 2  # the lower of the two
    assert balance(usage(0), Limits(max_concurrent=4), 0, servers_allowed=3).running_limit == 3


def test_the_servers_the_hub_allows():
    from types import SimpleNamespace as User

    assert servers_allowed(User(allow_named_servers=False, settings={"named_server_limit_per_user": 3})) == 1
    assert servers_allowed(User(allow_named_servers=True, settings={"named_server_limit_per_user": 3})) == 4  # + default
    assert servers_allowed(User(allow_named_servers=True, settings={})) is None
    assert servers_allowed(User(allow_named_servers=True, settings={"named_server_limit_per_user": len})) is None


def test_the_live_data_is_the_pages_numbers_as_json():
    shown = page({("nvidia.com/gpu", A100): GPUPool(A100, 8, 3, 8, 3)}, usage(2), Limits())
    data = json.loads(json.dumps(page_data(shown.cards, shown.balance, NOW)))
    assert data["as_of"] == NOW.isoformat()
    assert data["cards"]["one"]["gpus_free"] == 3 and data["cards"]["one"]["group"] == "JupyterLab · Container"
    assert data["balance"]["card_hours_left"] == 48 and data["balance"]["used_percent"] == 4
    assert page_data([], balance(None, None, 0), NOW)["balance"] is None


def test_the_form_groups_cards_and_keeps_kubespawners_field_names():
    form = render_form(page({("nvidia.com/gpu", A100): GPUPool(A100, 8, 3, 8, 3)}, usage(12.5), Limits(card_hours_per_month=50)),
                       live_url="/hub/spawn-page-data/ann/", user_options={})
    headings = re.findall(r'<h3 class="ws-group">(.*?)</h3>', form)
    assert headings == ["JupyterLab · Container", "code-server · Container", "JupyterLab · Virtual machine"]
    assert re.findall(r'name="profile" id="profile-item-(\w+)" value="\1"', form) == ["cpu", "one", "code", "vm"]
    assert 'name="profile-option-vm--image"' in form
    assert 'data-name="profile-option-vm--image--unlisted-choice"' in form
    assert "3 of 8 NVIDIA A100 80GB free now" in form and "NVIDIA-A100-SXM4-80GB" not in form  # (#38 item 13)
    # kubespawner's "4G" is 4 GiB (JupyterHub's byte specification counts in 1024s): issue #38 item 13
    assert "2 CPU cores · 4 GiB memory" in form and "8 CPU cores · 32 GiB memory · 1 NVIDIA A100 80GB GPU" in form
    assert form.count("No GPU: costs no card-hours") == 3  # the CPU cards
    assert "A card-hour is one GPU for one hour" in form
    assert "<strong>12.5</strong> of 50 card-hours used, <strong>37.5</strong> left" in form
    assert "Resets 2027-01-01 00:00 (Europe/Berlin)" in form
    assert 'data-live-url="/hub/spawn-page-data/ann/"' in form
    assert html.escape("1 A100 & friends <b>") in form and "friends <b>" not in form  # profile text is escaped
    assert re.search(r'id="profile-item-cpu" value="cpu"\s*checked', form)  # the configured default


def test_the_form_preselects_the_last_choice_while_it_still_holds():
    shown = page(spent=usage(running=0), limits=Limits())
    assert chosen_slug(shown, "vm") == "vm"
    assert chosen_slug(shown, "gone") == "cpu"  # a profile no longer listed: the default
    form = render_form(shown, live_url="/x", user_options={"profile": "vm", "image--unlisted-choice": "my/img:1"})
    assert re.search(r'value="unlisted-choice" selected', form)
    assert 'value="my/img:1"' in form
    blocked = page(spent=usage(running=2), limits=Limits(max_concurrent=2))
    assert chosen_slug(blocked, "cpu") is None  # nothing may start: nothing preselected
    assert not re.search(r'value="\w+"\s*checked', render_form(blocked, live_url="/x", user_options={"profile": "cpu"}))


VM_DEFAULTS = {**DEFAULTS, "vm_golden_image": "ubuntu-24.04-gpu-2026-11", "vm_golden_image_namespace": "golden-images"}
VM_PROFILES = [
    {"slug": "vm-new", "display_name": "VM", "kubespawner_override": {"workspace_kind": "vm"}},
    {"slug": "vm-old", "display_name": "VM, old image",
     "kubespawner_override": {"workspace_kind": "vm", "vm_golden_image": "ubuntu-22.04-gpu"}},
    PROFILES[0],
]


def test_a_vm_card_names_its_system_image_and_the_one_the_users_disk_came_from():
    new, old, cpu = [card(p, VM_DEFAULTS, None, None, None, root_disk_image="golden-images/ubuntu-24.04-gpu-2026-09")
                     for p in VM_PROFILES]
    assert (new.system_image, new.system_image_version) == ("ubuntu-24.04-gpu-2026-11", "2026-11")
    assert (new.disk_image, new.disk_image_version) == ("ubuntu-24.04-gpu-2026-09", "2026-09")
    assert (old.system_image, old.system_image_version) == ("ubuntu-22.04-gpu", "no version in its name")
    assert (cpu.system_image, cpu.disk_image) == ("", "")  # a container has no system image
    same = card(VM_PROFILES[0], VM_DEFAULTS, None, None, None, root_disk_image="golden-images/ubuntu-24.04-gpu-2026-11")
    assert same.disk_image == ""  # cloned from this very image: nothing to say
    other_namespace = card(VM_PROFILES[0], VM_DEFAULTS, None, None, None, root_disk_image="lab/ubuntu-24.04-gpu-2026-11")
    assert other_namespace.disk_image == "ubuntu-24.04-gpu-2026-11"
    assert card(VM_PROFILES[0], VM_DEFAULTS, None, None, None).disk_image == ""  # no root disk yet

    cards = [card(p, VM_DEFAULTS, None, None, None, root_disk_image="golden-images/ubuntu-24.04-gpu-2026-09")
             for p in VM_PROFILES]
    form = render_form(SpawnPage(VM_PROFILES, cards, balance(None, None, 0)), live_url="/x", user_options={})
    assert "System image: ubuntu-24.04-gpu-2026-11 (2026-11)" in form
    assert "System image: ubuntu-22.04-gpu (no version in its name)" in form
    assert form.count("Your system disk: cloned from ubuntu-24.04-gpu-2026-09 (2026-09)") == 2
    assert form.count("System image:") == 2
    assert json.loads(json.dumps(page_data(cards, balance(None, None, 0), NOW)))["cards"]["vm-new"]["system_image"] == \
        "ubuntu-24.04-gpu-2026-11"


def test_the_page_cache_shares_one_gathering_and_keeps_it_for_the_ttl():
    now = [0.0]
    cache = PageCache(ttl=5, clock=lambda: now[0])
    made = []

    async def make():
        made.append(now[0])
        await asyncio.sleep(0)
        return page()

    async def run():
        first, second = await asyncio.gather(cache.get("ann/", make), cache.get("ann/", make))
        assert first is second and made == [0.0]
        now[0] = 4.9
        await cache.get("ann/", make)
        assert made == [0.0]
        now[0] = 5.0
        await cache.get("ann/", make)
        assert made == [0.0, 5.0]

        async def broken():
            raise RuntimeError("ledger down")

        with pytest.raises(RuntimeError):
            await cache.get("bob/", broken)
        await cache.get("bob/", make)  # a failure is not kept
        assert made == [0.0, 5.0, 5.0]

    asyncio.run(run())
