"""`rota bench replay-speed`: three replays of the same Philly jobs, timed, and their ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rota.cli.main import app
from rota_policy.sim.speed import _bucket, replay_speed
from rota_policy.sim.workload import load_philly
from typer.testing import CliRunner

runner = CliRunner()
HEAD = Path(__file__).resolve().parents[2] / "data" / "philly-head-800.csv"


@pytest.mark.parametrize(("depth", "bucket"), [(0, "0-9"), (9, "0-9"), (10, "10-99"), (999, "100-999"),
                                                (1000, "1000+"), (52_849, "1000+")])
def test_a_cycle_counts_in_the_bucket_of_its_queue_depth(depth: int, bucket: str) -> None:
    assert _bucket(depth) == bucket


def test_the_three_replays_time_every_cycle_and_the_ratios_are_of_their_figures() -> None:
    philly = load_philly(HEAD)
    lines: list[str] = []
    figures = replay_speed(philly, log=lines.append)
    replays = ("all_features", "same_jobs_one_flavor", "philly_768")
    for name in replays:
        replay = figures[name]
        assert replay["jobs"] == len(philly) == 800
        assert replay["cycles"] > 0
        assert sum(b["cycles"] for b in replay["cycle_ms_by_depth"].values()) == replay["cycles"]
        assert 0 < replay["policy_cpu_s"] <= replay["cpu_s"] + 0.01
        assert f"{name}: 100% of jobs submitted" in lines
    per_job = {name: figures[name]["cpu_ms_per_job"] for name in replays}
    assert figures["all_features_vs_same_jobs_one_flavor"] == round(
        per_job["all_features"] / per_job["same_jobs_one_flavor"], 3)
    assert figures["all_features_vs_philly_768"] == round(per_job["all_features"] / per_job["philly_768"], 3)
    assert set(figures["cycle_cost_vs_philly_768_by_depth"]) == (
        set(figures["all_features"]["cycle_ms_by_depth"]) & set(figures["philly_768"]["cycle_ms_by_depth"]))
    assert figures["target"] == 1.3


def test_the_command_prints_the_figures_and_writes_them(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    result = runner.invoke(app, ["bench", "replay-speed", "--trace", str(HEAD), "--jobs", "200",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert printed["philly_768"]["jobs"] == 200
