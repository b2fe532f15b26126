"""Fair share: decayed usage, Slurm's classic factor, and weighted max-min water-filling.

Slurm's classic fair-share factor is F = 2^(-U/S), where U is the team's share of all decayed
usage and S its share of all configured shares (priority_multifactor docs). A team that used
exactly its share gets 0.5, an idle one 1.0, a heavy one tends to 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["accrue", "decay", "fairshare_factors", "usage_share_gap", "water_fill"]

_LN2 = math.log(2.0)


def decay(value: float, elapsed_s: float, half_life_s: float) -> float:
    if elapsed_s <= 0:
        return value
    return value * math.pow(2.0, -elapsed_s / half_life_s)


def accrue(value: float, gpus: float, elapsed_s: float, half_life_s: float) -> float:
    """Decayed usage after `elapsed_s` more seconds at a constant `gpus` busy.

    Exact integral of a constant rate under exponential decay, so the result does not depend on
    how often the caller updates it.
    """
    if elapsed_s <= 0:
        return value
    kept = math.pow(2.0, -elapsed_s / half_life_s)
    return value * kept + gpus * (half_life_s / _LN2) * (1.0 - kept)


def fairshare_factors(usage: Mapping[str, float], shares: Mapping[str, float]) -> dict[str, float]:
    """2^(-U/S) per team in `shares`; teams missing from `usage` have used nothing."""
    total_usage = sum(max(0.0, u) for u in usage.values())
    total_shares = sum(shares.values())
    out: dict[str, float] = {}
    for team, share in shares.items():
        if total_usage <= 0 or total_shares <= 0 or share <= 0:
            out[team] = 1.0 if share > 0 else 0.0
            continue
        normalized_usage = max(0.0, usage.get(team, 0.0)) / total_usage
        normalized_share = share / total_shares
        out[team] = math.pow(2.0, -normalized_usage / normalized_share)
    return out


def water_fill(capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair allocation of `capacity`, each team capped at its demand.

    Repeatedly offers the remaining capacity in proportion to weight; teams whose demand is met
    drop out and their surplus is offered again.
    """
    fair = {team: 0.0 for team in demand}
    active = {team for team, d in demand.items() if d > 0}
    remaining = float(capacity)
    while active and remaining > 1e-9:
        total_weight = sum(weight.get(t, 1.0) for t in active)
        offer = {t: remaining * weight.get(t, 1.0) / total_weight for t in active}
        satisfied = {t for t in active if demand[t] - fair[t] <= offer[t]}
        if not satisfied:
            for t in active:
                fair[t] += offer[t]
            break
        for t in satisfied:
            remaining -= demand[t] - fair[t]
            fair[t] = float(demand[t])
        active -= satisfied
    return fair


def usage_share_gap(used: Mapping[str, float], weight: Mapping[str, float]) -> float | None:
    """Half the summed gap between each team's share of `used` and its share of `weight`, over
    the teams in `used`: 0 when usage splits as entitled, 1 at worst. None for fewer than two
    teams, or none with any usage yet."""
    total_used = sum(used.values())
    total_weight = sum(weight.get(t, 1.0) for t in used)
    if len(used) < 2 or total_used <= 0 or total_weight <= 0:
        return None
    return sum(abs(u / total_used - weight.get(t, 1.0) / total_weight) for t, u in used.items()) / 2
