"""One rule of Kueue's preemption, shown by the real Kueue and by Rota's `kueue` replay
baseline on the same six jobs (`traces/reclaim-after-own.csv`), so that the baseline cannot
drift from it unnoticed.

Four nodes x 8 GPUs, two teams of 16 GPUs' quota, no `borrowWithinCohort` (as the baseline).
team-b runs three whole-node jobs (24 GPUs: it borrows 8, the last an experiment), team-a two
4-GPU training jobs on the fourth node. Then team-a submits a production gang of 2 x 8. It
does not fit within team-a's nominal quota as things stand (8 + 16 > 16), but team-a is below
its quota, so Kueue v0.17 (`classicalPreemptions`) tries without borrowing: team-b's borrowed
experiment job and then team-a's own two training jobs, and then team-a fits within its
nominal quota on two free nodes. The gang starts long before anything ends on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.real_kube import bench, bench_compare

pytestmark = [pytest.mark.real_kube, pytest.mark.kueue, pytest.mark.timeout(900)]

TRACE = Path(__file__).parent / "traces" / "reclaim-after-own.csv"
SCALE = 60.0
VICTIMS = {"b3", "a1", "a2"}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    jobs = bench.load_trace(TRACE, SCALE)
    nodes = bench.bench_nodes(4)
    config = bench.bench_config(nodes, ["team-a", "team-b"], scale=SCALE)
    return bench.run_one("kueue", jobs, nodes, config, workdir=tmp_path_factory.mktemp("reclaim"), scale=SCALE,
                         timeout_s=240, say=print, borrow_within_cohort=False)


def test_the_real_kueue_reclaims_borrowed_and_own_work_to_fit_within_quota(real: dict[str, Any]) -> None:
    d = real["jobs_detail"]
    assert real["completed"] == 6, real
    assert {j for j, r in d.items() if r["preemptions"] > 0} == VICTIMS, d
    # The gang started (it was submitted at 300 s / 60 = 5 s) well before team-b's first
    # unstopped job ends (1,200 s / 60 = 20 s after its start).
    assert d["a3"]["all_running"] < d["b1"]["completed"] - 5, d


def test_the_kueue_baseline_decides_the_same() -> None:
    replay = bench_compare.replayed(TRACE, 4, SCALE)
    assert {j for j, r in replay.items() if r["preemptions"] > 0} == VICTIMS, replay
    a3 = replay["a3"]
    assert a3["start"] is not None and a3["start"] - a3["submit"] <= 60, a3  # its victims' grace only


def test_both_agree_job_by_job(real: dict[str, Any]) -> None:
    result = bench_compare.compare(real, bench_compare.replayed(TRACE, 4, SCALE), tolerance_s=300)
    assert result["decided_same"] == 6, result["jobs_detail"]
