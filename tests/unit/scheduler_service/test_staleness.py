"""A published wait is published again when what it says goes stale beyond its tolerance."""

from __future__ import annotations

from rota.contracts import messages as m
from rota_policy import schedule
from rota_scheduler.actions import plan_actions, record_sent
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.staleness import (
    NEVER,
    PLACE,
    SCORE,
    WORDS,
    WaitPrint,
    eta_tolerance_s,
    staleness,
    text_hash,
    words,
)

from tests.unit.scheduler_service.test_view_and_actions import POLICY, Story, of

NOW = 1_800_000_000.0


def _print(**kw: object) -> WaitPrint:
    base: dict[str, object] = {"codes": ("INSUFFICIENT_CAPACITY",), "text": text_hash(["no room"]),
                               "eta": NOW + 3600.0, "position": 3, "overdue": False,
                               "factors": (1000.0, 10.0, 5000.0, 0.0)}
    base.update(kw)
    return WaitPrint(**base)  # type: ignore[arg-type]


def test_an_eta_is_published_again_only_past_its_tolerance() -> None:
    published = _print()
    assert eta_tolerance_s(NOW + 3600.0, NOW) == 360.0  # 10% of the hour left
    assert staleness(published, _print(eta=NOW + 3600.0 + 350), NOW, 1.0) == 0.0
    assert staleness(published, _print(eta=NOW + 3600.0 - 370), NOW, 1.0) > 0.0
    near = _print(eta=NOW + 300.0)
    assert eta_tolerance_s(NOW + 300.0, NOW) == 60.0  # never less than a minute
    assert staleness(near, _print(eta=NOW + 359.0), NOW, 1.0) == 0.0
    assert staleness(near, _print(eta=NOW + 361.0), NOW, 1.0) > 0.0
    assert staleness(published, _print(eta=None), NOW, 1.0) == PLACE


def test_words_position_and_the_score_each_count_and_rank() -> None:
    published = _print()
    assert staleness(None, published, NOW, 1.0) == NEVER
    assert staleness(published, _print(), NOW, 1.0) == 0.0
    assert staleness(published, _print(text=text_hash(["a100 is full"])), NOW, 1.0) == WORDS
    assert staleness(published, _print(codes=("QUOTA_EXCEEDED",)), NOW, 1.0) == WORDS
    assert staleness(published, _print(overdue=True), NOW, 1.0) == WORDS
    assert staleness(published, _print(position=2), NOW, 1.0) == PLACE
    # The age factor grows every second: published again once it has grown by a tenth.
    assert staleness(published, _print(factors=(1000.0, 10.9, 5000.0, 0.0)), NOW, 1.0) == 0.0
    assert staleness(published, _print(factors=(1000.0, 11.1, 5000.0, 0.0)), NOW, 1.0) == SCORE
    assert WORDS > PLACE > SCORE > 0


def test_a_time_in_the_words_is_held_to_the_etas_tolerance_not_compared_as_text() -> None:
    def said(at: str) -> WaitPrint:
        text, times = words([f"your team's training job X should end by {at}, which frees"])
        return _print(text=text, times=times)

    published = said("2027-01-15 12:00:00 UTC")
    now = 1_800_010_800.0  # 2027-01-15 11:00 UTC: an hour before, so 6 minutes' tolerance
    assert staleness(published, said("2027-01-15 12:00:02 UTC"), now, 1.0) == 0.0  # slides
    assert staleness(published, said("2027-01-15 12:07:00 UTC"), now, 1.0) > 0.0  # past 6 min
    text, _ = words(["no time here"])
    assert staleness(published, _print(text=text), now, 1.0) == WORDS


def test_the_job_behind_an_admitted_one_is_published_with_its_new_position() -> None:
    story = Story()
    running = [story.submit(workers=4, team="nlp", user="alice", declared_runtime_s=3600)]
    first = story.cycle()
    [proposal] = of(first, m.AllocationProposed)
    story.grant_and_start(proposal)
    head = story.submit(workers=4, team="nlp", user="alice")
    behind = story.submit(workers=4, team="nlp", user="alice")
    published = {p.job_id: p for p in of(story.cycle(), m.JobPending)}
    assert published[behind].position == published[head].position + 1
    story.now += 5
    story.event(m.RunFinished, run_id=proposal.run_id, job_id=running[0], exit_code=0)
    story.released(proposal.run_id, running[0])
    out = story.cycle()
    assert [p.job_id for p in of(out, m.AllocationProposed)] == [head]
    [moved] = of(out, m.JobPending)
    assert moved.job_id == behind and moved.position == published[head].position


def test_the_age_factor_is_published_again_as_it_grows_but_not_every_cycle() -> None:
    story = Story()
    story.submit(workers=4, team="nlp", user="alice", declared_runtime_s=100 * 3600)
    [running] = of(story.cycle(), m.AllocationProposed)
    story.grant_and_start(running)
    waiting = story.submit(workers=4, team="nlp", user="alice", queue="experiment")
    [first] = of(story.cycle(), m.JobPending)
    ages = [first.factors.age]
    published = 1
    for _ in range(60):
        story.now += 600  # ten hours in all
        out = [p for p in of(story.cycle(), m.JobPending) if p.job_id == waiting]
        published += len(out)
        ages.extend(p.factors.age for p in out)
    assert ages == sorted(ages) and ages[-1] > ages[0]
    assert 3 <= published < 60  # every tenth of growth (and the threshold), not each cycle


def test_never_explained_jobs_go_first_then_the_most_changed() -> None:
    story = Story()
    story.submit(workers=4, team="nlp", user="alice")
    story.cycle()
    older = story.submit(workers=4, team="nlp", user="alice")
    story.cycle()  # explained once
    story.now += 3601  # past training's long-wait threshold: its words change
    newer = story.submit(workers=4, team="nlp", user="alice")
    decisions = schedule(policy_snapshot(story.view, story.now), story.now, POLICY)
    actions = plan_actions(story.view, decisions, now=story.now, new_uuid=story.uuid,
                           pending_limit=1)
    assert [p.job_id for p in of([o.message for o in actions.outgoing], m.JobPending)] == [newer]
    assert actions.held_back == [older]
    record_sent(story.view, actions, story.now)
