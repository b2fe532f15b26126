"""Trace replay: the Philly workload, a discrete-event simulator, and the comparison metrics."""

from rota_replay.replay import POLICY_NAMES, SCENARIOS, ReplayRun, compare, replay, replay_run
from rota_replay.workload import TraceJob, load_philly, scenario_quotas

__all__ = [
    "POLICY_NAMES",
    "SCENARIOS",
    "ReplayRun",
    "TraceJob",
    "compare",
    "load_philly",
    "replay",
    "replay_run",
    "scenario_quotas",
]
