"""Benchmarks of the scheduling core (not timed assertions: the figures go to RESULTS.md).

Run the full set with `uv run rota bench core --json OUT`; this test runs the small sizes so
the benchmark code keeps working.
"""

from __future__ import annotations

from rota_replay.bench import run_core_bench


def test_core_bench_smoke() -> None:
    lines: list[str] = []
    result = run_core_bench(quick=True, memory=False, log=lines.append)
    rows = result["core"]
    assert {(r["nodes"], r["pending"]) for r in rows} == {
        (n, p) for n in (128, 1250) for p in (1_000, 10_000)
    }
    for row in rows:
        assert row["admissions"] > 0 and row["admissions_per_s"] > 0
        assert row["explained"] == row["pending"]
    assert len(lines) == len(rows)
