"""The demo's script and its checks. Pure: the runner feeds it events and the clock.

Four nodes of 8 GPUs; nlp and vision own 16 each, research owns none. The sim executor runs
60x faster than real time, so "1200 s" of training takes 20 s.

    t=0   nlp submits 2 training jobs, vision 3: each team gets its quota; vision's third waits
    t=2   research submits an experiment that can only borrow idle GPUs
    t≈20  nlp's jobs finish: vision's third and the experiment borrow nlp's idle quota
    then  nlp submits a production job: it reclaims its quota by preempting the borrowers,
          which are told, checkpoint, acknowledge, stop; production starts on the freed GPUs;
          the victims resume later from their checkpoints
    then  the admin drains the node of vision's first job for maintenance: the job is told,
          checkpoints, acknowledges, stops (`drained`, no preemption budget spent) and resumes
          on another node from its checkpoint; the node is undrained once it has
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.formats import moment, short

CONFIG = Path(__file__).with_name("demo.rota.yaml")
SIM_SPEED = 60.0
NODE_GPUS = 8
TIME_LIMIT_S = 110.0


@dataclass(frozen=True)
class Submission:
    at_s: float
    """Seconds after the start (ignored when `after` is set)."""
    name: str
    team: str
    user: str
    queue: str
    gpus: int
    duration_s: float
    after: str | None = None
    """Submit only once this condition holds (see `Story.ready`)."""

    def spec(self, run: str) -> dict[str, Any]:
        return {
            "name": self.name, "team": self.team, "user": self.user, "queue": self.queue,
            "flavor": "gpu", "workers": max(1, self.gpus // NODE_GPUS),
            "gpus_per_worker": min(self.gpus, NODE_GPUS), "resumable": True,
            "declared_runtime_s": int(self.duration_s), "submission_id": f"demo-{run}-{self.name}",
            "sim": {"duration_s": self.duration_s, "checkpoint_interval_s": 300.0,
                    "checkpoint_save_s": 60.0},
        }


SCRIPT: tuple[Submission, ...] = (
    Submission(0, "nlp-finetune-a", "nlp", "alice", "training", 8, 1200),
    Submission(0, "nlp-finetune-b", "nlp", "alice", "training", 8, 1200),
    Submission(0, "vision-train-a", "vision", "carol", "training", 8, 2400),
    Submission(0, "vision-train-b", "vision", "carol", "training", 8, 2400),
    Submission(0, "vision-train-c", "vision", "carol", "training", 8, 1800),
    Submission(2, "research-sweep", "research", "dave", "experiment", 8, 1800),
    Submission(0, "nlp-prod-release", "nlp", "alice", "production", 16, 600,
               after="borrowers_settled"),
)


@dataclass(frozen=True)
class Maintenance:
    """An admin's node command: drain the node `job` runs on, or undrain it, once `after`."""

    action: str  # drain | undrain
    after: str
    job: str
    deadline_s: float = 60.0
    reason: str = "firmware upgrade"


MAINTENANCE: tuple[Maintenance, ...] = (
    Maintenance("drain", after="prod_running", job="vision-train-a"),
    Maintenance("undrain", after="drained_job_resumed", job="vision-train-a"),
)


@dataclass
class JobView:
    name: str
    team: str
    queue: str
    gpus: int
    job_id: str = ""
    state: str = "waiting to submit"
    attempts: int = 0
    why: str = ""
    borrowed: int = 0
    resumed_from: str | None = None
    started_at: float | None = None
    nodes: tuple[str, ...] = ()
    """The nodes of its current grant."""


@dataclass
class Story:
    """What happened, folded from events, and whether it tells the promised story."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    acks: dict[str, str] = field(default_factory=dict)
    """run_id -> checkpoint URI acknowledged in answer to a notice."""
    stopped_at: dict[str, float] = field(default_factory=dict)
    notices: int = 0
    completed: list[dict[str, Any]] = field(default_factory=list)
    borrowing_seen: bool = False
    run_started_at: dict[str, float] = field(default_factory=dict)
    drained_node: str | None = None
    drain_plans: set[str] = field(default_factory=set)
    drain_victims: dict[str, str] = field(default_factory=dict)
    """run_id -> job name, of runs a drain stopped."""
    early: dict[str, list[tuple[float, str, dict[str, Any]]]] = field(default_factory=dict)
    """Events of jobs whose submit reply has not arrived yet. The reply and the job's events
    come on different subscriptions, so a fast grant can overtake the reply."""

    def __post_init__(self) -> None:
        for item in SCRIPT:
            self.jobs[item.name] = JobView(item.name, item.team, item.queue, item.gpus)

    def submitted(self, name: str, job_id: str) -> None:
        self.jobs[name].job_id = job_id
        self.jobs[name].state = "pending"
        self.names[job_id] = name
        for t, type_, data in self.early.pop(job_id, []):
            self.event(t, type_, data, job_id)

    def ready(self, condition: str) -> bool:
        if condition == "prod_running":
            return self.jobs["nlp-prod-release"].state == "running"
        if condition == "drained_job_resumed":
            moved = [self.jobs[name] for name in self.drain_victims.values()]
            return bool(moved) and all(j.state in ("running", "finished") and j.attempts >= 2
                                       for j in moved)
        if condition == "borrowers_settled":
            # Both borrowers run, and have run past the minimum runtime that protects them.
            borrowers = [self.jobs["vision-train-c"], self.jobs["research-sweep"]]
            return all(j.state == "running" and j.borrowed > 0 for j in borrowers)
        return True

    def event(self, t: float, type_: str, data: dict[str, Any], job_id: str | None) -> None:
        drain_done = type_ == "PreemptionCompleted" and data.get("plan_id") in self.drain_plans
        if job_id and job_id not in self.names and not drain_done:  # a drain's id is no job's
            self.early.setdefault(job_id, []).append((t, type_, data))
            return
        name = self.names.get(job_id or "")
        job = self.jobs.get(name or "")
        line = _LINES.get(type_)
        if type_ == "AllocationGranted" and job is not None:
            job.borrowed = int(data.get("borrowed_gpus") or 0)
            job.nodes = tuple(dict.fromkeys(w["node"] for w in data.get("placement") or []))
            self.borrowing_seen |= job.borrowed > 0
        elif type_ == "RunStarted" and job is not None:
            job.state, job.attempts = "running", int(data["attempt"])
            job.resumed_from = data.get("resumed_from")
            self.run_started_at[data["run_id"]] = t
            job.started_at = t
        elif type_ == "RunCheckpointed" and data.get("notice_id"):
            self.acks[data["run_id"]] = data["checkpoint_uri"]
        elif type_ == "RunStopped" and job is not None:
            job.state = "requeued" if data["reason"] in ("preempted", "drained") else "stopped"
            self.stopped_at[data["run_id"]] = t
        elif type_ in ("RunFinished", "RunFailed") and job is not None:
            job.state = "finished" if type_ == "RunFinished" else "failed"
        elif type_ == "PreemptionNoticed":
            self.notices += 1
            if job is not None:
                job.state = "checkpointing"
        elif type_ == "PreemptionRequested" and data.get("node"):
            self.drain_plans.add(data["plan_id"])
            for victim in data["victims"]:
                self.drain_victims[victim["run_id"]] = self.names.get(victim["job_id"], "?")
        elif type_ == "PreemptionCompleted":
            self.completed.append(data)
        elif type_ == "JobPending" and job is not None and data.get("reasons"):
            reason = data["reasons"][0]
            job.why = f"{reason['code']}: {reason['message']}"
        if line is not None and (job is not None or type_.startswith("Preemption")):
            text = line(self, name or "", data)
            if text:
                self.log.append(f"{t:6.1f}s  {text}")

    @property
    def finished(self) -> bool:
        return all(j.state in ("finished", "failed") for j in self.jobs.values())

    def drained(self, node: str) -> None:
        self.drained_node = node
        self.log.append(f"{'':>7}  node {node} drained for maintenance (admin)")

    def checks(self) -> list[tuple[str, bool]]:
        drains = [v for c in self.completed if c["plan_id"] in self.drain_plans
                  for v in c["victims"]]
        victims = [v for c in self.completed if not c.get("aborted")
                   and c["plan_id"] not in self.drain_plans for v in c["victims"]]
        acked = [v for v in victims if v["outcome"] == "acked"]
        resumed = [j for j in self.jobs.values() if j.resumed_from]
        prod = self.jobs["nlp-prod-release"]
        after_stops = prod.started_at is not None and all(
            self.stopped_at.get(v["run_id"], float("inf")) <= prod.started_at for v in victims)
        return [
            ("both teams ran their quota at once",
             all(self.jobs[n].attempts >= 1 for n in ("nlp-finetune-a", "nlp-finetune-b",
                                                       "vision-train-a", "vision-train-b"))),
            ("idle GPUs were borrowed", self.borrowing_seen),
            ("production preempted the borrowers with a notice", self.notices >= 1 and bool(victims)),
            ("every victim acknowledged a checkpoint before its GPUs were freed",
             bool(victims) and len(acked) == len(victims)),
            ("production started only after its victims stopped", after_stops),
            ("the victims resumed from their checkpoints",
             bool(resumed) and all(j.resumed_from in self.acks.values() for j in resumed)),
            ("a drained node's job checkpointed, stopped and resumed elsewhere from its checkpoint",
             bool(drains) and all(v["outcome"] == "acked" for v in drains)
             and all(self._moved(v) for v in drains)),
            ("every job finished", all(j.state == "finished" for j in self.jobs.values())),
        ]

    def _moved(self, victim: dict[str, Any]) -> bool:
        job = self.jobs.get(self.names.get(victim["job_id"], ""))
        return (job is not None and job.resumed_from is not None
                and job.resumed_from == victim.get("checkpoint_uri")
                and self.drained_node not in job.nodes)


def _victims(story: Story, data: dict[str, Any]) -> str:
    return ", ".join(story.names.get(v["job_id"], short(v["job_id"])) for v in data["victims"])


_LINES: dict[str, Any] = {
    "AllocationGranted": lambda s, n, d: f"{n} granted {d['gpus']} GPUs"
    + (f" ({d['borrowed_gpus']} borrowed)" if d.get("borrowed_gpus") else ""),
    "RunStarted": lambda s, n, d: f"{n} started (attempt {d['attempt']})"
    + (f" from {d['resumed_from']}" if d.get("resumed_from") else ""),
    "PreemptionRequested": lambda s, n, d: (
        f"drain of node {d['node']}: {_victims(s, d)} must checkpoint and move" if d.get("node")
        else f"{s.names.get(d['preemptor_job_id'], '?')} preempts {_victims(s, d)}: {d['reason']}"),
    "PreemptionNoticed": lambda s, n, d: f"{n}: notice sent, checkpoint by"
    f" {moment(d['deadline'])}",
    "RunCheckpointed": lambda s, n, d: f"{n} acknowledged with checkpoint {d['checkpoint_uri']}"
    if d.get("notice_id") else None,
    "RunStopped": lambda s, n, d: f"{n} stopped ({d['reason']}), GPUs released",
    "PreemptionCompleted": lambda s, n, d: "preemption completed: " + ", ".join(
        f"{s.names.get(v['job_id'], '?')} {v['outcome']}" for v in d["victims"]),
    "RunFinished": lambda s, n, d: f"{n} finished",
    "RunFailed": lambda s, n, d: f"{n} FAILED: {d.get('error')}",
}
