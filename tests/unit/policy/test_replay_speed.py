"""`rota bench replay-speed`: three replays of the same Philly jobs, timed, and their ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rota.cli.main import app
from rota_replay.speed import PAIRS, _bucket, replay_speed
from typer.testing import CliRunner

runner = CliRunner()
HEAD = Path(__file__).resolve().parents[2] / "data" / "philly-head-800.csv"


@pytest.mark.parametrize(("depth", "bucket"), [(0, "0-9"), (9, "0-9"), (10, "10-99"), (999, "100-999"),
                                                (1000, "1000+"), (52_849, "1000+")])
def test_a_cycle_counts_in_the_bucket_of_its_queue_depth(depth: int, bucket: str) -> None:
    assert _bucket(depth) == bucket


def test_each_pair_times_every_cycle_and_the_ratios_are_of_their_figures() -> None:
    lines: list[str] = []
    figures = replay_speed(HEAD, log=lines.append)
    assert len(figures["pairs"]) == 2
    for pair, (mine, other) in zip(figures["pairs"], PAIRS, strict=True):
        for name in (mine, other):
            replay = pair[name]
            assert replay["jobs"] == 800
            assert replay["cycles"] > 0
            assert sum(b["cycles"] for b in replay["cycle_ms_by_depth"].values()) == replay["cycles"]
            assert 0 < replay["policy_cpu_s"] <= replay["cpu_s"] + 0.01
            assert any(line.startswith(f"{name}: ") and "ms per job" in line for line in lines)
        assert pair["per_job"] == round(pair[mine]["cpu_ms_per_job"] / pair[other]["cpu_ms_per_job"], 3)
        assert set(pair["cycle_cost_by_depth"]) == (
            set(pair[mine]["cycle_ms_by_depth"]) & set(pair[other]["cycle_ms_by_depth"]))
    features_off, single = figures["pairs"]
    # The all-features replay decides the same in both pairs: its cycles and depths are equal.
    assert {b: c["cycles"] for b, c in features_off["all_features"]["cycle_ms_by_depth"].items()} == {
        b: c["cycles"] for b, c in single["all_features"]["cycle_ms_by_depth"].items()}
    assert figures["all_features_vs_same_jobs_one_flavor"] == features_off["per_job"]
    assert figures["all_features_vs_philly_768"] == single["per_job"]
    assert figures["cycle_cost_vs_philly_768_by_depth"] == single["cycle_cost_by_depth"]
    assert figures["target"] == 1.3


def test_the_command_prints_the_figures_and_writes_them(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    result = runner.invoke(app, ["bench", "replay-speed", "--trace", str(HEAD), "--jobs", "200",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert [pair["philly_768"]["jobs"] for pair in printed["pairs"][1:]] == [200]
