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

SHAREABLE = frozenset({"gpu"})


def _placed(job_id: str, *slot: Slot) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        (a,) = [a for a in d.admissions if a.job_id == job_id]
        assert a.placement == slot, a.placement

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
    Row("a share is no victim: production waits rather than stop an experiment share it cannot free a GPU by",
        cluster(1, Run("cv", "experiment", gpus=7), Run("cv", "experiment", share=2, gpu=7, run_id="share")),
        gpu_jobs("nlp", "production", gpus=8, name="prod"),
        team_config({"nlp": 8, "cv": 0}, shareable=SHAREABLE), admits=(), victims=(),
        reasons={"prod": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("a share stops nobody: it waits for room while experiment work holds every GPU",
        cluster(1, Run("cv", "experiment", gpus=8)),
        gpu_jobs("nlp", "production", share=2, name="half"),
        team_config({"nlp": 8, "cv": 0}, shareable=SHAREABLE), admits=(), victims=(),
        reasons={"half": (Code.INSUFFICIENT_CAPACITY,)}),
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
