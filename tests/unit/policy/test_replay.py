"""The Philly enrichment rule, the shipped scenarios, the metrics, and short replays."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from rota.config import load_config
from rota.contracts.common import Tier
from rota_policy import Decisions, PendingQueue, PolicyConfig, Snapshot, policy_config_from
from rota_policy.nominate.fairshare import accrue, decay, fairshare_factors, usage_share_gap, water_fill
from rota_replay.metrics import METRIC_KEYS
from rota_replay.replay import find_scenario, nodes_from, replay_run
from rota_replay.simulator import Simulator
from rota_replay.workload import load_philly, scenario_quotas

ROOT = Path(__file__).resolve().parents[3]
TRACE_NAME = Path("data") / "philly" / "philly-2017-09-10.csv"


def _find_trace() -> Path:
    """The full trace lives beside the repository (`../shared`), not in it: ROTA_PHILLY_TRACE,
    else the sibling of this checkout, else this workplace's shared folder."""
    candidates = [Path(os.environ["ROTA_PHILLY_TRACE"])] if "ROTA_PHILLY_TRACE" in os.environ else []
    candidates += [ROOT.parent / "shared" / TRACE_NAME, Path("/work/shared") / TRACE_NAME]
    return next((c for c in candidates if c.exists()), candidates[0])


TRACE = _find_trace()
HEAD = ROOT / "tests" / "data" / "philly-head-800.csv"
"""The trace's first 800 jobs, checked in, so the replay test never depends on the full file."""
README_QUOTAS = {
    768: {"ee9e8c": 160, "7f04ca": 160, "b436b2": 112, "0e4a51": 72, "6214e9": 72, "6c71a0": 64,
          "2869ce": 48, "103959": 16, "11cb48": 8, "ed69ec": 8, "e13805": 8, "23dbec": 0},
    512: {"ee9e8c": 104, "7f04ca": 104, "b436b2": 72, "0e4a51": 48, "6214e9": 48, "6c71a0": 40,
          "2869ce": 32, "103959": 8, "11cb48": 8, "ed69ec": 8, "e13805": 8, "23dbec": 0},
}  # fmt: skip
SMALL_CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-09-04 10:00:00,100.0,1,100.0,aa
2017-09-04 10:00:00,0.0,1,0.0,aa
2017-09-04 09:59:00,3601.0,12,43212.0,bb
2017-09-04 10:00:30,50.0,0,0.0,bb
2017-09-04 10:01:00,10.0,24,240.0,aa
2017-09-04 10:02:00,10.0,2,20.0,aa
2017-09-04 10:03:00,10.0,2,20.0,aa
2017-09-04 10:04:00,10.0,2,20.0,aa
2017-09-04 10:05:00,10.0,2,20.0,aa
2017-09-04 10:06:00,10.0,2,20.0,aa
2017-09-04 10:07:00,10.0,2,20.0,aa
"""


def test_enrichment_rule_is_applied_exactly(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(SMALL_CSV)
    jobs = load_philly(path)
    assert len(jobs) == 9  # two dropped: duration 0 and 0 GPUs
    first = jobs[0]  # sorted by timestamp: the 09:59 row comes first
    assert (first.k, first.team, first.user, first.submit) == (0, "bb", "bb", 0.0)
    assert (first.workers, first.gpus_per_worker, first.gpus) == (2, 6, 12)
    assert first.tier is Tier.production and first.resumable
    assert first.declared_runtime_s == 10_800.0  # 2 x 3601 s = 7202 s, rounded up to 3 h
    assert jobs[1].submit == 60.0 and jobs[1].tier is Tier.training
    assert (jobs[2].workers, jobs[2].gpus_per_worker) == (3, 8)
    assert [j.tier for j in jobs[7:9]] == [Tier.experiment, Tier.experiment]
    assert not jobs[4].resumable and jobs[5].resumable  # k % 5 == 4


@pytest.mark.skipif(not TRACE.exists(), reason="Philly trace not available")
@pytest.mark.parametrize("capacity", [768, 512])
def test_scenarios_match_the_readme(capacity: int) -> None:
    jobs = load_philly(TRACE)
    assert len(jobs) == 52_849
    assert scenario_quotas(jobs, capacity) == README_QUOTAS[capacity]
    config = load_config(find_scenario(f"philly-{capacity}"))
    assert config.capacity() == {"gpu": capacity}
    assert {n: t.quota.get("gpu", 0) for n, t in config.teams.items()} == README_QUOTAS[capacity]
    racks = {n.rack for n in config.expanded_nodes()}
    assert len(racks) == capacity // 64


def test_philly_1152_is_philly_768_with_half_again_every_quota() -> None:
    config = load_config(find_scenario("philly-1152"))
    assert config.capacity() == {"gpu": 1152}
    assert len({n.rack for n in config.expanded_nodes()}) == 18
    expected = {team: quota * 3 // 2 // 8 * 8 for team, quota in README_QUOTAS[768].items()}
    assert {n: t.quota.get("gpu", 0) for n, t in config.teams.items()} == expected


def test_long_term_fairness_is_the_gap_between_usage_and_entitlement_shares() -> None:
    # aa is entitled to half as much as bb yet used three times as much over the long run.
    assert usage_share_gap({"aa": 3000.0, "bb": 1000.0}, {"aa": 8, "bb": 16}) == pytest.approx(
        (abs(0.75 - 1 / 3) + abs(0.25 - 2 / 3)) / 2)
    assert usage_share_gap({"aa": 1000.0, "bb": 2000.0}, {"aa": 8, "bb": 16}) == pytest.approx(0.0)
    assert usage_share_gap({"aa": 1000.0}, {"aa": 8}) is None  # one team waiting: nothing to compare
    assert usage_share_gap({"aa": 0.0, "bb": 0.0}, {"aa": 8, "bb": 8}) is None


@pytest.mark.parametrize("policy", ["rota", "fifo", "kueue", "slurm"])
def test_short_replay_reports_exactly_the_metric_keys(policy: str) -> None:
    jobs = load_philly(HEAD)
    config = load_config(find_scenario("philly-512"))
    run = replay_run(jobs, config, policy)
    assert tuple(run.result) == METRIC_KEYS
    assert run.result["completed"] == run.result["jobs"] == 800
    assert set(run.result["p95_wait_s_by_tier"]) == {"production", "training", "experiment"}
    assert 0.0 <= run.result["utilization"] <= 1.0
    assert 0.0 <= run.result["goodput"] <= run.result["utilization"]
    assert run.result["eta_waited_p50_rel_error"] <= run.result["eta_waited_p90_rel_error"]
    assert 0.0 <= run.result["eta_waited_within_25pct"] <= 1.0
    if policy == "fifo":
        assert run.result["preemptions"] == 0


def test_what_the_simulator_keeps_between_cycles_matches_its_snapshot() -> None:
    """The simulator keeps GPUs in use per team as runs start and stop, and each queue's
    smallest request, shortest runtime and prefix sums as jobs come and go, instead of letting
    each cycle count them again: every cycle, they must match the runs and jobs, and the cycle
    must decide exactly as with its own count."""
    jobs = load_philly(HEAD)
    config = load_config(find_scenario("philly-512"))
    sim = Simulator(jobs, nodes_from(config), policy_config_from(config), "rota")
    policy = sim.policy
    cycles = 0

    def checked(snapshot: Snapshot, now: float, pcfg: PolicyConfig) -> Decisions:
        nonlocal cycles
        cycles += 1
        counted: Counter[tuple[str, str]] = Counter()
        for run in snapshot.running:
            counted[(run.team, run.flavor)] += run.gpus
        assert snapshot.in_use == dict(counted)
        for queue in snapshot.pending:
            fresh = PendingQueue(queue.tier, queue.team, queue.flavor, queue.jobs)
            assert (queue.min_gpus, queue.min_runtime_s) == (fresh.min_gpus, fresh.min_runtime_s)
            everything = (0, len(queue.jobs))
            assert queue.sums().between(*everything) == fresh.sums().between(*everything)
        decisions = policy(snapshot, now, pcfg)
        assert decisions == policy(replace(snapshot, in_use=None), now, pcfg)
        return decisions

    sim.policy = checked
    sim.run()
    assert cycles > 100 and sum(1 for j in sim.jobs if j.finish is not None) == 800


def test_water_fill_is_weighted_max_min() -> None:
    fair = water_fill(100, {"a": 10, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 3})
    assert fair["a"] == 10
    assert fair["b"] == pytest.approx(22.5) and fair["c"] == pytest.approx(67.5)
    assert water_fill(10, {"a": 0, "b": 4}, {"a": 1, "b": 1}) == {"a": 0.0, "b": 4.0}


def test_decayed_usage_and_classic_fair_share() -> None:
    week = 7 * 86_400.0
    assert decay(100.0, week, week) == pytest.approx(50.0)
    # Accrual does not depend on how often it is updated.
    once = accrue(0.0, 8, 1000.0, week)
    twice = accrue(accrue(0.0, 8, 500.0, week), 8, 500.0, week)
    assert once == pytest.approx(twice)
    factors = fairshare_factors({"a": 50.0, "b": 50.0}, {"a": 1.0, "b": 1.0})
    assert factors["a"] == pytest.approx(0.5)
    assert fairshare_factors({}, {"a": 1.0}) == {"a": 1.0}
