"""The rendered messages, above all the preemption notice: deadline three ways, reason, job,
what to do, and where it resumes. Operator templates override the built-in ones."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rota.units import gpu_time
from rota_notifier.domain import notices
from rota_notifier.render import Renderer, human_duration, relative, when

from tests.unit.notifier import events as ev
from tests.unit.notifier.events import rota_config

NOW = datetime(2026, 7, 1, 14, 0, tzinfo=UTC)  # summer: Berlin is UTC+2


def notice_context(recipient_kind: str = "user", timezone: str = "Europe/Berlin",
                   **overrides: Any) -> dict[str, Any]:
    env = ev.noticed(NOW, name="llama-ft", grace_s=420, **overrides)
    (notice,) = notices(env, None, rota_config())
    return notice.context | {"kind": "preemption_noticed", "recipient_kind": recipient_kind,
                             "timezone": timezone}


def test_preemption_notice_says_when_why_what_and_where() -> None:
    ctx = notice_context()
    out = Renderer().render("preemption_noticed", ctx, NOW)
    assert out.subject == ("[Rota] Preemption: llama-ft must checkpoint by 2026-07-01 14:07 UTC"
                           " (in 7 min)")
    for body in (out.text, out.html, out.slack):
        assert "2026-07-01 14:07 UTC" in body  # absolute, UTC
        assert "2026-07-01 16:07 CEST (Europe/Berlin)" in body  # absolute, the user's zone
        assert "in 7 min" in body  # relative
        assert "llama-ft" in body and ctx["job_id"] in body
        assert re.search(r"Team:?\*?(</th><td>)?\s*ml\b|team ml\b", body)  # team...
        assert "experiment" in body  # ...and queue
        assert "production" in body and "PRIORITY" in body  # why: preemptor tier + reason
        assert "acknowledge" in body and ctx["control_subject"] in body  # SDK and protocol
        assert ctx["notice_id"] in body
        # Where it resumes: what it acknowledges, or its last checkpoint without an ack.
        assert "the checkpoint it acknowledges" in " ".join(body.split())
        assert "s3://ckpt/llama-ft/step-1200" in body
        assert "ReportCheckpoint" in body and "RunCheckpointed" not in body  # the protocol


def test_a_shrink_notice_says_it_restarts_smaller_at_once() -> None:
    out = Renderer().render("preemption_noticed", notice_context(shrink_to=2), NOW)
    for body in (out.text, out.html, out.slack):
        assert "2 workers" in body
        assert "original submit time" not in body and "original place" not in body
    plain = Renderer().render("preemption_noticed", notice_context(), NOW)
    assert "workers" not in plain.text


def test_a_drain_notice_names_the_node_and_no_preemptor() -> None:
    ctx = notice_context(reason="drain", node="gpu-7")
    out = Renderer().render("preemption_noticed", ctx, NOW)
    for body in (out.text, out.html, out.slack):
        assert "gpu-7" in body and "drained for maintenance" in body
        assert "budget" in body  # it spends none
        assert ctx["preemptor_job_id"] not in body and "production" not in body
        assert "acknowledge" in body  # the job does as for any notice


def test_relative_deadline_is_computed_when_sent() -> None:
    ctx = notice_context()
    later = Renderer().render("preemption_noticed", ctx, NOW + timedelta(minutes=5))
    assert "(in 2 min)" in later.subject
    missed = Renderer().render("preemption_noticed", ctx, NOW + timedelta(minutes=9))
    assert "(2 min ago)" in missed.subject


def test_team_copy_names_the_owner_and_stays_in_utc() -> None:
    out = Renderer().render("preemption_noticed", notice_context("team", "UTC"), NOW)
    assert out.text.startswith("Job llama-ft of alice is about to be preempted.")
    assert "CEST" not in out.text


def test_not_resumable_says_work_is_lost() -> None:
    ctx = notice_context(resumable=False, resume_from=None)
    out = Renderer().render("preemption_noticed", ctx, NOW)
    assert "not marked resumable" in out.text and "starts over" in out.text


def test_escaping_for_html_and_slack() -> None:
    ctx = notice_context() | {"job_name": "a<b>&c"}
    out = Renderer().render("preemption_noticed", ctx, NOW)
    assert "a&lt;b&gt;&amp;c" in out.html and "<b>" not in out.html
    assert "a&lt;b&gt;&amp;c" in out.slack
    assert "a<b>&c" in out.text


@pytest.mark.parametrize("kind, extra, expected", [
    ("run_failed", {"run_id": "r", "exit_code": 137, "error": "OOM"}, "Failed: llama-ft (exit 137)"),
    ("run_started", {"run_id": "r", "attempt": 1, "resumed_from": None, "waited_s": 7260,
                     "threshold_s": 3600}, "Started after 2 h 1 min: llama-ft"),
    ("run_resumed", {"run_id": "r", "attempt": 2, "resumed_from": "s3://c", "waited_s": 5},
     "Resumed: llama-ft"),
    ("long_wait", {"waited_s": 4000, "threshold_s": 3600, "reason_code": "QUOTA_EXCEEDED",
                   "reason_message": "at quota", "position": 2, "eta": None,
                   "other_reasons": []}, "Still waiting after 1 h 6 min: llama-ft"),
    ("preemption_completed", {"run_id": "r", "plan_id": "p", "outcome": "acked",
                              "aborted": False, "checkpoint_uri": "s3://c",
                              "lost_gpu_hours": 0, "lost_gpu_seconds": 0,
                              "lost_work": "0.0 GPU-s", "preemptor_job_id": "x"},
     "Preempted after a checkpoint: llama-ft"),
    ("digest", {"items": [{"subject": "one"}, {"subject": "two"}]}, "2 notifications"),
])
def test_every_kind_renders(kind: str, extra: dict[str, Any], expected: str) -> None:
    ctx = {key: value for key, value in notice_context().items()} | extra | {"kind": kind}
    out = Renderer().render(kind, ctx, NOW)
    assert expected in out.subject
    assert out.text and out.html.startswith("<!doctype html>") and out.slack


def test_a_long_wait_says_its_reasons_in_words_and_no_bare_unknown() -> None:
    ctx = notice_context() | {"kind": "long_wait", "waited_s": 4000, "threshold_s": 3600,
                              "reason_code": "QUOTA_EXCEEDED", "reason_title": "over its team's quota",
                              "reason_message": "at quota", "position": 2, "eta": None,
                              "other_reasons": ["PRIORITY"],
                              "other_titles": ["behind other jobs in its queue"]}
    out = Renderer().render("long_wait", ctx, NOW)
    for text in (out.subject, out.text, out.html, out.slack):
        assert "QUOTA_EXCEEDED" not in text and "unknown" not in text
    assert "over its team's quota: at quota" in out.text
    assert "behind other jobs in its queue" in out.text and "not estimated" in out.text


def test_operator_templates_override_and_a_broken_one_falls_back(tmp_path: Path) -> None:
    (tmp_path / "run_failed.subject.j2").write_text("[ACME] {{ job_name }} broke")
    (tmp_path / "preemption_noticed.subject.j2").write_text("{{ no_such_value }}")
    renderer = Renderer(tmp_path)
    ctx = notice_context() | {"run_id": "r", "exit_code": 1, "error": "x"}
    assert renderer.render("run_failed", ctx | {"kind": "run_failed"}, NOW).subject == (
        "[ACME] llama-ft broke")
    assert renderer.render("preemption_noticed", ctx, NOW).subject.startswith(
        "[Rota] Preemption: llama-ft")


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (59, "59 s"), (90, "1 min 30 s"),
                                           (600, "10 min"), (3600, "1 h"), (5400, "1 h 30 min"),
                                           (90000, "1 d 1 h")])
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_when_and_relative() -> None:
    assert relative(NOW, NOW) == "now"
    got = when((NOW + timedelta(hours=1)).isoformat(), "America/New_York", NOW)
    assert got == {"utc": "2026-07-01 15:00 UTC",
                   "local": "2026-07-01 11:00 EDT (America/New_York)", "relative": "in 1 h"}
    assert when(NOW.isoformat(), "Not/AZone", NOW) == {"utc": "2026-07-01 14:00 UTC",
                                                       "local": None, "relative": "now"}


def test_a_small_loss_is_shown_in_gpu_seconds_not_rounded_away() -> None:
    ctx = notice_context() | {"kind": "preemption_completed", "run_id": "r", "plan_id": "p",
                              "outcome": "forced", "aborted": False, "checkpoint_uri": None,
                              "lost_gpu_hours": 0.0, "lost_gpu_seconds": 10.3,
                              "lost_work": gpu_time(10.3), "preemptor_job_id": "x"}
    out = Renderer().render("preemption_completed", ctx, NOW)
    assert "Lost work: 10.3 GPU-s" in out.text
