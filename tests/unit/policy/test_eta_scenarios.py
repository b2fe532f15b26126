"""Every wait's ETA, with what it rests on; the holds on a preemptor, as reasons; the words a
user meets. Rows as in `test_policy_scenarios` (same `Row`, same checks): each says the ETA a
reason gives, or the blocker it names where there is none, and the words of its message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import POLICIES, Decisions

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, explanation, run_row

SAVE = team_config().checkpoint_save_s


def _second(job_id: str, code: Code, *words: str, **details: object) -> Callable[[Decisions], None]:
    """The job's second reason has `code`, holds `words` and these details."""
    def check(d: Decisions) -> None:
        reason = explanation(d, job_id).reasons[1]
        assert reason.code is code, explanation(d, job_id).reasons
        for w in words:
            assert w in reason.message, reason.message
        for key, value in details.items():
            assert reason.detail(key) == value, (key, reason.details)

    return check


def _blocker(job_id: str, blocker: str) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        ex = explanation(d, job_id)
        assert ex.eta is None and ex.reasons[0].detail("blocker") == blocker, ex.reasons[0]

    return check


def _not_said(job_id: str, words: str) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        assert words not in explanation(d, job_id).reasons[0].message

    return check


def _positions(*jobs: str) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        assert [explanation(d, j).position for j in jobs] == list(range(1, len(jobs) + 1))

    return check


_OWN_RUN_ENDS = cluster(2, Run("nlp", "training", node=0, end=NOW + 1000, run_id="own"))
_TWO_BY_TWO = cluster(2, Run("cv", "production", node=0, gpus=6, end=NOW + 1000),
                      Run("cv", "production", node=1, gpus=6, end=NOW + 2000))

ROWS: list[Row] = [
    # ------------------------------------------------------------ quota waits
    Row("quota: over its borrowing limit, the ETA is when its own run frees the quota, named",
        _OWN_RUN_ENDS, gpu_jobs("nlp", "training", submitted=NOW), team_config({"nlp": 8, "cv": 8}, borrowing={"nlp": 0}),
        reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)}, etas={"nlp-trai-1x8": NOW + 1000},
        says={"nlp-trai-1x8": "your team's training job job-own should end by"}),
    Row("quota: the team's waiting jobs free its quota one after the other, in order",
        _OWN_RUN_ENDS, gpu_jobs("nlp", "training", n=2, submitted=NOW - 10, runtime=500.0),
        team_config({"nlp": 8, "cv": 8}, borrowing={"nlp": 0}),
        etas={"nlp-trai-1x8-0": NOW + 1000, "nlp-trai-1x8-1": NOW + 1500}),
    Row("quota: a job larger than its team may ever hold has no ETA but a named blocker",
        cluster(2), gpu_jobs("nlp", "training", workers=2, submitted=NOW),
        team_config({"nlp": 8, "cv": 8}, borrowing={"nlp": 0}), reasons={"nlp-trai-2x8": (Code.QUOTA_EXCEEDED,)},
        says={"nlp-trai-2x8": "more than team nlp may ever hold: its quota of 8 plus its borrowing limit of 0"},
        check=_blocker("nlp-trai-2x8", "quota_limit")),
    Row("quota: another team's lending limit keeps its quota back: ETA when GPUs in use are freed",
        _OWN_RUN_ENDS, gpu_jobs("nlp", "training", submitted=NOW), team_config({"nlp": 8, "cv": 8}, lending={"cv": 0}),
        reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)}, etas={"nlp-trai-1x8": NOW + 1000}),
    Row("quota: with nothing kept back it says the flavor is full, not '0 kept back'",
        cluster(2, Run("cv", "training", node=0, end=NOW + 1000), Run("nlp", "training", node=1, end=NOW + 2000)),
        gpu_jobs("nlp", "training", submitted=NOW), team_config({"nlp": 8, "cv": 8}, lending={"cv": 0}),
        reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)}, etas={"nlp-trai-1x8": NOW + 1000},
        says={"nlp-trai-1x8": "all 16 gpu GPUs are in use or promised"},
        check=_not_said("nlp-trai-1x8", "keep 0")),
    # ------------------------------------------------------------ waits on a shape
    Row("fragmentation: 2 + 2 free for a 1x4: the ETA is when one node frees 4, not now",
        _TWO_BY_TWO, gpu_jobs("nlp", "training", gpus=4, submitted=NOW), team_config({"nlp": 8, "cv": 16}),
        reasons={"nlp-trai-1x4": (Code.FRAGMENTATION,)}, etas={"nlp-trai-1x4": NOW + 1000},
        says={"nlp-trai-1x4": "the most free on one node is 2"}),
    Row("fragmentation: says what to ask for instead",
        _TWO_BY_TWO, gpu_jobs("nlp", "training", gpus=4, submitted=NOW), team_config({"nlp": 8, "cv": 16}),
        says={"nlp-trai-1x4": "ask for 2 x 2"}),
    Row("topology: a gang that needs one rack starts when a rack frees room for it, not the flavor",
        cluster(4, Run("cv", "production", node=1, end=NOW + 3000), Run("cv", "production", node=3, end=NOW + 1000),
                racks=2),
        gpu_jobs("nlp", "training", workers=2, rack="required", submitted=NOW), team_config({"nlp": 16, "cv": 16}),
        reasons={"nlp-trai-2x8": (Code.FRAGMENTATION,)}, etas={"nlp-trai-2x8": NOW + 1000},
        says={"nlp-trai-2x8": "one rack should have room for it by"}),
    # ------------------------------------------------------------ holds
    Row("hold: a preemptor over quota whose only victim is inside its minimum runtime says until when",
        cluster(1, Run("nlp", "experiment", started=NOW - 100, run_id="young")),
        gpu_jobs("nlp", "production", submitted=NOW), team_config({"nlp": 8}, borrowing={"nlp": 0}), victims=(),
        reasons={"nlp-prod-1x8": (Code.QUOTA_EXCEEDED, Code.PREEMPTION_HELD)},
        etas={"nlp-prod-1x8": NOW - 100 + 300 + SAVE},
        check=_second("nlp-prod-1x8", Code.PREEMPTION_HELD, "your team's experiment job job-young",
                      "protects it for its first 300 s", hold="min_runtime", held_by="job-young")),
    Row("hold: a preemptor short of GPUs held by a victim's minimum runtime",
        cluster(1, Run("nlp", "experiment", started=NOW - 100, run_id="young")),
        gpu_jobs("nlp", "production", submitted=NOW), team_config({"nlp": 8}), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_HELD)},
        etas={"nlp-prod-1x8": NOW - 100 + 300 + SAVE},
        check=_second("nlp-prod-1x8", Code.PREEMPTION_HELD, hold="min_runtime", hold_ends_at=NOW + 200)),
    Row("hold: the wait target: running work frees the GPUs in time, so it stops no one, and says so",
        cluster(1, Run("cv", end=NOW + 600, run_id="ends-soon")), gpu_jobs("nlp", "training", submitted=NOW),
        team_config({"nlp": 8}), victims=(), etas={"nlp-trai-1x8": NOW + 600},
        reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_HELD)},
        check=_second("nlp-trai-1x8", Code.PREEMPTION_HELD, "within queue training's 3600 s wait target",
                      hold="wait_target")),
    Row("hold: victims preempted as often as their queue allows are named as the hold",
        cluster(1, Run("nlp", preemptions=team_config().max_preemptions_per_job, end=NOW + 900)),
        gpu_jobs("nlp", "production", submitted=NOW), team_config({"nlp": 8}), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_HELD)}, etas={"nlp-prod-1x8": NOW + 900},
        check=_second("nlp-prod-1x8", Code.PREEMPTION_HELD, "preempted as often as their queues allow",
                      hold="preemption_budget")),
    # ------------------------------------------------------------ can never start: named
    Row("never: too large for the cluster names the blocker", cluster(2), gpu_jobs("nlp", workers=3),
        team_config({"nlp": 16}), check=_blocker("nlp-trai-3x8", "exceeds_cluster")),
    Row("never: a flavor no node has names the blocker", cluster(1), gpu_jobs("nlp", flavor="h100"),
        team_config({"nlp": 8}), says={"nlp-trai-1x8": "it can never start"},
        check=_blocker("nlp-trai-1x8", "no_matching_flavor")),
    # ------------------------------------------------------------ position
    Row("position: 1-based and unique along the flavor's queue, across tiers",
        cluster(1, Run("cv", "production")),
        gpu_jobs("nlp", "production", name="p") + gpu_jobs("nlp", "training", name="t", submitted=1)
        + gpu_jobs("nlp", "experiment", name="e", submitted=2),
        team_config({"nlp": 8, "cv": 8}), check=_positions("p", "t", "e")),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_eta_scenario(row: Row) -> None:
    d = run_row(row)
    # Every wait has an ETA, or a reason that names what blocks it.
    for ex in d.pending:
        assert ex.eta is not None or any(r.detail("blocker") for r in ex.reasons), ex


def test_the_age_factor_grows_with_age() -> None:
    world, config = cluster(1, Run("cv", "production")), team_config({"nlp": 8, "cv": 8})
    job = gpu_jobs("nlp", "training", submitted=NOW)
    ages = [explanation(POLICIES["rota"](world.snapshot(job), NOW + dt, config), job[0].job_id).factors.age
            for dt in (0.0, 600.0, 3600.0)]
    assert ages[0] < ages[1] < ages[2]


def test_no_internal_names_leak_into_reasons() -> None:
    """Plan codes such as `rota:lower_tier` are for machines: no reason a user reads holds one."""
    seen = []
    for row in ROWS:
        snapshot = row.world.snapshot(row.pending)
        d = POLICIES[row.policy](replace(snapshot), NOW, row.config)
        seen.extend(r.message for ex in d.pending for r in ex.reasons)
    assert seen and not [m for m in seen if "rota:" in m or "lower_tier" in m or "last_resort" in m]


def test_an_eta_that_rests_on_a_run_with_no_declared_runtime_names_it() -> None:
    world = cluster(1, Run("cv", "training", started=NOW - 100, run_id="open-ended"))
    row = Row("behind a run with no declared runtime", world, gpu_jobs("nlp", "training", submitted=NOW),
              team_config({"nlp": 0, "cv": 8}, preemption=False),
              etas={"nlp-trai-1x8": NOW - 100 + team_config().default_runtime_s},
              says={"nlp-trai-1x8": "its ETA assumes that job job-open-ended, which declared no runtime"})
    d = run_row(row)
    assert explanation(d, "nlp-trai-1x8").reasons[0].detail("eta_assumes") == "job-open-ended"
