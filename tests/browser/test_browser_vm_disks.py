"""A VM workspace's system disk on the dashboard and the spawn page, in a real browser, on the demo's configuration.

The demo's golden image is seeded, and ``c.ImagePublish.teacher_groups = ["teachers"]``. A teacher (tina) and a
student (stu) each start and stop the "Ubuntu VM, JupyterLab" profile, so each has a stopped VM workspace.

- Tina's dashboard card shows the golden image her system disk was cloned from, with its version. She publishes her
  workspace as a golden image from the card's form (the page says so in words; the DataSource exists in the
  golden-image namespace), then ticks the confirmation and rebuilds her system disk (the page says so, with the date
  the old disk is kept until; the VirtualMachine names the new DataVolume, the old one is Retained). She snapshots
  the new system disk from its row; the snapshot's row names it a system disk and offers Restore, which the page
  refuses in words (the restored disk and the retained one would pass her disk quota).
- Stu's card has the rebuild form but not the publish form. His first rebuild fits the demo's disk quota (the old
  system disk it retains does not count against it); a second one would keep a second copy past the quota, and the
  page says to give the first back.
- Tina's spawn page shows the VM profile card's system image and version.

Screenshots for a person to look at, in ``test-artifacts/``: ``dashboard-vm-disks.png`` (tina's card with both
forms), ``dashboard-vm-disks-rebuilt.png`` (her page after the rebuild) and ``spawn-page-system-image.png`` (the VM
profile card); the copies of the first and last in ``tests/browser/screenshots/`` are the documentation's.
"""

from __future__ import annotations

import time

import pytest

from tests.browser.test_browser_dashboard import running_dashboard_demo
from tests.browser.test_browser_demo import CHROMIUM, launch, log_in
from tests.support.hubharness import core_and_custom
from tests.support.paths import ARTIFACTS
from workspacespawner.config.goldenimages import version_label
from workspacespawner.core import names
from workspacespawner.demo import GOLDEN_IMAGE
from workspacespawner.vmdisk.rootdisk import root_disk_of

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]

GOLDEN_NS, IMAGE = GOLDEN_IMAGE
SHOWN_IMAGE = f"{IMAGE} ({version_label(IMAGE)})"  # ubuntu-22.04-gpu-2026-11 (2026-11)
KUBEVIRT = ("kubevirt.io", "v1", "default", "virtualmachines")
CDI = "cdi.kubevirt.io", "v1beta1"
#: Teachers publish their own workspaces.
TEACHERS = """
c.ImagePublish.teacher_groups = ["teachers"]
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(cluster, hub): the demo's hub with the dashboard and teachers who may publish; tina (a teacher) and stu (a
    student) each have a stopped VM workspace of the "ubuntu-vm" profile."""
    with running_dashboard_demo(tmp_path_factory, golden=True, more_config=TEACHERS, start_timeout=240) as (cluster, hub):
        hub.create_user("tina", groups=("teachers",))
        hub.create_user("stu")
        for user in ("tina", "stu"):  # both start at once
            r = hub.spawn(user, {"profile": "ubuntu-vm"})
            assert r.status_code in (201, 202), f"{r.status_code} {r.text}\n{hub.log()}"
        for user in ("tina", "stu"):
            hub.wait_ready(user)
        for user in ("tina", "stu"):
            hub.stop_server(user, timeout=120)
        yield cluster, hub


def vm_of(cluster, user: str) -> dict:
    """``user``'s one VirtualMachine, found by its owner labels."""
    with core_and_custom(cluster) as (_core, custom):
        (vm,) = custom.list_namespaced_custom_object(*KUBEVIRT, label_selector=names.owner_selector(user))["items"]
    return vm


def datavolume(cluster, namespace: str, name: str) -> dict:
    with core_and_custom(cluster) as (_core, custom):
        return custom.get_namespaced_custom_object(*CDI, namespace, "datavolumes", name)


def golden_image(cluster, name: str) -> dict | None:
    """The DataSource ``name`` in the golden-image namespace, or None."""
    from kubernetes.client.rest import ApiException

    with core_and_custom(cluster) as (_core, custom):
        try:
            return custom.get_namespaced_custom_object(*CDI, GOLDEN_NS, "datasources", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise


def stopped_vm_card(browser, hub, user: str):
    """(page, card): a page of ``browser`` logged in as ``user`` on their dashboard, and the card of their stopped VM
    default server, which names the demo's golden image and its version."""
    page = log_in(browser, hub.url, user)
    page.goto(hub.service_url())
    card = page.locator("article.ws-card[data-server='']")
    card.wait_for(timeout=60_000)
    assert "Stopped" in card.locator(".ws-phase").inner_text() and "VM" in card.locator("h3").inner_text()
    assert card.locator("[data-field=system_image]").inner_text() == SHOWN_IMAGE
    return page, card


def test_a_teacher_publishes_and_rebuilds_her_stopped_vm_from_the_dashboard(demo):
    from playwright.sync_api import sync_playwright

    cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    old_disk = root_disk_of(vm_of(cluster, "tina"))
    with sync_playwright() as p:
        browser = launch(p)
        page, card = stopped_vm_card(browser, hub, "tina")
        publish = card.locator("form[action$='/publish']")
        rebuild = card.locator("form[action$='/rebuild']")
        assert publish.count() == 1 and rebuild.count() == 1
        card.screenshot(path=str(ARTIFACTS / "dashboard-vm-disks.png"))
        disks = card.locator("[data-field=disk]").all_inner_texts()
        assert any(text.startswith("System disk of the default server") and old_disk in text for text in disks), disks

        assert golden_image(cluster, "ml101-ubuntu-22.04-2026-11") is None
        publish.locator("input[name=name]").fill("ml101-ubuntu-22.04-2026-11")
        publish.locator("button", has_text="Publish as golden image").click()
        page.wait_for_selector(".ws-done, .ws-error", timeout=60_000)
        assert page.locator(".ws-error").count() == 0, page.locator(".ws-error").inner_text()
        said = page.locator(".ws-done").inner_text()
        assert f"as golden image {GOLDEN_NS}/ml101-ubuntu-22.04-2026-11" in said and old_disk in said, said
        made = golden_image(cluster, "ml101-ubuntu-22.04-2026-11")
        assert made is not None and made["spec"]["source"], made

        # the rebuild asks for the confirmation first: without it the browser does not send the form
        rebuild = page.locator("article.ws-card[data-server=''] form[action$='/rebuild']")
        rebuild.locator("button", has_text="Rebuild system disk").click()
        assert rebuild.locator("input[type=checkbox]").evaluate("box => box.validity.valueMissing")
        assert root_disk_of(vm_of(cluster, "tina")) == old_disk
        rebuild.locator("input[type=checkbox]").check()
        with page.expect_navigation(timeout=90_000):
            rebuild.locator("button", has_text="Rebuild system disk").click()
        assert page.locator(".ws-error").count() == 0, page.locator(".ws-error").inner_text()
        said = page.locator(".ws-done").inner_text()
        new_disk = root_disk_of(vm_of(cluster, "tina"))
        assert new_disk != old_disk and f"is now {new_disk} (from {GOLDEN_NS}/{IMAGE})" in said, said
        assert f"the old system disk {old_disk} is kept until 20" in said and said.endswith(" UTC.") and "the home is kept" in said, said
        old = datavolume(cluster, "default", old_disk)
        assert old["metadata"]["labels"][names.PHASE_LABEL] == "Retained"
        deadline = time.monotonic() + 30  # the service's cache hears of the retained disk by its watch
        while old_disk not in (retained := {d["name"] for d in page.request.get(hub.service_url("api/workspaces")).json()["retained"]}) \
                and time.monotonic() < deadline:
            time.sleep(0.3)
        assert old_disk in retained
        page.reload()
        kept = page.locator("[data-field=retained-disk]").all_inner_texts()
        assert any(text.startswith("System disk of the default server") and old_disk in text for text in kept), kept
        page.screenshot(path=str(ARTIFACTS / "dashboard-vm-disks-rebuilt.png"), full_page=True)

        # a snapshot of the new system disk, from its row on the card, then its Restore: refused in words, as the
        # disk it would make and the old system disk the rebuild retained take her past the demo's 50 GiB
        card = page.locator("article.ws-card[data-server='']")
        row = card.locator("tr", has=page.locator("[data-field=disk]", has_text=new_disk))
        with page.expect_navigation(timeout=60_000):
            row.locator("button", has_text="Snapshot").click()
        assert page.locator(".ws-error").count() == 0, page.locator(".ws-error").inner_text()
        deadline = time.monotonic() + 60
        while not any(s["ready"] and s["system"] for s in page.request.get(hub.service_url("api/workspaces")).json()["snapshots"]):
            assert time.monotonic() < deadline, "the system disk's snapshot never became ready"
            time.sleep(0.3)
        page.reload()
        snapshot = page.locator("section[aria-label=Snapshots] tr", has_text=f"{new_disk} (system disk)")
        assert snapshot.count() == 1, page.locator("section[aria-label=Snapshots]").inner_text()
        with page.expect_navigation(timeout=60_000):
            snapshot.locator("button", has_text="Restore (server stopped)").click()
        said = page.locator(".ws-error").inner_text()
        assert "A new system disk of 40 GiB would take tina's disks past their 50 GiB" in said, said
        assert root_disk_of(vm_of(cluster, "tina")) == new_disk
        page.screenshot(path=str(ARTIFACTS / "dashboard-vm-disks-restore-refused.png"), full_page=True)
        browser.close()


def test_a_student_may_rebuild_but_not_publish(demo):
    """Stu has the rebuild form, not the publish one; his first rebuild fits the demo's 50 GiB (a 10 GiB home and the
    new 40 GiB system disk: the old one it retains is not counted against it), a second is refused in words."""
    from playwright.sync_api import sync_playwright

    cluster, hub = demo
    disk = root_disk_of(vm_of(cluster, "stu"))
    with sync_playwright() as p:
        browser = launch(p)
        page, card = stopped_vm_card(browser, hub, "stu")
        assert card.locator("form[action$='/publish']").count() == 0 and "Publish" not in card.inner_text()

        def rebuild_from_the_page() -> None:
            form = page.locator("article.ws-card[data-server=''] form[action$='/rebuild']")
            form.locator("input[type=checkbox]").check()
            with page.expect_navigation(timeout=90_000):
                form.locator("button", has_text="Rebuild system disk").click()

        rebuild_from_the_page()
        assert page.locator(".ws-error").count() == 0, page.locator(".ws-error").inner_text()
        rebuilt = root_disk_of(vm_of(cluster, "stu"))
        assert rebuilt != disk and f"is now {rebuilt}" in page.locator(".ws-done").inner_text()

        rebuild_from_the_page()
        said = page.locator(".ws-error").inner_text()
        assert "would take stu's disks past their 50 GiB: besides the system disk it replaces, they hold 50 GiB, " \
               "40 GiB of it in retained disks; give back a retained disk first" in said, said
        assert root_disk_of(vm_of(cluster, "stu")) == rebuilt
        browser.close()


def test_the_spawn_page_names_the_vm_profiles_system_image(demo):
    from playwright.sync_api import sync_playwright

    _cluster, hub = demo
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = log_in(browser, hub.url, "tina")
        page.goto(f"{hub.url}/hub/spawn")
        vm = page.locator(".js-ws-card[data-slug=ubuntu-vm]")
        assert vm.locator(".js-ws-image").inner_text() == f"System image: {SHOWN_IMAGE}"
        vm.screenshot(path=str(ARTIFACTS / "spawn-page-system-image.png"))
        browser.close()
