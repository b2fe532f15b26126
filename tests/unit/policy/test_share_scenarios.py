"""Scenario rows for GPU shares (DECISIONS 66-68), in the data-row style of `test_policy_scenarios`:
nodes of 8 GPUs of the flavor `gpu`, which the rows' config lets shares split unless a row says
otherwise. A share is given in quarters of one GPU (`share=2` is 0.5).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import Decisions, Slot

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, run_row
from tests.unit.policy.test_protection_scenarios import PROD_ONLY, queues

SHAREABLE = frozenset({"gpu"})


def _placed(job_id: str, *slot: Slot) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (a,) = [a for a in d.admissions if a.job_id == job_id]
        assert a.placement == slot, a.placement

    return check


def _target(job_id: str, *slot: Slot) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (p,) = [p for p in d.plans if p.preemptor_job_id == job_id]
        assert p.target == slot, p.target

    return check


def _both(*checks: Callable[[Decisions], None]) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        for c in checks:
            c(d)

    return check


ROWS: list[Row] = [
    Row("share: a half GPU starts on one free GPU, booked as a share of it",
        cluster(1), gpu_jobs("nlp", share=2, name="half"),
        team_config({"nlp": 8}, shareable=SHAREABLE), admits=("half",),
        check=_placed("half", Slot(0, "n0", (0,), 2))),
    Row("share: two halves share one GPU",
        cluster(1), gpu_jobs("nlp", share=2, name="a", submitted=0) + gpu_jobs("nlp", share=2, name="b", submitted=5),
        team_config({"nlp": 8}, shareable=SHAREABLE), admits=("a", "b"),
        check=_both(_placed("a", Slot(0, "n0", (0,), 2)), _placed("b", Slot(0, "n0", (0,), 2)))),
    Row("share best fit: a half goes onto the GPU it fills, not onto the emptier shared GPU",
        cluster(1, Run("cv", "training", share=1, gpu=0), Run("cv", "training", share=2, gpu=1)),
        gpu_jobs("nlp", share=2, name="half"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=("half",),
        check=_placed("half", Slot(0, "n0", (1,), 2))),
    Row("share best fit: a GPU already shared before a free GPU, even on a node with more free",
        cluster(2, Run("cv", "training", node=0, gpus=4), Run("cv", "training", node=1, share=2, gpu=3)),
        gpu_jobs("nlp", share=1, name="quarter"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=("quarter",),
        check=_placed("quarter", Slot(0, "n1", (3,), 1))),
    Row("share on a node that a gang also wants: the share goes to the fragmented node, the gang to the whole one",
        cluster(2, Run("cv", "training", node=0, gpus=4)),
        gpu_jobs("nlp", share=2, name="half", submitted=0) + gpu_jobs("nlp", gpus=8, name="gang", submitted=5),
        team_config({"nlp": 16, "cv": 8}, shareable=SHAREABLE), admits=("half", "gang"),
        check=_both(_placed("half", Slot(0, "n0", (4,), 2)), _placed("gang", Slot(0, "n1", tuple(range(8)))))),
    Row("share on a node that a gang also wants: the GPU already shared takes the share, the node stays for the gang",
        cluster(2, Run("cv", "training", node=0, gpus=7), Run("cv", "training", node=1, share=2, gpu=0)),
        gpu_jobs("nlp", share=2, name="half", submitted=0) + gpu_jobs("nlp", gpus=7, name="gang", submitted=5),
        team_config({"nlp": 16, "cv": 16}, shareable=SHAREABLE), admits=("half", "gang"),
        check=_both(_placed("half", Slot(0, "n1", (0,), 2)), _placed("gang", Slot(0, "n1", tuple(range(1, 8)))))),
    Row("a whole-GPU job never lands on a GPU a share holds: 7 of 8 free is too few for 8",
        cluster(1, Run("cv", "training", share=1, gpu=0)),
        gpu_jobs("nlp", gpus=8, name="eight"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(),
        reasons={"eight": (Code.INSUFFICIENT_CAPACITY,)}, victims=()),
    Row("share: a full shared GPU and no free GPU: the share waits, a quarter that fits starts",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "training", share=3, gpu=7)),
        gpu_jobs("nlp", share=2, name="half", submitted=0) + gpu_jobs("nlp", share=1, name="quarter", submitted=5),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=("quarter",),
        reasons={"half": (Code.INSUFFICIENT_CAPACITY,)},
        check=_placed("quarter", Slot(0, "n0", (7,), 1))),
    Row("share on a flavor that does not allow shares waits with NO_MATCHING_FLAVOR naming the field",
        cluster(1), gpu_jobs("nlp", share=2, name="half"),
        team_config({"nlp": 8}), admits=(), reasons={"half": (Code.NO_MATCHING_FLAVOR,)},
        says={"half": "shareable: true on gpu in cluster.flavors"}),
    Row("quota counts fractions: a team with a quota of 1 and no borrowing runs two halves, not three",
        cluster(1),
        gpu_jobs("nlp", share=2, n=3, name="half"),
        team_config({"nlp": 1}, borrowing={"nlp": 0}, shareable=SHAREABLE), admits=("half-0", "half-1"),
        reasons={"half-2": (Code.QUOTA_EXCEEDED,)}),
    Row("quota counts fractions: a quarter fits beside 0.75 of a quota of 1",
        cluster(1, Run("nlp", "training", share=3, gpu=0)),
        gpu_jobs("nlp", share=1, name="quarter") + gpu_jobs("nlp", gpus=1, name="one", submitted=5),
        team_config({"nlp": 1}, borrowing={"nlp": 0}, shareable=SHAREABLE), admits=("quarter",),
        reasons={"one": (Code.QUOTA_EXCEEDED,)}),
    Row("a share is a victim: production stops the experiment run and the share alone on the GPU it needs",
        cluster(1, Run("cv", "experiment", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="share")),
        gpu_jobs("nlp", "production", gpus=8, name="prod"),
        team_config({"nlp": 8, "cv": 0}, shareable=SHAREABLE), admits=(), victims=("share", "run-cv-expe-0"),
        reasons={"prod": (Code.WAITING_FOR_PREEMPTION,)}, says={"prod": "0.5 of one gpu GPU"},
        check=_target("prod", Slot(0, "n0", tuple(range(8))))),
    Row("a whole-GPU production job stops two experiment halves on one GPU, which frees it",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="h1"),
                Run("cv", "experiment", share=2, gpu=7, run_id="h2")),
        gpu_jobs("nlp", "production", gpus=1, name="prod"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(), victims=("h1", "h2"),
        reasons={"prod": (Code.WAITING_FOR_PREEMPTION,)},
        says={"prod": "needs 1 gpu GPUs; stopping 2 run(s) (experiment) stops 2 shares (1) of one gpu GPU"},
        check=_target("prod", Slot(0, "n0", (7,)))),
    Row("a production share stops one experiment share and leaves the other running beside it",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="a"),
                Run("cv", "experiment", share=2, gpu=7, run_id="b")),
        gpu_jobs("nlp", "production", share=2, name="half"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(), victims=("a",),
        reasons={"half": (Code.WAITING_FOR_PREEMPTION,)}, says={"half": "needs 0.5 of one gpu GPU"},
        check=_target("half", Slot(0, "n0", (7,), 2))),
    Row("a production share stops just enough: one quarter of three, where a half needs room",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=1, gpu=7, run_id="q1"),
                Run("cv", "experiment", share=1, gpu=7, run_id="q2"),
                Run("cv", "experiment", share=1, gpu=7, run_id="q3")),
        gpu_jobs("nlp", "production", share=2, name="half"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(), victims=("q1",),
        check=_target("half", Slot(0, "n0", (7,), 2))),
    Row("a whole-GPU job does not plan a GPU one of whose two shares it may not stop",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="exp"),
                Run("cv", "training", share=2, gpu=7, run_id="kept")),
        gpu_jobs("nlp", "production", gpus=1, name="prod"),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(), victims=(),
        reasons={"prod": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("a whole job's failed search does not stop a share of its queue from finding room by one",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="exp"),
                Run("cv", "training", share=2, gpu=7, run_id="kept")),
        gpu_jobs("nlp", "training", gpus=1, name="one", submitted=-100_000.0)
        + gpu_jobs("nlp", "training", share=2, name="half", submitted=-99_000.0),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=(), victims=("exp",),
        reasons={"one": (Code.INSUFFICIENT_CAPACITY,), "half": (Code.WAITING_FOR_PREEMPTION,)},
        check=_target("half", Slot(0, "n0", (7,), 2))),
    Row("a share too young to stop (its queue's minimum runtime) keeps its GPU; the whole job waits",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="old"),
                Run("cv", "experiment", share=2, gpu=7, run_id="young", started=NOW - 10.0)),
        gpu_jobs("nlp", "production", gpus=1, name="prod"),
        queues(team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), experiment={"min_runtime_s": 600.0}),
        admits=(), victims=(), reasons={"prod": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("a share only production may stop (preemptible_by) is safe from a training share, which stops the other",
        cluster(1, Run("cv", "production", gpus=7), Run("cv", "experiment", share=1, gpu=7, run_id="shielded"),
                Run("cv", "training", share=1, gpu=7, run_id="open", started=-7200.0),
                Run("cv", "experiment", share=2, gpu=7, run_id="safe")),
        gpu_jobs("nlp", "training", share=1, name="quarter"),
        queues(team_config({"nlp": 8, "cv": 0}, shareable=SHAREABLE), experiment=PROD_ONLY),
        admits=(), victims=("open",), check=_target("quarter", Slot(0, "n0", (7,), 1))),
    Row("a share stops a whole run when no GPU is shared: it takes one GPU of the ones freed",
        cluster(1, Run("cv", "experiment", gpus=8)),
        gpu_jobs("nlp", "production", share=2, name="half"),
        team_config({"nlp": 8, "cv": 0}, shareable=SHAREABLE), admits=(), victims=("run-cv-expe-0",),
        check=_target("half", Slot(0, "n0", (0,), 2))),
    Row("a share on a node that a gang also wants: a production gang stops the share and the run beside it",
        cluster(2, Run("cv", "training", node=1, gpus=8), Run("cv", "experiment", node=0, gpus=6),
                Run("cv", "experiment", node=0, share=3, gpu=6, run_id="s1"),
                Run("cv", "experiment", node=0, share=1, gpu=6, run_id="s2"),
                Run("cv", "experiment", node=0, share=2, gpu=7, run_id="s3")),
        gpu_jobs("nlp", "production", gpus=8, name="gang"),
        team_config({"nlp": 8, "cv": 16}, shareable=SHAREABLE), admits=(),
        victims=("s2", "s3", "s1", "run-cv-expe-1"),
        check=_target("gang", Slot(0, "n0", tuple(range(8))))),
    Row("a share behind a reservation: room on a shared GPU takes no whole GPU, so it starts",
        cluster(1, Run("cv", "training", gpus=4, end=NOW + 3600), Run("cv", "training", share=2, gpu=4)),
        gpu_jobs("nlp", "production", gpus=8, name="big", submitted=0)
        + gpu_jobs("nlp", "training", share=2, name="half", submitted=5, runtime=86_400.0)
        + gpu_jobs("nlp", "training", gpus=1, name="one", submitted=6, runtime=86_400.0),
        team_config({"nlp": 16, "cv": 16}, shareable=SHAREABLE), admits=("half",),
        reasons={"big": (Code.INSUFFICIENT_CAPACITY,), "one": (Code.RESERVED_FOR_HIGHER_PRIORITY,)}),
    Row("a share behind a full window of blocked jobs in its queue still gets its turn on a shared GPU",
        cluster(1, Run("cv", "training", gpus=7), Run("cv", "training", share=2, gpu=7)),
        gpu_jobs("nlp", "experiment", gpus=8, n=70, name="big")
        + gpu_jobs("nlp", "experiment", share=2, name="half", submitted=100),
        team_config({"nlp": 8, "cv": 8}, shareable=SHAREABLE), admits=("half",),
        check=_placed("half", Slot(0, "n0", (7,), 2))),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_share_rows(row: Row) -> None:
    run_row(row)
