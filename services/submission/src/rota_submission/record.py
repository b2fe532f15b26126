"""The decision record of one job, for `rota trace`: its decisions and its preemptions.

Pure functions of the job's history rows (the read model's `job_events`), like `explain`:
- `decisions`: every admit, hold and preempt the scheduler published about the job, and
  each time it was chosen as a victim, with the reasons and the score factors of the moment;
- `preemptions`: each plan the job caused or suffered, from request to completion, with the
  notice, the acknowledgement (its time and checkpoint), the stop and the outcome.

The acknowledgement is the one the coordinator accepted, judged by its own rule
(`rota_preemption.domain.acknowledge`): the first `RunCheckpointed` naming the notice, from
the victim's own run, before the run stopped. Any other report naming the notice (a stale
run's, a repeat, one after a forced stop) is not the acknowledgement, and the plan's final
outcome has the last word: a victim that ended `forced` has no acknowledgement at all.

Notifications are not events in the stream; the CLI adds them from the notifier.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


def decisions(rows: list[Row], job_id: str) -> list[Row]:
    out: list[Row] = []
    factors: dict[str, Any] | None = None  # the score the job last waited with
    for row in rows:
        data, kind, at = row["data"], row["type"], row["occurred_at"]
        if kind == "JobPending":
            factors = data.get("factors")
            reasons = data.get("reasons") or []
            out.append({"at": at, "decision": "hold",
                        "reason": reasons[0]["code"] if reasons else None,
                        "reasons": reasons, "factors": factors, "eta": data.get("eta"),
                        "position": data.get("position")})
        elif kind == "AllocationProposed":
            reason = ("freed_by_preemption" if data.get("plan_id")
                      else "borrowed_idle_gpus" if data.get("borrowed_gpus") else "fits")
            out.append({"at": at, "decision": "admit", "reason": reason, "factors": factors,
                        "run_id": data.get("run_id"), "gpus": data.get("gpus"),
                        "borrowed_gpus": data.get("borrowed_gpus", 0),
                        "plan_id": data.get("plan_id"), "placement": data.get("placement")})
        elif kind == "PreemptionRequested":
            mine = data.get("preemptor_job_id") == job_id
            victim: Row = next(
                (v for v in data.get("victims", []) if v.get("job_id") == job_id), {})
            out.append({"at": at, "decision": "preempt" if mine else "preempted",
                        "reason": data.get("reason"), "message": data.get("message"),
                        "factors": factors if mine else None, "plan_id": data.get("plan_id"),
                        "preemptor_job_id": data.get("preemptor_job_id"),
                        "victims": [v.get("job_id") for v in data.get("victims", [])],
                        "expected_lost_gpu_seconds": (data.get("expected_lost_gpu_seconds")
                                                      if mine else
                                                      victim.get("expected_lost_gpu_seconds"))})
    for i, decision in enumerate(out):
        if decision["decision"] == "preempt":
            # A plan is published before the same cycle's JobPending: that hold has the score.
            decision["factors"] = next((d["factors"] for d in out[i + 1:]
                                        if d["decision"] == "hold" and d["at"] == decision["at"]),
                                       decision["factors"])
    return out


def _plan(data: Row, job_id: str, at: Any) -> Row:
    caused = data.get("preemptor_job_id") == job_id
    return {
        "plan_id": data["plan_id"], "role": "caused" if caused else "suffered",
        "requested_at": at, "reason": data.get("reason"), "message": data.get("message"),
        "preemptor_job_id": data.get("preemptor_job_id"),
        "preemptor_queue": data.get("preemptor_queue"),
        "expected_lost_gpu_seconds": data.get("expected_lost_gpu_seconds"),
        "victims": [{**{k: v.get(k) for k in ("job_id", "run_id", "job_name", "team", "queue",
                                               "gpus", "expected_lost_gpu_seconds")},
                     **({"gpu_share": v["gpu_share"]} if v.get("gpu_share") else {})}
                    for v in data.get("victims", [])],
        "noticed_at": None, "deadline": None, "acked_at": None, "ack_checkpoint_uri": None,
        "ack_event_id": None,
        "stopped_at": None, "forced": None, "completed_at": None, "outcome": None,
        "lost_gpu_seconds": None,
    }


def preemptions(rows: list[Row], job_id: str) -> list[Row]:
    plans: dict[str, Row] = {}
    notices: dict[str, str] = {}  # notice_id -> plan_id
    victim_runs: dict[str, str] = {}  # run_id -> plan_id, for this job's runs
    for row in rows:
        data, kind, at = row["data"], row["type"], row["occurred_at"]
        if kind == "PreemptionRequested" and data.get("plan_id"):
            plan = plans.setdefault(data["plan_id"], _plan(data, job_id, at))
            for victim in plan["victims"]:
                if victim["job_id"] == job_id:
                    victim_runs[victim["run_id"]] = plan["plan_id"]
        elif kind == "PreemptionNoticed" and data.get("plan_id") in plans:
            plan = plans[data["plan_id"]]
            plan.update(noticed_at=at, deadline=data.get("deadline"))
            notices[data.get("notice_id", "")] = data["plan_id"]
        elif kind == "RunCheckpointed" and data.get("notice_id") in notices:
            plan = plans[notices[data["notice_id"]]]
            if _may_acknowledge(plan, data, victim_runs):
                plan.update(acked_at=at, ack_checkpoint_uri=data.get("checkpoint_uri"),
                            ack_event_id=row.get("event_id"))
        elif kind == "RunStopped" and data.get("run_id") in victim_runs:
            plan = plans[victim_runs[data["run_id"]]]
            plan.update(stopped_at=at, forced=bool(data.get("forced")),
                        lost_gpu_seconds=data.get("lost_gpu_seconds"))
        elif kind == "PreemptionCompleted" and data.get("plan_id") in plans:
            plan = plans[data["plan_id"]]
            results = {v.get("job_id"): v for v in data.get("victims", [])}
            for victim in plan["victims"]:
                result = results.get(victim["job_id"], {})
                victim.update(outcome=result.get("outcome"),
                              lost_gpu_seconds=result.get("lost_gpu_seconds"),
                              checkpoint_uri=result.get("checkpoint_uri"))
            mine = results.get(job_id, {})
            plan.update(completed_at=at, aborted=bool(data.get("aborted")),
                        outcome=mine.get("outcome") if plan["role"] == "suffered"
                        else ("aborted" if data.get("aborted") else "completed"))
            if plan["role"] == "suffered" and mine.get("lost_gpu_seconds") is not None:
                plan["lost_gpu_seconds"] = mine["lost_gpu_seconds"]
            if plan["role"] == "suffered" and mine.get("outcome") not in ("acked", "shrunk"):
                plan.update(acked_at=None, ack_checkpoint_uri=None, ack_event_id=None)
            elif plan["role"] == "suffered" and mine.get("checkpoint_uri"):
                plan["ack_checkpoint_uri"] = mine["checkpoint_uri"]
    return list(plans.values())


def _may_acknowledge(plan: Row, data: Row, victim_runs: dict[str, str]) -> bool:
    """Whether this report can be the plan's acknowledgement: the first, from the victim's
    own run (not an older run of the job), while that run had not stopped yet."""
    return (plan["acked_at"] is None and plan["stopped_at"] is None
            and plan["completed_at"] is None
            and victim_runs.get(str(data.get("run_id"))) == plan["plan_id"])


def accepted_acks(plans: list[Row]) -> set[str]:
    """The event ids of the reports that were the acknowledgement of some plan."""
    return {plan["ack_event_id"] for plan in plans if plan.get("ack_event_id")}
