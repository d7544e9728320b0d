"""The demo as a person uses it, in a real browser (Debian's chromium, driven by playwright).

Logs in to the demo hub configuration, picks the JupyterLab profile on the
spawn form, waits for JupyterLab to load, and keeps screenshots of the spawn
form and of JupyterLab in ``test-artifacts/`` for a person to look at. The
code-server profile, whose servers here have no code-server (this module
does not put it on the PATH, as the demo does when it is installed), fails
on the hub's own page with what to install; its screenshot is kept too.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time

import pytest
from localcluster.goldenimage import make_golden_image
from localcluster.volumes import claim_path

from localcluster import ClusterThread
from tests.support.hubharness import Hub
from tests.support.paths import ARTIFACTS
from workspacespawner.demo import DEMO_NODES, GOLDEN_FILES, GOLDEN_IMAGE, config_dir, demo_config, npm_proxy

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]


@contextlib.contextmanager
def running_demo(tmp_path_factory, *, golden_image: bool = False, npm_proxy_in_front: bool = False, extra_config: str = ""):
    """(cluster thread, hub): a local cluster and a hub on the demo's configuration, stopped on exit.

    ``golden_image``: the demo's golden image made first, for the VM
    profiles. ``npm_proxy_in_front``: JupyterHub's reference proxy from npm,
    as the demo prefers (VS Code needs it), instead of the Python port.
    ``extra_config``: lines of config after the demo's.
    """
    thread = ClusterThread(state_dir=tmp_path_factory.mktemp("cluster"), nodes=DEMO_NODES)
    cluster = thread.start()
    try:
        if golden_image:
            thread.call(make_golden_image, *GOLDEN_IMAGE, GOLDEN_FILES, timeout=60)
        state = tmp_path_factory.mktemp("demo")
        proxy = asyncio.run(npm_proxy(state)) if npm_proxy_in_front else None
        assert proxy is not None or not npm_proxy_in_front, "npm could not install configurable-http-proxy (see the log above)"
        config = demo_config(state, config_dir(), port=8000, proxy_command=proxy) + extra_config
        hub = Hub(state, cluster.kubeconfig, config).start()
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


def start_from_form(browser, hub_url: str, user: str, profile: str):
    """A new page of ``browser``, logged in as ``user`` (:func:`log_in`), that sent the spawn form with the profile
    whose slug is ``profile``."""
    page = log_in(browser, hub_url, user)
    page.check(f"input[value={profile}]")
    page.click("input[type=submit], button[type=submit]")
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


def test_code_server_missing_says_what_to_install(demo_hub):
    """Issue #17: without code-server in the image, the user sees the hub's page saying so, what the
    administrators must install and the server's log line, never jupyter-server-proxy's bare 500 at /vscode/."""
    from playwright.sync_api import sync_playwright

    if shutil.which("code-server"):
        pytest.skip("code-server is on this process's PATH, which every Pod's PATH ends with")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = start_from_form(browser, demo_hub.url, "student3", "code-server-cpu")
        page.wait_for_selector("text=Can not find code-server in PATH", timeout=180_000)
        page.wait_for_timeout(1000)  # let the page settle before the screenshot
        page.screenshot(path=str(ARTIFACTS / "code-server-missing.png"), full_page=True)
        text = page.inner_text("body")
        for words in ("has no code-server", "please tell the JupyterHub administrators", "code-server on the PATH",
                      "jupyter-server-proxy and jupyter-vscode-proxy", "helm-values/singleuser-image.md"):
            assert words in text, text
        assert "Internal Server Error" not in text and "/vscode" not in page.url, (page.url, text)
        # coming back to the page once the hub stopped the server: JupyterHub's "Spawn failed" page, same words
        deadline = time.monotonic() + 60
        while page.locator("h1:has-text('Spawn failed')").count() == 0 and time.monotonic() < deadline:
            page.wait_for_timeout(1000)
            page.reload()
        assert "Can not find code-server in PATH" in page.inner_text("body"), page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "code-server-missing-again.png"), full_page=True)
        browser.close()
