"""GPU-hour budgets as scenario rows (the data-row style of `test_policy_scenarios`), and the
multi-round rows a replay tells: a budget running out mid-run, and idle_only work preempted.

NOW (10,000 s after the epoch) lies in January 1970, so a monthly budget resets at
1970-02-01T00:00Z and a daily one at 1970-01-02T00:00Z.
"""

from __future__ import annotations

import pytest
from rota.budget import Period
from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import BudgetLimit, Decisions, PolicyConfig
from rota_policy.model.snapshot import NodeState
from rota_replay.metrics import metrics
from rota_replay.simulator import Simulator
from rota_replay.workload import TraceJob

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, explanation, run_row

MONTH_END = 31 * 86_400.0
WAIT = {"nlp": BudgetLimit(10.0)}
IDLE = {"nlp": BudgetLimit(10.0, idle_only=True)}


def _details_of_the_budget(d: Decisions) -> None:
    reason = explanation(d, "nlp-trai-1x8").reasons[0]
    assert reason.detail("used_gpu_hours") == 12.0
    assert reason.detail("budget_gpu_hours") == 10.0
    assert reason.detail("resets_at") == MONTH_END


def _says_it_runs_on_idle_gpus_only(d: Decisions) -> None:
    codes = [r.code for r in explanation(d, "nlp-prod-1x8").reasons]
    assert Code.BUDGET_EXHAUSTED in codes[1:], codes


ROWS = [
    Row("wait: a team at its budget waits with BUDGET_EXHAUSTED on an idle cluster; the ETA is the reset",
        cluster(2, budget_used={"nlp": 10.0}), gpu_jobs("nlp"), team_config({"nlp": 8}, budgets=WAIT),
        admits=(), reasons={"nlp-trai-1x8": (Code.BUDGET_EXHAUSTED,)}, etas={"nlp-trai-1x8": MONTH_END},
        says={"nlp-trai-1x8": "team nlp has used 10 of 10 gpu GPU-hours this month; its jobs wait until"
                              " the budget resets at 1970-02-01T00:00Z"}),
    Row("wait: the reason gives used, budget and reset as details", cluster(2, budget_used={"nlp": 12.0}),
        gpu_jobs("nlp"), team_config({"nlp": 8}, budgets=WAIT), check=_details_of_the_budget),
    Row("below its budget a team starts as it would without one", cluster(2, budget_used={"nlp": 9.99}),
        gpu_jobs("nlp"), team_config({"nlp": 8}, budgets=WAIT), admits=("nlp-trai-1x8",)),
    Row("a team's budget holds only that team: another team's job takes the GPUs",
        cluster(1, budget_used={"nlp": 10.0}), gpu_jobs("nlp") + gpu_jobs("cv", submitted=5),
        team_config({"nlp": 8, "cv": 0}, budgets=WAIT), admits=("cv-trai-1x8",),
        reasons={"nlp-trai-1x8": (Code.BUDGET_EXHAUSTED,)}),
    Row("a budget is per flavor: a budget on a100 does not hold gpu jobs", cluster(1),
        gpu_jobs("nlp"), team_config({"nlp": 8}).with_overrides(budgets={("nlp", "a100"): BudgetLimit(1.0)}),
        admits=("nlp-trai-1x8",)),
    Row("wait: a job at its budget does not preempt, even production over experiment",
        cluster(1, Run("cv", "experiment"), budget_used={"nlp": 10.0}), gpu_jobs("nlp", "production"),
        team_config({"nlp": 8}, budgets=WAIT), victims=(), reasons={"nlp-prod-1x8": (Code.BUDGET_EXHAUSTED,)}),
    Row("wait: the team's running work is not stopped at the budget, nor open to others",
        cluster(1, Run("nlp", "training", run_id="nlp-run"), budget_used={"nlp": 50.0}),
        gpu_jobs("cv", "training"), team_config({"nlp": 8, "cv": 8}, budgets=WAIT), victims=()),
    Row("wait: a held job does not hold the line without backfill",
        cluster(1, budget_used={"nlp": 10.0}), gpu_jobs("nlp") + gpu_jobs("cv", submitted=5),
        team_config({"nlp": 8, "cv": 0}, budgets=WAIT, backfill=False), admits=("cv-trai-1x8",)),
    Row("idle_only: at its budget a team still starts on idle GPUs", cluster(1, budget_used={"nlp": 10.0}),
        gpu_jobs("nlp"), team_config({"nlp": 8}, budgets=IDLE), admits=("nlp-trai-1x8",)),
    Row("idle_only: at its budget a job stops nobody; its reasons say the budget keeps it to idle GPUs",
        cluster(1, Run("cv", "experiment"), budget_used={"nlp": 10.0}), gpu_jobs("nlp", "production"),
        team_config({"nlp": 8}, budgets=IDLE), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY,)}, check=_says_it_runs_on_idle_gpus_only),
    Row("idle_only: an in-quota job of another team preempts the team's work, same tier and in quota",
        cluster(1, Run("nlp", "training", run_id="over"), budget_used={"nlp": 10.0}),
        gpu_jobs("cv", "training", submitted=NOW - 7200), team_config({"nlp": 8, "cv": 8}, budgets=IDLE),
        victims=("over",)),
    Row("idle_only: even the lowest tier may preempt a team past its budget",
        cluster(1, Run("nlp", "production", run_id="over"), budget_used={"nlp": 10.0}),
        gpu_jobs("cv", "experiment", submitted=NOW - 86_400), team_config({"nlp": 8, "cv": 8}, budgets=IDLE),
        victims=("over",)),
    Row("idle_only below its budget: the same run is guarded as any in-quota work",
        cluster(1, Run("nlp", "training", run_id="over"), budget_used={"nlp": 9.0}),
        gpu_jobs("cv", "training", submitted=NOW - 7200), team_config({"nlp": 8, "cv": 8}, budgets=IDLE),
        victims=()),
    Row("control: a blocked head holds a reservation that a long job behind it may not delay",
        cluster(2, Run("cv", "training", node=0, end=NOW + 1000)),
        gpu_jobs("nlp", workers=2, name="head") + gpu_jobs("cv", runtime=5000.0, name="long", submitted=5),
        team_config({"nlp": 16, "cv": 16}, budgets=IDLE), admits=(),
        reasons={"long": (Code.RESERVED_FOR_HIGHER_PRIORITY,)}),
    Row("idle_only: past its budget a blocked head holds no reservation; the job behind it starts",
        cluster(2, Run("cv", "training", node=0, end=NOW + 1000), budget_used={"nlp": 10.0}),
        gpu_jobs("nlp", workers=2, name="head") + gpu_jobs("cv", runtime=5000.0, name="long", submitted=5),
        team_config({"nlp": 16, "cv": 16}, budgets=IDLE), admits=("long",)),
    Row("idle_only: the minimum runtime still protects a run that just started",
        cluster(1, Run("nlp", "training", started=NOW - 10), budget_used={"nlp": 10.0}),
        gpu_jobs("cv", "training", submitted=NOW - 7200), team_config({"nlp": 8, "cv": 8}, budgets=IDLE),
        victims=()),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_budget_scenario(row: Row) -> None:
    run_row(row)


# ---------------------------------------------------------------- replays of a few jobs

HOUR = 3600.0


def _job(k: int, job_id: str, team: str, submit: float, duration: float, tier: Tier = Tier.training) -> TraceJob:
    return TraceJob(k, job_id, submit, duration, 8, team, team, tier, 1, 8, True, duration)


def _nodes(n: int) -> tuple[NodeState, ...]:
    return tuple(NodeState(f"n{i}", "gpu", "r0", 8, tuple(range(8))) for i in range(n))


def _replay(trace: list[TraceJob], nodes: int, config: PolicyConfig) -> Simulator:
    sim = Simulator(trace, _nodes(nodes), config, "rota")
    sim.run()
    return sim


def test_a_budget_running_out_mid_run() -> None:
    """16 GPU-hours a day: the first run uses them up after 2 h and runs on to its end at 3 h;
    the next job, submitted at 2.5 h, waits for the reset at midnight and starts then."""
    config = team_config({"nlp": 8}, budgets={"nlp": BudgetLimit(16.0, Period.day)})
    trace = [_job(0, "first", "nlp", 0.0, 3 * HOUR), _job(1, "next", "nlp", 2.5 * HOUR, HOUR)]
    sim = _replay(trace, 2, config)
    first, nxt = sim.by_id["first"], sim.by_id["next"]
    assert first.preemptions == 0 and first.finish == 3 * HOUR
    assert nxt.first_reason == Code.BUDGET_EXHAUSTED.value
    assert nxt.first_start == 86_400.0
    assert sim.etas.at_submit["next"] == 86_400.0
    result = metrics(sim, 0.0)
    assert result["budget_held_jobs"] == 1
    # The first run went on past the budget: 24 of 16 GPU-hours on the first day.
    assert result["budget_peak_gpu_hours"]["nlp/gpu 1970-01-01"] == 24.0


def test_a_job_submitted_before_the_budget_ran_out_is_held_too() -> None:
    """The second job waits behind a full cluster, then the budget runs out before GPUs free."""
    config = team_config({"nlp": 8}, budgets={"nlp": BudgetLimit(8.0, Period.day)})
    trace = [_job(0, "first", "nlp", 0.0, 2 * HOUR), _job(1, "next", "nlp", 60.0, HOUR)]
    sim = _replay(trace, 1, config)
    assert sim.by_id["next"].first_start == 86_400.0
    assert metrics(sim, 0.0)["budget_held_jobs"] == 1


def test_idle_only_admitted_on_idle_gpus_then_preempted_by_an_in_quota_job() -> None:
    """nlp is past its budget at 1 h; its second job still starts on the idle node, and cv's
    in-quota job, arriving later, stops it (it is resumable: it resumes after cv's run)."""
    config = team_config({"nlp": 8, "cv": 8}, budgets={"nlp": BudgetLimit(8.0, Period.day, idle_only=True)})
    trace = [
        _job(0, "used-up", "nlp", 0.0, HOUR),
        _job(1, "idle", "nlp", 1.5 * HOUR, 10 * HOUR),
        _job(2, "owner", "cv", 2 * HOUR, HOUR),
    ]
    sim = _replay(trace, 1, config)
    idle, owner = sim.by_id["idle"], sim.by_id["owner"]
    assert idle.first_start == 1.5 * HOUR
    assert idle.preemptions == 1
    assert owner.first_start is not None and idle.finish is not None
    assert owner.first_start < idle.finish
    assert owner.first_start - owner.t.submit <= config.min_runtime_s + 2 * config.checkpoint_save_s + 300


def test_without_the_budget_the_same_in_quota_job_waits() -> None:
    """The control of the row above: nlp's run is in its quota, so cv waits for its end."""
    config = team_config({"nlp": 8, "cv": 8})
    trace = [
        _job(0, "used-up", "nlp", 0.0, HOUR),
        _job(1, "idle", "nlp", 1.5 * HOUR, 10 * HOUR),
        _job(2, "owner", "cv", 2 * HOUR, HOUR),
    ]
    sim = _replay(trace, 1, config)
    assert sim.by_id["idle"].preemptions == 0
    assert sim.by_id["owner"].first_start == 11.5 * HOUR
