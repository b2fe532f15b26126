"""The ETA report of a replay: the squeue-style estimate, and the ETA 10 minutes before start."""

from __future__ import annotations

import re
from pathlib import Path

from rota.config import load_config
from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode
from rota_policy import PendingJob, RunningRun
from rota_replay.etas import probe_times
from rota_replay.replay import find_scenario, replay_run
from rota_replay.squeue import BF_MAX_JOB_TEST, FreeProfile, squeue_start
from rota_replay.workload import load_philly

from tests.unit.policy.test_replay import HEAD

NOW = 1_000.0


def _job(job_id: str, gpus: int, limit: float, *, tier: Tier = Tier.training, submit: float = 0.0) -> PendingJob:
    return PendingJob(job_id=job_id, team="t", tier=tier, flavor="gpu", workers=1, gpus_per_worker=gpus,
                      submitted_at=submit, runtime_estimate_s=limit)


def _run(run_id: str, gpus: int, end: float) -> RunningRun:
    return RunningRun(run_id=run_id, job_id=run_id, team="t", tier=Tier.training, flavor="gpu", placement=(),
                      gpus=gpus, started_at=0.0, last_checkpoint_at=None, resumable=True, preemptions=0,
                      expected_end=end)


def test_a_profile_finds_the_first_window_long_enough_and_reserves_it() -> None:
    profile = FreeProfile(NOW, 2, [(NOW + 100, 2), (NOW + 300, 4)])  # 2 free, 4 at +100, 8 at +300
    assert profile.earliest(4, 50) == NOW + 100
    profile.reserve(NOW + 100, 4, 50)  # 0 free on [+100, +150)
    assert profile.earliest(2, 60) == NOW  # a hole before the reservation's start: backfill
    assert profile.earliest(2, 200) == NOW + 150  # too long for the hole: after the reservation
    assert profile.earliest(9, 10) is None


def test_squeue_orders_by_tier_then_age_and_lets_a_short_job_backfill() -> None:
    # 4 GPUs, all busy: 2 free at +100, 2 more at +1000.
    runs = [_run("a", 2, NOW + 100), _run("b", 2, NOW + 1_000)]
    head = _job("head", 4, 500, submit=10)  # needs all 4: from +1000
    short = _job("short", 2, 800, tier=Tier.experiment, submit=5)  # fits before the head: +100
    long = _job("long", 2, 5_000, tier=Tier.experiment, submit=6)  # would delay the head
    urgent = _job("urgent", 2, 50, tier=Tier.production, submit=20)  # first: it takes +100
    queues = {(Tier.training, "t", "gpu"): [head], (Tier.experiment, "t", "gpu"): [short, long],
              (Tier.production, "t", "gpu"): [urgent]}
    found = squeue_start(NOW, {"gpu": 0}, runs, queues, [head, short, long, urgent], 3_600)
    assert found == {"urgent": NOW + 100, "head": NOW + 1_000, "short": NOW + 150, "long": NOW + 1_500}


def test_squeue_shows_n_a_past_the_backfill_depth() -> None:
    ahead = [_job(f"p{i}", 1, 60, tier=Tier.production) for i in range(BF_MAX_JOB_TEST)]
    last = _job("last", 1, 60)
    queues = {(Tier.production, "t", "gpu"): ahead, (Tier.training, "t", "gpu"): [last]}
    found = squeue_start(NOW, {"gpu": 8}, [], queues, [ahead[0], ahead[-1], last], 3_600)
    # 8 at a time for a minute each: the 500th starts in the 63rd minute; the next shows N/A.
    assert found == {"p0": NOW, f"p{BF_MAX_JOB_TEST - 1}": NOW + 62 * 60, "last": None}


def test_the_probe_is_the_last_cycle_ten_minutes_before_the_start() -> None:
    cycles = [0.0, 100.0, 500.0, 1_000.0, 1_700.0, 2_000.0]
    starts = {"long": (0.0, 2_000.0), "short": (0.0, 500.0), "late": (1_000.0, 1_700.0)}
    # long: the last cycle at or before 1,400 is 1,000; short waited under 10 minutes; late has
    # no cycle after its submission and 10 minutes before its start.
    assert probe_times(starts, cycles) == {"long": 1_000.0}


def test_a_replay_with_eta_probes_decides_as_one_without(tmp_path: Path) -> None:
    jobs = load_philly(HEAD)
    # philly-512 on 8 nodes instead of 64, every GPU borrowed, so that jobs of the trace's head wait.
    text = find_scenario("philly-512").read_text().replace("count: 64", "count: 8")
    text = text.replace("racks: 8, nodes_per_rack: 8", "racks: 1, nodes_per_rack: 8")
    small = tmp_path / "small.yaml"
    small.write_text(re.sub(r"quota: \{gpu: \d+\}", "quota: {gpu: 0}", text))
    config = load_config(small)
    plain = replay_run(jobs, config, "rota").result
    probed = replay_run(jobs, config, "rota", eta_probes=True).result
    assert plain["eta_before_start_p50_rel_error"] is None
    assert probed["eta_before_start_p50_rel_error"] is not None
    assert probed["squeue_eta_before_start_coverage"] is not None
    measured = {k for k, v in plain.items() if v is not None and k not in ("wall_s", "eta_by_reason")}
    assert {k: plain[k] for k in measured} == {k: probed[k] for k in measured}
    assert plain["squeue_eta_waited_p50_rel_error"] is None
    assert plain["eta_waited_jobs"] > 0 and 0.0 < probed["squeue_eta_waited_coverage"] <= 1.0
    # Per reason code: the same jobs, the probes' figures only with probes, every code present.
    by_plain, by_probed = plain["eta_by_reason"], probed["eta_by_reason"]
    assert set(by_plain) == set(by_probed) == {c.value for c in WaitReasonCode} | {"NONE"}
    groups = {code: figures for code, figures in by_probed.items() if figures is not None}
    assert sum(f["jobs"] for f in groups.values()) == probed["eta_waited_jobs"]
    for code, figures in groups.items():
        assert {k: v for k, v in by_plain[code].items() if v is not None} == {
            k: figures[k] for k, v in by_plain[code].items() if v is not None}
        assert figures["before_start_p50"] is not None and figures["squeue_p50"] is not None
        assert figures["coverage"] <= figures["eta_or_blocker"] <= 1.0
    assert probed["eta_waited_coverage"] <= probed["eta_waited_eta_or_blocker"] <= 1.0
