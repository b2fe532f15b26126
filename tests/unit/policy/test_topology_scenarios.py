"""Scenario rows for topology levels, in the data-row style of `test_policy_scenarios`.

Worlds of nodes n0.. of 8 GPUs, racks filled in order (r0, r1, ..), and, where a row says
`blocks`, racks grouped into blocks in order (b0, b1, ..): the cluster then declares the levels
block > rack. A job's topology is (required, preferred) level.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import Decisions

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import Row, explanation, run_row


def _on(job_id: str, *nodes: str) -> Callable[[Decisions], None]:
    """The job is admitted on exactly these nodes, one worker each, in order."""
    def check(d: Decisions) -> None:
        (admission,) = [a for a in d.admissions if a.job_id == job_id]
        assert tuple(s.node for s in admission.placement) == nodes, admission.placement
    return check


def _plan_in_one(level_of: dict[str, str]) -> Callable[[Decisions], None]:
    """The one plan's target lies in one domain of the level (`level_of`: node -> domain)."""
    def check(d: Decisions) -> None:
        (plan,) = d.plans
        assert len({level_of[s.node] for s in plan.target}) == 1, plan.target
    return check


def _names_the_block(d: Decisions) -> None:
    reason = explanation(d, "gang").reasons[0]
    assert reason.detail("level") == "block"
    assert reason.detail("best_domain_workers") == 1


def _diagnosis_names_rack(d: Decisions) -> None:
    (diag,) = d.diagnoses
    assert diag.cause == "fragmentation"
    assert "1 need one rack" in diag.message, diag.message




QUOTA = team_config({"nlp": 64, "cv": 64})

ROWS: list[Row] = [
    Row("required rack holds: the gang goes to the rack with two free nodes",
        cluster(4, Run("cv", "production", node=1), racks=2, blocks=1),
        gpu_jobs("nlp", workers=2, topology=("rack", None), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n2", "n3")),
    Row("required rack, free GPUs split across racks: FRAGMENTATION naming the rack",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=2, blocks=1),
        gpu_jobs("nlp", workers=2, topology=("rack", None), name="gang"), QUOTA,
        admits=(), reasons={"gang": (Code.FRAGMENTATION,)},
        says={"gang": "needs 2x8 gpu GPUs in one rack; the rack with the most room, r1, seats 1 of 2"
                      " workers; 2 node(s) with room for a worker are spread across 2 rack(s)"}),
    Row("required block, free GPUs split across blocks: FRAGMENTATION naming the block",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=4, blocks=2),
        gpu_jobs("nlp", workers=2, topology=("block", None), name="gang"), QUOTA,
        admits=(), reasons={"gang": (Code.FRAGMENTATION,)}, says={"gang": "in one block"},
        check=_names_the_block),
    Row("preferred block falls back across blocks when no block seats the gang",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=4, blocks=2),
        gpu_jobs("nlp", workers=2, topology=(None, "block"), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n0", "n2")),
    Row("preferred rack falls back to the required block, not to any nodes",
        # b0 = r0 (n0, n1) + r1 (n2, n3), b1 = r2 (n4, n5) + r3 (n6, n7): one free node per rack,
        # and b1 has one more GPU free, so best-fit picks b0 for the two workers.
        cluster(8, Run("cv", "production", node=1), Run("cv", "production", node=3),
                Run("cv", "production", node=5), Run("cv", "production", node=7, gpus=7),
                racks=4, blocks=2),
        gpu_jobs("nlp", workers=2, topology=("block", "rack"), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n0", "n2")),
    Row("preferred rack is kept when a rack seats the gang, though a block would too",
        cluster(8, Run("cv", "production", node=1), Run("cv", "production", node=3),
                Run("cv", "production", node=5), racks=4, blocks=2),
        gpu_jobs("nlp", workers=2, topology=("block", "rack"), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n6", "n7")),
    Row("a whole rack is kept for the gang that requires it: the small job packs into the fuller rack",
        # r0 = n0, n1 free; r1 = n2 free, n3 busy. Production's small job goes first; with levels
        # declared it goes to r1, the rack with the least room, and the gang gets r0.
        cluster(4, Run("cv", "production", node=3), racks=2, blocks=1),
        gpu_jobs("cv", "production", name="small") + gpu_jobs("nlp", workers=2, topology=("rack", None), name="gang"),
        QUOTA, admits=("small", "gang"), check=_on("small", "n2")),
    Row("no levels declared: the small job takes the first whole node, as before, and the gang waits",
        cluster(4, Run("cv", "production", node=3), racks=2),
        gpu_jobs("cv", "production", name="small") + gpu_jobs("nlp", workers=2, rack="required", name="gang"),
        QUOTA, admits=("small",), reasons={"gang": (Code.FRAGMENTATION,)}, check=_on("small", "n0")),
    Row("rack: required is the level rack: the same placement with topology required rack",
        cluster(4, Run("cv", "production", node=1), racks=2),
        gpu_jobs("nlp", workers=2, topology=("rack", None), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n2", "n3")),
    Row("required node: both workers share one node",
        cluster(2, Run("cv", "production", node=0, gpus=4), racks=1, blocks=1),
        gpu_jobs("nlp", workers=2, gpus=4, topology=("node", None), name="gang"), QUOTA,
        admits=("gang",), check=_on("gang", "n1", "n1")),
    Row("a required level the cluster does not declare: every node is its own domain, so a gang of"
        " two whole nodes can never start",
        cluster(2, racks=1),
        gpu_jobs("nlp", workers=2, topology=("nvlink", None), name="gang"), QUOTA,
        admits=(), reasons={"gang": (Code.EXCEEDS_CLUSTER,)}, says={"gang": "in one nvlink"},
        no_eta=("gang",)),
    Row("a gang larger than any rack that requires one can never start",
        cluster(4, racks=2, blocks=1),
        gpu_jobs("nlp", workers=3, topology=("rack", None), name="gang"), QUOTA,
        admits=(), reasons={"gang": (Code.EXCEEDS_CLUSTER,)}, says={"gang": "in one rack"}),
    Row("preemption for a gang that requires a rack stops work in one rack only",
        cluster(4, Run("cv", node=0), Run("cv", node=1), Run("cv", node=2), Run("cv", node=3),
                racks=2, blocks=1),
        gpu_jobs("nlp", "production", workers=2, topology=("rack", None), name="gang"), QUOTA,
        admits=(), reasons={"gang": (Code.WAITING_FOR_PREEMPTION,)},
        check=_plan_in_one({"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1"})),
    Row("the queue diagnosis names the level that fragments its long waiters",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=2, blocks=1),
        gpu_jobs("nlp", workers=2, topology=("rack", None), name="gang", submitted=-100_000.0), QUOTA,
        admits=(), reasons={"gang": (Code.FRAGMENTATION,)}, causes=(("gpu", "fragmentation"),),
        check=_diagnosis_names_rack),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_topology_scenario(row: Row) -> None:
    run_row(row)
