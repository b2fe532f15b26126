"""A team's attacks through its own subjects: a team's name is one subject token, a team's
credentials name each subject in full, and the service reads the team as all that follows
the API's own tokens, so no team speaks for another, for the platform, or into a void; nor
does cancelling another team's job tell the team that the job exists."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rota.auth.permissions import team_permissions
from rota.bus.batch import subject_matches
from rota.config import ConfigError, parse_config
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.ids import new_id
from rota.service import RotaService
from rota_submission import commands, store
from rota_submission.commands import Origin
from rota_submission.domain import check_submission

from tests.builders import submit_job

CLUSTER: dict[str, Any] = {"flavors": [{"name": "h100"}],
                           "node_pools": [{"name": "n", "flavor": "h100", "count": 2,
                                           "gpus_per_node": 8}]}

# Teams whose names are also tokens of Rota's own subjects.
SUBJECT_WORDS = ["list", "get", "why", "trace", "summary", "submit", "cancel", "jobs", "job"]


def test_a_dotted_team_name_is_refused_by_the_config_check_naming_the_team() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"cluster": CLUSTER, "teams": {"nlp": {}, "ml.nlp": {}}}, source="rota.yaml")
    [issue] = refused.value.issues
    assert issue.path == "teams.ml.nlp.[key]"  # the key itself is what is wrong
    assert "one subject token" in issue.rule and "'.'" in issue.rule


@pytest.mark.parametrize("name", ["ml.nlp", "nlp.*", "nlp>", "n lp", "NLP", "-nlp", ""])
def test_no_credentials_are_made_for_a_team_name_that_is_not_one_token(name: str) -> None:
    with pytest.raises(ValueError, match="one subject token"):
        team_permissions(name)


def test_names_with_dashes_and_underscores_stay_valid() -> None:
    config = parse_config({"cluster": CLUSTER, "teams": {"nlp": {}, "ml-nlp": {}, "ml_cv": {},
                                                         "ee9e8c": {}}}, source="rota.yaml")
    assert set(config.teams) == {"nlp", "ml-nlp", "ml_cv", "ee9e8c"}


def _unscoped_and_others(team: str) -> list[str]:
    """Every subject no credentials of `team` may publish on: the platform's unscoped API and
    each other team's scoped subjects."""
    others = [t for t in ["nlp", "vision", *SUBJECT_WORDS] if t != team]
    unscoped = [s.API_SUBMIT, s.API_CANCEL, *s.TEAM_QUERIES, s.LEDGER_ALLOCATIONS]
    return unscoped + [subject for other in others
                       for subject in (s.submit(other), s.cancel(other), s.api_submit(other),
                                       s.api_cancel(other),
                                       *(s.team_query(q, other) for q in s.TEAM_QUERIES))]


@pytest.mark.parametrize("team", ["nlp", *SUBJECT_WORDS])
def test_no_team_may_publish_a_subject_of_the_platform_or_of_another_team(team: str) -> None:
    allowed = team_permissions(team).publish
    assert not any("*" in p or ">" in p for p in allowed), allowed
    leaks = [(pattern, subject) for subject in _unscoped_and_others(team)
             for pattern in allowed if subject_matches(pattern, subject)]
    assert leaks == []


def _origin(subject: str) -> Origin:
    return Origin(subject, "seed", datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("subject", ["rota.api.cancel.ml.nlp", "rota.api.submit.ml.nlp",
                                     "rota.cmd.submit.ml.nlp", "rota.cmd.cancel.ml.nlp"])
def test_a_subject_with_a_dotted_team_speaks_for_no_team(subject: str) -> None:
    origin = _origin(subject)
    assert origin.team == "ml.nlp"
    config = parse_config({"cluster": CLUSTER, "teams": {"nlp": {}}}, source="rota.yaml")
    refusal = check_submission(submit_job(team="nlp"), origin.team, config)
    assert refusal is not None and refusal.code == "UNAUTHORISED" and refusal.field == "team"


def test_only_the_unscoped_submit_is_unscoped() -> None:
    assert _origin(s.API_SUBMIT).team is None
    assert _origin(s.api_submit("nlp")).team == "nlp"
    assert _origin("rota.api.x").team == ""  # no team: matches none


def test_every_command_stream_subject_is_one_a_consumer_reads() -> None:
    """A command the stream keeps and no consumer reads is acknowledged, then lost."""
    consumed = {s.SUBMIT_ALL, s.CANCEL_ALL, s.RUN_START, s.RUN_STOP}
    assert set(s.STREAM_SUBJECTS[s.STREAM_CMD]) == consumed
    for team in ("nlp", *SUBJECT_WORDS):
        kept = [p for p in team_permissions(team).publish
                if any(subject_matches(f, p) for f in s.STREAM_SUBJECTS[s.STREAM_CMD])]
        assert kept and all(any(subject_matches(c, p) for c in consumed) for p in kept)


@asynccontextmanager
async def _transaction() -> AsyncIterator[object]:
    yield object()


class _Service:
    """What `Commands.cancel` asks of its service, without servers: the job table is
    `store.lock_job`'s, patched."""

    settings = SimpleNamespace(max_message_bytes=64 * 1024)
    clock = SimpleNamespace(now=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    engine = SimpleNamespace(begin=_transaction)
    broker = relay = None


async def test_cancelling_another_teams_job_answers_as_cancelling_no_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Get, why and trace answer JOB_NOT_FOUND for another team's job; cancel must too, word
    for word but the id, or a team could probe which job ids exist. Nothing is cancelled."""
    theirs, missing = new_id(), new_id()
    jobs = {theirs: SimpleNamespace(job_id=theirs, team="nlp", state="running")}

    async def lock_job(conn: object, job_id: str) -> object:
        return jobs.get(job_id)

    async def update_job(*args: object) -> None:
        raise AssertionError("a job of another team was changed")

    published: list[m.JobRejected] = []

    async def publish(broker: object, env: Any, subject: str, **_: object) -> None:
        published.append(env.data)

    monkeypatch.setattr(store, "lock_job", lock_job)
    monkeypatch.setattr(store, "update_job", update_job)
    monkeypatch.setattr(commands, "publish", publish)
    config = parse_config({"cluster": CLUSTER, "teams": {"nlp": {}, "vision": {}}}, source="rota.yaml")
    handler = commands.Commands(cast(RotaService, _Service()), config)

    async def cancel(job_id: str) -> m.ApiReply:
        raw = envelope(m.CancelJob(job_id=job_id, team="vision"), source="test").to_bytes()
        return await handler.cancel(raw, _origin(s.api_cancel("vision")))

    answers = [await cancel(theirs), await cancel(missing)]
    assert all(not a.ok and a.error is not None for a in answers)
    errors = [a.error for a in answers if a.error is not None]
    assert [(e.code, e.field, e.message) for e in errors] == [
        ("JOB_NOT_FOUND", "job_id", f"no job {theirs}"), ("JOB_NOT_FOUND", "job_id", f"no job {missing}")]
    # The rejections on the caller's feed say no more than the replies.
    assert [(r.code, r.field, r.message.replace(r.job_id or "", "<id>"), r.team) for r in published] == [
        ("JOB_NOT_FOUND", "job_id", "no job <id>", "vision")] * 2
