"""The metric pieces on their own: the catalog, the scheduler's gauges from a view, the
coordinator's count of a completed saga, the executor's outcomes, and `rota up`'s ports."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest
from rota import metrics
from rota.cli.stack import SERVICES, metrics_ports, metrics_url
from rota.contracts import messages as m
from rota.settings import Settings
from rota_executor.metrics import outcome_label
from rota_policy import Decisions, schedule
from rota_preemption.metrics import record_victims
from rota_scheduler import metrics as scheduler_metrics
from rota_scheduler.snapshot import policy_snapshot

from tests.unit.scheduler_service.test_view_and_actions import POLICY, Story, of

RUN = "00000000-0000-7000-8000-000000000001"
JOB = "00000000-0000-7000-8000-000000000002"


def value(name: str, **labels: str) -> float:
    found = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_the_catalog_has_every_metric_of_the_issue_under_its_name() -> None:
    issue = {
        "rota_queue_wait_seconds", "rota_queue_pending_jobs", "rota_running_jobs",
        "rota_job_runtime_seconds", "rota_jobs_finished_total", "rota_preemptions_total",
        "rota_preemption_ack_seconds", "rota_lost_gpu_seconds_total", "rota_gpus_allocated",
        "rota_gpus_capacity", "rota_quota_used_ratio", "rota_team_usage_gpu_seconds",
        "rota_schedule_cycle_seconds", "rota_scheduler_decisions_total",
        "rota_notifications_total", "rota_outbox_lag_seconds",
    }
    protection = {"rota_preemption_deferred_jobs"}
    budgets = {"rota_budget_used_gpu_hours", "rota_budget_gpu_hours"}
    trust_boundary = {"rota_forged_messages_total"}
    elastic = {"rota_grows_total"}
    drains = {"rota_drain_stops_total"}
    assert set(metrics.NAMES) == issue | trust_boundary | protection | budgets | elastic | drains
    owned = [metrics.family_name(f) for fs in metrics.OWNERS.values() for f in fs]
    assert len(owned) == len(set(owned)), "each family has one owner"


def test_registering_twice_is_harmless_and_the_exposition_has_no_created_series() -> None:
    for service in (*SERVICES, *SERVICES):
        metrics.register(service)
    text = generate_latest(metrics.REGISTRY).decode()
    assert "rota_preemptions_total{" in text and "_created" not in text


def test_a_snapshot_gauge_is_replaced_whole() -> None:
    gauge = metrics.SnapshotGauge("test_snapshot", "doc", ("team",))
    gauge.set_all({("a",): 1.0, ("b",): 2.0})
    gauge.set_all({("b",): 3.0})
    samples = [(s.labels, s.value) for f in gauge.collect() for s in f.samples]
    assert samples == [({"team": "b"}, 3.0)]
    with pytest.raises(ValueError, match="expected labels"):
        gauge.set_all({("a", "extra"): 1.0})


def test_the_scheduler_gauges_follow_its_view() -> None:
    story = Story()
    for _ in range(3):
        story.submit(team="nlp", flavor="h100", workers=1, gpus_per_worker=8)
    story.submit(team="nlp", flavor="h100", workers=4, gpus_per_worker=8)  # too big to fit now
    proposals = of(story.cycle(), m.AllocationProposed)
    for proposal in proposals:
        story.grant_and_start(proposal)
    decisions = schedule(policy_snapshot(story.view, story.now), story.now, POLICY)
    scheduler_metrics.observe_cycle(story.view, decisions, story.now)

    assert metrics.RUNNING_JOBS.value() == len(proposals) == 3
    assert metrics.GPUS_ALLOCATED.value("nlp", "h100") == 24
    assert metrics.GPUS_ALLOCATED.value("vision", "a100") == 0  # every configured pair
    assert metrics.GPUS_CAPACITY.value("h100") == 32
    assert metrics.QUOTA_USED_RATIO.value("nlp", "h100") == 24 / 16
    assert metrics.QUOTA_USED_RATIO.value("research", "a100") is None  # no quota: no ratio
    assert len(decisions.pending) == 1
    reason = decisions.pending[0].primary.value
    assert metrics.QUEUE_PENDING.value("training", "nlp", reason) == 1
    assert metrics.TEAM_USAGE.value("vision") == 0


def test_jobs_held_by_their_queues_preemption_delay_are_counted_by_queue() -> None:
    story = Story()
    job_id = story.submit(team="nlp", flavor="h100")
    deferred = Decisions(deferred=((job_id, story.now + 600.0),))
    scheduler_metrics.observe_cycle(story.view, deferred, story.now)
    assert metrics.PREEMPTION_DEFERRED.value("training") == 1
    assert metrics.PREEMPTION_DEFERRED.value("production") == 0
    scheduler_metrics.observe_cycle(story.view, Decisions(), story.now)
    assert metrics.PREEMPTION_DEFERRED.value("training") == 0


def test_a_requeued_job_waits_from_its_preemption_not_its_submit() -> None:
    story = Story()
    job_id = story.submit(team="nlp", flavor="h100")
    job = story.view.jobs[job_id]
    before = value("rota_queue_wait_seconds_count", queue="training", team="nlp", flavor="h100")
    scheduler_metrics.job_started(job, story.now + 30)
    job.requeued_at = story.now + 1000
    scheduler_metrics.job_started(job, story.now + 1010)
    count = value("rota_queue_wait_seconds_count", queue="training", team="nlp", flavor="h100")
    assert count == before + 2
    assert value("rota_queue_wait_seconds_bucket", queue="training", team="nlp", flavor="h100",
                 le="15.0") >= 1  # the 10 s wait after the requeue, not 1010 s


def victim(outcome: str, *, team: str = "vision", queue: str = "training", lost: float = 0.0,
           ack_s: float | None = None) -> dict[str, Any]:
    noticed = datetime(2026, 1, 1, tzinfo=UTC)
    return {"outcome": outcome, "team": team, "queue": queue, "lost_gpu_seconds": lost,
            "noticed_at": noticed,
            "acked_at": None if ack_s is None else noticed + timedelta(seconds=ack_s)}


def test_a_completed_saga_counts_each_victim_once_by_tier_and_outcome() -> None:
    acked = value("rota_preemptions_total", tier="training", outcome="acked")
    forced = value("rota_preemptions_total", tier="experiment", outcome="forced")
    finished = value("rota_preemptions_total", tier="training", outcome="finished")
    lost = value("rota_lost_gpu_seconds_total", team="research")
    acks = value("rota_preemption_ack_seconds_count")
    record_victims([
        victim("acked", ack_s=4.0, lost=80.0),
        victim("forced", team="research", queue="experiment", lost=800.0),
        victim("finished"),  # ended by itself: not a preemption
    ])
    assert value("rota_preemptions_total", tier="training", outcome="acked") == acked + 1
    assert value("rota_preemptions_total", tier="experiment", outcome="forced") == forced + 1
    assert value("rota_preemptions_total", tier="training", outcome="finished") == finished == 0
    assert value("rota_lost_gpu_seconds_total", team="research") == lost + 800.0
    assert value("rota_preemption_ack_seconds_count") == acks + 1


def test_a_shrunk_victim_counts_as_a_preemption_with_its_own_outcome() -> None:
    shrunk = value("rota_preemptions_total", tier="experiment", outcome="shrunk")
    acked = value("rota_preemptions_total", tier="experiment", outcome="acked")
    acks = value("rota_preemption_ack_seconds_count")
    record_victims([victim("shrunk", queue="experiment", ack_s=3.0)])
    assert value("rota_preemptions_total", tier="experiment", outcome="shrunk") == shrunk + 1
    assert value("rota_preemptions_total", tier="experiment", outcome="acked") == acked
    assert value("rota_preemption_ack_seconds_count") == acks + 1


def test_run_outcomes_are_few() -> None:
    assert outcome_label(m.RunFinished(run_id=RUN, job_id=JOB)) == "finished"
    assert outcome_label(m.RunFailed(run_id=RUN, job_id=JOB, error="boom")) == "failed"
    stopped = m.RunStopped(run_id=RUN, job_id=JOB, reason=m.StopReason.preempted)
    assert outcome_label(stopped) == "preempted"
    assert {r.value for r in m.StopReason} <= set(metrics.RUN_OUTCOMES)


def test_rota_up_gives_each_service_its_own_port() -> None:
    ports = metrics_ports(Settings(metrics_port=None))
    assert sorted(ports) == sorted(SERVICES) and len(set(ports.values())) == len(SERVICES)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports["scheduler"]))  # was free
    fixed = metrics_ports(Settings(metrics_port=9400))
    assert sorted(fixed.values()) == list(range(9400, 9406))
    assert metrics_url(Settings(metrics_host="0.0.0.0"), 9401) == "http://127.0.0.1:9401/metrics"


def test_a_broken_metric_never_breaks_the_cycle_that_records_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler_metrics.observe_cycle(None, None, 0.0)  # type: ignore[arg-type]
    assert "recording metrics in observe_cycle failed" in caplog.text
