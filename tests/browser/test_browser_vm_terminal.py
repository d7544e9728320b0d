"""A VM workspace of the demo from the browser: a JupyterLab terminal is a shell in the guest.

Logs in, starts the "Ubuntu VM, JupyterLab" profile, opens a terminal in
JupyterLab and reads ``/etc/os-release`` there: the guest's, which the
demo's golden image wrote, not the host's. The shell writes what it read to
the home folder, which the test reads from the home PVC on the host; a
screenshot of the terminal is kept in ``test-artifacts/vm-terminal.png``.
"""

from __future__ import annotations

import time

import pytest

from tests.browser.test_browser_demo import CHROMIUM, files_in_claims, launch, running_demo, start_from_form
from tests.support.paths import ARTIFACTS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

MARKER = "workspacespawner demo image"  # in the golden image's PRETTY_NAME


@pytest.fixture(scope="module")
def vm_demo(tmp_path_factory):
    with running_demo(tmp_path_factory, golden_image=True) as (thread, hub):
        if not thread.cluster.controllers["nodeagent"].isolation:
            pytest.skip("this host cannot sandbox (needs Linux, and root or user namespaces): a guest's /etc/os-release is the host's")
        yield thread, hub


def test_vm_terminal_reads_the_guests_os_release(vm_demo):
    from playwright.sync_api import sync_playwright

    thread, hub = vm_demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = start_from_form(browser, hub.url, "student1", "ubuntu-vm")
        page.wait_for_url("**/user/student1/lab**", timeout=240_000)
        page.wait_for_selector(".jp-LauncherCard[title*='Terminal'], .jp-LauncherCard:has-text('Terminal')", timeout=120_000)
        page.locator(".jp-LauncherCard:has-text('Terminal')").first.click()
        terminal = page.locator(".jp-Terminal .xterm-helper-textarea")
        terminal.wait_for(state="attached", timeout=60_000)
        page.locator(".jp-Terminal").first.click()
        page.keyboard.type("clear; grep PRETTY_NAME /etc/os-release | tee ~/seen-os-release.txt\n")
        deadline = time.monotonic() + 60
        while not (seen := files_in_claims(thread, "seen-os-release.txt")) and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        page.wait_for_timeout(1000)  # let the terminal paint before the screenshot
        page.screenshot(path=str(ARTIFACTS / "vm-terminal.png"))
        browser.close()
    assert len(seen) == 1, "the terminal's shell wrote nothing to the home folder"
    assert MARKER in seen[0].read_text()
