"""Scenario rows for elastic gangs (DECISIONS 70-74), in the data-row style of
`test_policy_scenarios`: nodes of 8 GPUs, jobs of 8 GPUs per worker.

An elastic job of `workers` to `workers_max` is admitted at the largest size that fits now and
never below its min; its reasons and ETA are for its min. A resumable elastic run above its min
is shrunk for a preemptor instead of stopped; below its max, it grows on idle GPUs nobody waits
for.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import POLICIES, Decisions

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, run_row


def _size(job_id: str, workers: int) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (a,) = [a for a in d.admissions if a.job_id == job_id]
        assert len(a.placement) == workers, a.placement
        assert [s.worker for s in a.placement] == list(range(workers))

    return check


def _shrunk(run_id: str, keeps: int, target: tuple[str, ...]) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (plan,) = d.plans
        (victim,) = plan.victims
        assert (victim.run_id, victim.shrink_to) == (run_id, keeps)
        assert victim.gpus == sum(len(s.gpus) for s in plan.target)
        assert tuple(s.node for s in plan.target) == target
        assert plan.reason == "shrink:lower_tier" and plan.expected_lost_gpu_s == 0.0
        assert "shrinking 1 elastic run(s)" in plan.message
        assert not d.grows

    return check


def _stopped(d: Decisions) -> None:
    assert [v.shrink_to for p in d.plans for v in p.victims] == [0]


def _grows(run_id: str, workers: int, nodes: tuple[str, ...]) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (grow,) = d.grows
        assert (grow.run_id, grow.workers) == (run_id, workers)
        assert tuple(s.node for s in grow.added) == nodes
        assert [s.worker for s in grow.added] == list(range(workers - len(nodes), workers))

    return check


def _no_grow(d: Decisions) -> None:
    assert d.grows == ()


ELASTIC = {"gpus": 8, "workers": 2, "workers_max": 4}
THREE_ENDS = (Run("cv", "production", node=0, end=NOW + 3600), Run("cv", "production", node=1, end=NOW + 7200),
              Run("cv", "production", node=2, end=NOW + 10800))  # fmt: skip

ROWS: list[Row] = [
    Row("elastic: admitted at its max when all of it fits",
        cluster(4), gpu_jobs("nlp", name="el", **ELASTIC), team_config({"nlp": 32}),
        admits=("el",), check=_size("el", 4)),
    Row("elastic: admitted at the largest size that fits now",
        cluster(4, Run("cv", "production", node=0)), gpu_jobs("nlp", name="el", **ELASTIC),
        team_config({"nlp": 32, "cv": 8}), admits=("el",), check=_size("el", 3)),
    Row("elastic: admitted at its min when only its min fits",
        cluster(4, Run("cv", "production", node=0), Run("cv", "production", node=1)),
        gpu_jobs("nlp", name="el", **ELASTIC), team_config({"nlp": 32, "cv": 16}),
        admits=("el",), check=_size("el", 2)),
    Row("elastic: its team's quota caps its size (no borrowing)",
        cluster(4), gpu_jobs("nlp", name="el", **ELASTIC), team_config({"nlp": 24}, borrowing={"nlp": 0}),
        admits=("el",), check=_size("el", 3)),
    Row("elastic: waits when even its min does not fit; its reason and ETA are for its min",
        cluster(4, *THREE_ENDS), gpu_jobs("nlp", name="el", **ELASTIC), team_config({"nlp": 32, "cv": 24}),
        admits=(), reasons={"el": (Code.INSUFFICIENT_CAPACITY,)}, says={"el": "needs 2x8 gpu GPUs; 8 of 32 are free (elastic, 2 to 4 workers: it starts at the"
                                " largest size that fits once 2 do; its ETA is for 2)"},
        etas={"el": NOW + 3600}),
    Row("elastic: quota below its min keeps it waiting with QUOTA_EXCEEDED",
        cluster(4), gpu_jobs("nlp", name="el", **ELASTIC), team_config({"nlp": 8}, borrowing={"nlp": 0}),
        admits=(), reasons={"el": (Code.QUOTA_EXCEEDED,)}),
    Row("elastic victim versus a rigid preemptor: shrunk to its min, not stopped",
        cluster(4, Run("nlp", "training", node=[0, 1, 2, 3], elastic_min=2, run_id="el")),
        gpu_jobs("nlp", "production", gpus=8, workers=2, name="prod", submitted=0),
        team_config({"nlp": 32}), admits=(), victims=("el",),
        reasons={"prod": (Code.WAITING_FOR_PREEMPTION,)}, check=_shrunk("el", 2, ("n2", "n3"))),
    Row("elastic victim versus a rigid preemptor: it keeps every worker the preemptor does not need",
        cluster(4, Run("nlp", "training", node=[0, 1, 2, 3], elastic_min=1, run_id="el")),
        gpu_jobs("nlp", "production", gpus=8, workers=1, name="prod", submitted=0),
        team_config({"nlp": 32}), admits=(), victims=("el",), check=_shrunk("el", 3, ("n3",))),
    Row("elastic victim versus a rigid preemptor: at its min it is stopped as any run",
        cluster(2, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el")),
        gpu_jobs("nlp", "production", gpus=8, workers=2, name="prod", submitted=0),
        team_config({"nlp": 16}), admits=(), victims=("el",), check=_stopped),
    Row("elastic victim versus a rigid preemptor: another team's in-quota work is not shrunk",
        cluster(4, Run("cv", "training", node=[0, 1, 2, 3], elastic_min=2, run_id="el")),
        gpu_jobs("nlp", "production", gpus=8, workers=2, name="prod", submitted=0),
        team_config({"nlp": 0, "cv": 32}), admits=(), victims=()),
    # Shrink first even over a lower-tier run (DECISIONS 73): taking the experiment run instead
    # cut philly-hetero's elastic gain (elastic jobs' wait 8,770 s -> 23,511 s, utilization
    # below rigid's; policy/RESULTS.md, "Every issue-16 feature at once").
    Row("elastic victim versus a rigid preemptor: shrunk before a lower-tier run is stopped",
        cluster(5, Run("nlp", "training", node=[0, 1, 2, 3], elastic_min=2, run_id="el"),
            Run("nlp", "experiment", node=4, run_id="exp")),
        gpu_jobs("nlp", "production", gpus=8, workers=1, name="prod", submitted=0),
        team_config({"nlp": 40}), admits=(), victims=("el",), check=_shrunk("el", 3, ("n3",))),
    Row("elastic victim: a run that cannot checkpoint is stopped, not shrunk",
        cluster(4, Run("nlp", "training", node=[0, 1, 2, 3], elastic_min=2, run_id="el", resumable=False)),
        gpu_jobs("nlp", "production", gpus=8, workers=2, name="prod", submitted=0),
        team_config({"nlp": 32}, max_lost_gpu_s_per_plan=None), admits=(), victims=("el",), check=_stopped),
    Row("elastic run: grows on idle GPUs when nothing waits for them",
        cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el")), [],
        team_config({"nlp": 32}), admits=(), check=_grows("el", 4, ("n2", "n3"))),
    Row("elastic run: grows only as far as its team's quota allows",
        cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el")), [],
        team_config({"nlp": 24}, borrowing={"nlp": 0}), admits=(), check=_grows("el", 3, ("n2",))),
    Row("elastic run: does not grow while a job waits for its flavor",
        cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el")),
        gpu_jobs("cv", "training", gpus=8, workers=1, name="capped"),
        team_config({"nlp": 32, "cv": 0}, borrowing={"cv": 0}), admits=(),
        reasons={"capped": (Code.QUOTA_EXCEEDED,)}, check=_no_grow),
    Row("elastic run: does not grow in its first half hour",
        cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el", started=NOW - 600)), [],
        team_config({"nlp": 32}), admits=(), check=_no_grow),
    Row("elastic run: a job admitted in the cycle takes the idle GPUs first",
        cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el")),
        gpu_jobs("cv", "training", gpus=8, workers=1, name="one"),
        team_config({"nlp": 32, "cv": 8}), admits=("one",), check=_grows("el", 3, ("n3",))),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_elastic_scenario(row: Row) -> None:
    run_row(row)


@pytest.mark.parametrize("policy", ["fifo", "kueue", "slurm"])
def test_baselines_never_grow_a_run(policy: str) -> None:
    world = cluster(4, Run("nlp", "training", node=[0, 1], elastic_min=2, run_id="el"))
    assert POLICIES[policy](world.snapshot([]), NOW, team_config({"nlp": 32})).grows == ()
