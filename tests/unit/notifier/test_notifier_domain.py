"""Events to notices, as pure functions: the job view, thresholds, keys, staleness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rota.contracts import messages as m
from rota_notifier.domain import JobView, Kind, completed_notices, fold, is_stale, notices

from tests.unit.notifier import events as ev
from tests.unit.notifier.events import rota_config

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
CONFIG = rota_config()


def view_after(*envs: object) -> JobView | None:
    job: JobView | None = None
    for env in envs:
        job = fold(job, env) or job  # type: ignore[arg-type]
    return job


def test_fold_tracks_owner_wait_and_episode() -> None:
    job = ev.submitted(T0, user="bob", name="bert")
    assert job.job_id
    view = view_after(job)
    assert view == JobView(job.job_id, "bert", "ml", "bob", "experiment", T0, T0, 0)
    started = view_after(job, ev.run_started(T0 + timedelta(hours=1), job.job_id))
    assert started is not None and started.pending_since is None
    stopped_at = T0 + timedelta(hours=2)
    requeued = view_after(job, ev.run_started(T0, job.job_id), ev.run_stopped(stopped_at,
                                                                               job.job_id))
    assert requeued is not None
    assert (requeued.pending_since, requeued.episode) == (stopped_at, 1)


def test_a_notice_for_an_unknown_job_brings_its_owner() -> None:
    notice = ev.noticed(T0, user="alice", name="vit")
    view = fold(None, notice)
    assert view is not None and (view.name, view.team, view.user) == ("vit", "ml", "alice")


def test_preemption_notice_context_has_what_the_template_needs() -> None:
    env = ev.noticed(T0, resume_from="s3://c/1")
    (notice,) = notices(env, None, CONFIG)
    assert notice.kind == Kind.preemption_noticed and notice.dedup_key == env.id
    data = env.data
    assert isinstance(data, m.PreemptionNoticed)
    ctx = notice.context
    assert ctx["deadline"] == data.deadline.isoformat() and ctx["reason"] == "PRIORITY"
    assert ctx["resume_from"] == "s3://c/1" and ctx["preemptor_queue"] == "production"
    assert ctx["control_subject"] == f"rota.ctl.run.{data.run_id}"


def test_long_wait_key_is_one_per_job_wait_and_threshold() -> None:
    job = ev.submitted(T0)
    assert job.job_id
    view = view_after(job)
    assert notices(ev.pending(T0 + timedelta(seconds=3599), job.job_id), view, CONFIG) == []
    (first,) = notices(ev.pending(T0 + timedelta(seconds=3600), job.job_id), view, CONFIG)
    (later,) = notices(ev.pending(T0 + timedelta(hours=5), job.job_id), view, CONFIG)
    assert first.dedup_key == later.dedup_key == f"long_wait:{job.job_id}:0:3600"
    assert first.context["reason_code"] == "QUOTA_EXCEEDED"
    assert first.context["other_reasons"] == ["PRIORITY"]
    assert first.context["reason_title"] == "over its team's quota"  # what the templates show
    assert first.context["other_titles"] == ["behind other jobs in its queue"]


def test_start_notifies_only_after_a_long_wait_and_resume_always() -> None:
    job = ev.submitted(T0)
    assert job.job_id
    view = view_after(job)
    assert notices(ev.run_started(T0 + timedelta(minutes=5), job.job_id), view, CONFIG) == []
    (late,) = notices(ev.run_started(T0 + timedelta(hours=2), job.job_id), view, CONFIG)
    assert late.kind == Kind.run_started and late.context["waited_s"] == 7200
    (resumed,) = notices(ev.run_started(T0, job.job_id, attempt=2, resumed_from="s3://c"),
                         view, CONFIG)
    assert resumed.kind == Kind.run_resumed


def test_run_events_of_unknown_jobs_notify_nobody() -> None:
    assert notices(ev.run_failed(T0, "01900000-0000-7000-8000-000000000000"), None, CONFIG) == []


def test_completed_is_one_notice_per_victim() -> None:
    a, b = ev.submitted(T0, name="a"), ev.submitted(T0, user="bob", name="b")
    assert a.job_id and b.job_id
    env = ev.completed(T0, [a.job_id, b.job_id])
    data = env.data
    assert isinstance(data, m.PreemptionCompleted)
    out = completed_notices(env, [(data.victims[0], view_after(a)),
                                  (data.victims[1], view_after(b))])
    assert [(n.user, n.dedup_key) for n in out] == [
        ("alice", f"{env.id}:{a.job_id}"), ("bob", f"{env.id}:{b.job_id}")]
    assert out[0].context["lost_gpu_hours"] == 1.5
    assert out[0].context["lost_work"] == "1.50 GPU-h"


def test_staleness() -> None:
    env = ev.run_failed(T0, "01900000-0000-7000-8000-000000000000")
    assert not is_stale(env, T0 + timedelta(minutes=59), 3600)
    assert is_stale(env, T0 + timedelta(minutes=61), 3600)
