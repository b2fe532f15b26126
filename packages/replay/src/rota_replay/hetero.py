"""A heterogeneous workload derived from the Philly slice, for `deploy/scenarios/philly-hetero.yaml`.

The cluster has three flavors of different sizes: `a100` (40 nodes of 8 GPUs), `v100` (40 of 8)
and `t4` (32 of 4): 768 GPUs, as philly-768. Each job keeps its Philly shape, tier, team,
duration and resumability (`workload`), and gets flavors by a fixed rule on its index k, so the
derived trace is the same on every run:

  u = a hash of k in [0, 1) (Knuth's multiplicative hash: k x 2654435761 mod 2^32, / 2^32)
  preferred flavor  u < 0.40: a100; u < 0.80: v100; else t4, unless a worker needs more than
                    4 GPUs (a t4 node's size): then a100 if u < 0.90, else v100
  second flavor     when k % 10 in (1, 4, 8), 30% of jobs: a100 -> v100, v100 -> a100,
                    t4 -> v100
  elastic gang      the i-th training job of 2 workers or more (i = 0, 1, ... in trace order)
                    when i % 10 in (2, 5, 8), 30% of them: min = workers // 2, max = workers,
                    its trace size (DECISIONS 72); on with `elastic=True` (`rota
                    convert-trace --hetero --elastic`); off, the same jobs rigid.
                    `elastic_draw` d in 0-9 takes i % 10 in (2+d, 5+d, 8+d) mod 10 instead:
                    another 30% of them, to see how much a result owes to which few jobs
                    the rule picked (the slice has only 55 such gangs)

With `--shares` (`hetero_shares`), 20% of the 1-GPU experiment jobs ask for half a GPU
instead (DECISIONS 69), by a second fixed rule on k, so the same jobs are chosen on every run:

  v = (k x 2246822519 mod 2^32) / 2^32 (a second multiplicative hash, independent of u)
  a share of 0.5    when the job has one worker of one GPU, its tier is experiment, and v < 0.20

Team quotas per flavor follow the Philly rule per flavor, in whole nodes of that flavor (n_f GPUs):
floor(C_f x the team's share of the GPU-hours preferring f / n_f) x n_f, at least n_f; 0 for
teams with fewer than 10 jobs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from rota.contracts.common import Tier

from rota_replay.workload import GPUS_PER_NODE, MIN_JOBS_FOR_QUOTA, TraceJob

__all__ = [
    "ELASTIC_DRAWS", "HETERO_CAPACITY", "SHARE_FRACTION",
    "hetero_jobs", "hetero_quotas", "hetero_shares", "whole_gpus",
]

HETERO_CAPACITY: Mapping[str, int] = MappingProxyType({"a100": 320, "v100": 320, "t4": 128})
T4_NODE = 4
NODE_SIZE: Mapping[str, int] = MappingProxyType({"a100": GPUS_PER_NODE, "v100": GPUS_PER_NODE, "t4": T4_NODE})
_SECOND: Mapping[str, str] = MappingProxyType({"a100": "v100", "v100": "a100", "t4": "v100"})
_TWO_FLAVORS = (1, 4, 8)
_ELASTIC = (2, 5, 8)


def _unit(k: int) -> float:
    return (k * 2654435761 % 2**32) / 2**32


def _gang_of_training(job: TraceJob) -> bool:
    return job.tier is Tier.training and job.workers >= 2


def _preferred(job: TraceJob) -> str:
    u = _unit(job.k)
    if u < 0.40:
        return "a100"
    if u < 0.80:
        return "v100"
    if job.gpus_per_worker <= T4_NODE:
        return "t4"
    return "a100" if u < 0.90 else "v100"


ELASTIC_DRAWS = 10


def hetero_jobs(jobs: list[TraceJob], *, elastic: bool = False, elastic_draw: int = 0) -> list[TraceJob]:
    """The jobs with the rule's flavors, and (`elastic`) its elastic gangs, the rule's own
    (draw 0) or another 30% of the training gangs (draws 1-9)."""
    if not 0 <= elastic_draw < ELASTIC_DRAWS:
        raise ValueError(f"elastic_draw: {elastic_draw} is not in 0-{ELASTIC_DRAWS - 1}")
    chosen = {(i + elastic_draw) % 10 for i in _ELASTIC}
    out = []
    gangs = 0
    for job in jobs:
        first = _preferred(job)
        flavors = (first, _SECOND[first]) if job.k % 10 in _TWO_FLAVORS else (first,)
        least = 0
        if _gang_of_training(job):
            least = job.workers // 2 if elastic and gangs % 10 in chosen else 0
            gangs += 1
        out.append(replace(job, flavors=flavors, workers_min=least))
    return out


SHARE_FRACTION = 0.20
"""The part of the 1-GPU experiment jobs that `hetero_shares` turns into half-GPU shares."""
_HALF = 2


def hetero_shares(jobs: list[TraceJob]) -> list[TraceJob]:
    """The jobs with the share rule: 20% of the 1-GPU experiment jobs ask for 0.5 of a GPU."""
    return [
        replace(job, share=_HALF)
        if job.workers == 1 and job.gpus_per_worker == 1 and job.tier is Tier.experiment
        and (job.k * 2246822519 % 2**32) / 2**32 < SHARE_FRACTION
        else job
        for job in jobs
    ]


def whole_gpus(jobs: list[TraceJob]) -> list[TraceJob]:
    """The same jobs with every share asking for its one GPU whole (shares off)."""
    return [replace(job, share=0) if job.share else job for job in jobs]


def hetero_quotas(jobs: list[TraceJob]) -> dict[str, dict[str, int]]:
    """Per team, per flavor: the Philly quota rule applied to each flavor's capacity and the
    GPU-hours of the jobs that prefer it."""
    count = Counter(j.team for j in jobs)
    quotas: dict[str, dict[str, int]] = {team: {} for team in sorted(count)}
    for flavor, capacity in HETERO_CAPACITY.items():
        hours: dict[str, float] = {}
        for j in jobs:
            if j.flavors[:1] == (flavor,):
                hours[j.team] = hours.get(j.team, 0.0) + j.duration * j.gpus
        total = sum(hours.values()) or 1.0
        for team in quotas:
            if count[team] < MIN_JOBS_FOR_QUOTA:
                quotas[team][flavor] = 0
                continue
            share = hours.get(team, 0.0) / total
            size = NODE_SIZE[flavor]
            quotas[team][flavor] = max(size, math.floor(capacity * share / size) * size)
    return quotas
