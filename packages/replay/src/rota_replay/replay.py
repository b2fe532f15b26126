"""`replay` and `compare`: a trace, a scenario and a policy in, the issue's metrics out."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.config import load_config
from rota.config.model import RotaConfig
from rota_policy import POLICIES, PolicyConfig, policy_config_from
from rota_policy.model.snapshot import NodeState

from rota_replay.etas import EtaLog, probe_times
from rota_replay.metrics import metrics
from rota_replay.rotacsv import load_rota_csv
from rota_replay.simulator import Simulator
from rota_replay.workload import TraceJob, load_philly

__all__ = [
    "POLICY_NAMES",
    "PROBE_LABEL",
    "SCENARIOS",
    "TRACE_FORMATS",
    "Progress",
    "ReplayRun",
    "compare",
    "find_scenario",
    "load",
    "nodes_from",
    "replay",
    "replay_run",
]

SCENARIOS = ("philly-768", "philly-512", "philly-1152", "philly-hetero")
TRACE_FORMATS = ("philly", "rota-csv")
POLICY_NAMES = ("rota", "fifo", "kueue", "slurm")
Progress = Callable[[str, float], None]
"""progress(policy, fraction of the trace submitted)."""


def find_scenario(scenario: str | Path) -> Path:
    """A scenario file path, or a name shipped as `deploy/scenarios/<name>.yaml`."""
    path = Path(scenario)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    name = f"{scenario}.yaml"
    roots = [Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents]
    for root in roots:
        candidate = root / "deploy" / "scenarios" / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no scenario {scenario!r}: expected deploy/scenarios/{name} or a path")


def nodes_from(config: RotaConfig) -> tuple[NodeState, ...]:
    return tuple(
        NodeState(n.name, n.flavor, n.rack, n.gpus, tuple(range(n.gpus)), config.node_levels(n))
        for n in config.expanded_nodes()
    )


def freeze_heap() -> None:
    """Call before a replay: the collector would otherwise scan, again and again, every object
    alive before it starts (the modules the `rota` command imports, the trace), about 5% of
    the replay's time."""
    gc.collect()
    gc.freeze()


def team_quotas(config: RotaConfig) -> dict[str, int]:
    """Each team's quota over all flavors: the simulator's fair-share accounts weigh by it."""
    return {name: sum(team.quota.values()) for name, team in config.teams.items()}


@dataclass
class ReplayRun:
    """One replay's metrics plus the series the plot needs."""

    result: dict[str, Any]
    waits_by_tier: dict[str, list[float]] = field(default_factory=dict)
    busy_timeline: list[tuple[float, float]] = field(default_factory=list)
    capacity: int = 0


def replay_run(
    trace: list[TraceJob],
    config: RotaConfig,
    policy: str,
    *,
    progress: Progress | None = None,
    cycle_s: float = 0.0,
    policy_config: PolicyConfig | None = None,
    eta_probes: bool = False,
    first_flavor: bool = False,
    rigid: bool = False,
) -> ReplayRun:
    """One policy over the trace. With `eta_probes`, the replay runs twice: the first pass finds
    each job's start, the second, identical, also asks the policy about each job 10 minutes
    before that start, and computes the squeue-style estimate at both moments (`sim.etas`).
    With `first_flavor`, each job accepts only the first flavor it lists (flavor fallback off,
    for a comparison on the same jobs); with `rigid`, each elastic gang runs rigid at its max."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}")
    pcfg = policy_config or policy_config_from(config)
    quotas = team_quotas(config)

    def simulate(label: str, etas: EtaLog) -> Simulator:
        cb = (lambda frac: progress(label, frac)) if progress is not None else None
        sim = Simulator(trace, nodes_from(config), pcfg, policy, quotas=quotas, cycle_s=cycle_s, progress=cb,
                        etas=etas, first_flavor=first_flavor, rigid=rigid)
        sim.run()
        return sim

    started = time.perf_counter()
    sim = simulate(policy, EtaLog())
    wall = time.perf_counter() - started
    if eta_probes:
        # The squeue-style estimate costs as much as the policy under overload: only the
        # second pass, which reports, computes it.
        first = sim
        starts = {j.t.job_id: (j.t.submit, j.first_start) for j in first.jobs if j.first_start is not None}
        sim = simulate(f"{policy} {PROBE_LABEL}", EtaLog(probe_times(starts, first.cycle_times), squeue=True))
        _same_starts(first, sim)
    result = metrics(sim, wall)
    waits: dict[str, list[float]] = {}
    for job in sim.jobs:
        waits.setdefault(job.t.tier.value, []).append(job.wait)
    return ReplayRun(result, waits, sim.accounts.timeline, sim.capacity)


PROBE_LABEL = "(ETA probes)"


def _same_starts(first: Simulator, second: Simulator) -> None:
    """The probe pass must decide exactly as the first: ETAs decide nothing."""
    for a, b in zip(first.jobs, second.jobs, strict=True):
        if (a.first_start, a.finish, a.preemptions) != (b.first_start, b.finish, b.preemptions):
            raise RuntimeError(f"the ETA probe pass decided differently for {a.t.job_id}")


def replay(
    trace_path: str | Path,
    scenario: str | Path,
    policy: str,
    progress: Progress | None = None,
    *,
    trace_format: str = "philly",
) -> dict[str, Any]:
    """Replay one policy; returns one object with exactly the issue's metric keys."""
    trace, config = load(trace_path, scenario, trace_format)
    return replay_run(trace, config, policy, progress=progress).result


def compare(
    trace_path: str | Path,
    scenario: str | Path,
    policies: tuple[str, ...] = POLICY_NAMES,
    progress: Progress | None = None,
    *,
    trace_format: str = "philly",
) -> list[ReplayRun]:
    """Replay every policy on the same workload and cluster, in order."""
    trace, config = load(trace_path, scenario, trace_format)
    return [replay_run(trace, config, p, progress=progress) for p in policies]


def load(
    trace_path: str | Path, scenario: str | Path, trace_format: str
) -> tuple[list[TraceJob], RotaConfig]:
    if trace_format == "philly":
        jobs = load_philly(Path(trace_path))
    elif trace_format == "rota-csv":
        jobs = load_rota_csv(Path(trace_path))
    else:
        raise ValueError(f"unknown trace format {trace_format!r}; choose from {', '.join(TRACE_FORMATS)}")
    return jobs, load_config(find_scenario(scenario))
