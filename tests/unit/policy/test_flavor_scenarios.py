"""Scenario rows for jobs that accept several flavors (flavor fallback), in the data-row style of
`test_policy_scenarios`: node n0 is `a100`, n1 `v100` (and n2 `t4` where a row has three).

A job names its preferred flavor and its fallbacks; the ladder places it on the first flavor that
admits it within its team's quota, else on the first that admits it by borrowing.
"""

from __future__ import annotations

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import Decisions

from tests.unit.policy.builders import Run, cluster, gpu_jobs, team_config
from tests.unit.policy.test_policy_scenarios import NOW, Row, explanation, run_row

TWO = {0: "a100", 1: "v100"}
THREE = {0: "a100", 1: "v100", 2: "t4"}


def _quotas(a100: int, v100: int, t4: int = 0) -> dict[str, dict[str, int]]:
    return {"nlp": {"a100": a100, "v100": v100, "t4": t4}, "cv": {"a100": 8, "v100": 8, "t4": 8}}


def _says_wider_list_starts_it_now(d: Decisions) -> None:
    (diag,) = d.diagnoses
    assert "would start now on v100 (within quota)" in diag.message
    assert "1h 00m before its ETA" in diag.message, diag.message


def _reason_says_wider_list_starts_it_now(d: Decisions) -> None:
    reason = explanation(d, "one").reasons[0]
    assert reason.code is Code.INSUFFICIENT_CAPACITY
    assert reason.message.endswith("; it would start now on v100 (within its team's quota) if it accepted v100")
    assert (reason.detail("wider_flavor"), reason.detail("wider_within_quota")) == ("v100", "yes")


def _reason_names_every_flavor(d: Decisions) -> None:
    reason = explanation(d, "many").reasons[0]
    assert reason.detail("flavors") == "a100|v100"
    assert reason.detail("flavor") == "a100"


def _v100_reserved(d: Decisions) -> None:
    # The small job fits on v100 only if it does not delay the head's reservation there.
    assert explanation(d, "small").reasons[0].code is Code.RESERVED_FOR_HIGHER_PRIORITY


ROWS: list[Row] = [
    Row("fallback: a job whose first flavor is full starts on its second",
        cluster(2, Run("cv", "production", node=0), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(8, 8)), admits=("many",), starts_on={"many": "v100"}),
    Row("fallback across quotas: within quota on the second flavor before borrowing on the first",
        cluster(2, flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(0, 8)), admits=("many",), starts_on={"many": "v100"}),
    Row("fallback across quotas: borrowing on the preferred flavor when no flavor is within quota",
        cluster(2, flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(0, 0)), admits=("many",), starts_on={"many": "a100"}),
    Row("fallback across quotas: a borrowing limit on the first flavor sends it to the second",
        cluster(2, flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors={"nlp": {"a100": 0, "v100": 8}}, borrowing={"nlp": 0}),
        admits=("many",), starts_on={"many": "v100"}),
    Row("fallback in order of preference: three flavors, the first two full, the third free",
        cluster(3, Run("cv", "production", node=0), Run("cv", "production", node=1), flavors=THREE),
        gpu_jobs("nlp", gpus=4, flavor="a100", fallback=("v100", "t4"), name="many"),
        team_config(flavors=_quotas(8, 8, 8)), admits=("many",), starts_on={"many": "t4"}),
    Row("fallback: two jobs, the second takes the flavor the first left",
        cluster(2, flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="first", submitted=0)
        + gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="second", submitted=5),
        team_config(flavors=_quotas(8, 8)), admits=("first", "second"),
        starts_on={"first": "a100", "second": "v100"}),
    Row("single flavor unchanged: a job naming a100 waits for a100 though v100 is free",
        cluster(2, Run("cv", "production", node=0, end=NOW + 3600), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", name="one"),
        team_config(flavors=_quotas(8, 8)), admits=(), reasons={"one": (Code.INSUFFICIENT_CAPACITY,)},
        etas={"one": NOW + 3600}, says={"one": "needs 8 a100 GPUs; 0 of 8 are free"}),
    Row("diagnosis: a wider flavor list would have started a waiting job now, and how much sooner",
        cluster(2, Run("cv", "production", node=0, end=NOW + 3600), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", name="one", submitted=NOW - 10),
        team_config(flavors=_quotas(8, 8)), admits=(), causes=(("a100", "flavor_too_narrow"),),
        check=_says_wider_list_starts_it_now),
    Row("why: the reason of a job whose list is too narrow says which flavor would start it now",
        cluster(2, Run("cv", "production", node=0, end=NOW + 3600), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", name="one", submitted=NOW - 10),
        team_config(flavors=_quotas(8, 8)), admits=(), check=_reason_says_wider_list_starts_it_now),
    Row("why: no wider-flavor note when its own flavor starts it within a minute",
        cluster(2, Run("cv", "production", node=0, end=NOW + 30), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", name="one", submitted=NOW - 10),
        team_config(flavors=_quotas(8, 8)), admits=(), causes=(), says={"one": "0 of 8 are free"}),
    Row("diagnosis: no wider-list diagnosis when the other flavor is over the team's borrowing limit",
        cluster(2, Run("cv", "production", node=0, end=NOW + 3600), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", name="one", submitted=NOW - 10),
        team_config(flavors={"nlp": {"a100": 8, "v100": 0}, "cv": {"a100": 8}}, borrowing={"nlp": 0}),
        admits=(), causes=()),
    Row("fallback: when no flavor admits it, the reason names its flavors and the ETA is the earliest",
        cluster(2, Run("cv", "production", node=0, end=NOW + 7200), Run("cv", "production", node=1, end=NOW + 3600),
                flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(8, 8)), admits=(), reasons={"many": (Code.INSUFFICIENT_CAPACITY,)},
        etas={"many": NOW + 3600}, says={"many": "none of its flavors (a100, v100) can start it now"},
        check=_reason_names_every_flavor),
    Row("fallback: the flavor that got furthest down the ladder answers (quota on one, capacity on the other)",
        cluster(2, Run("cv", "production", node=1, end=NOW + 3600), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors={"nlp": {"a100": 0, "v100": 8}, "cv": {"v100": 8}}, borrowing={"nlp": 0}),
        admits=(), reasons={"many": (Code.INSUFFICIENT_CAPACITY,)}, says={"many": "on v100"}),
    Row("fallback with preemption: a production job preempts on its second flavor when the first has no victim",
        cluster(2, Run("cv", "production", node=0), Run("cv", "experiment", node=1, run_id="victim"), flavors=TWO),
        gpu_jobs("nlp", "production", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(8, 8)), admits=(), victims=("victim",),
        reasons={"many": (Code.WAITING_FOR_PREEMPTION,)}),
    Row("kueue baseline: flavor fungibility, within quota first",
        cluster(2, flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(0, 8)), admits=("many",), starts_on={"many": "v100"}, policy="kueue"),
    Row("fifo baseline: the first listed flavor that fits",
        cluster(2, Run("cv", "production", node=0), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(8, 8)), admits=("many",), starts_on={"many": "v100"}, policy="fifo"),
    Row("slurm baseline: the first listed flavor that fits",
        cluster(2, Run("cv", "production", node=0), flavors=TWO),
        gpu_jobs("nlp", flavor="a100", fallback=("v100",), name="many"),
        team_config(flavors=_quotas(8, 8)), admits=("many",), starts_on={"many": "v100"}, policy="slurm"),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_flavor_scenario(row: Row) -> None:
    run_row(row)
