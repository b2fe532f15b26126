"""The replay honours a queue's preemption delay: a held job preempts when the delay ends,
even if no other event falls then, and GPUs that free themselves first start it without."""

from __future__ import annotations

from dataclasses import replace

from rota.contracts.common import Tier
from rota_policy import NodeState, PolicyConfig, TeamLimits, TeamPolicy
from rota_replay.metrics import metrics
from rota_replay.simulator import Simulator
from rota_replay.workload import TraceJob

NODE = (NodeState("n0", "gpu", "r0", 8, tuple(range(8))),)


def _job(k: int, tier: Tier, submit: float, duration: float) -> TraceJob:
    return TraceJob(k, f"j{k}", submit, duration, 8, "t", "u", tier, 1, 8, True, duration)


def _config(delay: float) -> PolicyConfig:
    base = PolicyConfig(teams={"t": TeamPolicy("t", 1.0, {"gpu": TeamLimits(8)})})
    tiers = {t: replace(base.tier(t), long_wait_s=60.0) for t in Tier}
    tiers[Tier.production] = replace(tiers[Tier.production], preemption_delay_s=delay)
    return base.with_overrides(tiers=tiers)


def _replay(experiment_runs_s: float, delay: float) -> Simulator:
    trace = [_job(0, Tier.experiment, 0.0, experiment_runs_s), _job(1, Tier.production, 1000.0, 100.0)]
    sim = Simulator(trace, NODE, _config(delay), "rota")
    sim.run()
    return sim


def test_a_held_job_preempts_when_its_delay_ends() -> None:
    sim = _replay(experiment_runs_s=50_000.0, delay=600.0)
    production = sim.by_id["j1"]
    # The delay ends at 1600 with no event there; the victim saves for 60 s, then it starts.
    assert production.first_start == 1660.0
    assert sim.preemptions == 1
    result = metrics(sim, 0.0)
    assert result["preemption_deferred_jobs"] == 1
    assert result["deferred_started_without_preemption"] == 0
    assert result["preemptions_by_victim_tier"] == {"production": 0, "training": 0, "experiment": 1}


def test_without_a_delay_it_preempts_at_once() -> None:
    sim = _replay(experiment_runs_s=50_000.0, delay=0.0)
    assert sim.by_id["j1"].first_start == 1060.0
    assert metrics(sim, 0.0)["preemption_deferred_jobs"] == 0


def test_gpus_that_free_themselves_within_the_delay_start_it_without_preempting() -> None:
    sim = _replay(experiment_runs_s=1300.0, delay=600.0)
    assert sim.by_id["j1"].first_start == 1300.0
    assert sim.preemptions == 0
    result = metrics(sim, 0.0)
    assert result["preemption_deferred_jobs"] == result["deferred_started_without_preemption"] == 1

