"""The "Publish as golden image" form of workspaces.html: offered on a stopped VM workspace to who may publish only.

Rendered with plain data (Jinja2, no server): a stopped VM server gets the form (posting ``server`` and a typed
``name``) when ``can_publish``; a running VM, a container or a viewer who may not publish gets none. The name the
field suggests follows the golden images' version convention.
"""

from __future__ import annotations

import re
from dataclasses import asdict

from tests.unit.test_dashboard_reports_view import render
from workspacespawner.config.goldenimages import parse_image_name
from workspacespawner.dashboard.workspaces import WorkspaceRow

FORM = 'action="/services/workspaces/api/workspaces/tom/publish"'


def page(*rows: WorkspaceRow, can_publish: bool) -> str:
    data = {"cardhours": None, "balance": None, "servers": [asdict(r) for r in rows], "snapshots": [], "retained": []}
    return render("workspaces.html", title="My workspaces", data=data, owner="tom", can_act=True, others=[],
                  cardhours_charts={}, can_publish=can_publish)


def row(server: str, kind: str, phase: str) -> WorkspaceRow:
    return WorkspaceRow(server=server, kind=kind, phase=phase, reason="", profile="", node="", cpu=0.0, memory=0,
                        gpus=0, gpu_type="")


def test_a_stopped_vm_is_offered_to_who_may_publish():
    html = page(row("course", "vm", "Stopped"), can_publish=True)
    assert html.count(FORM) == 1
    assert '<input type="hidden" name="server" value="course">' in html and 'name="name"' in html
    assert "Publish as golden image" in html


def test_nothing_is_offered_otherwise():
    assert FORM not in page(row("course", "vm", "Stopped"), can_publish=False)
    assert FORM not in page(row("course", "vm", "Running"), row("", "container", "Stopped"), can_publish=True)


def test_the_name_it_suggests_follows_the_version_convention():
    html = page(row("course", "vm", "Stopped"), can_publish=True)
    (suggested,) = re.findall(r'<input name="name" placeholder="([^"]+)"', html)
    assert parse_image_name(suggested) is not None, suggested  # the pages would show its version
