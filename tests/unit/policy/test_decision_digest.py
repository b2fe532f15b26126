"""The decision digest: what a replay decided, apart from how it explained the waits."""

from __future__ import annotations

from dataclasses import replace

from rota.contracts.messages import WaitReasonCode
from rota_policy import Admission, Decisions, PendingExplanation, Reason, ScoreBreakdown, Slot
from rota_replay.digest import decision_digest, decisions_text

from tests.unit.policy.test_replay import HEAD

_ADMITTED = Decisions(admissions=(Admission("a", (Slot(0, "n0", (0, 1)),), flavor="gpu"),))


def test_explanations_are_not_part_of_the_digest_but_admissions_are() -> None:
    why = PendingExplanation("b", (Reason(WaitReasonCode.PRIORITY, "1 job ahead"),), 5.0, 1, ScoreBreakdown())
    explained = replace(_ADMITTED, pending=(why,))
    assert decisions_text(10.0, explained) == decisions_text(10.0, _ADMITTED)
    moved = replace(_ADMITTED, admissions=(Admission("a", (Slot(0, "n1", (0, 1)),), flavor="gpu"),))
    assert decisions_text(10.0, moved) != decisions_text(10.0, _ADMITTED)


def test_a_replay_digest_is_the_same_twice_and_tells_policies_apart() -> None:
    first = decision_digest(HEAD, "philly-1152", "rota")
    assert first == decision_digest(HEAD, "philly-1152", "rota")
    assert first["cycles"] > 0 and first["sha256"] != decision_digest(HEAD, "philly-1152", "fifo")["sha256"]
