"""GPU-hour budgets over random worlds (hypothesis): a team at a `wait` budget is never admitted
nor preempts; a budget not yet reached changes nothing; the shortcuts agree with the reference."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from rota.budget import Period, period_bounds
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import POLICIES, BudgetLimit, PolicyConfig, Snapshot
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import run_cycle

from tests.unit.policy.test_policy_properties import NOW, SETTINGS, TEAMS, worlds

HOURS = 100.0


@st.composite
def budgeted(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig, dict[tuple[str, str], float]]:
    """A random world whose teams each may have a budget of 100 GPU-hours, used or not."""
    snap, config = draw(worlds())
    budgets: dict[tuple[str, str], BudgetLimit] = {}
    used: dict[tuple[str, str], float] = {}
    for team in TEAMS:
        if draw(st.booleans()):
            period = draw(st.sampled_from(tuple(Period)))
            budgets[(team, "gpu")] = BudgetLimit(HOURS, period, idle_only=draw(st.booleans()))
            used[(team, "gpu")] = draw(st.sampled_from((0.0, 50.0, 99.9, 100.0, 250.0))) * 3600.0
    return replace(snap, budget_used=used), replace(config, budgets=budgets), used


def _exhausted(config: PolicyConfig, used: dict[tuple[str, str], float], idle_only: bool) -> set[str]:
    return {
        team for (team, flavor), lim in config.budgets.items()
        if lim.idle_only is idle_only and used.get((team, flavor), 0.0) >= lim.gpu_s
    }  # fmt: skip


@SETTINGS
@given(budgeted(), st.sampled_from(tuple(POLICIES)))
def test_in_wait_mode_no_job_of_a_team_at_its_budget_is_admitted(
    world: tuple[Snapshot, PolicyConfig, dict[tuple[str, str], float]], policy: str
) -> None:
    snap, config, used = world
    d = POLICIES[policy](snap, NOW, config)
    held = _exhausted(config, used, idle_only=False)
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    assert not [a.job_id for a in d.admissions if jobs[a.job_id].team in held and jobs[a.job_id].flavor == "gpu"]
    assert not [p.preemptor_job_id for p in d.plans if jobs[p.preemptor_job_id].team in held]
    for e in d.pending:
        job = jobs[e.job_id]
        if job.team in held and job.flavor == "gpu" and e.primary is Code.BUDGET_EXHAUSTED:
            period = config.budgets[(job.team, "gpu")].period
            assert e.eta is not None and e.eta >= period_bounds(period, NOW)[1]


@SETTINGS
@given(budgeted())
def test_past_an_idle_only_budget_a_job_stops_nobody(
    world: tuple[Snapshot, PolicyConfig, dict[tuple[str, str], float]],
) -> None:
    snap, config, used = world
    d = POLICIES["rota"](snap, NOW, config)
    idle = _exhausted(config, used, idle_only=True)
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    assert not [p.preemptor_job_id for p in d.plans if jobs[p.preemptor_job_id].team in idle]


@SETTINGS
@given(budgeted(), st.sampled_from(tuple(POLICIES)))
def test_a_budget_not_reached_decides_exactly_as_no_budget(
    world: tuple[Snapshot, PolicyConfig, dict[tuple[str, str], float]], policy: str
) -> None:
    snap, config, used = world
    below = {key: lim for key, lim in config.budgets.items() if used.get(key, 0.0) < lim.gpu_s}
    with_budgets = POLICIES[policy](snap, NOW, replace(config, budgets=below))
    without = POLICIES[policy](replace(snap, budget_used=None), NOW, replace(config, budgets={}))
    assert with_budgets == without


@SETTINGS
@given(budgeted())
def test_with_budgets_the_shortcuts_decide_as_the_reference_walk(
    world: tuple[Snapshot, PolicyConfig, dict[tuple[str, str], float]],
) -> None:
    snap, config, _ = world
    fast = run_cycle(snap, NOW, config, ROTA_RULES)
    reference = run_cycle(snap, NOW, config, replace(ROTA_RULES, pass_over=False))
    assert fast == reference
