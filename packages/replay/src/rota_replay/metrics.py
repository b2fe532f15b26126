"""The replay metrics, exactly as the issue defines them (so that policies compare).

wait      all pending time: before the first start, plus after each stop until the restart
JCT       finish - submit
lost      GPUs x the run time whose progress was discarded, / 3600
deferred  jobs that their queue's preemption delay kept, once or more, from stopping anyone
          (`preemption_deferred_jobs`), and of those the ones that started without a plan of
          their own (`deferred_started_without_preemption`): GPUs freed themselves in time
overhead  GPUs x (notice or SIGTERM to stop, plus restart overhead), / 3600
util      busy GPU-seconds between the first and the last submission / (capacity x that span)
fairness  Armada's fairness error, sampled every 300 s while demand >= capacity (the count of
          such samples is `fairness_samples`)
long-term among teams with unmet demand, half the summed gap between each one's share of their
          decayed usage (the policy's half-life) and its share of their quota weights; every
          300 s over the whole simulation, 0 while fewer than two teams wait (the count of
          samples where two or more did is `teams_waiting_samples`)
goodput   busy GPU-seconds neither lost nor overhead, over the same capacity x span
eta_waited  over jobs whose first start came 60 s or more after submit: the median and p90
          of |ETA at submit - start| / wait, the share within 25%, and the share of them that
          had an ETA at all (coverage; the others are left out of the figures)
eta_before_start  the same, for the ETA of the last cycle 10 minutes or more before the start
          (the one at submission if none came between); None unless the replay was run with
          ETA probes (a second pass, `replay_run(..., eta_probes=True)`)
squeue_eta_*  the same two, for what `squeue --start` would have printed (`sim.squeue`);
          None, too, without ETA probes
eta_waited_eta_or_blocker  the share of the jobs that waited 60 s or more that had, at
          submission, an ETA or a reason naming what blocks them (`details.blocker`)
eta_by_reason  the same figures per primary reason code at submission, over the jobs that waited
          60 s or more (None for a code no such job had; NONE: jobs the policy did not explain at
          submission, as one that started at once and was stopped later): jobs, coverage, eta_or_blocker,
          p50 / p90 at submission, before_start p50 / p90, squeue p50 / p90 at submission and
          squeue coverage (the last four None without ETA probes)
eta       median over jobs of |ETA at submit - actual start| / max(actual wait, 60 s)
gpu_shares  only on a cluster with a shareable flavor: the jobs asking for a share and their
          average wait, the GPU-hours held (a shared GPU whole), the completed jobs per GPU-hour
          held, the makespan (last finish - first submit), how often a share was stopped as a
          victim and how many shares had a plan of their own (DECISIONS 84)
flavor_fallback  only for a trace where some job lists several flavors: how many do, their
          average wait, how many started on another flavor than their first at least once, and
          the average wait of the jobs that list one flavor
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from rota.contracts.common import TIER_ORDER
from rota.contracts.messages import WaitReasonCode

from rota_replay.simjob import SimJob
from rota_replay.simulator import Simulator

__all__ = ["METRIC_KEYS", "metrics"]

Estimates = dict[str, float | None]

METRIC_KEYS = (
    "policy", "jobs", "completed", "wall_s", "avg_jct_s", "avg_wait_s", "avg_wait_s_by_tier",
    "p50_wait_s_by_tier", "p95_wait_s_by_tier", "max_wait_s", "utilization", "goodput", "preemptions",
    "preemptions_by_victim_tier", "preemption_deferred_jobs", "deferred_started_without_preemption",
    "lost_gpu_hours", "preemption_overhead_gpu_hours", "fairness_error",
    "fairness_samples", "long_term_fairness_error", "teams_waiting_samples", "eta_median_rel_error",
    "eta_waited_jobs",
    "eta_waited_p50_rel_error", "eta_waited_p90_rel_error", "eta_waited_within_25pct",
    "eta_waited_coverage", "eta_before_start_p50_rel_error", "eta_before_start_p90_rel_error",
    "eta_before_start_within_25pct", "squeue_eta_waited_p50_rel_error",
    "squeue_eta_waited_p90_rel_error", "squeue_eta_waited_within_25pct",
    "squeue_eta_waited_coverage", "squeue_eta_before_start_p50_rel_error",
    "squeue_eta_before_start_p90_rel_error", "squeue_eta_before_start_within_25pct",
    "squeue_eta_before_start_coverage", "eta_waited_eta_or_blocker", "eta_by_reason",
)  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))
    return ordered[rank]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def metrics(sim: Simulator, wall_s: float) -> dict[str, Any]:
    jobs = sim.jobs
    done = [j for j in jobs if j.finish is not None]
    waits = [j.wait for j in jobs]
    by_tier: dict[str, list[float]] = {t.value: [] for t in TIER_ORDER}
    for j in jobs:
        by_tier[j.t.tier.value].append(j.wait)
    at_submit = sim.etas.at_submit
    errors = [
        abs(eta - j.first_start) / max(j.first_start - j.t.submit, 60.0)
        for j in jobs
        if (eta := at_submit.get(j.t.job_id)) is not None and j.first_start is not None
    ]
    start, end = sim.accounts.window
    span = max(end - start, 1e-9)
    busy = sim.accounts.busy_gpu_s
    return {
        "policy": sim.policy_name,
        "jobs": len(jobs),
        "completed": len(done),
        "wall_s": round(wall_s, 2),
        "avg_jct_s": _mean([j.finish - j.t.submit for j in done if j.finish is not None]),
        "avg_wait_s": _mean(waits),
        "avg_wait_s_by_tier": {k: _mean(v) for k, v in by_tier.items()},
        "p50_wait_s_by_tier": {k: _percentile(v, 0.50) for k, v in by_tier.items()},
        "p95_wait_s_by_tier": {k: _percentile(v, 0.95) for k, v in by_tier.items()},
        "max_wait_s": max(waits, default=0.0),
        "utilization": busy / (sim.capacity * span),
        "goodput": max(0.0, busy - sim.lost_gpu_s - sim.overhead_gpu_s) / (sim.capacity * span),
        "preemptions": sim.preemptions,
        "preemptions_by_victim_tier": dict(sim.victims_by_tier),
        "preemption_deferred_jobs": len(sim.deferred_jobs),
        "deferred_started_without_preemption": sum(
            1 for job_id in sim.deferred_jobs
            if job_id not in sim.preemptors and sim.by_id[job_id].first_start is not None
        ),
        "lost_gpu_hours": sim.lost_gpu_s / 3600.0,
        "preemption_overhead_gpu_hours": sim.overhead_gpu_s / 3600.0,
        "fairness_error": sim.accounts.fairness.value,
        "fairness_samples": sim.accounts.fairness.count,
        "long_term_fairness_error": sim.accounts.long_term_fairness.value,
        "teams_waiting_samples": sim.accounts.teams_waiting_samples,
        "eta_median_rel_error": statistics.median(errors) if errors else 0.0,
        **_eta_quality(sim),
        **_budgets(sim),
        **_fallback(sim),
        **_topology(sim),
        **_shares(sim),
        **_elastic(sim),
    }


def _shares(sim: Simulator) -> dict[str, Any]:
    """Figures for a cluster with flavors that allow GPU shares (DECISIONS 69); nothing on one
    without, so that such replays keep exactly the issue's keys. `jobs_per_gpu_hour` is the
    completed jobs over the GPU-hours held in the whole replay, a GPU that shares hold counting
    whole: packing two halves onto one GPU raises it, a lone half on a GPU does not."""
    if not sim.config.shareable:
        return {}
    shares = [j for j in sim.jobs if j.t.share]
    done = [j for j in sim.jobs if j.finish is not None]
    held_h = sim.accounts.held_gpu_s / 3600.0
    last = max((j.finish for j in done if j.finish is not None), default=sim.accounts.window[0])
    return {"gpu_shares": {
        "share_jobs": len(shares),
        "share_jobs_avg_wait_s": _mean([j.wait for j in shares]),
        "held_gpu_hours": held_h,
        "jobs_per_gpu_hour": len(done) / held_h if held_h > 0 else 0.0,
        "makespan_s": last - sim.accounts.window[0],
        "share_preemptions": sum(j.preemptions for j in shares),
        "share_preemptors": sum(j.t.job_id in sim.preemptors for j in shares),
    }}


def _elastic(sim: Simulator) -> dict[str, Any]:
    """Figures for elastic gangs (DECISIONS 72); nothing when the trace has none, so that other
    replays keep exactly the keys they had. A policy that runs them rigid (the baselines, or
    `--rigid`) reports the same jobs, for the comparison."""
    elastic = [j for j in sim.jobs if j.t.elastic]
    if not elastic:
        return {}
    multi = [j for j in sim.jobs if j.t.workers > 1 and not j.t.elastic]
    started = [j for j in elastic if j.starts]
    return {"elastic": {
        "jobs": len(elastic),
        "run_elastic": sim.elastic,
        "avg_wait_s": _mean([j.wait for j in elastic]),
        "other_gangs_avg_wait_s": _mean([j.wait for j in multi]),
        "avg_start_workers_of_max": _mean([j.size_sum / (j.starts * j.t.workers) for j in started]),
        "started_below_max": sum(1 for j in started if j.size_sum < j.starts * j.t.workers),
        "shrinks": sim.shrinks,
        "grows": sim.grows,
    }}


def _topology(sim: Simulator) -> dict[str, Any]:
    """Figures for gangs on a cluster that declares topology levels; nothing on one that does
    not, so that such replays keep exactly the issue's keys."""
    if not any(n.levels for n in sim.node_states):
        return {}
    gangs = [j for j in sim.jobs if j.t.workers > 1]
    singles = [j for j in sim.jobs if j.t.workers <= 1]
    fragmented = [j for j in sim.jobs if j.first_reason == "FRAGMENTATION"]
    return {"topology": {
        "gangs": len(gangs),
        "gangs_avg_wait_s": _mean([j.wait for j in gangs]),
        "singles_avg_wait_s": _mean([j.wait for j in singles]),
        "fragmentation_waits": len(fragmented),
        "gang_fragmentation_waits": sum(1 for j in fragmented if j.t.workers > 1),
    }}


def _budgets(sim: Simulator) -> dict[str, Any]:
    """Only for a scenario with budgets, so that other replays report exactly what they did."""
    if sim.budgets is None:
        return {}
    held = [j.wait for j in sim.jobs if j.t.job_id in sim.budgets.held]
    teams = {team for team, _ in sim.config.budgets}
    with_budget = [j.wait for j in sim.jobs if j.t.team in teams]
    others = [j.wait for j in sim.jobs if j.t.team not in teams]
    return {
        "budget_held_jobs": len(held),
        "budget_held_avg_wait_s": _mean(held),
        "budget_teams_avg_wait_s": _mean(with_budget),
        "budget_other_teams_avg_wait_s": _mean(others),
        "budget_peak_gpu_hours": {k: round(v, 1) for k, v in sorted(sim.budgets.peaks.items())},
    }


def _fallback(sim: Simulator) -> dict[str, Any]:
    """Figures for jobs that list several flavors; nothing when no job does, so that the
    metrics of a single-flavor trace keep exactly the issue's keys."""
    many = [j for j in sim.jobs if len(j.t.flavors) > 1]
    if not many:
        return {}
    one = [j for j in sim.jobs if len(j.t.flavors) <= 1]
    return {"flavor_fallback": {
        "jobs": len(many),
        "avg_wait_s": _mean([j.wait for j in many]),
        "started_on_fallback": sum(1 for j in many if j.fallback_starts),
        "single_flavor_avg_wait_s": _mean([j.wait for j in one]),
    }}


def _waited_errors(jobs: list[SimJob], estimates: Callable[[str], float | None]) -> tuple[list[float], int]:
    """|estimate - start| / wait over the jobs that waited 60 s or more and had an estimate,
    and how many waited."""
    errors, waited = [], 0
    for j in jobs:
        if j.first_start is None or j.first_start - j.t.submit < 60.0:
            continue
        waited += 1
        eta = estimates(j.t.job_id)
        if eta is not None:
            errors.append(abs(eta - j.first_start) / (j.first_start - j.t.submit))
    return errors, waited


def _summary(prefix: str, errors: list[float], waited: int, *, coverage: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"{prefix}_p50_rel_error": _percentile(errors, 0.50),
        f"{prefix}_p90_rel_error": _percentile(errors, 0.90),
        f"{prefix}_within_25pct": sum(e <= 0.25 for e in errors) / len(errors) if errors else 0.0,
    }
    if coverage:
        out[f"{prefix}_coverage"] = len(errors) / waited if waited else 0.0
    return out


def _eta_quality(sim: Simulator) -> dict[str, Any]:
    log = sim.etas

    def before(estimates: Estimates, fallback: Estimates) -> Callable[[str], float | None]:
        return lambda job_id: estimates[job_id] if job_id in estimates else fallback.get(job_id)

    errors, waited = _waited_errors(sim.jobs, log.at_submit.get)
    out: dict[str, Any] = {"eta_waited_jobs": waited}
    out |= _summary("eta_waited", errors, waited, coverage=True)
    probed = log.probed
    b_errors, _ = _waited_errors(sim.jobs, before(log.before_start, log.at_submit))
    out |= _none_unless(probed, _summary("eta_before_start", b_errors, waited, coverage=False))
    s_errors, _ = _waited_errors(sim.jobs, log.squeue_at_submit.get)
    out |= _none_unless(log.squeue, _summary("squeue_eta_waited", s_errors, waited, coverage=True))
    sb_errors, _ = _waited_errors(sim.jobs, before(log.squeue_before_start, log.squeue_at_submit))
    summary = _summary("squeue_eta_before_start", sb_errors, waited, coverage=True)
    out |= _none_unless(log.squeue and probed, summary)
    waited_jobs = [j for j in sim.jobs if j.first_start is not None and j.first_start - j.t.submit >= 60.0]
    told = sum(1 for j in waited_jobs
               if log.at_submit.get(j.t.job_id) is not None or j.t.job_id in log.blocker_at_submit)
    out["eta_waited_eta_or_blocker"] = told / len(waited_jobs) if waited_jobs else 0.0
    out["eta_by_reason"] = _by_reason(sim, waited_jobs, before(log.before_start, log.at_submit),
                                      before(log.squeue_before_start, log.squeue_at_submit))
    return out


def _by_reason(
    sim: Simulator, waited: list[SimJob], before: Callable[[str], float | None],
    squeue_before: Callable[[str], float | None],
) -> dict[str, dict[str, Any] | None]:
    """`eta_by_reason`: the ETA figures per primary reason code at submission."""
    log = sim.etas
    groups: dict[str, list[SimJob]] = {}
    for j in waited:
        groups.setdefault(log.code_at_submit.get(j.t.job_id, "NONE"), []).append(j)
    out: dict[str, dict[str, Any] | None] = {}
    for code in (*(c.value for c in WaitReasonCode), "NONE"):
        jobs = groups.get(code)
        if not jobs:
            out[code] = None
            continue
        errors, n = _waited_errors(jobs, log.at_submit.get)
        b_errors, _ = _waited_errors(jobs, before)
        s_errors, _ = _waited_errors(jobs, log.squeue_at_submit.get)
        told = sum(1 for j in jobs if log.at_submit.get(j.t.job_id) is not None
                   or j.t.job_id in log.blocker_at_submit)
        figures: dict[str, Any] = {
            "jobs": n, "coverage": len(errors) / n, "eta_or_blocker": told / n,
            "p50": _percentile(errors, 0.5), "p90": _percentile(errors, 0.9),
        }
        figures |= _none_unless(log.probed, {"before_start_p50": _percentile(b_errors, 0.5),
                                             "before_start_p90": _percentile(b_errors, 0.9)})
        figures |= _none_unless(log.squeue, {"squeue_p50": _percentile(s_errors, 0.5),
                                             "squeue_p90": _percentile(s_errors, 0.9),
                                             "squeue_coverage": len(s_errors) / n})
        out[code] = figures
    return out


def _none_unless(measured: bool, figures: dict[str, Any]) -> dict[str, Any]:
    return figures if measured else dict.fromkeys(figures)
