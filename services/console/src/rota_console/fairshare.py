"""The fair-share plot's data: each team's decayed GPU usage against its share, over time.

The console keeps no database and the API has no usage history, so it samples the teams' GPUs
in use (the queue summary) every `sample_interval_s` and decays it with the policy's half-life,
as the ledger does (usage * 2^(-dt / half-life) plus GPUs * dt). The plot starts when the
console does; the ledger's own usage remains the scheduler's truth.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from rota.config import RotaConfig

from rota_console.pages import FairSharePage, SharePoint, TeamShare
from rota_console.reader import Viewer


def shares(config: RotaConfig) -> dict[str, float]:
    """Each team's fair share: its part of all quotas (weights break a tie of no quotas)."""
    quota = {name: float(sum(team.quota.values())) for name, team in config.teams.items()}
    total = sum(quota.values())
    if total > 0:
        return {name: q / total for name, q in quota.items()}
    weights = {name: team.weight for name, team in config.teams.items()}
    return {name: w / sum(weights.values()) for name, w in weights.items()}


@dataclass
class UsageHistory:
    half_life_s: float
    points: int
    usage: dict[str, float] = field(default_factory=dict)
    """GPU-seconds, decayed, per team."""
    samples: deque[tuple[datetime, dict[str, float]]] = field(default_factory=deque)
    _last_at: datetime | None = None

    def record(self, at: datetime, gpus_in_use: dict[str, float]) -> None:
        if self._last_at is not None:
            dt = max(0.0, (at - self._last_at).total_seconds())
            decay = 2.0 ** (-dt / self.half_life_s)
            for team in set(self.usage) | set(gpus_in_use):
                self.usage[team] = self.usage.get(team, 0.0) * decay + gpus_in_use.get(team, 0) * dt
        else:
            self.usage = {team: 0.0 for team in gpus_in_use}
        self._last_at = at
        self.samples.append((at, dict(self.usage)))
        while len(self.samples) > self.points:
            self.samples.popleft()


def usage_by_team(summary: list[dict[str, object]]) -> dict[str, float]:
    used: dict[str, float] = {}
    for row in summary:
        team = str(row.get("team"))
        value = row.get("gpus_in_use")
        used[team] = used.get(team, 0) + (value if isinstance(value, int | float) else 0)
    return used


def fairshare_page(viewer: Viewer, config: RotaConfig, history: UsageHistory,
                   sample_interval_s: float, now: datetime) -> FairSharePage:
    fair = shares(config)
    teams = [t for t in config.teams if viewer.may_see(t)]
    series: dict[str, list[SharePoint]] = {t: [] for t in teams}
    for at, usage in history.samples:
        total = sum(usage.values())
        for team in teams:
            part = usage.get(team, 0.0) / total if total > 0 else 0.0
            series[team].append(SharePoint(at=at, usage_share=round(part, 4)))
    return FairSharePage(
        viewer=viewer.team, generated_at=now, half_life_s=history.half_life_s,
        sample_interval_s=sample_interval_s,
        teams=[TeamShare(team=t, share=round(fair.get(t, 0.0), 4),
                         usage_share=series[t][-1].usage_share if series[t] else 0.0,
                         series=series[t]) for t in teams])


def polyline(points: list[SharePoint], width: float, height: float) -> str:
    """SVG polyline points for a series, time left to right, 0..1 bottom to top."""
    if not points:
        return ""
    start, end = points[0].at, points[-1].at
    span = (end - start).total_seconds() or 1.0
    return " ".join(
        f"{width * (p.at - start).total_seconds() / span:.1f},{height * (1 - p.usage_share):.1f}"
        for p in points)
