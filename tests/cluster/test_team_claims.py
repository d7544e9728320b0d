"""Team claims on the local cluster (:func:`ensure_team_claims`) and the ``workspacespawner storage`` admin view.

Covers: a missing claim created ReadWriteMany on cephfs and Bound, found
(not re-created) on the next start; a claim several teams share created
once, naming every group; an admin's missing claim left out with a message;
a user's home named as a team claim refused, never mounted or changed;
transient API errors retried, a permanent one leaving the claim out;
``workspacespawner storage`` listing each team's members from the hub's
database (``--team``, ``--json``, the claim's phase with ``--cluster``), and
refusing a bad setting with its name.
"""

from __future__ import annotations

import json
import textwrap

from workspacespawner.admin import storage as storagecli
from workspacespawner.core import names
from workspacespawner.storage import home, tiers
from workspacespawner.storage.teamclaims import ensure_team_claims

TEAMS = {
    "physics": {"size": "2Gi"},
    "ML Lab": {"claim": "labs", "sub_path": "ml"},
    "bio": {"claim": "labs", "sub_path": "bio"},
    "course-101": {"claim": "course-101-material", "create": False},
}


def folders():
    return tiers.resolve_team_folders(TEAMS)


async def core_api(api):
    from kubernetes_asyncio import client

    return client.CoreV1Api(api)


async def read_claim(core, name):
    return core.api_client.sanitize_for_serialization(await core.read_namespaced_persistent_volume_claim(name, "default"))


async def test_missing_claim_is_created_then_found(api):
    core = await core_api(api)
    physics = folders()["physics"]
    [status] = await ensure_team_claims(core, namespace="default", folders=[physics])
    assert status.usable and status.created and "Team folder /shared/physics (read-write, 2Gi) created" == status.message
    claim = await read_claim(core, "team-physics")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == "cephfs"
    assert claim["metadata"]["labels"] == names.team_labels("physics")
    [again] = await ensure_team_claims(core, namespace="default", folders=[physics])
    assert again.usable and not again.created and again.phase == "Bound"
    assert (await read_claim(core, "team-physics"))["metadata"]["uid"] == claim["metadata"]["uid"]


async def test_shared_claim_is_created_once_for_every_group(api):
    core = await core_api(api)
    resolved = folders()
    statuses = await ensure_team_claims(
        core, namespace="default", folders=[resolved["ML Lab"], resolved["bio"]], all_folders=list(resolved.values())
    )
    assert [(s.claim, s.teams, s.usable) for s in statuses] == [("labs", ("ML Lab", "bio"), True)]
    claim = await read_claim(core, "labs")
    assert json.loads(claim["metadata"]["annotations"][names.TEAM_ANNOTATION]) == ["ML Lab", "bio"]


async def test_admin_claim_missing_is_left_out(api):
    core = await core_api(api)
    [status] = await ensure_team_claims(core, namespace="default", folders=[folders()["course-101"]])
    assert not status.usable and "'course-101-material' does not exist yet" in status.message


async def test_users_home_named_as_team_claim_is_refused(api):
    core = await core_api(api)
    manifest = home.make_home_pvc(name="home-alice", namespace="default", user_name="alice", kubespawner_username="alice",
                                  storage_class="ceph-rbd", size="1Gi", access_modes=["ReadWriteOnce"])
    await core.create_namespaced_persistent_volume_claim("default", manifest)
    mistaken = tiers.resolve_team_folders({"physics": {"claim": "home-alice"}})["physics"]
    [status] = await ensure_team_claims(core, namespace="default", folders=[mistaken])
    assert not status.usable and "user's own disk" in status.message
    assert (await read_claim(core, "home-alice"))["metadata"]["labels"] == manifest["metadata"]["labels"]
    _volumes, mounts = tiers.team_volumes(groups_of_user=["physics"], team_folders={"physics": mistaken}, unavailable=["home-alice"])
    assert mounts == []


async def test_transient_errors_are_retried_and_permanent_ones_leave_the_claim_out(api, cluster):
    core = await core_api(api)
    cluster.faults.add("GET", r"/persistentvolumeclaims/team-physics$", status=503, reason="ServiceUnavailable", count=2)
    [status] = await ensure_team_claims(core, namespace="default", folders=[folders()["physics"]])
    assert status.usable and status.created
    cluster.faults.add("POST", r"/persistentvolumeclaims", status=403, reason="Forbidden", count=1)
    [denied] = await ensure_team_claims(core, namespace="default", folders=[tiers.resolve_team_folders({"chem": {}})["chem"]])
    assert not denied.usable and "403" in denied.message


# -- the admin view ------------------------------------------------------------------------------------


def hub_files(tmp_path, team_folders=TEAMS):
    from jupyterhub import orm

    tmp_path.mkdir(exist_ok=True)
    db = tmp_path / "hub.sqlite"
    session = orm.new_session_factory(f"sqlite:///{db}")()
    users = {name: orm.User(name=name) for name in ("alice", "bob", "carol")}
    session.add_all(users.values())
    for group, members in {"physics": ["alice", "bob"], "ML Lab": ["carol"], "bio": [], "students": ["alice"]}.items():
        session.add(orm.Group(name=group, users=[users[m] for m in members]))
    session.commit()
    session.close()
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(textwrap.dedent(f"""
        c.JupyterHub.db_url = "sqlite:///{db}"
        c.KubeSpawner.namespace = "default"
        c.WorkspaceSpawner.team_folders = {team_folders!r}
    """))
    return config


def test_storage_lists_members_of_each_team(tmp_path, capsys):
    config = hub_files(tmp_path)
    assert storagecli.main(["-f", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TEAM", "CLAIM", "MOUNT", "MODE", "SIZE", "USERS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["physics"].endswith("alice, bob") and "team-physics" in rows["physics"]
    assert "labs:ml" in rows["ML"] and rows["ML"].endswith("carol")
    assert rows["bio"].endswith("(no member in the hub)")
    assert rows["course-101"].endswith("(no member in the hub)")
    assert "students" not in rows


def test_storage_one_team_as_json(tmp_path, capsys):
    config = hub_files(tmp_path)
    assert storagecli.main(["-f", str(config), "--team", "physics", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row == {"team": "physics", "claim": "team-physics", "mount": "/shared/physics", "mode": "rw", "size": "2Gi",
                   "users": "alice, bob"}
    assert storagecli.main(["-f", str(config), "--team", "chemistry"]) == 1
    assert "no team folder for 'chemistry'" in capsys.readouterr().err


def test_storage_refuses_bad_settings_and_missing_database(tmp_path, capsys):
    config = hub_files(tmp_path, {"physics": {"size": "huge"}})
    assert storagecli.main(["-f", str(config)]) == 1
    assert "c.WorkspaceSpawner.team_folders['physics'].size = 'huge' is invalid" in capsys.readouterr().err
    config = hub_files(tmp_path / "again")
    assert storagecli.main(["-f", str(config), "--db-url", f"sqlite:///{tmp_path / 'nothing.sqlite'}"]) == 1
    assert "cannot read the hub database" in capsys.readouterr().err
    assert not (tmp_path / "nothing.sqlite").exists()


def test_storage_with_cluster_shows_claim_phase(tmp_path, capsys, kube_env, cluster_thread):
    claim = tiers.make_team_claim(folder=folders()["physics"], namespace="default")
    cluster_thread.call(lambda cl: cl.store.create(cl.store.kind("", "v1", "persistentvolumeclaims"), "default", claim))
    config = hub_files(tmp_path)
    assert storagecli.main(["-f", str(config), "--cluster", "--json"]) == 0
    rows = {r["team"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["physics"]["phase"] in ("Pending", "Bound") and rows["physics"]["size"] == "2Gi"
    assert rows["course-101"]["phase"] == "missing" and rows["course-101"]["used"] is None
