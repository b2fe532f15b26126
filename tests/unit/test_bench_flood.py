"""`rota bench flood`'s figures from what it saw: the flood's answers counted by outcome, and
the steady team's latencies over every job and over those sent during the flood."""

from __future__ import annotations

from rota.bench.flood import Seen, figures


def test_the_figures_count_each_answer_once_and_time_the_steady_team() -> None:
    seen = Seen(sent={"f0": 0.0, "f1": 0.0, "f2": 0.0, "f3": 0.0, "s0": 0.0, "s1": 1.0})
    seen.recorded.update({"f0": 0.5, "s0": 0.1, "s1": 1.3})
    seen.rejected.update({"f1": (0.6, "RATE_LIMITED"), "f2": (0.7, "PENDING_LIMIT")})
    seen.granted.update({"s0": 0.4, "s1": 2.0})
    out = figures(seen, ["f0", "f1", "f2", "f3"], ["s0", "s1"], {"s1": 1.0},
                  sent_s=0.25, answered_s=0.7)
    assert out["flood"] == {
        "commands": 4, "accepted": 1, "rejected": 2,
        "rejected_by_code": {"PENDING_LIMIT": 1, "RATE_LIMITED": 1}, "unanswered": 1,
        "sent_s": 0.25, "sent_per_s": 16.0, "answered_s": 0.7, "answered_per_s": 4.3}
    steady = out["steady"]
    assert (steady["jobs"], steady["recorded"], steady["granted"]) == (2, 2, 2)
    assert (steady["recorded_max_ms"], steady["granted_max_ms"]) == (300.0, 1000.0)
    assert steady["during_flood"] == {
        "jobs": 1, "recorded_p50_ms": 300.0, "recorded_p99_ms": 300.0, "recorded_max_ms": 300.0,
        "granted_p50_ms": 1000.0, "granted_p99_ms": 1000.0, "granted_max_ms": 1000.0}
