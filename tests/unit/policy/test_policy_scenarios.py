"""Named scenario table: one rule per case, built from small builders (Kueue/Armada style)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import (
    POLICIES,
    Decisions,
    PlanInFlight,
    PolicyConfig,
    Slot,
    Snapshot,
)

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 10_000.0


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple[Snapshot, PolicyConfig]]
    check: Callable[[Decisions], None]
    policy: str = "rota"
    now: float = NOW


def admitted(d: Decisions) -> list[str]:
    return [a.job_id for a in d.admissions]


def codes(d: Decisions, job_id: str) -> list[Code]:
    ex = next(e for e in d.pending if e.job_id == job_id)
    return [r.code for r in ex.reasons]


def explanation(d: Decisions, job_id: str):  # type: ignore[no-untyped-def]
    return next(e for e in d.pending if e.job_id == job_id)


def victims(d: Decisions) -> list[str]:
    return [v.run_id for p in d.plans for v in p.victims]


CASES: list[Case] = []


def case(name: str, *, policy: str = "rota", now: float = NOW):  # type: ignore[no-untyped-def]
    def register(fn):  # type: ignore[no-untyped-def]
        build, check = fn()
        CASES.append(Case(name, build, check, policy, now))
        return fn

    return register


# ---------------------------------------------------------------- ordering


@case("tiers are strict: production before an older training job")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        jobs = gpu_jobs("nlp", "training", submitted=0) + gpu_jobs("nlp", "production", submitted=5000)
        return w.snapshot(jobs), team_config({"nlp": 8})

    return build, lambda d: (admitted(d) == ["nlp-prod-1x8"]) or pytest.fail(str(admitted(d)))


@case("within a team, the older job goes first")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        jobs = gpu_jobs("nlp", "training", n=2, submitted=100)
        return World(nodes=1).snapshot(jobs), team_config({"nlp": 8})

    return build, lambda d: (admitted(d) == ["nlp-trai-1x8-0"]) or pytest.fail(str(admitted(d)))


@case("fair share: the team with less decayed usage goes first")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.usage = {"heavy": 1e7, "light": 1e3}
        jobs = gpu_jobs("heavy", submitted=0) + gpu_jobs("light", submitted=500)
        return w.snapshot(jobs), team_config({"heavy": 8, "light": 8})

    def check(d: Decisions) -> None:
        assert admitted(d) == ["light-trai-1x8"]
        assert explanation(d, "heavy-trai-1x8").factors.fairshare < 5000  # below a fair user

    return build, check


@case("quota headroom: a team under its quota goes before one at it")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=3)
        w.run("busy", "training", node=0)
        jobs = gpu_jobs("busy", submitted=0) + gpu_jobs("idle", submitted=10)
        w.free[1] = []  # node 1 is down to nothing: one free node remains
        return w.snapshot(jobs), team_config({"busy": 8, "idle": 8})

    def check(d: Decisions) -> None:
        assert admitted(d) == ["idle-trai-1x8"]
        assert explanation(d, "busy-trai-1x8").factors.quota_headroom == 0.0

    return build, check


@case("age is capped: two jobs older than the cap score the same age")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("nlp", "production", node=0)
        jobs = gpu_jobs("nlp", n=2, submitted=0)
        return w.snapshot(jobs), team_config({"nlp": 8}, age_cap_s=1000.0)

    def check(d: Decisions) -> None:
        a, b = (explanation(d, f"nlp-trai-1x8-{i}").factors for i in (0, 1))
        assert a.age == b.age == 1000.0

    return build, check


@case("score breakdown: queue weight follows the tier and total is the sum")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("nlp", "production", node=0)
        return w.snapshot(gpu_jobs("nlp", "experiment") + gpu_jobs("nlp", "training")), team_config(
            {"nlp": 8}
        )

    def check(d: Decisions) -> None:
        exp, train = explanation(d, "nlp-expe-1x8").factors, explanation(d, "nlp-trai-1x8").factors
        assert exp.queue < train.queue
        assert train.total == pytest.approx(train.queue + train.age + train.fairshare + train.quota_headroom)
        assert explanation(d, "nlp-trai-1x8").position == 0

    return build, check


# ---------------------------------------------------------------- quotas


@case("borrowing limit: no borrowing beyond it, even on an idle cluster")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=4)
        w.run("nlp", "training", node=0)
        return w.snapshot(gpu_jobs("nlp")), team_config({"nlp": 8}, borrowing={"nlp": 0})

    def check(d: Decisions) -> None:
        assert admitted(d) == []
        assert codes(d, "nlp-trai-1x8")[0] is Code.QUOTA_EXCEEDED
        assert explanation(d, "nlp-trai-1x8").eta is None

    return build, check


@case("borrowing: idle GPUs above the quota are lent, and reported as borrowed")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        return World(nodes=4).snapshot(gpu_jobs("nlp", workers=3)), team_config({"nlp": 8, "cv": 16})

    def check(d: Decisions) -> None:
        assert admitted(d) == ["nlp-trai-3x8"]
        assert d.admissions[0].borrowed_gpus == 16

    return build, check


@case("lending limit: the unlendable part of an idle quota is kept back")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        jobs = gpu_jobs("nlp", workers=4, name="big") + gpu_jobs("nlp", workers=3, name="fits", submitted=1)
        return World(nodes=4).snapshot(jobs), team_config({"nlp": 0, "cv": 16}, lending={"cv": 8})

    def check(d: Decisions) -> None:
        assert admitted(d) == ["fits"]
        assert codes(d, "big")[0] is Code.QUOTA_EXCEEDED

    return build, check


@case("capacity nobody owns can be borrowed by a team without quota")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        return World(nodes=2).snapshot(gpu_jobs("stranger", workers=2)), team_config({"nlp": 8})

    return build, lambda d: (admitted(d) == ["stranger-trai-2x8"]) or pytest.fail(str(d))


# ---------------------------------------------------------------- placement


@case("gangs are all or nothing: no partial start")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "production", node=1, gpus=4)
        return w.snapshot(gpu_jobs("nlp", workers=2)), team_config({"nlp": 16, "cv": 16})

    def check(d: Decisions) -> None:
        assert admitted(d) == []
        assert codes(d, "nlp-trai-2x8")[0] is Code.INSUFFICIENT_CAPACITY

    return build, check


@case("best fit: a small job goes to the fullest node that fits, keeping whole nodes free")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=3)
        w.run("cv", "production", node=2, gpus=6)
        return w.snapshot(gpu_jobs("nlp", gpus=2)), team_config({"nlp": 8, "cv": 16})

    return build, lambda d: (d.admissions[0].placement[0].node == "n2") or pytest.fail(str(d.admissions))


@case("rack required: the gang lands inside one rack")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=4, racks=2)
        w.run("cv", "production", node=1)
        return w.snapshot(gpu_jobs("nlp", workers=2, rack="required")), team_config({"nlp": 16})

    def check(d: Decisions) -> None:
        assert {s.node for s in d.admissions[0].placement} == {"n2", "n3"}

    return build, check


@case("rack required but split free GPUs: FRAGMENTATION")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=4, racks=2)
        w.run("cv", "production", node=1)
        w.run("cv", "production", node=3)
        snap = w.snapshot(gpu_jobs("nlp", workers=2, rack="required"))
        return snap, team_config({"nlp": 16, "cv": 16})

    return build, lambda d: (codes(d, "nlp-trai-2x8")[0] is Code.FRAGMENTATION) or pytest.fail(str(d))


@case("rack preferred: falls back to several racks")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=4, racks=2)
        w.run("cv", "production", node=1)
        w.run("cv", "production", node=3)
        return w.snapshot(gpu_jobs("nlp", workers=2, rack="preferred")), team_config({"nlp": 16})

    return build, lambda d: (admitted(d) == ["nlp-trai-2x8"]) or pytest.fail(str(d))


@case("too large for the whole cluster: EXCEEDS_CLUSTER, no ETA")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        return World(nodes=2).snapshot(gpu_jobs("nlp", workers=3)), team_config({"nlp": 16})

    def check(d: Decisions) -> None:
        assert codes(d, "nlp-trai-3x8") == [Code.EXCEEDS_CLUSTER]
        assert explanation(d, "nlp-trai-3x8").eta is None

    return build, check


@case("a flavor no node has: NO_MATCHING_FLAVOR")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        return World(nodes=1).snapshot(gpu_jobs("nlp", flavor="h100")), team_config({"nlp": 8})

    return build, lambda d: (codes(d, "nlp-trai-1x8")[0] is Code.NO_MATCHING_FLAVOR) or pytest.fail(str(d))


@case("enough free GPUs, but not on one node: FRAGMENTATION")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "production", node=0, gpus=4)
        w.run("cv", "production", node=1, gpus=4)
        return w.snapshot(gpu_jobs("nlp")), team_config({"nlp": 8, "cv": 8})

    def check(d: Decisions) -> None:
        reason = explanation(d, "nlp-trai-1x8").reasons[0]
        assert reason.code is Code.FRAGMENTATION and reason.detail("free") == 8

    return build, check


# ---------------------------------------------------------------- backfill


def _backfill_world(runtime: float) -> tuple[Snapshot, PolicyConfig]:
    w = World(nodes=2)
    w.run("cv", "production", node=0, end=NOW + 1000)
    head = gpu_jobs("nlp", "training", workers=2, name="head", submitted=0)
    small = gpu_jobs("nlp", "training", name="small", submitted=10, runtime=runtime)
    return w.snapshot(head + small), team_config({"nlp": 16, "cv": 8})


@case("backfill: a short job runs when it ends before the head's reservation")
def _():  # type: ignore[no-untyped-def]
    return (lambda: _backfill_world(500.0)), lambda d: (admitted(d) == ["small"]) or pytest.fail(str(d))


@case("backfill: a long job may not delay the head: RESERVED_FOR_HIGHER_PRIORITY")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        assert admitted(d) == []
        reason = explanation(d, "small").reasons[0]
        assert reason.code is Code.RESERVED_FOR_HIGHER_PRIORITY and reason.detail("reserved_for") == "head"

    return (lambda: _backfill_world(5000.0)), check


@case("ETA: a blocked job's ETA is when running work is expected to end")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        assert explanation(d, "head").eta == NOW + 1000

    return (lambda: _backfill_world(5000.0)), check


# ---------------------------------------------------------------- reasons


@case("INSUFFICIENT_CAPACITY gives the numbers")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("cv", "production", node=0)
        return w.snapshot(gpu_jobs("nlp")), team_config({"nlp": 0, "cv": 8})

    def check(d: Decisions) -> None:
        reason = explanation(d, "nlp-trai-1x8").reasons[0]
        assert reason.code is Code.INSUFFICIENT_CAPACITY
        assert "needs 8 gpu GPUs; 0 of 8 are free" in reason.message

    return build, check


def _three_jobs_on_a_busy_node():  # type: ignore[no-untyped-def]
    w = World(nodes=1)
    w.run("cv", "production", node=0)
    return w.snapshot(gpu_jobs("nlp", n=3)), team_config({"nlp": 8})


@case("jobs short of the same GPUs share one INSUFFICIENT_CAPACITY reason (memory at 1M pending)")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        capacity = [
            next(r for r in explanation(d, job).reasons if r.code is Code.INSUFFICIENT_CAPACITY)
            for job in ("nlp-trai-1x8-1", "nlp-trai-1x8-2")
        ]
        assert capacity[0] is capacity[1]
        assert capacity[0].message == "needs 8 gpu GPUs; 0 of 8 are free"
        assert capacity[0].detail("free") == 0 and capacity[0].detail("capacity") == 8

    return _three_jobs_on_a_busy_node, check


@case("PRIORITY counts the jobs and GPUs ahead")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        reasons = explanation(d, "nlp-trai-1x8-2").reasons
        prio = next(r for r in reasons if r.code is Code.PRIORITY)
        assert prio.detail("jobs_ahead") == 2 and prio.detail("gpus_ahead") == 16

    return _three_jobs_on_a_busy_node, check


@case("queue diagnosis: long waits on quota are blamed on the quota")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=4)
        w.run("nlp", "training", node=0)
        return w.snapshot(gpu_jobs("nlp", n=3, submitted=0)), team_config({"nlp": 8}, borrowing={"nlp": 0})

    def check(d: Decisions) -> None:
        assert [(x.team, x.cause) for x in d.diagnoses] == [("nlp", "quota_too_low")]
        assert d.diagnoses[0].long_waiters == 3

    return build, check


# ---------------------------------------------------------------- preemption (Rota)


@case("production preempts lower-tier, resumable work before work that cannot checkpoint")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("nlp", "experiment", node=0, resumable=False, run_id="fragile")
        w.run("nlp", "training", node=1, resumable=True, run_id="saver")
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 16})

    def check(d: Decisions) -> None:
        assert victims(d) == ["saver"]
        assert d.plans[0].expected_lost_gpu_s == 0.0
        assert codes(d, "nlp-prod-1x8")[0] is Code.WAITING_FOR_PREEMPTION

    return build, check


@case("among resumable victims, the lowest tier goes first")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("nlp", "training", node=0, run_id="train")
        w.run("nlp", "experiment", node=1, run_id="exp")
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 16})

    return build, lambda d: (victims(d) == ["exp"]) or pytest.fail(str(d.plans))


@case("a victim with two workers on one node frees its GPUs there once, not twice")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        # Cheapest first (least work since its checkpoint), but only 4 of the 8 GPUs needed.
        w.run("nlp", "experiment", node=[0, 0], gpus=2, checkpoint=NOW - 10, run_id="pair")
        w.run("nlp", "experiment", node=0, gpus=4, checkpoint=NOW - 3600, run_id="quad")
        return w.snapshot(gpu_jobs("nlp", "training")), team_config({"nlp": 8})

    def check(d: Decisions) -> None:
        assert sorted(victims(d)) == ["pair", "quad"], d.plans
        assert d.plans[0].target[0].gpus == tuple(range(8))

    return build, check


@case("minimum runtime: a run that just started is never a victim")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("nlp", "experiment", node=0, started=NOW - 100)
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 8})

    return build, lambda d: (d.plans == ()) or pytest.fail(str(d.plans))


@case("preemption budget: a job preempted too often is never a victim again")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        config = team_config({"nlp": 8})
        w = World(nodes=1)
        w.run("nlp", "experiment", node=0, preemptions=config.max_preemptions_per_job)
        return w.snapshot(gpu_jobs("nlp", "production")), config

    return build, lambda d: (d.plans == ()) or pytest.fail(str(d.plans))


@case("a plan is made only when the freed GPUs really fit the gang")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("nlp", "experiment", node=0)
        w.run("nlp", "production", node=1)
        return w.snapshot(gpu_jobs("nlp", "production", workers=2)), team_config({"nlp": 16})

    def check(d: Decisions) -> None:
        assert d.plans == ()
        assert codes(d, "nlp-prod-2x8")[0] is Code.INSUFFICIENT_CAPACITY

    return build, check


@case("production never preempts another team's in-quota training work")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("cv", "training", node=0)
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 0, "cv": 8})

    return build, lambda d: (d.plans == ()) or pytest.fail(str(d.plans))


@case("reclaim: a team within its quota takes back what another team borrowed")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "training", node=0, run_id="cv-own")
        w.run("cv", "training", node=1, run_id="cv-borrowed", started=-100.0)
        return w.snapshot(gpu_jobs("nlp", "training")), team_config({"nlp": 8, "cv": 8})

    def check(d: Decisions) -> None:
        assert len(d.plans) == 1 and d.plans[0].victims[0].why == "reclaim"
        assert d.plans[0].victims[0].borrowed

    return build, check


@case("production work is a victim only as a last resort")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "production", node=0, run_id="cv-prod")
        w.run("cv", "production", node=1, run_id="cv-prod-borrowed")
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 8, "cv": 0})

    def check(d: Decisions) -> None:
        assert len(d.plans) == 1 and d.plans[0].victims[0].why == "last_resort"

    return build, check


@case("a training job may not destroy work that cannot checkpoint (loss cap)")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("nlp", "experiment", node=0, resumable=False)
        return w.snapshot(gpu_jobs("nlp", "training")), team_config({"nlp": 8})

    return build, lambda d: (d.plans == ()) or pytest.fail(str(d.plans))


@case("over its quota, a training job stops another team's experiment work that can checkpoint")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        # nlp is over its quota, so it cannot reclaim: only lower-tier work is a victim, and
        # of that only what loses nothing under the loss cap.
        w = World(nodes=2)
        w.run("nlp", "experiment", node=0, resumable=False, run_id="fragile")
        w.run("cv", "experiment", node=1, resumable=True, run_id="saver")
        return w.snapshot(gpu_jobs("nlp", "training")), team_config({"nlp": 8, "cv": 0})

    def check(d: Decisions) -> None:
        assert victims(d) == ["saver"], d.plans
        assert d.plans[0].expected_lost_gpu_s == 0.0

    return build, check


def _plan_world(victim_stopped: bool) -> tuple[Snapshot, PolicyConfig]:
    w = World(nodes=2)
    victim = w.run("nlp", "experiment", node=0, run_id="victim")
    w.run("cv", "production", node=1)
    target = (Slot(0, "n0", tuple(range(8))),)
    if victim_stopped:
        w.finish(victim)
    w.plans = [PlanInFlight("nlp-prod-1x8", ("victim",), target)]
    jobs = gpu_jobs("nlp", "production") + gpu_jobs("cv", "production", submitted=-50, name="rival")
    return w.snapshot(jobs), team_config({"nlp": 8, "cv": 8})


@case("plan in flight: the preemptor waits for its victims (WAITING_FOR_PREEMPTION)")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        assert codes(d, "nlp-prod-1x8")[0] is Code.WAITING_FOR_PREEMPTION
        assert d.plans == ()  # no second plan for the same job

    return (lambda: _plan_world(False)), check


@case("freed GPUs are held for the preemptor: an older rival cannot take them")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        assert admitted(d) == ["nlp-prod-1x8"]
        assert d.admissions[0].via_plan and d.admissions[0].placement[0].node == "n0"

    return (lambda: _plan_world(True)), check


@case("a plan whose target was taken by someone else is abandoned")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("cv", "production", node=0, run_id="squatter")
        w.plans = [PlanInFlight("nlp-prod-1x8", ("gone",), (Slot(0, "n0", tuple(range(8))),))]
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 8})

    return build, lambda d: (d.abandoned_plans == ("nlp-prod-1x8",)) or pytest.fail(str(d))


# ---------------------------------------------------------------- baselines


@case("fifo: the head blocks everything behind it, whatever its tier", policy="fifo")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "training", node=0)
        jobs = gpu_jobs("nlp", "experiment", workers=2, name="head") + gpu_jobs(
            "nlp", "production", name="prod", submitted=5
        )
        return w.snapshot(jobs), team_config({"nlp": 16})

    def check(d: Decisions) -> None:
        assert admitted(d) == [] and d.plans == ()
        assert codes(d, "prod")[0] is Code.PRIORITY

    return build, check


@case("kueue BestEffortFIFO: a blocked head does not block smaller jobs", policy="kueue")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "training", node=0, end=NOW + 10)
        jobs = gpu_jobs("nlp", "training", workers=2, name="head") + gpu_jobs(
            "nlp", "training", name="long", runtime=1e6, submitted=5
        )
        return w.snapshot(jobs), team_config({"nlp": 16, "cv": 8})

    return build, lambda d: (admitted(d) == ["long"]) or pytest.fail(str(d))


@case("kueue victims: other ClusterQueues first, then the most recently admitted", policy="kueue")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=3)
        w.run("nlp", "experiment", node=0, run_id="own-low")
        w.run("cv", "training", node=1, run_id="cv-old", started=-9000)
        w.run("cv", "training", node=2, run_id="cv-new", started=-10)
        return w.snapshot(gpu_jobs("nlp", "training")), team_config({"nlp": 16, "cv": 0})

    return build, lambda d: (victims(d) == ["cv-new"]) or pytest.fail(str(d.plans))


@case("kueue has no minimum runtime: a fresh run is a victim", policy="kueue")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("nlp", "experiment", node=0, started=NOW - 1, run_id="fresh")
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 8})

    return build, lambda d: (victims(d) == ["fresh"]) or pytest.fail(str(d.plans))


@case("slurm partition priority: any team's lower-tier job is preemptable", policy="slurm")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.run("cv", "training", node=0, run_id="cv-train")
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({"nlp": 0, "cv": 8})

    return build, lambda d: (victims(d) == ["cv-train"]) or pytest.fail(str(d.plans))


@case("slurm victims: the lowest partition tier first", policy="slurm")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=2)
        w.run("cv", "training", node=0, run_id="train", started=-10)
        w.run("cv", "experiment", node=1, run_id="exp", started=-9000)
        return w.snapshot(gpu_jobs("nlp", "production")), team_config({})

    return build, lambda d: (victims(d) == ["exp"]) or pytest.fail(str(d.plans))


@case("slurm multifactor: classic fair share orders teams within a tier", policy="slurm")
def _():  # type: ignore[no-untyped-def]
    def build():  # type: ignore[no-untyped-def]
        w = World(nodes=1)
        w.usage = {"heavy": 1e7, "light": 0.0}
        return w.snapshot(gpu_jobs("heavy") + gpu_jobs("light", submitted=100)), team_config({})

    return build, lambda d: (admitted(d) == ["light-trai-1x8"]) or pytest.fail(str(d))


@case("slurm backfill: a long job may not delay a reserved head", policy="slurm")
def _():  # type: ignore[no-untyped-def]
    def check(d: Decisions) -> None:
        assert admitted(d) == [] and codes(d, "small")[0] is Code.RESERVED_FOR_HIGHER_PRIORITY

    return (lambda: _backfill_world(5000.0)), check


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_scenario(c: Case) -> None:
    snapshot, config = c.build()
    decisions = POLICIES[c.policy](snapshot, c.now, config)
    c.check(decisions)
    # Every pending job that was not admitted is explained, with a reason first.
    pending = {j.job_id for q in snapshot.pending for j in q.jobs} - set(admitted(decisions))
    assert {e.job_id for e in decisions.pending} == pending
    assert all(e.reasons for e in decisions.pending)


def test_there_are_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


def test_multi_round_preemption_then_admission() -> None:
    """Round 1 plans; the victim stops; round 2 admits the preemptor on the held GPUs."""
    w = World(nodes=1)
    w.run("nlp", "experiment", node=0, run_id="victim")
    config = team_config({"nlp": 8})
    job = gpu_jobs("nlp", "production")
    first = POLICIES["rota"](w.snapshot(job), NOW, config)
    assert [v.run_id for p in first.plans for v in p.victims] == ["victim"]
    plan = first.plans[0]
    w.finish(w.runs[0])
    w.plans = [PlanInFlight(plan.preemptor_job_id, ("victim",), plan.target)]
    second = POLICIES["rota"](w.snapshot(job), NOW + 60, config)
    assert [a.job_id for a in second.admissions] == ["nlp-prod-1x8"]
    assert second.admissions[0].placement == plan.target
