"""The rota-csv trace format: the Philly slice converted to it replays identically, bad rows
are refused with their line and field, and multi-flavor traces replay on a multi-flavor cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rota.config import load_config
from rota.contracts.common import Tier
from rota_replay.hetero import hetero_jobs, hetero_quotas, hetero_shares, whole_gpus
from rota_replay.replay import find_scenario, load, replay_run
from rota_replay.rotacsv import HEADER, TraceFormatError, load_rota_csv, write_rota_csv
from rota_replay.workload import load_philly

from tests.unit.policy.test_replay import HEAD

GOOD = "j1,0,3600,2,4,a100|v100,training,nlp,true\n"


def _csv(tmp_path: Path, *rows: str, header: str = ",".join(HEADER)) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + "".join(rows))
    return path


def _without_wall(result: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in result.items() if k != "wall_s"}


def test_the_philly_head_converted_to_rota_csv_replays_identically(tmp_path: Path) -> None:
    philly = load_philly(HEAD)
    path = tmp_path / "head.csv"
    assert write_rota_csv(philly, path) == len(philly)
    converted = load_rota_csv(path)
    assert converted == philly
    config = load_config(find_scenario("philly-768"))
    a = replay_run(philly, config, "rota").result
    b = replay_run(converted, config, "rota").result
    assert _without_wall(a) == _without_wall(b)
    assert a["completed"] > 0


def test_load_reads_the_format_by_name(tmp_path: Path) -> None:
    jobs, config = load(_csv(tmp_path, GOOD), "philly-hetero", "rota-csv")
    (job,) = jobs
    assert (job.flavors, job.workers, job.gpus_per_worker, job.gpus, job.tier, job.resumable) == (
        ("a100", "v100"), 2, 4, 8, Tier.training, True)
    assert job.declared_runtime_s == 7200.0  # twice the duration, rounded up to an hour
    assert set(config.teams["0e4a51"].quota) == {"a100", "v100", "t4"}


def test_an_empty_flavor_list_or_any_means_any_flavor(tmp_path: Path) -> None:
    jobs = load_rota_csv(_csv(tmp_path, "a,0,10,1,1,,experiment,x,false\n", "b,1,10,1,1,any,experiment,x,false\n"))
    assert [j.flavors for j in jobs] == [(), ()]


def test_rows_are_taken_by_submit_time_ties_in_file_order(tmp_path: Path) -> None:
    jobs = load_rota_csv(_csv(tmp_path, "late,50,10,1,1,,training,x,true\n", "b,5,10,1,1,,training,x,true\n",
                              "a,5,10,1,1,,training,x,true\n"))
    assert [(j.k, j.job_id) for j in jobs] == [(0, "b"), (1, "a"), (2, "late")]


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("j1,0,3600,1,1.5,a100,experiment,nlp,true\n", "line 2, field gpus_per_worker: '1.5' is not a whole number"),
        ("j1,0,3600,1,0.3,a100,experiment,nlp,true\n",
         "line 2, field gpus_per_worker: '0.3' is not a share of 0.25, 0.5 or 0.75 of one GPU"),
        ("j1,0,3600,2,0.5,a100,experiment,nlp,true\n",
         "line 2, field gpus_per_worker: a share of one GPU (0.5) needs workers 1, not 2"),
        ("j1,0,3600,1,0,a100,experiment,nlp,true\n", "line 2, field gpus_per_worker: '0' must be at least 1"),
        ("j1,0,3600,x,1,a100,experiment,nlp,true\n", "line 2, field workers: 'x' is not a number"),
        ("j1,0,0,1,1,a100,experiment,nlp,true\n", "line 2, field duration_s: '0' must be above 0"),
        ("j1,-1,10,1,1,a100,experiment,nlp,true\n", "line 2, field submit_s: '-1' is negative"),
        ("j1,0,10,1,1,a100,batch,nlp,true\n", "line 2, field tier: 'batch' is not one of production"),
        ("j1,0,10,1,1,a100,training,nlp,yes\n", "line 2, field resumable: 'yes' is not true or false"),
        ("j1,0,10,1,1,a100||v100,training,nlp,true\n", "line 2, field flavors: 'a100||v100' has an empty name"),
        ("j1,0,10,1,1,a100|a100,training,nlp,true\n", "line 2, field flavors: 'a100|a100' names a flavor twice"),
        ("j1,0,10,1,1,a100,training,,true\n", "line 2, field team: empty"),
        ("j1,0,10,1,1,a100,training\n", "line 2: 7 fields; the header has 9"),
        (GOOD + GOOD, "line 3, field job_id: 'j1' is also on line 2"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line_and_field(tmp_path: Path, row: str, words: str) -> None:
    with pytest.raises(TraceFormatError, match=re.escape(words)):
        load_rota_csv(_csv(tmp_path, row))


def test_a_wrong_header_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="line 1: the header must be job_id,submit_s"):
        load_rota_csv(_csv(tmp_path, GOOD, header="id,submit,duration"))


def test_the_hetero_rule_is_deterministic_and_gives_30_percent_two_flavors() -> None:
    philly = load_philly(HEAD)
    jobs = hetero_jobs(philly)
    assert jobs == hetero_jobs(philly)
    two = [j for j in jobs if len(j.flavors) == 2]
    assert len(two) == sum(1 for j in philly if j.k % 10 in (1, 4, 8))
    assert all(j.flavors[0] != "t4" or j.gpus_per_worker <= 4 for j in jobs)  # a t4 node has 4 GPUs
    assert {f for j in jobs for f in j.flavors} == {"a100", "v100", "t4"}
    quotas = hetero_quotas(jobs)
    assert all(q["t4"] % 4 == 0 and q["a100"] % 8 == 0 for q in quotas.values())


def test_multi_flavor_jobs_start_on_their_second_flavor_and_first_flavor_turns_that_off(tmp_path: Path) -> None:
    jobs = hetero_jobs(load_philly(HEAD))
    path = tmp_path / "hetero.csv"
    write_rota_csv(jobs, path)
    trace, config = load(path, "philly-hetero", "rota-csv")
    with_fallback = replay_run(trace, config, "rota").result
    without = replay_run(trace, config, "rota", first_flavor=True).result
    assert with_fallback["flavor_fallback"]["jobs"] == without["flavor_fallback"]["jobs"] > 0
    assert with_fallback["flavor_fallback"]["started_on_fallback"] > 0
    assert without["flavor_fallback"]["started_on_fallback"] == 0
    assert with_fallback["completed"] == without["completed"] == len(jobs)


@pytest.mark.parametrize(("text", "quarters"), [("0.25", 1), ("0.5", 2), ("0.75", 3)])
def test_a_fraction_below_one_is_a_gpu_share_in_quarters(tmp_path: Path, text: str, quarters: int) -> None:
    (job,) = load_rota_csv(_csv(tmp_path, f"j1,0,3600,1,{text},a100,experiment,nlp,true\n"))
    assert (job.share, job.workers, job.gpus_per_worker, job.gpus, job.demand) == (
        quarters, 1, 1, 1, quarters / 4)
    path = tmp_path / "again.csv"
    write_rota_csv([job], path)
    assert load_rota_csv(path) == [job]


def test_the_share_rule_is_deterministic_and_picks_about_20_percent_of_1_gpu_experiment_jobs() -> None:
    jobs = hetero_jobs(load_philly(HEAD))
    shared = hetero_shares(jobs)
    assert shared == hetero_shares(jobs)
    eligible = [j for j in jobs if j.gpus == 1 and j.tier is Tier.experiment]
    halves = [j for j in shared if j.share]
    assert all(j.share == 2 and j.gpus == 1 and j.tier is Tier.experiment for j in halves)
    assert 0.10 * len(eligible) <= len(halves) <= 0.30 * len(eligible)
    assert whole_gpus(shared) == jobs


def test_shares_replay_on_the_hetero_cluster_and_whole_gpus_give_the_same_jobs_a_gpu_each(tmp_path: Path) -> None:
    jobs = hetero_shares(hetero_jobs(load_philly(HEAD)))
    path = tmp_path / "shares.csv"
    write_rota_csv(jobs, path)
    trace, config = load(path, "philly-hetero", "rota-csv")
    with_shares = replay_run(trace, config, "rota").result
    without = replay_run(whole_gpus(trace), config, "rota").result
    assert with_shares["gpu_shares"]["share_jobs"] > 0 and without["gpu_shares"]["share_jobs"] == 0
    assert with_shares["completed"] == without["completed"] == len(jobs)
    # A half GPU is counted as half in the busy GPU-seconds: the same work, less of it.
    assert with_shares["utilization"] < without["utilization"]
