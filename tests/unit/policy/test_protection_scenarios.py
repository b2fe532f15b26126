"""Per-queue protection, one rule per row (in the table style of `test_policy_scenarios`).

Each queue (tier) may set who may preempt its jobs (`preemptible_by`), its own minimum runtime
and preemption budget, and a preemption delay for its own pending jobs; unset, the global value
applies. The rows marked "(today)" hold on the code before per-queue protection too; the others
did not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import POLICIES, Decisions, PolicyConfig

import tests.unit.policy.test_policy_scenarios as table
from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, explanation

SAVE = team_config().checkpoint_save_s


def queues(config: PolicyConfig, **per_tier: dict[str, object]) -> PolicyConfig:
    """`config` with some queues' protection set, e.g. `training={"min_runtime_s": 60}`."""
    tiers = {t: replace(config.tier(t), **per_tier.get(t.value, {})) for t in Tier}  # type: ignore[arg-type]
    return config.with_overrides(tiers=tiers)


PROD_ONLY = {"preemptible_by": frozenset({Tier.production})}

# A training job of team nlp within its quota, waiting past its wait target: it may reclaim
# what cv borrowed (cv has no quota: all of it), production included (as a last resort).
_RECLAIM_PROD = (
    cluster(2, Run("cv", "production", node=0, run_id="cv-prod-a"),
            Run("cv", "production", node=1, run_id="cv-prod-b")),
    gpu_jobs("nlp", "training", submitted=NOW - 3600),
)  # fmt: skip
# A production job short of GPUs behind a lower-tier run that ends too late for its wait target.
_BEHIND_EXPERIMENT = cluster(1, Run("cv", "experiment", end=NOW + 7200, run_id="exp"))


# Team cv has no quota: everything it runs is borrowed from nlp, here on runs that cannot
# checkpoint. nlp's training job is within its quota; its wait target (`long_wait_s`) is 3600 s.
_SQUATTER = cluster(1, Run("cv", "training", resumable=False, end=NOW + 7200, run_id="squatter"))
_SQUATTER_LOSS = 8 * (NOW + 3600)  # 8 GPUs since it started at -3600: it cannot resume


def _loses(gpu_s: float, why: str = "reclaim") -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (plan,) = d.plans
        assert plan.expected_lost_gpu_s == gpu_s
        assert sum(v.expected_lost_gpu_s for v in plan.victims) == gpu_s
        assert all(v.why == why and v.borrowed for v in plan.victims)

    return check


def _delay_says_until(d: Decisions) -> None:
    reason = explanation(d, "nlp-prod-1x8").reasons[1]
    assert reason.code is Code.PREEMPTION_DELAYED
    assert "queue production waits 600 s after submission" in reason.message
    assert "may preempt from 1970-01-01 02:55:00 UTC" in reason.message  # NOW - 100 + 600
    assert reason.detail("preemption_allowed_at") == NOW + 500


ROWS = [
    # ------------------------------------------------------------ who may preempt a queue
    Row("(today) a training job within quota reclaims another team's borrowed production work",
        *_RECLAIM_PROD, team_config({"nlp": 8, "cv": 0}), victims=("cv-prod-a",)),
    Row("preemptible_by: production work is never preempted by training, not even borrowed",
        *_RECLAIM_PROD, queues(team_config({"nlp": 8, "cv": 0}), production=PROD_ONLY), victims=(),
        reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("preemptible_by: production may still reclaim production's borrowed work",
        _RECLAIM_PROD[0], gpu_jobs("nlp", "production", submitted=NOW - 3600),
        queues(team_config({"nlp": 8, "cv": 0}), production=PROD_ONLY), victims=("cv-prod-a",)),
    Row("(today) a training job stops lower-tier experiment work",
        cluster(1, Run("nlp", "experiment", run_id="exp")), gpu_jobs("nlp", "training", submitted=NOW - 3600),
        team_config({"nlp": 8}), victims=("exp",)),
    Row("preemptible_by: experiment work only production may stop is safe from training",
        cluster(1, Run("nlp", "experiment", run_id="exp")), gpu_jobs("nlp", "training", submitted=NOW - 3600),
        queues(team_config({"nlp": 8}), experiment=PROD_ONLY), victims=()),
    Row("preemptible_by: production is still free to stop that experiment work",
        cluster(1, Run("nlp", "experiment", run_id="exp")), gpu_jobs("nlp", "production", submitted=NOW - 3600),
        queues(team_config({"nlp": 8}), experiment=PROD_ONLY), victims=("exp",)),
    # ------------------------------------------------------------ minimum runtime per queue
    Row("(today) the global minimum runtime protects a 100 s old experiment run",
        cluster(1, Run("nlp", "experiment", started=NOW - 100, run_id="young")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), victims=()),
    Row("experiment's short minimum runtime lets it be preempted sooner",
        cluster(1, Run("nlp", "experiment", started=NOW - 100, run_id="young")),
        gpu_jobs("nlp", "production"), queues(team_config({"nlp": 8}), experiment={"min_runtime_s": 60.0}),
        victims=("young",)),
    Row("a queue's minimum runtime is its own: training keeps the global one",
        cluster(1, Run("nlp", "training", started=NOW - 100, run_id="young-train")),
        gpu_jobs("nlp", "production"), queues(team_config({"nlp": 8}), experiment={"min_runtime_s": 60.0}),
        victims=()),
    Row("a queue's minimum runtime may be longer than the global one",
        cluster(1, Run("nlp", "training", started=NOW - 900, run_id="train")),
        gpu_jobs("nlp", "production"), queues(team_config({"nlp": 8}), training={"min_runtime_s": 1800.0}),
        victims=()),
    # ------------------------------------------------------------ preemption budget per queue
    Row("(today) a training job preempted twice is still a victim under the global budget",
        cluster(1, Run("nlp", "training", preemptions=2, run_id="twice")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), victims=("twice",)),
    Row("training's budget of 2 exhausted: never a victim again",
        cluster(1, Run("nlp", "training", preemptions=2, run_id="twice")),
        gpu_jobs("nlp", "production"), queues(team_config({"nlp": 8}), training={"max_preemptions_per_job": 2}),
        victims=(), reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("another queue's budget does not protect training",
        cluster(1, Run("nlp", "training", preemptions=2, run_id="twice")),
        gpu_jobs("nlp", "production"), queues(team_config({"nlp": 8}), experiment={"max_preemptions_per_job": 2}),
        victims=("twice",)),
    # ------------------------------------------------------------ preemption delay
    Row("(today) no delay: production stops lower-tier work that would end too late",
        _BEHIND_EXPERIMENT, gpu_jobs("nlp", "production", submitted=NOW - 100), team_config({"nlp": 8}),
        victims=("exp",)),
    Row("inside its queue's preemption delay a preemptor does not preempt; says until when",
        _BEHIND_EXPERIMENT, gpu_jobs("nlp", "production", submitted=NOW - 100),
        queues(team_config({"nlp": 8}), production={"preemption_delay_s": 600.0}), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_DELAYED)},
        etas={"nlp-prod-1x8": NOW + 500 + SAVE}, check=_delay_says_until),
    Row("after its delay the preemptor preempts",
        _BEHIND_EXPERIMENT, gpu_jobs("nlp", "production", submitted=NOW - 700),
        queues(team_config({"nlp": 8}), production={"preemption_delay_s": 600.0}), victims=("exp",)),
    Row("the global delay applies to a queue that sets none",
        _BEHIND_EXPERIMENT, gpu_jobs("nlp", "production", submitted=NOW - 100),
        team_config({"nlp": 8}, preemption_delay_s=600.0), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_DELAYED)}),
    Row("a queue's delay of 0 overrides a global delay",
        _BEHIND_EXPERIMENT, gpu_jobs("nlp", "production", submitted=NOW - 100),
        queues(team_config({"nlp": 8}, preemption_delay_s=600.0), production={"preemption_delay_s": 0.0}),
        victims=("exp",)),
    Row("the delay's ETA is the natural start when GPUs free themselves before it ends",
        cluster(1, Run("cv", "experiment", end=NOW + 200, run_id="exp")),
        gpu_jobs("nlp", "production", submitted=NOW - 7200),
        queues(team_config({"nlp": 8}, preemption_delay_s=86_400.0)), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_DELAYED)},
        etas={"nlp-prod-1x8": NOW + 200}),
    Row("a delay with nothing it may stop says so, and promises no start at its end",
        cluster(1, Run("cv", "production", end=NOW + 7200)), gpu_jobs("nlp", "production", submitted=NOW - 3600),
        team_config({"nlp": 0, "cv": 8}, preemption_delay_s=86_400.0), victims=(),
        reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY, Code.PREEMPTION_DELAYED)},
        etas={"nlp-prod-1x8": NOW + 7200},
        check=lambda d: _says(d, "the 0 gpu GPUs it may stop now would not make room")),
    Row("reclaim waits for the preemptor's delay: the ETA is the delay's end, not the minimum runtime's",
        cluster(1, Run("nlp", "training", started=NOW - 100, end=NOW + 7200)),
        gpu_jobs("vision", "production", submitted=NOW),
        team_config({"vision": 8, "nlp": 0}, preemption_delay_s=1000.0), victims=(),
        etas={"vision-prod-1x8": NOW + 1000 + SAVE},
        says={"vision-prod-1x8": "when queue production's preemption delay ends"}),
    # ------------------------------------------------------------ reclaim at any loss (as Kueue)
    Row("before its wait target, a lender does not stop a borrower that cannot checkpoint; says until when",
        _SQUATTER, gpu_jobs("nlp", "training", submitted=NOW - 600), team_config({"nlp": 8, "cv": 0}),
        victims=(), reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY,)},
        etas={"nlp-trai-1x8": NOW + 3000 + SAVE},
        says={"nlp-trai-1x8": "has lent 8 GPUs to cv: they can be taken back at 1970-01-01 03:36:40 UTC,"
                              " when queue training's wait target of 3600 s ends; 8 of those GPUs hold runs"
                              " that cannot checkpoint"}),
    Row("past its wait target, a lender takes back a borrower that cannot checkpoint, counting its loss",
        _SQUATTER, gpu_jobs("nlp", "training", submitted=NOW - 3600), team_config({"nlp": 8, "cv": 0}),
        victims=("squatter",), reasons={"nlp-trai-1x8": (Code.WAITING_FOR_PREEMPTION,)},
        check=_loses(_SQUATTER_LOSS)),
    Row("past its wait target, production takes back a lower-tier borrower that cannot checkpoint",
        _SQUATTER, gpu_jobs("nlp", "production", submitted=NOW - 3600), team_config({"nlp": 8, "cv": 0}),
        victims=("squatter",), check=_loses(_SQUATTER_LOSS, "lower_tier")),
    Row("a borrower that can checkpoint is taken back before one that cannot",
        cluster(2, Run("cv", "training", node=0, resumable=False, run_id="fragile"),
                Run("cv", "training", node=1, started=NOW - 400, run_id="saver")),
        gpu_jobs("nlp", "training", submitted=NOW - 3600), team_config({"nlp": 8, "cv": 0}),
        victims=("saver",), check=_loses(0.0)),
    Row("among borrowers that cannot checkpoint, the one that loses least is taken back",
        cluster(2, Run("cv", "training", node=0, resumable=False, run_id="old"),
                Run("cv", "training", node=1, resumable=False, started=NOW - 1000, run_id="young")),
        gpu_jobs("nlp", "training", submitted=NOW - 3600), team_config({"nlp": 8, "cv": 0}),
        victims=("young",), check=_loses(8 * 1000.0)),
    Row("at any loss only borrowed GPUs: a team's in-quota work that cannot checkpoint keeps the loss cap",
        cluster(2, Run("cv", node=0, resumable=False, run_id="cv-a"), Run("cv", node=1, resumable=False, run_id="cv-b")),
        gpu_jobs("nlp", "training", workers=2, submitted=NOW - 3600), team_config({"nlp": 16, "cv": 8}),
        victims=()),
    Row("over its quota, a team takes back nothing that cannot checkpoint, however long it waited",
        cluster(2, Run("nlp", "training", node=0, run_id="nlp-own"),
                Run("cv", "training", node=1, resumable=False, run_id="squatter")),
        gpu_jobs("nlp", "training", submitted=NOW - 86_400), team_config({"nlp": 8, "cv": 0}), victims=()),
]  # fmt: skip


def _says(d: Decisions, words: str) -> None:
    assert any(words in r.message for r in explanation(d, "nlp-prod-1x8").reasons)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_protection_scenario(row: Row) -> None:
    table.test_scenario(row)


def test_gpus_freeing_during_the_delay_start_the_job_without_preemption() -> None:
    """Round 1, inside the delay: no plan. The experiment run ends by itself; round 2, still
    inside the delay: the job starts on the freed GPUs, and nobody was stopped."""
    world = cluster(1, Run("cv", "experiment", end=NOW + 7200, run_id="exp"))
    config = queues(team_config({"nlp": 8}), production={"preemption_delay_s": 600.0})
    job = gpu_jobs("nlp", "production", submitted=NOW - 100)
    first = POLICIES["rota"](world.snapshot(job), NOW, config)
    assert first.plans == () and first.admissions == ()
    assert first.deferred == (("nlp-prod-1x8", NOW + 500),)
    world.finish(world.runs[0])
    second = POLICIES["rota"](world.snapshot(job), NOW + 300, config)
    assert [a.job_id for a in second.admissions] == ["nlp-prod-1x8"]
    assert second.plans == () and not second.admissions[0].via_plan


def test_a_delayed_job_spends_no_preemption_attempt() -> None:
    """With one attempt per cycle, a production job inside its delay leaves it to the training
    job behind it."""
    world = cluster(2, Run("cv", "experiment", node=0, end=NOW + 7200, run_id="exp0"),
                    Run("cv", "experiment", node=1, end=NOW + 7200, run_id="exp1"))  # fmt: skip
    pending = gpu_jobs("nlp", "production", submitted=NOW - 100) + gpu_jobs("nlp", "training", submitted=NOW - 3600)
    config = queues(team_config({"nlp": 16}, max_preemption_attempts=1), production={"preemption_delay_s": 600.0})
    d = POLICIES["rota"](world.snapshot(pending), NOW, config)
    assert [p.preemptor_job_id for p in d.plans] == ["nlp-trai-1x8"]
    assert d.deferred == (("nlp-prod-1x8", NOW + 500),)


def test_baselines_ignore_rota_protection() -> None:
    """Kueue and Slurm have no per-queue minimum runtime, budget or delay here: the comparison
    gives them the same jobs, not Rota's protections."""
    world = cluster(1, Run("nlp", "experiment", started=NOW - 100, run_id="fresh"))
    config = queues(team_config({"nlp": 8}, preemption_delay_s=600.0), experiment={"min_runtime_s": 3600.0})
    for policy in ("kueue", "slurm"):
        d = POLICIES[policy](world.snapshot(gpu_jobs("nlp", "production", submitted=NOW)), NOW, config)
        assert [v.run_id for p in d.plans for v in p.victims] == ["fresh"], policy
