"""`rota why` asked of the scheduler: answered by the next cycle's explanation of the job."""

from __future__ import annotations

import asyncio

from rota.contracts import messages as m
from rota_policy import schedule
from rota_scheduler.asking import Questions
from rota_scheduler.snapshot import policy_snapshot

from tests.unit.scheduler_service.test_view_and_actions import POLICY, Story, of


def _questions(story: Story, woken: asyncio.Event) -> Questions:
    return Questions(story.view, woken.set, max_bytes=1 << 20)


async def test_a_question_wakes_a_cycle_and_gets_that_cycles_explanation() -> None:
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")
    story.cycle()
    waiting = story.submit(workers=4, team="nlp", user="alice")
    woken = asyncio.Event()
    questions = _questions(story, woken)
    asked = asyncio.create_task(questions._explain(m.GetJob(job_id=waiting)))
    await asyncio.wait_for(woken.wait(), 5)
    wanted = questions.take()
    assert wanted == {waiting}
    decisions = schedule(policy_snapshot(story.view, story.now, wanted), story.now, POLICY)
    questions.answer(wanted, decisions, story.now)
    reply = await asyncio.wait_for(asked, 5)
    assert reply.ok and reply.result["pending"] is True
    [explained] = [e for e in decisions.pending if e.job_id == waiting]
    assert [r["code"] for r in reply.result["reasons"]] == [r.code.value for r in explained.reasons]
    assert reply.result["position"] == explained.position and reply.result["explained_at"]
    assert questions.waiting == {}


async def test_a_job_that_does_not_wait_is_answered_at_once_and_an_unknown_one_not_found() -> None:
    story = Story()
    running = story.submit(workers=1, team="nlp", user="alice")
    [proposal] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(proposal)
    questions = _questions(story, asyncio.Event())
    reply = await questions._explain(m.GetJob(job_id=running))
    assert reply.ok and reply.result == {"pending": False, "state": "running"}
    missing = await questions._explain(m.GetJob(job_id="01900000-0000-7000-8000-000000000000"))
    assert not missing.ok and missing.error is not None
    assert missing.error.code == "JOB_NOT_FOUND"


async def test_a_job_admitted_by_the_cycle_that_was_asked_says_it_no_longer_waits() -> None:
    story = Story()
    fits = story.submit(workers=1, team="nlp", user="alice")
    questions = _questions(story, asyncio.Event())
    asked = asyncio.create_task(questions._explain(m.GetJob(job_id=fits)))
    await asyncio.sleep(0)
    wanted = questions.take()
    decisions = schedule(policy_snapshot(story.view, story.now, wanted), story.now, POLICY)
    assert [a.job_id for a in decisions.admissions] == [fits]
    questions.answer(wanted, decisions, story.now)
    reply = await asyncio.wait_for(asked, 5)
    assert reply.ok and reply.result["pending"] is False
