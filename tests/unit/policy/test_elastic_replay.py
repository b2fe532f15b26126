"""Elastic gangs in the replay (DECISIONS 72-74): the run's size, a shrink and a grow on the
virtual clock, the rota-csv `min-max` workers, and the philly-hetero rule's elastic jobs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rota.contracts.common import Tier
from rota_policy.model.snapshot import NodeState
from rota_replay.hetero import ELASTIC_DRAWS, hetero_jobs
from rota_replay.metrics import metrics
from rota_replay.rotacsv import HEADER, TraceFormatError, load_rota_csv, write_rota_csv
from rota_replay.simulator import Simulator
from rota_replay.workload import TraceJob, load_philly

from tests.unit.policy.builders import team_config
from tests.unit.policy.test_replay import HEAD

NODES = tuple(NodeState(f"n{i}", "gpu", "r0", 8, tuple(range(8))) for i in range(4))
HOUR = 3600.0


def _job(k: int, job_id: str, submit: float, duration: float, workers: int, tier: Tier,
         workers_min: int = 0) -> TraceJob:
    return TraceJob(k=k, job_id=job_id, submit=submit, duration=duration, gpus=workers * 8, team="nlp",
                    user="nlp", tier=tier, workers=workers, gpus_per_worker=8, resumable=True,
                    declared_runtime_s=2 * duration, flavors=("gpu",), workers_min=workers_min)  # fmt: skip


# An elastic training gang of 2-4 workers alone on 4 nodes, then a production job of 2 nodes.
TRACE = [_job(0, "e", 0.0, 4 * HOUR, 4, Tier.training, workers_min=2), _job(1, "p", HOUR, HOUR, 2, Tier.production)]


def _replay(policy: str = "rota", rigid: bool = False) -> Simulator:
    sim = Simulator(TRACE, NODES, team_config({"nlp": 32}), policy, rigid=rigid)
    sim.run()
    return sim


def test_an_elastic_victim_is_shrunk_then_grows_back() -> None:
    sim = _replay()
    e, p = sim.jobs
    # e starts at its max, 4 workers. At 1h p asks for 2 nodes: e saves in 60 s (progress 1h)
    # and restarts at once on 2 workers (60 s restart) at half speed; p starts at 3,660 s.
    assert (p.first_start, p.finish) == (3660.0, 7260.0)
    # When p ends, nothing waits: e (1h of run since its restart) grows back to 4 workers. It
    # saves in 60 s: progress 3,600 + 0.5 x (7,260 - 3,720) = 5,370 s; restarts at 7,320 on 4
    # workers, runs from 7,380 at full speed for the 9,030 s left.
    assert e.finish == 7380.0 + (4 * HOUR - 5370.0)
    assert (e.starts, e.size_sum, e.preemptions, e.wait) == (3, 4 + 2 + 4, 1, 0.0)
    assert (sim.shrinks, sim.grows, sim.preemptions) == (1, 1, 1)
    figures = metrics(sim, 0.0)["elastic"]
    assert (figures["jobs"], figures["shrinks"], figures["grows"], figures["started_below_max"]) == (1, 1, 1, 1)
    assert sim.accounts.busy == 0 and all(len(free) == 8 for free in sim.node_free)  # every GPU came back


def test_rigid_the_same_gang_is_stopped_and_waits() -> None:
    for sim in (_replay(rigid=True), _replay("kueue")):
        e = sim.jobs[0]
        assert (sim.shrinks, sim.grows, e.starts) == (0, 0, 2)
        assert e.size_sum == 8  # 4 workers at each start: its max, the trace's size
        assert e.wait > 0
    rigid = _replay(rigid=True)
    assert rigid.jobs[0].finish == 7320.0 + 3 * HOUR  # restarted when p ended, 3h left
    assert _replay().jobs[0].finish < rigid.jobs[0].finish
    assert metrics(rigid, 0.0)["elastic"]["run_elastic"] is False


def test_an_elastic_job_is_admitted_at_the_size_that_fits() -> None:
    trace = [_job(0, "r", 0.0, 2 * HOUR, 1, Tier.training), _job(1, "e", 10.0, 3 * HOUR, 4, Tier.training, 2)]
    sim = Simulator(trace, NODES, team_config({"nlp": 32}), "rota")
    sim.run()
    _, e = sim.jobs
    # r holds a node: e starts at 3 workers, at 3/4 speed. When r ends at 2h, e grows to 4: it
    # saves in 60 s (progress 0.75 x 7,190 = 5,392.5 s), restarts at 7,260 and runs from 7,320
    # at full speed for the 5,407.5 s left.
    assert e.first_start == 10.0
    assert e.size_sum == 3 + 4 and sim.grows == 1
    assert e.finish == 7320.0 + (3 * HOUR - 0.75 * 7190.0)


def test_rota_csv_reads_and_writes_min_max_workers(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join(HEADER) + "\n" + "e,0,3600,2-8,4,a100,training,nlp,true\n")
    (job,) = load_rota_csv(path)
    assert (job.workers_min, job.workers, job.gpus, job.elastic) == (2, 8, 32, True)
    again = tmp_path / "again.csv"
    write_rota_csv([job], again)
    assert ",2-8," in again.read_text()
    assert load_rota_csv(again) == [job]


@pytest.mark.parametrize(
    ("workers", "words"),
    [
        ("4-2", "line 2, field workers: '4-2': min must be below max"),
        ("2-2", "line 2, field workers: '2-2': min must be below max"),
        ("0-4", "line 2, field workers: '0' must be at least 1"),
        ("2-x", "line 2, field workers: 'x' is not a number"),
    ],
)
def test_a_bad_worker_range_is_refused(tmp_path: Path, workers: str, words: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join(HEADER) + "\n" + f"e,0,3600,{workers},4,a100,training,nlp,true\n")
    with pytest.raises(TraceFormatError, match=re.escape(words)):
        load_rota_csv(path)


def test_the_hetero_rule_makes_30_percent_of_training_gangs_elastic_and_can_be_turned_off() -> None:
    philly = load_philly(HEAD)
    jobs = hetero_jobs(philly, elastic=True)
    gangs = [j for j in jobs if j.tier is Tier.training and j.workers >= 2]
    elastic = [j for j in jobs if j.elastic]
    assert elastic and set(elastic) <= set(gangs)
    assert len(elastic) == sum(1 for i in range(len(gangs)) if i % 10 in (2, 5, 8))
    assert all(j.workers_min == j.workers // 2 for j in elastic)
    rigid = hetero_jobs(philly, elastic=False)
    assert not any(j.elastic for j in rigid)
    assert [(j.job_id, j.workers, j.flavors, j.duration) for j in rigid] == [
        (j.job_id, j.workers, j.flavors, j.duration) for j in jobs]


def test_each_elastic_draw_picks_another_30_percent_of_the_gangs() -> None:
    philly = load_philly(HEAD)
    picked = [{j.job_id for j in hetero_jobs(philly, elastic=True, elastic_draw=d) if j.elastic}
              for d in range(ELASTIC_DRAWS)]
    assert picked[0] == {j.job_id for j in hetero_jobs(philly, elastic=True) if j.elastic}
    gangs = [j.job_id for j in philly if j.tier is Tier.training and j.workers >= 2]
    for draw, elastic in enumerate(picked):
        assert elastic == {job for i, job in enumerate(gangs) if (i - draw) % 10 in (2, 5, 8)}
    # Over the 10 draws every gang is elastic in exactly 3.
    assert all(sum(job in p for p in picked) == 3 for job in gangs)
    with pytest.raises(ValueError, match="elastic_draw: 10"):
        hetero_jobs(philly, elastic=True, elastic_draw=10)
