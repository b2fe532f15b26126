"""`rota bench cli`: how long the quick commands take as a user runs them, each a new `rota`
process from start to exit, against a live stack.

Each command runs `runs` times (after one unmeasured run, which also lets Python write its
bytecode caches where it may); the figures are wall milliseconds (median, p90, max). Beside
them, `import_ms` is what Python's own `-X importtime` counts for the imports of one run of
the command (the median of a few runs; that mode itself adds a little), and `python_ms` the
bare interpreter's start (`python -c pass`), the floor of any command.

Bytecode matters as much as imports: a process that may not write `__pycache__`
(PYTHONDONTWRITEBYTECODE) into an environment installed without it compiles every module
it imports on every start. The figures say which case they were measured in.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

JOB_SPEC = {
    "name": "startup", "team": "bench", "user": "bench", "queue": "training",
    # 8 GPUs of the 128 of flavor `deep`: from the 17th on they wait, so `why` has reasons.
    "flavor": "deep", "workers": 1, "gpus_per_worker": 8, "resumable": True,
    "declared_runtime_s": 3600,
}
IMPORT_RUNS = 3
# A stack just started is still busy (its services' first cycles, imports, connections): the
# commands are measured as a user meets them, on a stack that has settled.
SETTLE_S = 20.0
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")
"""A top-level import of `-X importtime`: its cumulative microseconds (a nested one is indented)."""


def rota_command() -> list[str]:
    """The `rota` console script of this interpreter's environment, as a user runs it."""
    script = Path(sys.executable).with_name("rota")
    if not script.is_file():
        raise RuntimeError(f"no `rota` console script beside {sys.executable}")
    return [str(script)]


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 1), "p90_ms": round(p90, 1),
            "max_ms": round(ordered[-1], 1)}


def run_once(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, str]:
    """Wall milliseconds of one process, and its stdout; a failing command fails the bench."""
    start = time.perf_counter()
    done = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, timeout=60)
    wall = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[:300]}")
    return wall, done.stdout


def import_ms(argv: Sequence[str], env: Mapping[str, str]) -> float:
    """The imports of one run, as `python -X importtime` counts them: the sum of its top-level
    imports' cumulative times."""
    python = Path(argv[0]).with_name("python")  # the script's own interpreter
    done = subprocess.run([str(python), "-X", "importtime", *argv], env=dict(env),
                          capture_output=True, text=True, timeout=60)
    total = sum(int(m.group(1)) for line in done.stderr.splitlines()
                if (m := IMPORT_LINE.match(line)))
    return total / 1000


def measure(args: Sequence[str], env: Mapping[str, str], runs: int) -> dict[str, Any]:
    argv = [*rota_command(), *args]
    run_once(argv, env)  # unmeasured: caches written, the service's first answer out of the way
    walls = [run_once(argv, env)[0] for _ in range(runs)]
    imports = [import_ms(argv, env) for _ in range(min(runs, IMPORT_RUNS))]
    return {"command": f"rota {' '.join(args)}", "runs": runs, **percentiles(walls),
            "import_ms": round(statistics.median(imports), 1)}


def bytecode(env: Mapping[str, str]) -> dict[str, Any]:
    """Whether the measured processes could use bytecode caches."""
    import pydantic

    site = Path(pydantic.__file__).parent / "__pycache__"
    return {"PYTHONDONTWRITEBYTECODE": bool(env.get("PYTHONDONTWRITEBYTECODE")),
            "PYTHONPYCACHEPREFIX": env.get("PYTHONPYCACHEPREFIX"),
            "dependencies_compiled": site.is_dir() and any(site.glob("*.pyc"))}


def run(home: Path, *, runs: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Submit, list, explain and print help against the stack whose runtime file is under
    `home` (ROTA_HOME for the measured processes)."""
    env = {**os.environ, "ROTA_HOME": str(home), "COLUMNS": "200"}
    say(f"letting the stack settle for {SETTLE_S:g} s")
    time.sleep(SETTLE_S)
    load_before = os.getloadavg()
    spec = home / "startup-job.json"  # JSON is YAML: `submit -f` reads it
    spec.write_text(json.dumps(JOB_SPEC))
    python = percentiles([run_once([sys.executable, "-c", "pass"], env)[0]
                          for _ in range(runs)])
    say(f"submit, {runs} runs")
    submit = measure(["submit", "-f", str(spec), "--json"], env, runs)
    _, listed = run_once([*rota_command(), "jobs", "--json", "--limit", "1"], env)
    newest = json.loads(listed)[0]
    say(f"jobs, why {newest['job_id']} ({newest['state']}), --help: {runs} runs each")
    figures = {
        "jobs": measure(["jobs", "--json", "--limit", "50"], env, runs),
        "why": measure(["why", newest["job_id"]], env, runs),
        "submit": submit,
        "help": measure(["--help"], env, runs),
    }
    return {"benchmark": "cli", "python_ms": python["median_ms"], "commands": figures,
            "why_job_state": newest["state"], "bytecode": bytecode(env),
            "load_average_1m": {"before": round(load_before[0], 2),
                                "after": round(os.getloadavg()[0], 2)},
            "cpus": os.cpu_count()}
