"""GPU-hour budgets outside the policy: calendar periods, the meter, the config, the
scheduler's view and report, and the notifier's 80% warning."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from rota import metrics
from rota.budget import BudgetMeter, Period, period_bounds, period_label
from rota.config import ConfigError, parse_config
from rota.config.loader import example_text
from rota.contracts import envelope
from rota.contracts import messages as m
from rota_notifier.domain import Kind, budget_notices
from rota_notifier.render import Renderer
from rota_notifier.routing import Channel, route
from rota_policy import BudgetLimit, policy_config_from, schedule
from rota_scheduler import metrics as scheduler_metrics
from rota_scheduler.budgets import REPORT_EVERY_S, BudgetReporter, budget_uses
from rota_scheduler.snapshot import policy_snapshot

from tests.unit.scheduler_service.test_view_and_actions import Story, of

HOUR = 3600.0


def _t(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("period", "at", "start", "end", "label"),
    [
        (Period.day, _t(2026, 12, 31, 23, 59), _t(2026, 12, 31), _t(2027, 1, 1), "2026-12-31"),
        (Period.week, _t(2026, 12, 2, 16), _t(2026, 11, 30), _t(2026, 12, 7), "2026-W49"),  # Monday
        (Period.month, _t(2026, 12, 2), _t(2026, 12, 1), _t(2027, 1, 1), "2026-12"),
        (Period.month, _t(2027, 2, 28, 23), _t(2027, 2, 1), _t(2027, 3, 1), "2027-02"),
        (Period.quarter, _t(2026, 11, 15), _t(2026, 10, 1), _t(2027, 1, 1), "2026-Q4"),
        (Period.year, _t(2026, 6, 1), _t(2026, 1, 1), _t(2027, 1, 1), "2026"),
    ],
)
def test_periods_are_utc_calendar_periods(period: Period, at: float, start: float, end: float, label: str) -> None:
    assert period_bounds(period, at) == (start, end)
    assert period_bounds(period, start) == (start, end)  # the start belongs to its period
    assert period_label(period, at) == label


def test_the_meter_counts_only_the_part_of_a_run_within_the_period() -> None:
    day = _t(2026, 12, 2)
    meter = BudgetMeter({("nlp", "a100"): Period.day})
    meter.started("r1", "nlp", "a100", 8, day - 2 * HOUR)  # began yesterday
    meter.started("other", "cv", "a100", 8, day)  # no budget: not metered
    assert meter.used(day + HOUR) == {("nlp", "a100"): 8 * HOUR}
    meter.stopped("r1", day + 3 * HOUR)
    meter.started("r2", "nlp", "a100", 2, day + 4 * HOUR)
    assert meter.used(day + 5 * HOUR)[("nlp", "a100")] == 8 * 3 * HOUR + 2 * HOUR
    # Past midnight, the new day counts only what r2 holds since.
    assert meter.used(day + 25 * HOUR)[("nlp", "a100")] == 2 * HOUR
    meter.stopped("r2", day + 26 * HOUR)
    assert meter.used(day + 30 * HOUR)[("nlp", "a100")] == 2 * 2 * HOUR


def _doc(budget: Any) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(example_text()))
    doc["teams"]["nlp"]["budgets"] = budget
    return doc


def _issues(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return [str(issue) for issue in info.value.issues]


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ({"tpu": {"gpu_hours": 10}}, "teams.nlp.budgets.tpu: unknown flavor"),
        ({"a100": {"gpu_hours": 0}}, "teams.nlp.budgets.a100.gpu_hours: must be > 0"),
        ({"a100": {}}, "teams.nlp.budgets.a100.gpu_hours: is required"),
        ({"a100": {"gpu_hours": 10, "period": "fortnight"}}, "teams.nlp.budgets.a100.period: must be one of"),
        ({"a100": {"gpu_hours": 10, "when_exhausted": "stop"}},
         "teams.nlp.budgets.a100.when_exhausted: must be one of 'wait' or 'idle_only'"),
    ],
)
def test_budget_errors_name_the_field(budget: Any, expected: str) -> None:
    issues = _issues(_doc(budget))
    assert any(expected in issue for issue in issues), issues


def test_a_budget_reaches_the_policy_config() -> None:
    config = parse_config(_doc({"a100": {"gpu_hours": 5000, "period": "month", "when_exhausted": "idle_only"}}))
    assert policy_config_from(config).budgets == {("nlp", "a100"): BudgetLimit(5000.0, Period.month, True)}
    assert policy_config_from(parse_config(_doc({}))).budgets == {}


# ---------------------------------------------------------------- the scheduler


BUDGETED = parse_config(_doc({"h100": {"gpu_hours": 10, "period": "month"}}))


def _running_story(gpus: int) -> tuple[Story, str]:
    story = Story()
    story.view = type(story.view)(BUDGETED)
    job = story.submit(team="nlp", flavor="h100", gpus_per_worker=gpus, queue="training")
    (proposal,) = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(proposal)
    return story, job


def test_the_view_meters_use_and_the_policy_holds_the_team_at_its_budget() -> None:
    story, _ = _running_story(8)
    story.now += HOUR
    assert policy_snapshot(story.view, story.now).budget_used == {("nlp", "h100"): 8 * HOUR}
    story.now += 15 * 60  # 10 GPU-hours: the budget is spent
    waiting = story.submit(team="nlp", flavor="h100", gpus_per_worker=1, queue="training")
    decisions = schedule(policy_snapshot(story.view, story.now), story.now, policy_config_from(BUDGETED))
    assert not decisions.admissions
    (explained,) = [e for e in decisions.pending if e.job_id == waiting]
    assert explained.primary is m.WaitReasonCode.BUDGET_EXHAUSTED
    assert "team nlp has used 10 of 10 h100 GPU-hours this month" in explained.reasons[0].message


def test_the_report_goes_out_at_once_on_a_crossing_and_otherwise_every_few_minutes() -> None:
    story, _ = _running_story(8)
    reporter = BudgetReporter()
    first = reporter.report(story.view, story.now)
    assert first is not None and first.budgets[0].used_gpu_hours == 0.0
    assert reporter.report(story.view, story.now + 60) is None
    crossing = reporter.report(story.view, story.now + 0.8 * 10 * HOUR / 8)  # 80% of 10 GPU-hours
    assert crossing is not None and crossing.budgets[0].used_gpu_hours == pytest.approx(8.0)
    later = story.now + 0.8 * 10 * HOUR / 8 + REPORT_EVERY_S
    assert reporter.report(story.view, later) is not None


def test_the_gauges_show_use_against_the_budget_only_where_there_is_one() -> None:
    story, _ = _running_story(8)
    story.now += HOUR
    decisions = schedule(policy_snapshot(story.view, story.now), story.now, policy_config_from(BUDGETED))
    scheduler_metrics.observe_cycle(story.view, decisions, story.now)
    assert metrics.BUDGET_USED_GPU_HOURS.value("nlp", "h100") == 8.0
    assert metrics.BUDGET_GPU_HOURS.value("nlp", "h100") == 10.0
    assert metrics.BUDGET_USED_GPU_HOURS.value("vision", "h100") is None


def test_no_budget_no_report() -> None:
    story = Story()
    assert budget_uses(story.view, story.now) == []
    assert BudgetReporter().report(story.view, story.now) is None


# ---------------------------------------------------------------- the notifier


def _report(used: float, at: datetime) -> m.BudgetUsageRecorded:
    return m.BudgetUsageRecorded(as_of=at, budgets=[m.BudgetUse(
        team="nlp", flavor="h100", period="month", period_start=datetime(2026, 12, 1, tzinfo=UTC),
        resets_at=datetime(2027, 1, 1, tzinfo=UTC), used_gpu_hours=used, budget_gpu_hours=5000.0,
        when_exhausted="wait")])


def test_the_team_is_warned_at_80_percent_under_one_key_per_period() -> None:
    at = datetime(2026, 12, 20, tzinfo=UTC)
    assert budget_notices(envelope(_report(3999.0, at), source="scheduler")) == []
    first = budget_notices(envelope(_report(4000.0, at), source="scheduler"))
    again = budget_notices(envelope(_report(4500.0, at + timedelta(hours=1)), source="scheduler"))
    assert [n.kind for n in first] == [Kind.budget_warning]
    # Another report, another event id: the same key, which the table lets through once.
    assert first[0].dedup_key == again[0].dedup_key == "budget_warning:nlp:h100:2026-12-01T00:00:00+00:00"
    config = parse_config(_doc({"h100": {"gpu_hours": 5000}}))
    deliveries = route(first[0], config, frozenset(Channel))
    assert [(d.recipient, d.address) for d in deliveries] == [("team:nlp", "#nlp-jobs")]


def test_the_warning_says_how_much_is_used_and_when_it_resets() -> None:
    at = datetime(2026, 12, 20, tzinfo=UTC)
    (notice,) = budget_notices(envelope(_report(4000.0, at), source="scheduler"))
    ctx = notice.context | {"kind": "budget_warning", "recipient_kind": "team", "timezone": "UTC"}
    out = Renderer().render("budget_warning", ctx, at)
    assert out.subject == "[Rota] Team nlp has used 80% of its h100 GPU-hour budget this month"
    for body in (out.text, out.html, out.slack):
        assert "4000 of" in body and "5000" in body and "2027-01-01T00:00Z" in body
