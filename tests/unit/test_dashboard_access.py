"""The dashboard's access rules (workspacespawner.dashboard.access): a Viewer from the hub's user model and its scopes,
and the roles and scopes the config piece derives from WorkspacesDashboard.team_groups."""

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.dashboard.access import Viewer, grant_of
from workspacespawner.dashboard.settings import WorkspacesDashboard, oauth_scopes, roles, user_scopes

MEMBERS = {"research": {"researcher", "lead"}, "students": {"alice", "bob"}}


def viewer(name, *scopes, admin=False, groups=()):
    model = {"name": name, "kind": "user", "admin": admin, "groups": list(groups), "scopes": list(scopes)}
    return Viewer.from_model(model, members=MEMBERS)


def test_a_user_reads_and_acts_on_their_own_only():
    alice = viewer("alice", "custom:workspaces:read!user=alice", "custom:workspaces:act!user=alice", groups=["students"])
    assert alice.can_read("alice") and alice.can_act("alice")
    assert not alice.can_read("bob") and not alice.can_act("bob")
    assert alice.readable_users(["alice", "bob", "researcher"]) == {"alice"}
    assert not alice.sees_cluster and not alice.sees_reports and not alice.sees_all


def test_own_workspaces_stay_readable_without_any_scope():
    bare = viewer("bob")
    assert bare.can_read("bob") and bare.can_act("bob") and not bare.can_read("alice")


def test_a_team_lead_reads_the_team_but_acts_only_on_their_own():
    lead = viewer("lead", "custom:workspaces:read!group=research", "custom:workspaces:read!user=lead",
                  "custom:workspaces:act!user=lead", "custom:workspaces:cluster", groups=["research"])
    assert lead.can_read("researcher") and not lead.can_read("alice")
    assert lead.readable_users(["alice", "bob", "researcher", "lead"]) == {"researcher", "lead"}
    assert not lead.can_act("researcher")
    assert lead.sees_cluster and not lead.sees_reports
    assert lead.teams == {"research"}


def test_an_admin_reads_and_acts_on_everyone():
    admin = viewer("admin", admin=True)
    assert admin.can_read("alice") and admin.can_act("bob") and admin.sees_cluster and admin.sees_reports
    assert admin.readable_users(["alice", "bob"]) == {"alice", "bob", "admin"}


def test_a_service_model_is_never_an_admin():
    model = {"name": "x", "kind": "service", "admin": True, "scopes": []}
    assert not Viewer.from_model(model).admin


def test_unfiltered_scopes_grant_everyone_and_other_filters_nothing():
    assert grant_of(["custom:workspaces:read"], "custom:workspaces:read").all
    server_only = grant_of(["custom:workspaces:read!server=alice/x"], "custom:workspaces:read")
    assert not server_only.any
    other = grant_of(["custom:workspacesx:read", "custom:workspaces:reads"], "custom:workspaces:read")
    assert not other.any
    reports = viewer("adviser", "custom:workspaces:reports", "custom:workspaces:read")
    assert reports.sees_reports and reports.can_read("alice") and not reports.can_act("alice")


def test_the_service_name_names_the_scopes():
    model = {"name": "ann", "scopes": ["custom:gpu-dash:read!group=students"]}
    assert Viewer.from_model(model, service_name="gpu-dash", members=MEMBERS).can_read("alice")
    assert not Viewer.from_model(model, members=MEMBERS).can_read("alice")


def test_roles_come_from_team_groups():
    settings = WorkspacesDashboard(config=Config({"WorkspacesDashboard": {"team_groups": ["research"]}}))
    made = {r["name"]: r for r in roles(settings)}
    assert made["workspaces-team-research"]["scopes"] == ["custom:workspaces:read!group=research", "custom:workspaces:cluster"]
    assert made["workspaces-team-research"]["groups"] == ["research"]
    assert "delete:servers" in made["workspaces-service"]["scopes"]
    assert "access:services!service=workspaces" in user_scopes(settings)
    assert "custom:workspaces:act" in oauth_scopes(settings)


@pytest.mark.parametrize(("name", "value", "named"), [
    ("service_name", "Work Spaces", "service_name"),
    ("prometheus_url", "prometheus:9090", "prometheus_url"),
    ("port", 70000, "port"),
    ("team_groups", [" "], "team_groups"),
    ("departments", {"Physics": [""]}, "departments"),
])
def test_a_bad_setting_is_named(name, value, named):
    with pytest.raises(TraitError, match=f"WorkspacesDashboard.{named}"):
        WorkspacesDashboard(config=Config({"WorkspacesDashboard": {name: value}}))
