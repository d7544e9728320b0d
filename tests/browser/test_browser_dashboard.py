"""The Workspaces dashboard in a real browser (Debian's chromium, driven by playwright) on the demo's configuration.

A researcher with a running 1-GPU server opens /services/workspaces/ (logging in through the hub's OAuth) and sees
that server with the GPU it holds and its card-hours; the page's numbers equal the cluster's (the Pod's GPUs) and the
API's in the same test. The page's own forms take a snapshot (said in words) and refuse an expand past the disk
quota (said in words; the home keeps its size). Another user gets 403 for the researcher's workspaces, on the page and through the API. The
sentences come back once, in a signed cookie, not in the URL; a link's ``?error=``/``?done=``/``?user=`` words are on no
banner. The screenshots test-artifacts/dashboard-*.png are kept for a person to look at.
"""

from __future__ import annotations

import contextlib
import time
from urllib.parse import urlencode

import pytest

from tests.browser.test_browser_demo import CHROMIUM, launch, log_in
from tests.hub.test_dashboard_hub import DashboardHub
from tests.support import planes
from tests.support.hubharness import core_and_custom, free_port
from tests.support.paths import ARTIFACTS
from workspacespawner.core import names
from workspacespawner.demo import config_dir, demo_config
from workspacespawner.quota.policy import number

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]


@contextlib.contextmanager
def running_dashboard_demo(tmp_path_factory, *, golden: bool = False, more_config: str = "", start_timeout: int = 60):
    """(cluster, hub): a local cluster and the demo's hub with the Workspaces dashboard answering, stopped on exit.

    ``golden``: the demo's golden image made first, for the VM profiles; ``more_config``: lines added to the demo's
    config; ``start_timeout``: seconds the harness waits for a server to be ready.
    """
    with planes.running("embedded", tmp_path_factory.mktemp("cluster"), golden=golden) as cluster:
        state = tmp_path_factory.mktemp("demo")
        port = free_port()
        config = demo_config(state, config_dir(), port=8000, dashboard_port=port) + more_config
        hub = DashboardHub(state, cluster.kubeconfig, config, dashboard_port=port, start_timeout=start_timeout).start()
        try:
            hub.wait_service()
            yield cluster, hub
        finally:
            hub.stop()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with running_dashboard_demo(tmp_path_factory) as (cluster, hub):
        yield cluster, hub


def test_a_researcher_sees_her_gpu_server_and_another_user_is_refused(demo):
    from playwright.sync_api import sync_playwright

    cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "researcher")
        hub.start_server("researcher", {"profile": "jupyterlab-1gpu"})
        page.goto(hub.service_url())
        page.wait_for_selector("article.ws-card", timeout=60_000)
        card = page.locator("article.ws-card[data-server='']")
        assert "Running" in card.inner_text()
        shown_gpus = card.locator("[data-field=gpus]").inner_text()
        with core_and_custom(cluster) as (core, _custom):
            (pod,) = [q for q in core.list_namespaced_pod("default", label_selector=names.owner_selector("researcher")).items
                      if q.metadata.annotations.get("hub.jupyter.org/username") == "researcher"]
            held = sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
        assert held == 1 and shown_gpus.split()[0] == str(held)
        api = page.request.get(hub.service_url("api/workspaces"))
        assert api.status == 200
        server = api.json()["servers"][0]
        assert (server["gpus"], server["node"]) == (held, pod.spec.node_name)
        assert page.locator("[data-field=limit]").inner_text() == number(api.json()["balance"]["limit"])
        assert page.locator("nav >> text=Cluster").count() == 1  # research is a team group in the demo
        page.screenshot(path=str(ARTIFACTS / "dashboard-my-workspaces.png"), full_page=True)

        # the page's own forms: a snapshot of the home is taken and said so; an expand past the disk quota is
        # refused in words, and the home keeps its size
        home = card.locator("tr", has=page.locator("form[action$='/snapshot']"))
        home.locator("button", has_text="Snapshot").click()
        page.wait_for_selector(".ws-done", timeout=30_000)
        assert "napshot" in page.locator(".ws-done").inner_text()
        assert "done=" not in page.url and "napshot" not in page.url  # the sentence came in a cookie, not the URL
        page.screenshot(path=str(ARTIFACTS / "dashboard-action-done.png"), full_page=True)
        page.reload()
        assert page.locator(".ws-done").count() == 0  # shown once
        deadline = time.monotonic() + 30  # the service's cache hears of the new VolumeSnapshot by its watch
        while not page.request.get(hub.service_url("api/workspaces")).json()["snapshots"] and time.monotonic() < deadline:
            time.sleep(0.3)
        assert page.request.get(hub.service_url("api/workspaces")).json()["snapshots"]
        size_before = api.json()["servers"][0]["disks"][0]["size"]
        home = page.locator("article.ws-card[data-server=''] tr", has=page.locator("form[action$='/expand']"))
        home.locator("input[name=size]").fill("100000Gi")
        home.locator("button", has_text="Expand").click()
        page.wait_for_selector(".ws-error", timeout=30_000)
        assert "100000Gi" in page.locator(".ws-error").inner_text()
        page.screenshot(path=str(ARTIFACTS / "dashboard-action-refused.png"), full_page=True)
        assert page.request.get(hub.service_url("api/workspaces")).json()["servers"][0]["disks"][0]["size"] == size_before

        other = log_in(browser, hub.url, "student1")
        refused = other.goto(hub.service_url() + "?user=researcher")
        assert refused.status == 403
        assert other.request.get(hub.service_url("api/workspaces/researcher")).status == 403
        assert other.locator("nav >> text=Cluster").count() == 0
        browser.close()


#: What a link would have the page say on its banners.
WORDS = "Your quota was revoked: contact admin@evil.example"


def test_a_link_puts_no_words_on_the_banners(demo):
    """A classmate's link on the hub's own domain carrying ``?error=`` / ``?done=`` (or a ``?user=`` that is a
    sentence) shows none of its words: screenshots dashboard-link-error.png and dashboard-link-user.png."""
    from playwright.sync_api import sync_playwright

    _cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "student2")
        query = urlencode({"error": WORDS, "done": "Your home was deleted."})
        assert page.goto(f"{hub.service_url()}?{query}").status == 200
        page.wait_for_selector("section[aria-label='Servers']")
        page.screenshot(path=str(ARTIFACTS / "dashboard-link-error.png"), full_page=True)
        assert page.locator(".ws-error, .ws-done").count() == 0
        assert "revoked" not in page.content() and "deleted" not in page.content()

        refused = page.goto(f"{hub.service_url()}?{urlencode({'user': WORDS})}")
        assert refused.status == 403
        page.screenshot(path=str(ARTIFACTS / "dashboard-link-user.png"), full_page=True)
        assert page.locator(".ws-error").inner_text() == "You may not see that user's workspaces."
        assert "revoked" not in page.content()
        browser.close()
