"""A wait, said for people: a title per reason code, the time a hold ends, the age factor now.

The scheduler publishes each wait's reasons as codes (for machines) with messages in the
user's words; `rota why`, `rota trace`, `rota jobs` and the console show the title and the
message, and keep the code for `--json`. docs/reasons.md says what each code means and what
to do about it (a unit test holds every code to an entry there and a title here).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

TITLES: dict[str, str] = {
    "QUOTA_EXCEEDED": "over its team's quota",
    "INSUFFICIENT_CAPACITY": "too few free GPUs",
    "NO_MATCHING_FLAVOR": "no node offers what it asks for",
    "PRIORITY": "behind other jobs in its queue",
    "FRAGMENTATION": "the free GPUs are not together on one node",
    "EXCEEDS_CLUSTER": "larger than the cluster: it can never start",
    "WAITING_FOR_PREEMPTION": "waiting for preempted runs to save and stop",
    "RESERVED_FOR_HIGHER_PRIORITY": "the free GPUs are kept for a job ahead",
    "PREEMPTION_DELAYED": "its queue waits before it preempts",
    "BUDGET_EXHAUSTED": "its team's GPU-hour budget is spent",
    "PREEMPTION_HELD": "a rule holds it back from preempting",
    "NO_EXECUTOR": "no running executor can run it",
    "NOT_YET_SCHEDULED": "not looked at yet",
}

HOLDS = frozenset({"PREEMPTION_HELD", "PREEMPTION_DELAYED"})
"""Codes of the rules that hold a job back from preempting: `rota trace` names them on the
hold's line even when another reason comes first."""

HOLD_ENDS = ("hold_ends_at", "preemption_allowed_at", "resets_at")
"""Details that say, as epoch seconds, when what holds a job ends, in the order they are read:
a victim's minimum runtime (`PREEMPTION_HELD`), a preemption delay (`PREEMPTION_DELAYED`), a
budget's new period (`BUDGET_EXHAUSTED`). A wait-target hold has none: it lasts until the
job's ETA, when running work should free the GPUs."""

ETA_BASES: dict[str, str] = {
    "own_runs_end": "when its team's own runs end and free its quota",
    "gpus_in_use_freed": "when GPUs in use are freed",
    "one_node_frees": "when one node frees enough GPUs together",
}
"""What an ETA rests on (the primary reason's `details.eta_basis`), in words."""


def title(code: str) -> str:
    """The reason in a few words; a code this version does not know, in lower case."""
    return TITLES.get(code) or code.lower().replace("_", " ")


def ends_at(reason: Mapping[str, Any]) -> datetime | None:
    """When what the reason names stops holding the job, if its details say."""
    details = reason.get("details") or {}
    for key in HOLD_ENDS:
        value = details.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), UTC)
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def for_people(reason: Mapping[str, Any]) -> dict[str, Any]:
    """The reason with its `title` and, for a hold, `ends_at` (ISO 8601) added."""
    ends = ends_at(reason)
    return {**reason, "title": title(str(reason.get("code", ""))),
            "ends_at": ends.isoformat() if ends else None}


def eta_basis(reasons: list[Mapping[str, Any]]) -> str | None:
    """What the job's ETA rests on, in words, when its primary reason says."""
    details = (reasons[0].get("details") or {}) if reasons else {}
    basis = details.get("eta_basis")
    return ETA_BASES.get(str(basis), str(basis).replace("_", " ")) if basis else None


def no_eta(reasons: list[Mapping[str, Any]]) -> str:
    """Why a job has no ETA, never a bare "unknown": the blocker the scheduler named (a job
    that can never start as it is), else the primary reason's title."""
    if not reasons:
        return "not looked at yet"
    details = reasons[0].get("details") or {}
    blocker = details.get("blocker_reason") or details.get("blocker")
    return str(blocker) if blocker else title(str(reasons[0].get("code", "")))


def age_factor(weight: float, cap_s: float, waited_s: float) -> float:
    """The score's age factor after `waited_s`, as the policy computes it
    (`rota_policy.nominate.ordering.Scorer.age`): weight x min(wait, cap) / cap."""
    waited = min(max(waited_s, 0.0), cap_s)
    return weight * waited / cap_s if cap_s > 0 else 0.0


def relative(at: datetime, now: datetime) -> str:
    """"in 4m", "2h ago": how far `at` is from `now`, to the minute."""
    seconds = (at - now).total_seconds()
    minutes = round(abs(seconds) / 60)
    span = "under a minute" if minutes == 0 else (
        f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m")
    if minutes == 0:
        return span
    return f"in {span}" if seconds > 0 else f"{span} ago"


PLAN_RULES: dict[str, str] = {
    "lower_tier": "its runs are in a lower queue",
    "reclaim": "its team takes back GPUs another team borrowed",
    "last_resort": "as a last resort, past the usual rules",
}
"""A preemption plan's `reason` is `<style>:<rule>` (`rota:lower_tier`): the rule, said for
people, for `rota trace` and the console (the plan keeps the code)."""


def plan_reason(reason: str | None) -> str:
    """Why runs were chosen as victims, in words: `rota:reclaim` -> "its team takes back ..."."""
    if not reason:
        return "preempted"
    rule = reason.rsplit(":", 1)[-1]
    return PLAN_RULES.get(rule) or rule.replace("_", " ")
