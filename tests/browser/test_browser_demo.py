"""The demo as a person uses it, in a real browser (Debian's chromium, driven by playwright).

Logs in to the demo hub configuration, picks the JupyterLab profile on the
spawn form, waits for JupyterLab to load, and keeps screenshots of the spawn
form and of JupyterLab in ``test-artifacts/`` for a person to look at.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil

import pytest

from tests.support.hubharness import Hub
from tests.support.paths import ARTIFACTS
from workspacespawner.demo import GOLDEN_FILES, GOLDEN_IMAGE, config_dir, demo_config, npm_proxy
from workspacespawner.localcluster import ClusterThread
from workspacespawner.localcluster.goldenimage import make_golden_image
from workspacespawner.localcluster.volumes import claim_path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]


@contextlib.contextmanager
def running_demo(tmp_path_factory, *, golden_image: bool = False, npm_proxy_in_front: bool = False):
    """(cluster thread, hub): a local cluster and a hub on the demo's configuration, stopped on exit.

    ``golden_image``: the demo's golden image made first, for the VM
    profiles. ``npm_proxy_in_front``: JupyterHub's reference proxy from npm,
    as the demo prefers (VS Code needs it), instead of the Python port.
    """
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"))
    cluster = thread.start()
    try:
        if golden_image:
            thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES, timeout=60)
        state = tmp_path_factory.mktemp("demo")
        proxy = asyncio.run(npm_proxy(state)) if npm_proxy_in_front else None
        assert proxy is not None or not npm_proxy_in_front, "npm could not install configurable-http-proxy (see the log above)"
        hub = Hub(state, cluster.kubeconfig, demo_config(state, config_dir(), port=8000, proxy_command=proxy)).start()
        try:
            yield thread, hub
        finally:
            hub.stop()
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def demo_hub(tmp_path_factory):
    with running_demo(tmp_path_factory) as (_thread, hub):
        yield hub


def launch(playwright):
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    )


def log_in(browser, hub_url: str, user: str):
    """A new page of ``browser``, logged in to the hub at ``hub_url`` as ``user`` (any password), on the spawn form."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{hub_url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", "any")
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url("**/hub/spawn**", timeout=30_000)
    return page


def files_in_claims(thread, name: str) -> list:
    """Every file called ``name`` in the claims of the cluster ``thread`` runs, as found on the host (a home holds
    what its user wrote)."""
    def find(cluster):
        found = []
        for pvc in cluster.store.list(cluster.store.kind("", "v1", "persistentvolumeclaims"), None)[0]:
            path = claim_path(cluster, pvc["metadata"]["namespace"], pvc["metadata"]["name"])
            if path is not None:
                found += list(path.rglob(name))
        return found

    return thread.call(find)


def test_login_start_jupyterlab_in_browser(demo_hub):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        login = browser.new_page(viewport={"width": 1280, "height": 800})
        login.goto(f"{demo_hub.url}/hub/login")
        hint = login.locator(".announcement").inner_text()
        assert "any user name logs in, with any password" in hint and "admin is an administrator" in hint, hint
        login.screenshot(path=str(ARTIFACTS / "login.png"))
        login.close()
        page = log_in(browser, demo_hub.url, "student1")
        assert page.locator("text=JupyterLab (CPU)").count() >= 1
        assert page.locator("text=JupyterLab, 8 GPUs").count() == 0, "a research-only profile was shown to a student"
        page.screenshot(path=str(ARTIFACTS / "spawn-form.png"), full_page=True)
        page.check("input[value=jupyterlab-cpu]")
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url("**/user/student1/lab**", timeout=120_000)
        page.wait_for_selector("#jp-main-dock-panel, .jp-LabShell", timeout=120_000)
        page.wait_for_timeout(1500)  # let the launcher paint before the screenshot
        page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"))
        assert "JupyterLab" in page.title() or page.locator(".jp-Launcher").count() >= 1
        browser.close()


def test_the_demos_admin_user_reaches_the_admin_page(demo_hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, demo_hub.url, "admin")
        page.goto(f"{demo_hub.url}/hub/admin")
        page.wait_for_selector("text=student1", timeout=30_000)  # the users' table, which only an admin gets
        page.screenshot(path=str(ARTIFACTS / "admin.png"))
        student = log_in(browser, demo_hub.url, "student2")
        response = student.goto(f"{demo_hub.url}/hub/admin")
        assert response.status == 403
        browser.close()
