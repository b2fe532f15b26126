"""Waits said for people: every reason code documented and titled, holds with the time they
end, the age factor as of the question, and `rota why` in words (the codes kept for --json)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rota import waits
from rota.cli import jobs
from rota.config import load_config
from rota.contracts.messages import WaitReasonCode
from rota_policy import schedule
from rota_scheduler.snapshot import policy_snapshot
from rota_submission.explain import AgeRule, describe, why

from tests.unit.scheduler_service.test_view_and_actions import POLICY, Story

REASONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "reasons.md"
T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def _documented() -> set[str]:
    return set(re.findall(r"^## `([A-Z_]+)`", REASONS_DOC.read_text(), flags=re.MULTILINE))


@pytest.mark.parametrize("code", list(WaitReasonCode))
def test_every_wait_reason_code_is_documented_for_users_and_has_a_title(code: WaitReasonCode) -> None:
    assert code.value in _documented(), f"docs/reasons.md has no '## `{code.value}`' section"
    assert code.value in waits.TITLES, f"rota.waits.TITLES has no words for {code.value}"
    section = REASONS_DOC.read_text().split(f"## `{code.value}`", 1)[1].split("\n## ", 1)[0]
    for part in ("What it means", "What it waits for", "ETA", "What to do"):
        assert part in section, f"{code.value}: no '{part}' in its section of docs/reasons.md"


def test_the_doc_names_no_code_that_does_not_exist() -> None:
    assert _documented() - {c.value for c in WaitReasonCode} <= {"NOT_YET_SCHEDULED"}


def test_the_age_factor_at_display_is_the_policys() -> None:
    config = load_config()
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")
    waiting = story.submit(workers=4, team="nlp", user="alice")
    submitted = story.view.jobs[waiting].submitted_at
    for waited in (0.0, 59.0, 3600.0, 86_400.0, 30 * 86_400.0):
        story.now = submitted + waited
        decisions = schedule(policy_snapshot(story.view, story.now), story.now, POLICY)
        [explained] = [e for e in decisions.pending if e.job_id == waiting]
        shown = waits.age_factor(config.policy.weights.age, config.policy.age_cap_s, waited)
        assert shown == pytest.approx(explained.factors.age)


def _pending(**wait: Any) -> dict[str, Any]:
    return {"job_id": "j" * 36, "name": "train", "state": "pending", "queue": "production",
            "team": "nlp", "flavor": "h100", "submitted_at": T0.isoformat(),
            "wait": {"reasons": [{"code": "PREEMPTION_HELD", "message": "it would stop team"
                                  " vision's experiment job v, but that run's queue protects it",
                                  "details": {"hold": "min_runtime",
                                              "hold_ends_at": (T0 + timedelta(minutes=5)).timestamp()}},
                                 {"code": "PRIORITY", "message": "1 job(s) are ahead",
                                  "details": {}}],
                     "eta": (T0 + timedelta(minutes=6)).isoformat(), "position": 2,
                     "factors": {"queue": 1000.0, "age": 0.0, "fairshare": 0.0,
                                 "quota_headroom": 0.0, "total": 1000.0}},
            **wait}


def test_why_grows_the_age_factor_with_the_wait_and_says_when_a_hold_ends() -> None:
    rule = AgeRule(1000.0, 7 * 86_400.0)
    early = why(_pending(), now=T0 + timedelta(hours=1), age=rule)
    later = why(_pending(), now=T0 + timedelta(hours=2), age=rule)
    assert 0.0 < early["factors"]["age"] < later["factors"]["age"]
    assert later["factors"]["total"] == pytest.approx(1000.0 + later["factors"]["age"])
    held, behind = later["reasons"]
    assert held["code"] == "PREEMPTION_HELD" and held["title"] == waits.title("PREEMPTION_HELD")
    assert datetime.fromisoformat(held["ends_at"]) == T0 + timedelta(minutes=5)
    assert behind["ends_at"] is None
    assert why(_pending())["factors"]["age"] == 0.0  # no clock: as published


def test_a_hold_in_the_trace_says_what_and_until_when_in_words() -> None:
    line = describe("JobPending", _pending()["wait"], "j" * 36)
    assert line.startswith("hold: a rule holds it back from preempting: it would stop team vision's")
    assert "(until 2026-12-07 10:05:00 UTC)" in line and "PREEMPTION_HELD" not in line
    plan = {"preemptor_job_id": "j" * 36, "reason": "rota:lower_tier", "message": "m",
            "victims": [], "expected_lost_gpu_seconds": 0.0}
    assert "rota:lower_tier" not in describe("PreemptionRequested", plan, "j" * 36)
    assert waits.plan_reason("kueue:reclaim") == waits.PLAN_RULES["reclaim"]


def test_rota_why_prints_words_not_codes_and_never_a_bare_unknown(
        capsys: pytest.CaptureFixture[str]) -> None:
    answer = why(_pending(), now=T0, age=AgeRule(1000.0, 7 * 86_400.0))
    jobs.print_wait(answer, T0)
    out = capsys.readouterr().out
    assert "PREEMPTION_HELD" not in out and "PRIORITY" not in out
    assert "a rule holds it back from preempting" in out
    assert "until  2026-12-07 10:05:00 UTC (in 5m)" in out
    assert "eta  2026-12-07 10:06:00 UTC (in 6m)   (position 2 in the h100 queue)" in out
    unknown = why(_pending(wait={"reasons": [{"code": "QUOTA_EXCEEDED", "message": "m",
                                              "details": {}}], "position": 1}))
    jobs.print_wait(unknown, T0)
    out = capsys.readouterr().out
    assert "unknown" not in out and "not estimated: over its team's quota" in out


def test_the_trace_shows_the_hold_between_the_submission_and_the_preemption() -> None:
    """A production job that its queue's preemption delay holds back: its trace says so, and
    until when, before the preemption it then makes (codes stay in the decisions)."""
    import yaml
    from rota.config import RotaConfig
    from rota_policy import policy_config_from
    from rota_scheduler.actions import plan_actions, record_sent
    from rota_scheduler.view import ClusterView
    from rota_submission.explain import timeline
    from rota_submission.record import decisions

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "packages" / "contracts" / "src" / "rota" / "config"
                          / "example.rota.yaml").read_text())
    doc["queues"]["production"]["preemption_delay_s"] = 300
    doc.setdefault("preemption", {})["max_lost_gpu_s_per_plan"] = None
    config = RotaConfig.model_validate(doc)
    policy = policy_config_from(config)
    story = Story()
    story.view = ClusterView(config)
    rows: list[dict[str, Any]] = []

    def cycle() -> list[Any]:
        out = plan_actions(story.view, schedule(policy_snapshot(story.view, story.now), story.now, policy),
                           now=story.now, new_uuid=story.uuid)
        record_sent(story.view, out, story.now)
        messages = [item.message for item in out.outgoing]
        for message in messages:
            data = message.model_dump(mode="json")
            story.fold(message)
            rows.append({"type": type(message).__name__, "data": data, "source": "scheduler",
                         "occurred_at": datetime.fromtimestamp(story.now, UTC)})
        return messages

    # Experiments fill the h100 nodes: vision's two (one borrowed node), research's, nlp's.
    for team, user in (("vision", "carol"), ("vision", "carol"), ("research", "dave"),
                       ("nlp", "bob")):
        story.submit(team=team, user=user, queue="experiment", declared_runtime_s=36_000)
    for message in cycle():
        if type(message).__name__ == "AllocationProposed":
            story.grant_and_start(message)
    story.now += 3600  # past their minimum runtime
    release = story.submit(team="nlp", user="alice", queue="production", declared_runtime_s=600)
    rows.append({"type": "JobSubmitted", "data": {"spec": {"workers": 1, "gpus_per_worker": 8,
                 "flavor": "h100", "queue": "production", "team": "nlp", "user": "alice"}},
                 "source": "submission", "occurred_at": datetime.fromtimestamp(story.now, UTC)})
    cycle()
    story.now += 301
    cycle()
    mine = [r for r in rows if r["type"] == "JobSubmitted"
            or r["data"].get("job_id") == release or r["data"].get("preemptor_job_id") == release]
    lines = [entry["summary"] for entry in timeline(mine, release)]
    held = next(i for i, line in enumerate(lines)
                if line.startswith("hold:") and "held back: its queue waits before it preempts" in line)
    preempt = next(i for i, line in enumerate(lines) if line.startswith("preempt ("))
    assert lines[0].startswith("submitted") and 0 < held < preempt, lines
    allowed_at = datetime.fromtimestamp(story.now - 1, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"(until {allowed_at})" in lines[held] and "PREEMPTION_DELAYED" not in lines[held]
    record = decisions(mine, release)  # the codes, for --json
    first_hold = next(i for i, d in enumerate(record) if d["decision"] == "hold")
    assert "PREEMPTION_DELAYED" in [r["code"] for r in record[first_hold]["reasons"]]
    assert first_hold < [d["decision"] for d in record].index("preempt")


def test_what_an_eta_rests_on_and_why_there_is_none_are_said_in_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    quota = {"code": "QUOTA_EXCEEDED", "message": "your team's training job X should end by T",
             "details": {"eta_basis": "own_runs_end", "held_by": "x"}}
    answer = why(_pending(wait={"reasons": [quota], "position": 1,
                                "eta": (T0 + timedelta(minutes=30)).isoformat()}))
    jobs.print_wait(answer, T0)
    said = " ".join(capsys.readouterr().out.split())  # as printed, whatever the wrap
    assert "(in 30m), when its team's own runs end and free its quota" in said
    never = {"code": "QUOTA_EXCEEDED", "message": "asks for 64",
             "details": {"blocker": "quota_limit",
                         "blocker_reason": "it asks for more than its team's quota and borrowing limit"}}
    jobs.print_wait(why(_pending(wait={"reasons": [never], "position": 1})), T0)
    assert ("not estimated: it asks for more than its team's quota and borrowing limit"
            in " ".join(capsys.readouterr().out.split()))
    assert waits.no_eta([{"code": "EXCEEDS_CLUSTER", "details": {"blocker": "exceeds_cluster"}}]) \
        == "exceeds_cluster"
    line = describe("JobPending", {"reasons": [never], "position": 1, "eta": None}, "j")
    assert line.endswith("no ETA: it asks for more than its team's quota and borrowing limit)")
