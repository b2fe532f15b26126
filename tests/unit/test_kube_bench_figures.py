"""The figures of the Rota-beside-Kueue benchmark from what its watch saw: admission, start,
completion, preemptions and the work they lose, API requests by user agent, and the replay
comparison's rule for a job decided the same."""

from __future__ import annotations

import json
from pathlib import Path

from tests.real_kube.bench_compare import compare
from tests.real_kube.bench_observe import BenchJob, PodSeen, job_figures, requests_by_agent, summary

GANG = BenchJob("g", submit_s=0, runtime_s=10, workers=2, gpus_per_worker=4, tier="training", team="a",
                resumable=True)


def test_a_gang_preempted_once_then_completed() -> None:
    pods = [
        # The first attempt: both Running at 3, stopped at 12 (9 s of run each).
        PodSeen("g", created=2.0, running=2.5, ended=12.0), PodSeen("g", created=2.1, running=3.0, ended=12.0),
        # The second: Running at 20 and 21, both succeed.
        PodSeen("g", created=19.0, running=20.0, ended=30.0, succeeded=True),
        PodSeen("g", created=19.5, running=21.0, ended=31.0, succeeded=True),
    ]
    f = job_figures(GANG, pods, submitted=1.0, end=40.0, checkpoint_s=4.0)
    assert (f.admitted, f.all_running, f.completed, f.preemptions) == (2.0, 3.0, 31.0, 1)
    # Each stopped pod ran 9.5 and 9 s, checkpointing every 4 s: 1.5 and 1 s lost, x 4 GPUs.
    assert f.lost_gpu_s == (1.5 + 1.0) * 4
    assert f.held_gpu_s == (9.5 + 9.0 + 10.0 + 10.0) * 4


def test_a_job_that_cannot_checkpoint_loses_its_whole_run_and_one_still_running_holds_until_the_end() -> None:
    job = BenchJob("x", 0, 10, 1, 8, "experiment", "b", resumable=False)
    f = job_figures(job, [PodSeen("x", 1.0, running=1.0, ended=6.0), PodSeen("x", 7.0, running=8.0)],
                    submitted=0.5, end=20.0, checkpoint_s=4.0)
    assert (f.preemptions, f.lost_gpu_s, f.completed) == (1, 5.0 * 8, None)
    assert f.held_gpu_s == (5.0 + 12.0) * 8


def test_an_attempt_stopped_before_it_ran_does_not_hide_the_next_start() -> None:
    job = BenchJob("y", 0, 10, 1, 8, "training", "b", resumable=True)
    pods = [PodSeen("y", 1.0, ended=2.0), PodSeen("y", 5.0, running=6.0, ended=16.0, succeeded=True)]
    f = job_figures(job, pods, submitted=0.5, end=20.0, checkpoint_s=4.0)
    assert (f.admitted, f.all_running, f.completed, f.preemptions, f.lost_gpu_s) == (1.0, 6.0, 16.0, 0, 0.0)


def test_a_job_never_admitted_has_no_times_and_the_summary_says_not_all_were() -> None:
    f = job_figures(GANG, [], submitted=1.0, end=9.0, checkpoint_s=4.0)
    assert (f.admitted, f.all_running, f.completed) == (None, None, None)
    out = summary([GANG], {"g": f}, start=0.0, gpus=8, scale=60)
    assert (out["admitted"], out["time_to_admit_all_s"], out["makespan_s"]) == (0, None, None)


def test_requests_are_counted_once_by_the_first_word_of_their_user_agent(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [{"stage": "ResponseComplete", "userAgent": "kueue/v0.17.0 (linux/amd64) abc"},
              {"stage": "ResponseStarted", "userAgent": "kueue/v0.17.0"},  # a watch, counted at its end
              {"stage": "ResponseComplete", "userAgent": "kube-scheduler/v1.37.2 (linux/amd64) x/scheduler"},
              {"stage": "ResponseComplete", "userAgent": "OpenAPI-Generator/33.1.0/python"}]
    log.write_text("before\n" + "".join(json.dumps(e) + "\n" for e in events))
    counts = requests_by_agent(log, offset=len("before\n"))
    assert counts == {"kueue": 1, "kube-scheduler": 1, "OpenAPI-Generator": 1}


def test_a_job_decided_the_same_starts_within_the_tolerance_and_is_preempted_in_both_or_neither() -> None:
    real = {"scale": 60.0, "jobs_detail": {
        "a": {"all_running": 2.0, "preemptions": 0},  # 120 trace s
        "b": {"all_running": 10.0, "preemptions": 1},  # 600
        "c": {"all_running": 20.0, "preemptions": 0},  # 1200
    }}
    sim = {"a": {"submit": 0.0, "start": 0.0, "preemptions": 0},
           "b": {"submit": 0.0, "start": 500.0, "preemptions": 0},
           "c": {"submit": 0.0, "start": 500.0, "preemptions": 0}}
    out = compare(real, sim, tolerance_s=150)
    assert {j: r["same"] for j, r in out["jobs_detail"].items()} == {"a": True, "b": False, "c": False}
    assert (out["decided_same"], out["same_start"], out["same_preempted_or_not"]) == (1, 2, 2)
    assert out["harness_latency_s"] == 120.0
    # a before b and c in both; b and c together in the replay but 600 s apart in the real run.
    assert out["admission_order_pairs_same"] == round(2 / 3, 4)


def test_kueue_performance_shapes_as_traces(tmp_path: Path) -> None:
    from collections import Counter

    from rota_replay.rotacsv import load_rota_csv

    from tests.real_kube.bench_shapes import QUEUES, shape_trace

    # Kueue's baseline: per queue 350 small (1), 100 medium (5), 50 large (20) = 15,000 in all.
    mixed = load_rota_csv(tmp_path / "mixed.csv") if shape_trace(tmp_path / "mixed.csv", shape="mixed",
                                                                 jobs=15_000) == 15_000 else []
    assert Counter(j.gpus for j in mixed) == {1: 10_500, 5: 3_000, 20: 1_500}
    assert Counter(j.tier.value for j in mixed) == {"experiment": 10_500, "training": 3_000, "production": 1_500}
    assert len({j.team for j in mixed}) == QUEUES
    # Each set at its own pace from the start, in trace seconds at scale 60: the last large
    # workload of a queue at 49 x 1.2 s, its small ones 0.2 s long.
    assert max(j.submit for j in mixed if j.gpus == 20) == 49 * 1.2 * 60
    assert {j.duration for j in mixed if j.gpus == 1} == {12.0}
    small = load_rota_csv(tmp_path / "small.csv") if shape_trace(tmp_path / "small.csv", shape="small",
                                                                 jobs=1_500) == 1_500 else []
    assert {j.gpus for j in small} == {1} and len(small) == 1_500
