"""Weighted card-hours in the ledger, the quota service, ``workspacespawner usage`` and the Prometheus gauges.

Covers, on SQLite and (when installed) PostgreSQL: migration 0004 on a
ledger of revision 0003 holding closed and open runs (they read as whole
GPUs of unknown type at weight 1.0, and their card-hours stay what they
were); a reservation writing the GPU resource, product and provisional
weight; :meth:`Ledger.price_run` pricing an open run once and never a
priced, closed or already-placed one; :meth:`QuotaService.placed` pricing
only a run this service opened (a restarted hub re-adopting a server never
reprices it), at the weight of the node's product; the usage command's
weighted and raw columns (existing columns first, in their order); the
gauges of unit-hours and running units per resource and product.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from traitlets.config import Config

from tests.support.migrations import at_revision
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.db.migrate import head_revision
from workspacespawner.db.migrations import RUNS_TABLE
from workspacespawner.quota import policy
from workspacespawner.quota.cli import COLUMNS, gpu_hours_by_type, usage_rows
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.enforcer import Enforcer
from workspacespawner.quota.ledger import Ledger
from workspacespawner.quota.policy import CLOSED, OPEN, Limits, Request
from workspacespawner.quota.service import QuotaService

NOW = datetime(2026, 6, 10, 12, tzinfo=UTC)
JUNE = policy.month_bounds(NOW, "UTC")
A100, V100 = "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB"
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
ROOMY = Limits(max_concurrent=9, card_hours_per_month=1000)
WEIGHTS = {GPU: {A100: 1.0, V100: 0.5}, MIG: 0.15}


@pytest.fixture
def ledger(database_url):
    ledger = Ledger(database_url)
    yield ledger
    ledger.dispose()


def open_run(ledger, user="ann", server="", *, gpus=1, resource=GPU, product="", weight=1.0, at=NOW):
    request = Request(gpus=gpus, server_name=server, gpu_resource=resource, gpu_product=product, gpu_weight=weight)
    reservation = ledger.check_and_reserve(user, request, ROOMY, at).reservation
    return ledger.open_run(reservation, at)


def test_migration_0004_keeps_the_card_hours_of_existing_runs(database_url):
    ledger = Ledger(database_url)
    with at_revision(ledger, "0003") as conn:
        conn.execute(sa.text(
            f"INSERT INTO {RUNS_TABLE} (user_name, server_name, profile, workspace_kind, gpus, started, stopped, state) VALUES "
            "('ann', '', 'gpu', 'container', 2, '2026-05-31 22:00:00', '2026-06-01 01:00:00', 'closed'), "
            "('ann', 'vm', 'vm', 'vm', 1, '2026-06-10 10:00:00', NULL, 'open')"
        ))
    try:
        assert ledger.upgrade() == head_revision() >= "0004"
        runs = sorted(ledger.runs_of("ann", JUNE), key=lambda run: run.id)
        assert [(r.gpu_resource, r.gpu_product, r.weight, r.state) for r in runs] == [
            (GPU, "", 1.0, CLOSED), (GPU, "", 1.0, OPEN)
        ]
        may = policy.month_bounds(datetime(2026, 5, 15, tzinfo=UTC), "UTC")
        assert ledger.usage("ann", may, NOW).card_hours == 4.0  # 2 GPUs × 2 h, as before the migration
        assert ledger.usage("ann", JUNE, NOW).card_hours == 2.0 + 2.0  # 2 × 1 h, and the open VM's 2 h
        assert ledger.price_run(runs[1].id, A100, 1.0)  # an old open run is placed like any other
    finally:
        ledger.dispose()


def test_a_run_is_reserved_at_its_provisional_price_and_priced_once(ledger):
    run_id = open_run(ledger, gpus=2, weight=1.0)  # no product named: the most a GPU may cost
    run = ledger.get(run_id)
    assert (run.gpu_resource, run.gpu_product, run.weight, run.gpus) == (GPU, "", 1.0, 2)
    assert ledger.price_run(run_id, V100, 0.5)
    assert not ledger.price_run(run_id, A100, 1.0)  # once: a second placement (a restart) changes nothing
    assert (ledger.get(run_id).gpu_product, ledger.get(run_id).weight) == (V100, 0.5)
    assert ledger.usage("ann", JUNE, NOW + timedelta(hours=3)).card_hours == 3.0  # 2 × 0.5 × 3 h, from its start
    ledger.close_run(run_id, NOW + timedelta(hours=4))
    named = open_run(ledger, server="named", product=A100, weight=1.0)  # a profile naming its product: priced already
    assert not ledger.price_run(named, V100, 0.5) and ledger.get(named).weight == 1.0
    closed = open_run(ledger, server="gone")
    ledger.close_run(closed, NOW + timedelta(hours=1))
    assert not ledger.price_run(closed, V100, 0.5)  # only while it is open
    with pytest.raises(ValueError):
        ledger.price_run(named, A100, -1)


@pytest.fixture
async def service(tmp_path):
    config = Config()
    config.WorkspaceQuota.max_concurrent = 5
    service = QuotaService(WorkspaceQuota(config=config), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"),
                           economy=GPUEconomy(card_hour_weights=WEIGHTS))
    yield service
    await service.close()


async def test_placed_prices_the_run_this_hub_opened_at_its_nodes_product(service, monkeypatch):
    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    request = Request(gpus=2, server_name="train", gpu_resource=GPU, gpu_weight=service.economy.highest_weight(GPU))
    reservation = await service.reserve(user="ann", groups=(), request=request)
    run_id = await service.running(reservation)
    assert await service.placed("ann", "train", None) is None  # node's type unknown: stays provisional, still pending
    assert await service.placed("ann", "train", V100) == 0.5
    assert (service.ledger.get(run_id).gpu_product, service.ledger.get(run_id).weight) == (V100, 0.5)
    assert await service.placed("ann", "train", A100) is None  # priced once
    # a restarted hub: a new service on the same ledger did not open the run, so it never reprices it
    again = QuotaService(service.settings, ledger=Ledger(str(service.ledger.engine.url)), economy=service.economy)
    try:
        assert await again.placed("ann", "train", A100) is None
        assert again.ledger.get(run_id).weight == 0.5
    finally:
        again.ledger.dispose()
    # a MIG slice is priced by its resource's weight, whatever card it is cut from
    mig = await service.reserve(user="ann", groups=(), request=Request(gpus=3, server_name="mig", gpu_resource=MIG,
                                                                        gpu_weight=service.economy.highest_weight(MIG)))
    mig_id = await service.running(mig)
    assert await service.placed("ann", "mig", A100) == 0.15
    assert service.ledger.get(mig_id).gpu_product == A100


def test_usage_rows_show_weighted_card_hours_and_raw_gpu_hours_by_type(ledger):
    settings = WorkspaceQuota()
    a100 = open_run(ledger, "ann", "a", gpus=1, at=NOW - timedelta(hours=3, minutes=30))
    ledger.price_run(a100, A100, 1.0)
    mig = open_run(ledger, "ann", "m", gpus=2, resource=MIG, weight=0.15, at=NOW - timedelta(hours=1))
    ledger.price_run(mig, A100, 0.15)
    v100 = open_run(ledger, "bob", "", gpus=4, at=NOW - timedelta(hours=2))
    ledger.price_run(v100, V100, 0.5)
    ledger.close_run(v100, NOW)
    rows = {row["user"]: row for row in usage_rows(settings, ledger, {}, JUNE, NOW)}
    ann, bob = rows["ann"], rows["bob"]
    assert (ann["card_hours_used"], ann["gpu_hours"], ann["running_gpus"]) == (3.8, 5.5, 3)  # 3.5 + 2 × 0.15
    assert ann["gpu_hours_by_type"] == f"{GPU} {A100} 3.5; {MIG} {A100} 2"
    assert (bob["card_hours_used"], bob["gpu_hours"], bob["gpu_hours_by_type"]) == (4.0, 8.0, f"{GPU} {V100} 8")
    assert list(ann) == list(COLUMNS)
    assert COLUMNS[:8] == ("user", "groups", "card_hours_used", "card_hours_limit", "card_hours_left", "running",
                           "running_gpus", "workspaces")  # the dashboard's report reads these, in this order
    assert COLUMNS[8:] == ("gpu_hours", "gpu_hours_by_type")
    assert gpu_hours_by_type({(GPU, ""): 1.234}) == f"{GPU} (unknown) 1.23"


def test_the_usage_command_prints_the_new_columns_last(tmp_path, monkeypatch, capsys):
    from workspacespawner.cli import main as workspacespawner

    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    run_id = open_run(ledger, "ann", "", gpus=2, at=NOW - timedelta(hours=1))
    ledger.price_run(run_id, V100, 0.5)
    ledger.dispose()
    (tmp_path / "jupyterhub_config.py").write_text(f'c.WorkspaceQuota.ledger_url = "sqlite:///{tmp_path / "ledger.sqlite"}"\n')
    assert workspacespawner(["usage", "--csv", "-f", str(tmp_path / "jupyterhub_config.py")]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["card_hours_used"], row["gpu_hours"], row["gpu_hours_by_type"]) == ("1.0", "2.0", f"{GPU} {V100} 2")
    assert workspacespawner(["usage", "-f", str(tmp_path / "jupyterhub_config.py")]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header[-2:] == ["gpu_hours", "gpu_hours_by_type"]


async def test_the_gauges_show_unit_hours_and_running_units_by_resource_and_product(service, monkeypatch):
    monkeypatch.setattr(policy, "utcnow", lambda: NOW)
    for server, gpus, resource, product in (("a", 1, GPU, A100), ("v", 2, GPU, V100), ("m", 3, MIG, A100)):
        reservation = await service.reserve(user="ann", groups=(), request=Request(
            gpus=gpus, server_name=server, gpu_resource=resource, gpu_weight=service.economy.highest_weight(resource)))
        await service.running(reservation)
        service.start_done("ann", server)
        await service.placed("ann", server, product)
    monkeypatch.setattr(policy, "utcnow", lambda: NOW + timedelta(hours=2))
    await Enforcer(service).tick()

    def sample(name, resource, product):
        return REGISTRY.get_sample_value(name, {"resource": resource, "product": product})

    assert sample("workspacespawner_gpu_hours", GPU, A100) == 2.0
    assert sample("workspacespawner_gpu_hours", GPU, V100) == 4.0
    assert sample("workspacespawner_gpu_hours", MIG, A100) == 6.0
    assert sample("workspacespawner_running_gpu_units", GPU, V100) == 2
    assert sample("workspacespawner_running_gpu_units", MIG, A100) == 3
    assert REGISTRY.get_sample_value("workspacespawner_running_gpus") == 6
    weighted = 2 * 1.0 + 4 * 0.5 + 6 * 0.15
    assert REGISTRY.get_sample_value("workspacespawner_card_hours_used", {"user": "ann"}) == pytest.approx(weighted)
