"""Per-team intake limits as pure rules: the pending bound, the token bucket, the config."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from rota.config import ConfigError, parse_config
from rota.config.loader import example_text
from rota.config.model import Intake
from rota_submission.intake import TeamGate, refilled

T0 = datetime(2026, 12, 1, tzinfo=UTC)
LIMITS = Intake(max_pending=3, submit_rate_per_s=2.0, submit_burst=5)


def test_the_job_past_the_pending_limit_is_refused_naming_the_rule_and_the_limit() -> None:
    gate = TeamGate("nlp", LIMITS, pending=0, tokens=5.0)
    assert [gate.admit() for _ in range(3)] == [None, None, None]
    refused = gate.admit()
    assert refused is not None
    assert (refused.code, refused.field) == ("PENDING_LIMIT", "team")
    assert "intake.max_pending: 3" in refused.message and "'nlp' has 3 jobs waiting" in refused.message
    assert gate.tokens == 2.0  # the refused job spent no token


def test_past_the_burst_a_submission_is_refused_until_the_bucket_refills() -> None:
    gate = TeamGate("nlp", Intake(max_pending=100, submit_rate_per_s=2.0, submit_burst=5),
                    pending=0, tokens=5.0)
    assert [gate.admit() for _ in range(5)] == [None] * 5
    refused = gate.admit()
    assert refused is not None and refused.code == "RATE_LIMITED"
    assert "2 jobs/s" in refused.message and "at most 5 at once" in refused.message
    assert "retry in 0.5 s" in refused.message
    # Half a second later, one more token; never more than the burst however long it idles.
    assert refilled(gate.tokens, T0, T0 + timedelta(seconds=0.5), gate.limits) == 1.0
    assert refilled(gate.tokens, T0, T0 + timedelta(days=1), gate.limits) == 5.0
    assert refilled(3.0, T0, T0 - timedelta(seconds=10), gate.limits) == 3.0


def test_a_team_s_own_limits_override_the_section_field_by_field() -> None:
    doc: dict[str, Any] = yaml.safe_load(example_text())
    doc["intake"] = {"max_pending": 50, "submit_rate_per_s": 5, "submit_burst": 20}
    doc["teams"]["vision"]["intake"] = {"submit_burst": 200}
    config = parse_config(doc)
    assert config.intake_for("nlp") == Intake(max_pending=50, submit_rate_per_s=5, submit_burst=20)
    assert config.intake_for("vision") == Intake(max_pending=50, submit_rate_per_s=5,
                                                 submit_burst=200)


def test_without_an_intake_section_every_team_gets_the_documented_defaults() -> None:
    doc: dict[str, Any] = yaml.safe_load(example_text())
    doc.pop("intake")
    doc["teams"]["research"].pop("intake")
    config = parse_config(doc)
    assert config.intake_for("research") == Intake(max_pending=10_000, submit_rate_per_s=100,
                                                   submit_burst=2_000)


@pytest.mark.parametrize(("where", "value"), [
    ("max_pending", 0), ("submit_rate_per_s", 0), ("submit_burst", 0), ("colour", 1)])
def test_bad_intake_limits_are_refused_with_their_path(where: str, value: Any) -> None:
    doc: dict[str, Any] = yaml.safe_load(example_text())
    doc["teams"]["nlp"]["intake"] = {where: value}
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert any(str(issue).startswith(f"teams.nlp.intake.{where}") for issue in info.value.issues)
