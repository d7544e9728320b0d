"""The spawn page and the home page as a student sees them, in a real browser, on the demo's configuration (issue #17).

- A student with card-hours left sees the header (card-hours bar, reset,
  workspaces, disk) and the profiles as cards grouped by IDE and kind, each
  GPU card with the A100s free now (8 of 8).
- While the page stays open, a training run takes the whole shared 8-GPU
  node: within a refresh of the page's live endpoint the 1-GPU card says 0
  of 8 free and why it cannot start, without a reload.
- The research lead sees one 8-GPU profile, the team pool's, and every card
  says which node pool it runs on (#38 item 8).
- A student whose card-hours are nearly used sees the bar nearly full; one
  whose card-hours are used up sees the GPU cards marked and not selectable,
  the CPU cards still selectable.
- The page at a phone's width (390 px) keeps the cards readable, one per row.
- The progress page of a container start and of a VM start: the bar only
  moves forward, through the steps (node found, image pulled; the root
  disk's clone in its own range, the server answering).
- The home page lists the user's server with its phase, profile, GPUs and
  card-hours this month, and the warning when few card-hours are left; a
  user who comes back after their account was deleted sees the home disk
  kept for them and how to get it back.

- A link to the spawn page whose query is a sentence shows our refusal,
  none of its words.
- A student who stops a start while it pulls its image reads that the start
  was cancelled and gets Start again
  (#38 item 5), not JupyterHub's bare "Server not running".

Screenshots go to ``test-artifacts/spawn-page-*.png`` and ``home-*.png`` for a person to look at.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from localcluster.controllers.scheduler import GPU_TAINT

from tests.browser.test_browser_demo import CHROMIUM, launch, log_in, running_demo
from tests.support.paths import ARTIFACTS
from workspacespawner.core import names
from workspacespawner.core.milestones import LADDER, Milestone
from workspacespawner.quota import policy
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import Limits, Request

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

A100 = "NVIDIA-A100-SXM4-80GB"
A100_SHOWN = "NVIDIA A100 80GB"  # what the pages call it (#38 item 13)


@pytest.fixture(scope="module")
def demo_hub(tmp_path_factory):
    with running_demo(tmp_path_factory) as (thread, hub):
        hub.cluster_thread = thread  # for a test that slows the node agent down
        yield hub


def spend_card_hours(hub, user: str, hours: float) -> None:
    """Record a closed 1-GPU run of ``hours`` this month in the demo hub's ledger (as if ``user`` had used them)."""
    ledger = Ledger(f"sqlite:///{hub.workdir / 'workspacespawner-ledger.sqlite'}")
    try:
        now = policy.utcnow()
        began = now - timedelta(hours=hours, minutes=1)
        month_start = policy.month_bounds(now, "Europe/Berlin")[0]
        began = max(began, month_start + timedelta(minutes=1))
        decision = ledger.check_and_reserve(user, Request(gpus=1, server_name="earlier"), Limits(card_hours_per_month=1e6),
                                            began, tz="Europe/Berlin", min_start_hours=0)
        run_id = ledger.open_run(decision.reservation, began)
        ledger.close_run(run_id, began + timedelta(hours=hours))
    finally:
        ledger.dispose()


def card(page, slug: str):
    return page.locator(f".js-ws-card[data-slug={slug}]")


@contextmanager
def shared_a100s_held(hub):
    """A Pod holding all 8 A100s of the demo's shared GPU node, deleted on exit: shaped as a research user's workspace
    (kubespawner's component label, our owner labels) since the hub counts the GPUs of the Pods it watches, workspaces."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(hub.env["KUBECONFIG"])
    core = kubernetes.client.CoreV1Api(client)
    labels = {"component": "singleuser-server", **names.owner_labels("filler")}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "training-run", "labels": labels},
           "spec": {"nodeSelector": {"nvidia.com/gpu.product": A100},
                    "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "train", "image": "python:3.11", "command": ["sleep", "600"],
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    core.create_namespaced_pod("default", pod)
    try:
        yield
    finally:
        core.delete_namespaced_pod("training-run", "default", grace_period_seconds=0)
        client.close()


def test_the_spawn_page_shows_free_gpus_live_and_the_card_hours_left(demo_hub):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "student3")
        header = page.locator(".ws-balance").inner_text()
        assert "0 of 50 card-hours used, 50 left" in header, header
        assert "Resets" in header and "(Europe/Berlin)" in header, header
        assert "Workspaces:" not in header, header  # the demo has no named servers: one each, no "0 of 2" to reach
        groups = page.locator("h3.ws-group").all_inner_texts()
        assert [g.lower() for g in groups[:2]] == ["jupyterlab · container", "code-server · container"], groups
        assert f"8 of 8 {A100_SHOWN} free now" in card(page, "jupyterlab-1gpu").inner_text()
        assert "Costs 1 card-hour per hour" in card(page, "jupyterlab-1gpu").inner_text()
        assert "4 GiB memory" in card(page, "jupyterlab-cpu").inner_text()  # mem_limit "4G" is 4 GiB (#38 item 13)
        page.screenshot(path=str(ARTIFACTS / "spawn-page.png"), full_page=True)

        with shared_a100s_held(demo_hub):  # the whole shared GPU node
            one = card(page, "jupyterlab-1gpu")
            one.locator(".js-ws-free", has_text=f"0 of 8 {A100_SHOWN} free now").wait_for(timeout=30_000)  # no reload
            assert f"All 8 {A100_SHOWN} GPUs are in use right now" in one.locator(".js-ws-reason").inner_text()
            assert one.locator("input[type=radio]").is_enabled()  # the autoscaler may add a node: still selectable
            page.screenshot(path=str(ARTIFACTS / "spawn-page-gpus-busy.png"), full_page=True)

        phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
        phone.context.add_cookies(page.context.cookies())
        phone.goto(f"{demo_hub.url}/hub/spawn")
        boxes = [card(phone, slug).bounding_box() for slug in ("jupyterlab-cpu", "jupyterlab-1gpu")]
        assert boxes[0]["width"] <= 390 and boxes[1]["y"] > boxes[0]["y"] + boxes[0]["height"] - 1  # one per row
        phone.screenshot(path=str(ARTIFACTS / "spawn-page-phone.png"), full_page=True)
        browser.close()


#: What a link to the spawn page would have its error box say.
WORDS = "Your quota was revoked: contact admin@evil.example"


def test_a_link_to_the_spawn_page_puts_none_of_its_words_on_it(demo_hub):
    """/hub/spawn?profile=<a sentence> (a link on the hub's own domain) shows our refusal, not the sentence:
    screenshot spawn-page-link-words.png."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "student4")
        page.goto(f"{demo_hub.url}/hub/spawn?{urlencode({'profile': WORDS})}")
        page.wait_for_selector(".js-ws-card")
        page.screenshot(path=str(ARTIFACTS / "spawn-page-link-words.png"), full_page=True)
        shown = page.locator("body").inner_text()  # (the form's action keeps JupyterHub's query: not shown)
        assert "There is no such profile" in shown
        assert "revoked" not in shown and "evil.example" not in shown
        browser.close()


def test_the_gpu_kinds_of_the_demo_on_the_spawn_page(demo_hub):
    """The demo's MIG slices, time-sliced T4, cheapest-free profile and research pool, as a member and a student see them."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    demo_hub.create_user("lead", groups=("research",))
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "lead")
        mig = card(page, "jupyterlab-mig").inner_text()
        assert "1 MIG slice 1g.10gb" in mig and "Costs 0.15 card-hours per hour" in mig, mig
        assert "9 of 9" in mig and "free now" in mig, mig
        shared = card(page, "jupyterlab-t4-shared").inner_text()
        assert "4 of 4 NVIDIA T4 (shared) free now" in shared and "Costs 0.25 card-hours per hour" in shared, shared
        cheapest = card(page, "jupyterlab-cheapest").inner_text()
        assert "from 0.25 to 1 card-hours per hour" in cheapest and "Prefers older GPUs" in cheapest, cheapest
        assert "P4" not in cheapest, cheapest  # priced, but the demo's cluster has none (#38 item 13)
        assert "Prefers older GPUs: NVIDIA T4 (shared), then NVIDIA V100 16GB, then NVIDIA A100 80GB" in cheapest, cheapest
        assert "Tesla-" not in page.locator("body").inner_text()  # no raw product label on the page
        pool = card(page, "research-pool").inner_text()
        assert "Your team's pool 'research': 8 of 8 GPUs free" in pool, pool
        assert "Runs on your team's pool 'research'" in pool, pool
        eight = [t for t in page.locator(".js-ws-card h4").all_inner_texts() if "8 GPUs" in t]
        assert eight == ["Research pool, 8 GPUs (A100)"], eight  # one 8-GPU card, the pool's (#38 item 8)
        assert "Runs on the shared GPU nodes" in card(page, "jupyterlab-1gpu").inner_text()
        cards = page.locator(".js-ws-card").count()
        assert page.locator(".js-ws-card .js-ws-nodes").count() == cards  # each card names its node pool
        assert f"8 of 8 {A100_SHOWN} free now" in card(page, "jupyterlab-1gpu").inner_text()  # the pool's node not counted
        page.screenshot(path=str(ARTIFACTS / "spawn-page-gpu-kinds.png"), full_page=True)
        student = log_in(browser, demo_hub.url, "student9")
        assert card(student, "research-pool").count() == 0 and card(student, "jupyterlab-mig").count() == 1
        browser.close()


def test_a_start_stopped_while_starting_says_cancelled_and_offers_start_again(demo_hub):
    """Screenshot spawn-cancelled.png."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)

    def pull_seconds(seconds: float) -> None:
        def knob(cluster) -> None:
            agent = cluster.controllers["nodeagent"]
            agent.pull_seconds = seconds
            agent.pulled_images.clear()  # else an image an earlier test pulled is "already present on machine"
        demo_hub.cluster_thread.call(knob)

    pull_seconds(60.0)  # the image pull outlasts the click on Stop
    try:
        with sync_playwright() as p:
            browser = launch(p)
            page = log_in(browser, demo_hub.url, "student6")
            page.check("input[value=jupyterlab-cpu]")
            page.click("input[type=submit], button[type=submit]")
            page.wait_for_url("**/spawn-pending/**", timeout=60_000)
            # the stop while it pulls, as the home page's Stop or JupyterHub 6's button under the bar asks for it
            # (JupyterHub 5.5's progress page has no button of its own)
            demo_hub.stop_server("student6")
            page.goto(f"{demo_hub.url}/hub/spawn-pending/student6")
            page.locator("h1", has_text="Start cancelled").wait_for(timeout=60_000)
            text = page.locator("body").inner_text()
            assert "it was stopped while it was starting" in text and "Your home folder and your disks are kept" in text
            page.screenshot(path=str(ARTIFACTS / "spawn-cancelled.png"), full_page=True)
            pull_seconds(0.0)
            page.locator("a#start", has_text="Start again").click()
            page.wait_for_selector(".js-ws-card")  # the spawn form again, to choose and start
            browser.close()
    finally:
        pull_seconds(0.0)


def test_card_hours_nearly_used_and_used_up(demo_hub):
    from playwright.sync_api import sync_playwright

    demo_hub.create_user("nearly")
    demo_hub.create_user("spent")
    spend_card_hours(demo_hub, "nearly", 46)
    spend_card_hours(demo_hub, "spent", 50)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "nearly")
        header = page.locator(".ws-balance").inner_text()
        assert "46 of 50 card-hours used, 4 left" in header, header
        assert page.locator(".ws-bar.ws-low").count() == 1
        assert card(page, "jupyterlab-1gpu").locator("input[type=radio]").is_enabled()
        page.screenshot(path=str(ARTIFACTS / "spawn-page-nearly-used.png"), full_page=True)

        page = log_in(browser, demo_hub.url, "spent")
        one = card(page, "jupyterlab-1gpu")
        assert "You have used all 50 card-hours of this month" in one.locator(".js-ws-reason").inner_text()
        assert one.locator("input[type=radio]").is_disabled()
        assert card(page, "jupyterlab-cpu").locator("input[type=radio]").is_enabled()
        assert card(page, "jupyterlab-cpu").locator("input[type=radio]").is_checked()
        page.screenshot(path=str(ARTIFACTS / "spawn-page-used-up.png"), full_page=True)
        browser.close()


def test_the_home_page_shows_servers_the_warning_and_kept_disks(demo_hub):
    from playwright.sync_api import sync_playwright

    demo_hub.create_user("homer")
    spend_card_hours(demo_hub, "homer", 46)
    demo_hub.create_user("returner")  # a home made, then the account deleted: the home is kept (Retained)
    demo_hub.start_server("returner")
    demo_hub.stop_server("returner")
    assert demo_hub.api("DELETE", "/users/returner").status_code == 204
    demo_hub.create_user("returner")
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "homer")
        demo_hub.start_server("homer")
        page.goto(f"{demo_hub.url}/hub/home")
        row = page.locator("#ws-home tr[data-server='']")
        row.locator(".ws-phase", has_text="Running").wait_for(timeout=30_000)
        assert row.inner_text().split("\t")[2:4] == ["JupyterLab (CPU)", "none"], row.inner_text()
        warning = page.locator(".js-ws-warning")
        assert warning.is_visible()
        assert "4 of your 50 card-hours left this month" in warning.inner_text()
        assert page.locator(".js-ws-disks").inner_text() == "Your disks: 10 GiB of 50 GiB."
        page.screenshot(path=str(ARTIFACTS / "home-page.png"), full_page=True)
        phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
        phone.context.add_cookies(page.context.cookies())
        phone.goto(f"{demo_hub.url}/hub/home")
        phone.locator("#ws-home .ws-phase", has_text="Running").wait_for(timeout=30_000)
        phone.screenshot(path=str(ARTIFACTS / "home-page-phone.png"), full_page=True)
        # issue #38 item 11: Stop clicked, the row says Stopping at once and never Running again
        page.click("#stop")
        phases = [row.locator(".ws-phase").inner_text()]
        page.screenshot(path=str(ARTIFACTS / "home-page-stopping.png"), full_page=True)
        deadline = time.monotonic() + 60
        while phases[-1] != "Stopped" and time.monotonic() < deadline:
            page.wait_for_timeout(200)
            phases.append(row.locator(".ws-phase").inner_text())
        assert phases[0] == "Stopping" and phases[-1] == "Stopped" and "Running" not in phases, phases
        assert not demo_hub.user("homer")["servers"]

        back = log_in(browser, demo_hub.url, "returner")
        back.goto(f"{demo_hub.url}/hub/home")
        kept = back.locator(".js-ws-retained li").first
        kept.wait_for(timeout=30_000)
        assert "home-returner" in kept.inner_text() and "Start your default server again to use it" in kept.inner_text()
        back.screenshot(path=str(ARTIFACTS / "home-page-kept-disk.png"), full_page=True)
        browser.close()


@pytest.fixture(scope="module")
def vm_demo(tmp_path_factory):
    """The demo with its golden image, a slow image pull (14 s) and root-disk clone (16 s): longer than the 10 s JupyterHub waits before it shows the progress page."""
    # no root-disk pool: the progress bar test follows a VM's first start through its clone
    no_pool = "c.RootDiskPool.ready_disks = {}\n"
    with running_demo(tmp_path_factory, golden_image=True, npm_proxy_in_front=True, extra_config=no_pool) as (thread, hub):
        def slow(cluster):
            cluster.controllers["nodeagent"].pull_seconds = 14
            cluster.controllers["cdi"].clone_seconds = 16

        thread.call(slow)
        yield hub


#: Runs in every page: on the spawn-pending page, each value the progress bar takes is appended to sessionStorage
#: (which survives the page's move to the server, same origin).
BAR_RECORDER = """
document.addEventListener("DOMContentLoaded", () => {
  const bar = document.getElementById("progress-bar");
  if (!bar) return;
  new MutationObserver(() => {
    const seen = JSON.parse(sessionStorage.getItem("bar") || "[]");
    seen.push(Number(bar.getAttribute("aria-valuenow")));
    sessionStorage.setItem("bar", JSON.stringify(seen));
  }).observe(bar, { attributes: true, attributeFilter: ["aria-valuenow"] });
  const log = document.getElementById("progress-log");
  if (log) new MutationObserver(() => sessionStorage.setItem("log", log.innerText)).observe(log, { childList: true, subtree: true });
});
"""


def follow_progress(page, shot: str, wait_for: str, done_url: str) -> list[int]:
    """The progress bar's values on the spawn-pending page until ``done_url`` loads (recorded by
    :data:`BAR_RECORDER`, with the log's lines: :func:`progress_log`); a screenshot ``shot`` of the page once its log
    shows ``wait_for``."""
    page.evaluate("sessionStorage.removeItem('bar'); sessionStorage.removeItem('log')")
    page.wait_for_url("**/hub/spawn-pending/**", timeout=60_000)
    page.locator("#progress-details").evaluate("details => { details.open = true; }")
    page.locator("#progress-log", has_text=wait_for).wait_for(timeout=120_000)
    page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    page.wait_for_url(done_url, timeout=300_000)
    return page.evaluate("JSON.parse(sessionStorage.getItem('bar') || '[]')")


def progress_log(page) -> list[str]:
    """The lines of the last spawn-pending page's progress log, as it last read (recorded by :data:`BAR_RECORDER`)."""
    return [line.strip() for line in page.evaluate("sessionStorage.getItem('log') || ''").splitlines() if line.strip()]


def test_the_progress_bar_climbs_the_steps_of_a_container_and_a_vm_start(vm_demo):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, vm_demo.url, "climber")
        page.context.add_init_script(BAR_RECORDER)
        page.check("input[value=jupyterlab-cpu]")
        page.click("button[type=submit]")
        bar = follow_progress(page, "progress-container.png", "Pulling image", "**/user/climber/lab**")
        assert bar == sorted(bar) and bar[-1] == 100, bar  # only forward
        assert {LADDER[Milestone.NODE_FOUND], LADDER[Milestone.IMAGE_PULLED]} <= set(bar), bar
        vm_demo.stop_server("climber")

        page.goto(f"{vm_demo.url}/hub/spawn")
        page.check("input[value=ubuntu-vm]")
        page.click("button[type=submit]")
        bar = follow_progress(page, "progress-vm.png", "Copying the system image", "**/user/climber/lab**")
        assert bar == sorted(bar) and bar[-1] == 100, bar
        cloning = [v for v in bar if LADDER[Milestone.HOME_READY] < v < LADDER[Milestone.ROOT_DISK_READY]]
        assert cloning, f"the root disk's clone did not move the bar: {bar}"
        assert LADDER[Milestone.ANSWERING] in bar, bar
        # issue #38 item 12: what happened, in that order and in plain words
        log = progress_log(page)
        booting = next((i for i, line in enumerate(log) if "booting" in line and " on " in line), None)
        assert booting is not None, "\n".join(log)
        assert "gpu" not in log[booting], log[booting]  # a CPU VM keeps off the GPU nodes (#38 item 9)
        assert not any("Found a node" in line for line in log[booting:]), "\n".join(log)
        assert not any("probe" in line or "Container created" in line or line.startswith("[") for line in log), "\n".join(log)
        vm_demo.stop_server("climber")
        browser.close()
