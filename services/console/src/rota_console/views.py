"""Pure: the pages, built from what the API answered. No I/O, so each is unit-tested alone."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from rota import waits
from rota.config import RotaConfig
from rota.contracts.common import TIER_ORDER, Tier
from rota.units import gpu_count

from rota_console.pages import (
    ClusterPage,
    Factor,
    GpuCell,
    JobPage,
    NodeCells,
    Notification,
    PendingPreemption,
    QueueDiagnosis,
    QueueRow,
    QueuesPage,
    Reason,
    TierBlock,
    TimelineEntry,
    WaitingJob,
)
from rota_console.reader import OTHER_TEAM, Viewer

LONGEST_WAITS = 5
TIERS = [t.value for t in TIER_ORDER]

# The primary reason that explains a long wait by something other than too few GPUs, named
# as the scheduler's queue diagnosis names it (rota_policy.explain.reasons).
CAUSES = {
    "QUOTA_EXCEEDED": "quota_too_low",
    "NO_MATCHING_FLAVOR": "flavor_too_narrow",
    "EXCEEDS_CLUSTER": "request_too_large",
    "FRAGMENTATION": "fragmentation",
    "PRIORITY": "queue_weight",
    "NO_EXECUTOR": "no_executor",
}


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value)
    return None


def _primary(job: dict[str, Any]) -> dict[str, Any]:
    reasons = (job.get("wait") or {}).get("reasons") or []
    first: dict[str, Any] = reasons[0] if reasons else {
        "code": "NOT_YET_SCHEDULED", "message": "the scheduler has not considered it yet"}
    return first


def queues_page(viewer: Viewer, summary: list[dict[str, Any]], jobs: list[dict[str, Any]],
                config: RotaConfig, now: datetime) -> QueuesPage:
    pending = [j for j in jobs if j.get("state") == "pending"]
    tiers = []
    for tier in TIERS:
        rows = [QueueRow.model_validate(r) for r in summary if r.get("queue") == tier]
        waiting = sorted((j for j in pending if j.get("queue") == tier),
                         key=lambda j: str(j.get("submitted_at")))
        longest = [_waiting(j, now) for j in waiting[:LONGEST_WAITS]]
        threshold = config.queues[Tier(tier)].long_wait_threshold_s
        tiers.append(TierBlock(tier=tier, rows=rows, longest_waits=longest,
                               diagnoses=diagnose(waiting, threshold, now)))
    borrowers = sorted({r["team"] for r in summary if int(r.get("borrowed_gpus") or 0) > 0})
    return QueuesPage(viewer=viewer.team, generated_at=now, tiers=tiers, borrowers=borrowers,
                      jobs=jobs[:50])


def _waiting(job: dict[str, Any], now: datetime) -> WaitingJob:
    primary = _primary(job)
    submitted = _time(job.get("submitted_at")) or now
    return WaitingJob(job_id=job["job_id"], short_id=job.get("short_id") or job["job_id"][-12:],
                      name=job["name"], team=job["team"],
                      waited_s=max(0.0, (now - submitted).total_seconds()),
                      primary_reason=primary.get("code", "?"), message=primary.get("message", ""),
                      title=waits.title(str(primary.get("code", "?"))),
                      eta=_time((job.get("wait") or {}).get("eta")))


def diagnose(waiting: list[dict[str, Any]], threshold_s: float,
             now: datetime) -> list[QueueDiagnosis]:
    """Per team and flavor of one tier: why its long waiters wait, when it is something other
    than too few GPUs, from the primary reasons the scheduler published for each of them."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for job in waiting:
        submitted = _time(job.get("submitted_at")) or now
        if (now - submitted).total_seconds() > threshold_s:
            groups.setdefault((job["team"], job["flavor"]), []).append(job)
    out = []
    for (team, flavor), members in sorted(groups.items()):
        code, count = Counter(_primary(j).get("code", "?") for j in members).most_common(1)[0]
        cause = CAUSES.get(code, "capacity")
        message = (f"{count} of {len(members)} long waiters: {waits.title(code)}" if cause != "capacity"
                   else f"{len(members)} long waiter(s): too few free {flavor} GPUs")
        # The scheduler notes, in a job's primary reason, a flavor it does not accept that
        # would start it now: when that holds for most long waiters, the list is the cause.
        notes = [(_primary(j).get("details") or {}).get("wider_flavor") for j in members]
        wider = Counter(str(w) for w in notes if w)
        if wider and sum(wider.values()) * 2 >= len(members):
            other, _ = wider.most_common(1)[0]
            cause = "flavor_too_narrow"
            message = (f"{sum(wider.values())} of {len(members)} long waiters would start now on"
                       f" {other} if they accepted it (flavors: [{flavor}, {other}])")
        out.append(QueueDiagnosis(team=team, flavor=flavor, cause=cause,
                                  long_waiters=len(members), message=message))
    return out


def factor_bars(factors: dict[str, Any] | None) -> list[Factor]:
    numbers = {k: float(v) for k, v in (factors or {}).items()
               if isinstance(v, int | float) and not isinstance(v, bool) and k != "total"}
    magnitude = sum(abs(v) for v in numbers.values()) or 1.0
    return [Factor(name=k, value=v, percent=round(100 * abs(v) / magnitude, 1))
            for k, v in sorted(numbers.items(), key=lambda kv: -abs(kv[1]))]


def job_page(viewer: Viewer, why: dict[str, Any], trace: dict[str, Any],
             notifications: list[dict[str, Any]], *, jaeger_url: str | None,
             notifications_error: str | None, now: datetime,
             plans: list[dict[str, Any]] | None = None) -> JobPage:
    """`plans`: the coordinator's sagas of this job (`Reader.plans`, redacted for a team),
    whose per-victim notice, deadline and acknowledgement the trace of a preemptor lacks."""
    job = trace["job"]
    state = why.get("state") or job["state"]
    timeline = collapse_checkpoints(trace.get("timeline", []))
    trace_id = str(trace.get("trace_id") or "")
    link = f"{jaeger_url.rstrip('/')}/trace/{trace_id}" if jaeger_url and trace_id else None
    summary = why.get("summary")
    return JobPage(
        viewer=viewer.team, generated_at=now, job=job, state=state,
        position=why.get("position"), eta=_time(why.get("eta")),
        eta_basis=waits.eta_basis(why.get("reasons") or []),
        no_eta=(waits.no_eta(why.get("reasons") or [])
                if state == "pending" and not why.get("eta") else None),
        summary=summary if isinstance(summary, str) else None,
        reasons=[Reason.model_validate(waits.for_people(r)) for r in why.get("reasons") or []],
        factors=factor_bars(why.get("factors")), timeline=timeline,
        preemptions=[with_victims(p, plans or [], viewer) for p in trace.get("preemptions") or []],
        notifications=[Notification.model_validate(n) for n in notifications],
        notifications_error=notifications_error, trace_id=trace_id, jaeger_link=link,
        can_cancel=(not viewer.is_platform and job.get("team") == viewer.team
                    and job.get("state") not in ("finished", "failed", "cancelled")))


def _entry(event: dict[str, Any]) -> TimelineEntry:
    data = event.get("data") or {}
    return TimelineEntry(at=event["at"], type=event["type"], source=event.get("source") or "",
                         summary=event.get("summary") or "",
                         checkpoint_uri=data.get("checkpoint_uri") or data.get("resumed_from"))


def _periodic(event: dict[str, Any]) -> bool:
    """A checkpoint a run saved on its own schedule, not for a notice."""
    return event["type"] == "RunCheckpointed" and not (event.get("data") or {}).get("notice_id")


def collapse_checkpoints(events: list[dict[str, Any]]) -> list[TimelineEntry]:
    """One row per event, except that consecutive periodic checkpoints are one row: `N
    checkpoints, last at T`, with each of them in `collapsed` (the page can expand it). A
    long run saves hundreds; what happened around them must stay in view."""
    out: list[TimelineEntry] = []
    run: list[TimelineEntry] = []

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            last = run[-1]
            out.append(last.model_copy(update={
                "summary": f"{len(run)} checkpoints saved, the last {last.checkpoint_uri}",
                "collapsed": list(run)}))
        run.clear()

    for event in events:
        if _periodic(event):
            run.append(_entry(event))
            continue
        close()
        out.append(_entry(event))
    close()
    return out


PLAN_VICTIM_FIELDS = ("noticed_at", "deadline", "acked_at", "checkpoint_uri", "outcome",
                      "lost_gpu_seconds", "state")


def with_victims(plan: dict[str, Any], sagas: list[dict[str, Any]],
                 viewer: Viewer) -> dict[str, Any]:
    """A plan of the job's trace, its victims completed from the coordinator's saga (each
    victim's notice, deadline, acknowledgement, checkpoint, outcome and loss). For a team, a
    victim of another team keeps only its GPUs and outcome, as on the preemptions page."""
    saga = next((p for p in sagas if p.get("plan_id") == plan.get("plan_id")), {})
    by_run = {v.get("run_id"): v for v in saga.get("victims", []) if v.get("run_id")}
    victims = []
    for victim in plan.get("victims") or []:
        known = by_run.get(victim.get("run_id"), {})
        merged = {**victim, **{k: known[k] for k in PLAN_VICTIM_FIELDS
                               if known.get(k) is not None}}
        if not viewer.may_see(victim.get("team")):
            merged = {"team": OTHER_TEAM, "gpus": victim.get("gpus"),
                      "outcome": merged.get("outcome"), "state": merged.get("state")}
        victims.append(merged)
    return {**plan, "victims": victims}


def cluster_page(viewer: Viewer, config: RotaConfig, allocations: list[dict[str, Any]],
                 open_plans: list[dict[str, Any]], now: datetime) -> ClusterPage:
    victim_runs = {v.get("run_id") for p in open_plans for v in p.get("victims", [])}
    cells: dict[tuple[str, int], GpuCell] = {}
    for alloc in allocations:
        mine = viewer.may_see(alloc.get("team"))
        borrowed_left = int(alloc.get("borrowed_gpus") or 0)
        # The ledger counts a run's borrowed GPUs but the reply does not say which: its
        # last ones are marked, as many as it borrows.
        gpus = [(w["node"], g) for w in alloc.get("placement", []) for g in w["gpus"]]
        for position, (node, gpu) in enumerate(gpus):
            borrowed = position >= len(gpus) - borrowed_left
            cells[(node, gpu)] = GpuCell(
                index=gpu, team=alloc.get("team") if mine else OTHER_TEAM,
                tier=alloc.get("queue") if mine else None,
                job_id=alloc.get("job_id") if mine else None,
                job_name=alloc.get("job_name") if mine else None,
                borrowed=borrowed and mine, preempting=alloc.get("run_id") in victim_runs)
    nodes = [NodeCells(name=n.name, rack=n.rack, flavor=n.flavor,
                       gpus=[cells.get((n.name, i), GpuCell(index=i)) for i in range(n.gpus)])
             for n in config.expanded_nodes()]
    teams = sorted({c.team for c in cells.values() if c.team})
    pending = [PendingPreemption(plan_id=p["plan_id"], state=str(p.get("state")),
                                 preemptor_team=str(p.get("preemptor_team")),
                                 reason=str(p.get("reason") or ""),
                                 victim_gpus=gpu_count(sum(
                                     float(v.get("gpu_share") or v.get("gpus") or 0)
                                     for v in p.get("victims", []))))
               for p in open_plans]
    return ClusterPage(viewer=viewer.team, generated_at=now, nodes=nodes, teams=teams,
                       gpus_total=sum(n.gpus for n in config.expanded_nodes()),
                       gpus_in_use=len(cells), pending_preemptions=pending)


TEAM_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
                "#ff9da7", "#9c755f", "#bab0ac")


def team_colours(config: RotaConfig) -> dict[str, str]:
    """A stable colour per team, in the order rota.yaml lists them."""
    colours = {team: TEAM_COLOURS[i % len(TEAM_COLOURS)] for i, team in enumerate(config.teams)}
    colours[OTHER_TEAM] = "#8a8a8a"
    return colours
