"""The demo's code-server profile in a real browser: the real VS Code behind JupyterHub's login, on the user's home.

Logs in, starts the "code-server (CPU)" profile from the spawn form, waits
for the VS Code workbench (its DOM, not just a page that answers), opens a
terminal there and writes a file to the home folder; code-server's heartbeat
file (written while a client is connected) is in that home too. Then the same user's
JupyterLab (a new server on the JupyterLab profile) lists that file: one
home, one identity. Screenshots of the workbench and of JupyterLab's file
browser are kept in ``test-artifacts/`` for a person to look at.

The demo's hub and cluster are set up as ``workspacespawner demo`` sets them
up: code-server found by :func:`workspacespawner.demo.use_code_server`, and
JupyterHub's reference proxy from npm (:func:`workspacespawner.demo.npm_proxy`,
through ``running_demo``).
The Python port of configurable-http-proxy (0.4) forwards the browser's
binary WebSocket frames as text frames, which code-server closes: the
workbench then stays blank.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.browser.test_browser_demo import CHROMIUM, files_in_claims, launch, running_demo, start_from_form
from tests.support import codeserver
from tests.support.paths import ARTIFACTS
from workspacespawner.demo import use_code_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

USER = "coder1"
FILE = "written-in-vscode.txt"
TEXT = "hello from code-server"


@pytest.fixture(scope="module")
def code_server_demo(tmp_path_factory):
    codeserver.real_bin()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PATH", os.environ.get("PATH", os.defpath))  # restored after the module
        use_code_server()  # as the demo does: first on the PATH every Pod's PATH ends with
        with running_demo(tmp_path_factory, npm_proxy_in_front=True) as (thread, hub):
            yield thread, hub


def test_vscode_writes_to_the_home_that_jupyterlab_opens(code_server_demo):
    from playwright.sync_api import sync_playwright

    thread, hub = code_server_demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = start_from_form(browser, hub.url, USER, "code-server-cpu")
        page.wait_for_url(f"**/user/{USER}/vscode/**", timeout=180_000)
        # the workbench itself: VS Code's shell and its activity bar, drawn by the real code-server
        page.wait_for_selector(".monaco-workbench .part.activitybar", timeout=180_000)
        page.wait_for_selector(".monaco-workbench .part.statusbar", timeout=60_000)
        page.wait_for_selector(".explorer-folders-view .monaco-list-row", timeout=60_000)  # the home folder's files
        page.wait_for_timeout(2000)
        page.screenshot(path=str(ARTIFACTS / "vscode-workbench.png"))
        # code-server's heartbeat (out/node/heart.js) beats while a client is connected: the file is in the home
        beats = [path for path in files_in_claims(thread, "heartbeat") if path.parent.name == "code-server"]
        assert [path.parent.parent.name for path in beats] == ["share"], beats  # ~/.local/share/code-server/heartbeat

        page.keyboard.press("Control+Backquote")  # View: Toggle Terminal
        # VS Code's workspace trust asks before a terminal may run in the opened folder (the user's home)
        trust = page.locator(".monaco-dialog-box a.monaco-button:has-text('Trust'), .monaco-dialog-box button:has-text('Trust')")
        trust.first.wait_for(timeout=30_000)
        trust.first.click()
        terminal = page.locator(".terminal-wrapper .xterm-helper-textarea, .xterm .xterm-helper-textarea")
        terminal.first.wait_for(state="attached", timeout=60_000)
        # the shell behind a new terminal may start after its textarea: what is typed before is lost, so the line
        # (which overwrites, so saying it twice writes the same file) is typed again until the file is there
        deadline = time.monotonic() + 90
        while not (written := files_in_claims(thread, FILE)) and time.monotonic() < deadline:
            page.locator(".terminal-wrapper, .xterm").first.click()
            page.keyboard.type(f"echo '{TEXT}' > ~/{FILE}\n")
            again = time.monotonic() + 15
            while not (written := files_in_claims(thread, FILE)) and time.monotonic() < min(again, deadline):
                page.wait_for_timeout(500)
        page.wait_for_timeout(1000)  # let the terminal paint before the screenshot
        page.screenshot(path=str(ARTIFACTS / "vscode-terminal.png"))
        assert len(written) == 1, "the VS Code terminal wrote nothing to the home folder"
        assert written[0].read_text().strip() == TEXT

        hub.stop_server(USER)
        page.goto(f"{hub.url}/hub/spawn/{USER}")
        page.check("input[value=jupyterlab-cpu]")
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url(f"**/user/{USER}/lab**", timeout=180_000)
        listed = page.locator(f".jp-DirListing-item[title*='{FILE}'], .jp-DirListing-itemName:has-text('{FILE}')")
        listed.first.wait_for(timeout=120_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-sees-vscode-file.png"))
        browser.close()
    assert files_in_claims(thread, FILE) == written, "one file in one home: JupyterLab listed code-server's"
