"""Words for people: one line per event in a job's timeline, and the answer to "why?".

Pure functions of the read model's rows, so `rota why` and `rota trace` say exactly what
the events say, no more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rota import waits
from rota.formats import moment, short

Describe = Callable[[dict[str, Any], str], str]


def _gpus(data: dict[str, Any]) -> str:
    return ", ".join(f"{p['node']}[{','.join(str(g) for g in p['gpus'])}]"
                     for p in data.get("placement") or [])


def _held(victim: dict[str, Any]) -> str:
    """What a victim gives up: its GPUs, or its share of one GPU (DECISIONS 84)."""
    share = victim.get("gpu_share")
    return f"{share:g} of one GPU" if share else f"{victim['gpus']} GPUs"


def _victims(data: dict[str, Any]) -> str:
    return ", ".join(f"{v.get('job_name') or short(v['job_id'])} ({v['queue']}, {_held(v)}"
                     + (f", shrunk to {v['shrink_to']} workers" if v.get("shrink_to") else "")
                     + ")" for v in data.get("victims", []))


def _preemption_requested(data: dict[str, Any], job_id: str) -> str:
    if data.get("node"):  # a drain's plan: no job preempts, the node is drained
        return f"drain: {data['message']}; told to checkpoint and stop, no preemption budget spent"
    if data.get("preemptor_job_id") == job_id:
        return (f"preempt ({waits.plan_reason(data.get('reason'))}): {data['message']} — victims"
                f" {_victims(data)}, expected loss {data['expected_lost_gpu_seconds'] / 3600:.2f}"
                " GPU-h")
    mine: dict[str, Any] = next(
        (v for v in data.get("victims", []) if v.get("job_id") == job_id), {})
    stops = f" (stops its {mine['gpu_share']:g} of one GPU)" if mine.get("gpu_share") else ""
    shrunk = (f"; shrunk to {mine['shrink_to']} workers, it restarts on the GPUs it keeps"
              if mine.get("shrink_to") else "")
    return (f"chosen as a victim for {data['preemptor_queue']} job"
            f" {short(data['preemptor_job_id'])}{stops}: {waits.plan_reason(data.get('reason'))}"
            f"{shrunk}")


def _noticed(data: dict[str, Any], job_id: str) -> str:
    then = (f"save a checkpoint, stop and restart with {data['shrink_to']} workers"
            if data.get("shrink_to") else "checkpoint and stop")
    if data.get("reason") == "drain":
        return (f"notice sent: {then} by {moment(data['deadline'])} (grace {data['grace_s']:.0f} s) for"
                f" the drain of node {data.get('node') or '?'}")
    return (f"notice sent: {then} by {moment(data['deadline'])} (grace {data['grace_s']:.0f} s) for a"
            f" {data['preemptor_queue']} job")


def _preemption_completed(data: dict[str, Any], job_id: str) -> str:
    if data.get("aborted"):
        return "preemption aborted: the preemptor went away; victims keep running"
    outcomes = ", ".join(f"{short(v['job_id'])} {v['outcome']}"
                         + (f" (lost {v['lost_gpu_seconds'] / 3600:.2f} GPU-h)"
                            if v.get("lost_gpu_seconds") else "")
                         for v in data.get("victims", []))
    return f"preemption completed: {outcomes}"


def _pending(data: dict[str, Any], job_id: str) -> str:
    """A hold in the user's words: the primary reason's title and message, then any rule that
    holds the job back from preempting and until when, its position and its ETA (the codes
    stay in the decisions, for --json)."""
    reasons = data.get("reasons") or []
    said = [_reason(reasons[0])] if reasons else ["waiting"]
    said += [f"held back: {_reason(r)}" for r in reasons[1:] if r.get("code") in waits.HOLDS]
    eta = f", ETA {moment(data['eta'])}" if data.get("eta") else f", no ETA: {waits.no_eta(reasons)}"
    # Position 0: out of line (a job no running executor can run), so no place to say.
    place = f"position {data['position']}" if data.get("position") else "out of line"
    return f"hold: {'; '.join(said)} ({place}{eta})"


def _reason(reason: dict[str, Any]) -> str:
    ends = waits.ends_at(reason)
    until = f" (until {moment(ends)})" if ends is not None else ""
    return f"{waits.title(str(reason.get('code', '')))}: {reason.get('message', '')}{until}"


DESCRIBE: dict[str, Describe] = {
    "JobSubmitted": lambda d, _: (f"submitted: {d['spec']['workers']}x{d['spec']['gpus_per_worker']}"
                                  f" {d['spec']['flavor']} to {d['spec']['queue']} by"
                                  f" {d['spec']['team']}/{d['spec']['user']}"),
    "JobCancelled": lambda d, _: f"cancelled: {d['reason']}",
    "JobResubmitted": lambda d, _: (f"submitted again under submission_id {d['submission_id']}:"
                                    " the same job, nothing new created"),
    "JobPending": _pending,
    "AllocationProposed": lambda d, _: (
        f"admit: proposed {d['gpus']} GPUs on {_gpus(d)}"
        + (f" ({d['borrowed_gpus']} borrowed)" if d.get("borrowed_gpus") else "")
        + (" onto GPUs its preemption freed" if d.get("plan_id") else "")),
    "AllocationGranted": lambda d, _: f"granted by the ledger: {d['gpus']} GPUs",
    "AllocationRejected": lambda d, _: f"rejected by the ledger: {d['code']}: {d['message']}",
    "AllocationReleased": lambda d, _: f"released {d['gpus']} GPUs after {d['gpu_seconds'] / 3600:.2f} GPU-h",
    "RunStarted": lambda d, _: (f"run {short(d['run_id'])} started (attempt {d['attempt']})"
                                + (f", resuming from {d['resumed_from']}" if d.get("resumed_from") else "")),
    "RunFinished": lambda d, _: f"run finished (exit {d.get('exit_code', 0)})",
    "RunFailed": lambda d, _: f"run failed: {d['error']}",
    "RunStopped": lambda d, _: (f"run stopped ({d['reason']}{', forced' if d.get('forced') else ''})"
                                + (f", checkpoint {d['checkpoint_uri']}" if d.get("checkpoint_uri") else "")
                                + (f", lost {d['lost_gpu_seconds'] / 3600:.2f} GPU-h"
                                   if d.get("lost_gpu_seconds") else "")),
    "PreemptionRequested": _preemption_requested,
    "PreemptionNoticed": _noticed,
    "PreemptionCompleted": _preemption_completed,
    "GrowRequested": lambda d, _: (f"grow: {d['message']} (to {_gpus({'placement': d['target']})};"
                                   " not a preemption)"),
    "GrowCompleted": lambda d, _: {
        "grown": "grown: it saved a checkpoint and restarts larger",
        "aborted": "grow abandoned: no checkpoint in time, or cancelled; it runs on as it was",
    }.get(d["outcome"], f"grow ended: {d['outcome']}"),
}


def _checkpointed(data: dict[str, Any], accepted: bool) -> str:
    uri = data["checkpoint_uri"]
    if not data.get("notice_id"):
        return f"checkpoint saved: {uri}"
    if accepted:
        return f"acknowledged the notice with checkpoint {uri}"
    return (f"checkpoint {uri} reported for the notice, but not its acknowledgement"
            " (another run's, a repeat, or after the stop)")


def describe(event_type: str, data: dict[str, Any], job_id: str) -> str:
    line = DESCRIBE.get(event_type)
    return line(data, job_id) if line else event_type


def timeline(rows: list[dict[str, Any]], job_id: str, *,
             accepted_acks: set[str] | None = None) -> list[dict[str, Any]]:
    """One line per event. `accepted_acks` (event ids, from `record.preemptions`) says which
    reports naming a notice were its acknowledgement; without it, every such report is."""
    def summary(row: dict[str, Any]) -> str:
        if row["type"] == "RunCheckpointed":
            return _checkpointed(row["data"], accepted_acks is None
                                 or row.get("event_id") in accepted_acks)
        return describe(row["type"], row["data"], job_id)

    return [{"at": row["occurred_at"], "type": row["type"], "source": row["source"],
             "summary": summary(row), "data": row["data"]}
            for row in rows]


@dataclass(frozen=True)
class AgeRule:
    """The score's age factor as the scheduler's policy computes it (config `policy.weights.age`
    and `policy.age_cap_s`): `why` shows it as of the question, not of the last JobPending."""

    weight: float
    cap_s: float


def why(job: dict[str, Any], *, now: datetime | None = None,
        age: AgeRule | None = None) -> dict[str, Any]:
    """Every reason (primary first, each with its title and, for a hold, when it ends), the
    ETA, the position and the score factors, or what the job is doing. With `now` and `age`,
    the age factor (and the total) is the one at `now`: it grows with every second waited."""
    wait = job.get("wait") or {}
    state = job["state"]
    answer: dict[str, Any] = {"job_id": job["job_id"], "name": job["name"], "state": state,
                              "queue": job["queue"], "team": job["team"],
                              "flavor": job.get("flavor")}
    if job.get("gpu_share"):
        answer["gpu_share"] = job["gpu_share"]
    if state == "pending":
        reasons = wait.get("reasons") or [{
            "code": "NOT_YET_SCHEDULED", "message": "the scheduler has not considered this job yet",
            "details": {}}]
        answer.update(reasons=[waits.for_people(r) for r in reasons], eta=wait.get("eta"),
                      position=wait.get("position"),
                      factors=_factors_now(wait.get("factors"), job, now, age))
        if job.get("detail") and str(job["detail"]).startswith("requeued by a drain"):
            answer["requeued"] = job["detail"]
    else:
        answer["summary"] = {
            "admitted": "admitted: GPUs granted, the run is starting",
            "running": f"running since {moment(job.get('started_at'))} (attempt {job.get('attempts')})",
            "preempting": (job["detail"] if str(job.get("detail") or "").startswith("drain")
                           else "being preempted: told to checkpoint and stop"),
            "finished": f"finished at {moment(job.get('ended_at'))}",
            "failed": f"failed at {moment(job.get('ended_at'))}: {job.get('detail') or ''}".rstrip(": "),
            "cancelled": f"cancelled: {job.get('detail') or ''}".rstrip(": "),
        }.get(state, state)
    answer["resume_from"] = job.get("resume_from")
    return answer


def _factors_now(factors: dict[str, Any] | None, job: dict[str, Any], now: datetime | None,
                 age: AgeRule | None) -> dict[str, Any] | None:
    submitted = job.get("submitted_at")
    if not factors or now is None or age is None or submitted is None:
        return factors
    if isinstance(submitted, str):
        submitted = datetime.fromisoformat(submitted.replace("Z", "+00:00"))
    fresh = waits.age_factor(age.weight, age.cap_s, (now - submitted).total_seconds())
    published = float(factors.get("age") or 0.0)
    return {**factors, "age": fresh,
            "total": float(factors.get("total") or 0.0) + fresh - published}
