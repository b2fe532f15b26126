"""The console's pages, built from API answers: what each shows, and what a team may not see."""

from __future__ import annotations

from datetime import timedelta

from rota_console import views
from rota_console.fairshare import UsageHistory, fairshare_page, shares
from rota_console.reader import OTHER_TEAM, PLATFORM, Viewer, redact_plan

from tests.unit.console.fixtures import CONFIG, NOW, allocation, job, summary_row

NLP, VISION, PLATFORM_VIEWER = Viewer("nlp"), Viewer("vision"), Viewer(PLATFORM)


def test_queue_page_names_the_borrowers_and_the_longest_waits_oldest_first() -> None:
    summary = [summary_row("nlp"), summary_row("vision", in_use=8, borrowed=4),
               summary_row("research", "experiment", in_use=4, borrowed=4, quota=0)]
    jobs = [job("young", waited_s=10, reasons=["PRIORITY"]),
            job("old", waited_s=500, reasons=["QUOTA_EXCEEDED", "PRIORITY"])]
    page = views.queues_page(PLATFORM_VIEWER, summary, jobs, CONFIG, NOW)
    assert page.borrowers == ["research", "vision"]
    training = next(t for t in page.tiers if t.tier == "training")
    assert [w.name for w in training.longest_waits] == ["old", "young"]
    assert training.longest_waits[0].primary_reason == "QUOTA_EXCEEDED"
    assert [t.tier for t in page.tiers] == ["production", "training", "experiment"]


def test_a_long_wait_on_quota_is_diagnosed_as_a_quota_set_too_low() -> None:
    waiting = [job(f"j{i}", waited_s=4000, reasons=["QUOTA_EXCEEDED"]) for i in range(3)]
    waiting.append(job("short", waited_s=10, reasons=["PRIORITY"]))
    [diagnosis] = views.diagnose(waiting, 3600, NOW)
    assert (diagnosis.cause, diagnosis.long_waiters) == ("quota_too_low", 3)
    assert "over its team's quota" in diagnosis.message and "QUOTA_EXCEEDED" not in diagnosis.message


def test_long_waits_another_flavor_would_end_now_are_diagnosed_as_a_flavor_list_too_narrow() -> None:
    waiting = [job(f"j{i}", waited_s=4000, reasons=["INSUFFICIENT_CAPACITY"]) for i in range(3)]
    for j in waiting[:2]:
        j["wait"]["reasons"][0]["details"] = {"wider_flavor": "a100", "wider_within_quota": "yes"}
    [diagnosis] = views.diagnose(waiting, 3600, NOW)
    assert diagnosis.cause == "flavor_too_narrow"
    assert diagnosis.message == "2 of 3 long waiters would start now on a100 if they accepted it (flavors: [gpu, a100])"


def test_long_waits_for_an_executor_that_can_run_them_are_not_called_capacity() -> None:
    waiting = [job(f"j{i}", waited_s=4000, reasons=["NO_EXECUTOR"]) for i in range(2)]
    [diagnosis] = views.diagnose(waiting, 3600, NOW)
    assert diagnosis.cause == "no_executor"
    assert diagnosis.message == "2 of 2 long waiters: no running executor can run it"


def test_long_waits_for_too_few_gpus_are_capacity_not_a_misconfiguration() -> None:
    [diagnosis] = views.diagnose([job("j", waited_s=4000, reasons=["INSUFFICIENT_CAPACITY"])],
                                 3600, NOW)
    assert diagnosis.cause == "capacity"


def test_score_bars_are_shares_of_the_factors_largest_first_without_the_total() -> None:
    bars = views.factor_bars({"queue": 1000.0, "age": 250.0, "fairshare": -750.0, "total": 500.0})
    assert [(b.name, b.percent) for b in bars] == [("queue", 50.0), ("fairshare", 37.5),
                                                   ("age", 12.5)]


def test_cluster_marks_borrowed_and_preempted_gpus_and_leaves_idle_ones_empty() -> None:
    allocations = [allocation("j-nlp", "nlp", "training", "node-0", [0, 1, 2, 3]),
                   allocation("j-vis", "vision", "training", "node-1", [0, 1], borrowed=1,
                              run_id="victim-run")]
    plans = [{"plan_id": "p", "state": "noticed", "preemptor_team": "nlp",
              "victims": [{"run_id": "victim-run", "gpus": 2, "team": "vision"}]}]
    page = views.cluster_page(PLATFORM_VIEWER, CONFIG, allocations, plans, NOW)
    node1 = page.nodes[1].gpus
    assert [g.team for g in node1] == ["vision", "vision", None, None]
    assert [g.borrowed for g in node1] == [False, True, False, False]
    assert [g.preempting for g in node1] == [True, True, False, False]
    assert (page.gpus_in_use, page.gpus_total) == (6, 8)
    assert page.pending_preemptions[0].victim_gpus == 2


def test_a_pending_preemption_counts_share_victims_as_their_fractions() -> None:
    halves = [{"run_id": f"r{i}", "gpus": 0, "gpu_share": 0.5, "team": "vision"} for i in (0, 1)]
    plans = [{"plan_id": "p", "state": "noticed", "preemptor_team": "nlp", "victims": halves},
             {"plan_id": "q", "state": "noticed", "preemptor_team": "nlp", "victims": halves[:1]}]
    page = views.cluster_page(PLATFORM_VIEWER, CONFIG, [], plans, NOW)
    assert [p.victim_gpus for p in page.pending_preemptions] == [1, 0.5]


def test_a_team_sees_other_teams_gpus_as_occupied_by_someone_not_whose() -> None:
    allocations = [allocation("j-vis", "vision", "production", "node-1", [0], borrowed=1)]
    cell = views.cluster_page(NLP, CONFIG, allocations, [], NOW).nodes[1].gpus[0]
    assert (cell.team, cell.tier, cell.job_id, cell.borrowed) == (OTHER_TEAM, None, None, False)


def test_a_team_sees_other_teams_victims_only_as_gpus_given_up() -> None:
    plan = {"plan_id": "p", "preemptor_team": "vision", "preemptor_job_id": "their-job",
            "message": "vision's secret project", "victims": [
                {"team": "nlp", "job_id": "ours", "gpus": 4, "outcome": "acked"},
                {"team": "research", "job_id": "theirs", "job_name": "x", "gpus": 2}]}
    seen = redact_plan(plan, NLP)
    assert seen["victims"][0]["job_id"] == "ours"
    assert seen["victims"][1] == {"team": OTHER_TEAM, "gpus": 2, "state": None, "outcome": None}
    assert seen["preemptor_job_id"] is None and seen["message"] is None


def test_job_page_links_the_trace_to_jaeger_and_offers_cancel_only_to_its_team() -> None:
    row = job("mine", state="running")
    why = {"state": "running", "summary": "running since then"}
    trace = {"job": row, "trace_id": "ab" * 16, "preemptions": [], "timeline": [
        {"at": NOW.isoformat(), "type": "RunCheckpointed", "source": "executor", "summary": "s",
         "data": {"checkpoint_uri": "s3://ckpt/1"}}]}
    page = views.job_page(NLP, why, trace, [], jaeger_url="http://jaeger:16686/",
                          notifications_error=None, now=NOW)
    assert page.jaeger_link == f"http://jaeger:16686/trace/{'ab' * 16}"
    assert page.timeline[0].checkpoint_uri == "s3://ckpt/1"
    assert page.can_cancel
    assert not views.job_page(PLATFORM_VIEWER, why, trace, [], jaeger_url=None,
                              notifications_error=None, now=NOW).can_cancel
    ended = {**trace, "job": {**row, "state": "finished"}}
    assert not views.job_page(NLP, {"state": "finished"}, ended, [], jaeger_url=None,
                              notifications_error=None, now=NOW).can_cancel


def test_fair_share_decays_usage_with_the_half_life_and_compares_it_with_the_quota_share() -> None:
    history = UsageHistory(half_life_s=100.0, points=10)
    history.record(NOW, {"nlp": 4, "vision": 0})
    history.record(NOW + timedelta(seconds=100), {"nlp": 4, "vision": 0})
    history.record(NOW + timedelta(seconds=200), {"nlp": 0, "vision": 4})
    # nlp: 400 GPU-s, halved once; vision: 400 GPU-s fresh.
    assert history.usage == {"nlp": 200.0, "vision": 400.0}
    page = fairshare_page(PLATFORM_VIEWER, CONFIG, history, 5.0, NOW)
    by_team = {t.team: t for t in page.teams}
    assert by_team["vision"].usage_share == round(400 / 600, 4)
    assert by_team["nlp"].share == 0.5 and by_team["research"].share == 0.0
    assert [t.team for t in fairshare_page(NLP, CONFIG, history, 5.0, NOW).teams] == ["nlp"]
    assert shares(CONFIG) == {"nlp": 0.5, "vision": 0.5, "research": 0.0}


def test_fair_share_keeps_only_the_newest_points() -> None:
    history = UsageHistory(half_life_s=100.0, points=3)
    for i in range(5):
        history.record(NOW + timedelta(seconds=i), {"nlp": 1})
    assert history.samples[0][0] == NOW + timedelta(seconds=2)


def test_a_held_jobs_page_shows_the_reasons_in_words_and_when_the_hold_ends() -> None:
    row = job("held", queue="production")
    until = NOW + timedelta(minutes=5)
    why = {"state": "pending", "position": 1, "eta": None, "factors": {}, "reasons": [
        {"code": "PREEMPTION_HELD", "message": "its victim is protected until then",
         "details": {"hold": "min_runtime", "hold_ends_at": until.timestamp()}}]}
    trace = {"job": row, "trace_id": "ab" * 16, "preemptions": [], "timeline": []}
    page = views.job_page(NLP, why, trace, [], jaeger_url=None, notifications_error=None, now=NOW)
    [reason] = page.reasons
    assert reason.title == "a rule holds it back from preempting" and reason.ends_at == until
    queues = views.queues_page(NLP, [], [row], CONFIG, NOW + timedelta(hours=2))
    [tier] = [t for t in queues.tiers if t.longest_waits]
    assert tier.longest_waits[0].title  # the primary reason's words beside its code
