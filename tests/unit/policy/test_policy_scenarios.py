"""Named scenario table (Kueue's preemption tests, Armada's scheduling tables): one rule per row.

Each row is data: the world (nodes and running work), the pending jobs, the config, and what
must come out: the admissions, the leading reason codes of jobs that wait, the victims, the
jobs with no ETA. `check` is kept for what a row cannot say as data (score factors, placements,
messages, diagnoses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import (
    POLICIES,
    Decisions,
    NoExecutor,
    PendingExplanation,
    PendingJob,
    PlanInFlight,
    PolicyConfig,
    Slot,
)

from tests.unit.policy.builders import Run, World, cluster, gpu_jobs, team_config

NOW = 10_000.0


@dataclass(frozen=True)
class Row:
    name: str
    world: World
    pending: list[PendingJob]
    config: PolicyConfig
    admits: tuple[str, ...] | None = None
    """The admitted jobs, in order; None: not part of the row."""
    reasons: Mapping[str, tuple[Code, ...]] = field(default_factory=dict)
    """Per waiting job, the codes its reasons start with, primary first."""
    victims: tuple[str, ...] | None = None
    """The run ids of every plan's victims, in order; () means no plan."""
    no_eta: tuple[str, ...] = ()
    etas: Mapping[str, float] = field(default_factory=dict)
    """Per waiting job, its ETA."""
    says: Mapping[str, str] = field(default_factory=dict)
    """Per waiting job, words its primary reason's message must hold: what blocks it and
    what would unblock it, in the user's terms."""
    policy: str = "rota"
    check: Callable[[Decisions], None] | None = None
    starts_on: Mapping[str, str] = field(default_factory=dict)
    """Per admitted job, the flavor it starts on; every placement must be on nodes of it."""
    causes: tuple[tuple[str, str], ...] | None = None
    """The diagnoses, as (flavor, cause) in order; None: not part of the row."""


def explanation(d: Decisions, job_id: str) -> PendingExplanation:
    return next(e for e in d.pending if e.job_id == job_id)


def _factors_below_a_fair_user(d: Decisions) -> None:
    assert explanation(d, "heavy-trai-1x8").factors.fairshare < 5000


def _no_headroom_at_quota(d: Decisions) -> None:
    assert explanation(d, "busy-trai-1x8").factors.quota_headroom == 0.0


def _age_capped(d: Decisions) -> None:
    a, b = (explanation(d, f"nlp-trai-1x8-{i}").factors for i in (0, 1))
    assert a.age == b.age == 1000.0


def _breakdown_sums(d: Decisions) -> None:
    exp, train = explanation(d, "nlp-expe-1x8").factors, explanation(d, "nlp-trai-1x8").factors
    assert exp.queue < train.queue
    assert train.total == pytest.approx(train.queue + train.age + train.fairshare + train.quota_headroom)
    assert explanation(d, "nlp-trai-1x8").position == 1  # 1-based: the first in line is 1


def _borrowed_16(d: Decisions) -> None:
    assert d.admissions[0].borrowed_gpus == 16


def _on_nodes(*nodes: str) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        assert {s.node for s in d.admissions[0].placement} == set(nodes)

    return check


def _fragmentation_counts_free(d: Decisions) -> None:
    assert explanation(d, "nlp-trai-1x8").reasons[0].detail("free") == 8


def _reserved_for_head(d: Decisions) -> None:
    assert explanation(d, "small").reasons[0].detail("reserved_for") == "head"


def _eta_of_head(d: Decisions) -> None:
    assert explanation(d, "head").eta == NOW + 1000


def _capacity_message(d: Decisions) -> None:
    assert "needs 8 gpu GPUs; 0 of 8 are free" in explanation(d, "nlp-trai-1x8").reasons[0].message


def _one_shared_capacity_reason(d: Decisions) -> None:
    capacity = [
        next(r for r in explanation(d, job).reasons if r.code is Code.INSUFFICIENT_CAPACITY)
        for job in ("nlp-trai-1x8-1", "nlp-trai-1x8-2")
    ]
    assert capacity[0] is capacity[1]
    assert capacity[0].message == "needs 8 gpu GPUs; 0 of 8 are free"
    assert capacity[0].detail("free") == 0 and capacity[0].detail("capacity") == 8


def _two_ahead(d: Decisions) -> None:
    prio = next(r for r in explanation(d, "nlp-trai-1x8-2").reasons if r.code is Code.PRIORITY)
    assert prio.detail("jobs_ahead") == 2 and prio.detail("gpus_ahead") == 16


def _blamed_on_quota(d: Decisions) -> None:
    assert [(x.team, x.cause, x.long_waiters) for x in d.diagnoses] == [("nlp", "quota_too_low", 3)]


def _loses_nothing(d: Decisions) -> None:
    assert d.plans[0].expected_lost_gpu_s == 0.0


def _whole_node_target(d: Decisions) -> None:
    assert d.plans[0].target[0].gpus == tuple(range(8))


def _why(reason: str, *, borrowed: bool) -> Callable[[Decisions], None]:
    def check(d: Decisions) -> None:
        assert len(d.plans) == 1
        assert (d.plans[0].victims[0].why, d.plans[0].victims[0].borrowed) == (reason, borrowed)

    return check


def _via_plan_on_n0(d: Decisions) -> None:
    assert d.admissions[0].via_plan and d.admissions[0].placement[0].node == "n0"


def _abandoned(d: Decisions) -> None:
    assert d.abandoned_plans == ("nlp-prod-1x8",)


def _eta_when_its_victims_have_saved(d: Decisions) -> None:
    # Not behind the older rival's ETA (when the production run on n1 ends): the plan's
    # GPUs are its own. Requested at NOW - 10, saved 60 s later.
    assert explanation(d, "nlp-prod-1x8").eta == NOW + 50
    rival = explanation(d, "rival").eta
    assert rival is not None and rival > NOW + 50


def _starts_on_the_free_node_and_gives_up_its_plan(d: Decisions) -> None:
    (admission,) = d.admissions
    assert (admission.job_id, admission.via_plan, admission.placement[0].node) == ("nlp-prod-1x8", False, "n2")
    assert d.abandoned_plans == ("nlp-prod-1x8",)


# ---------------------------------------------------------------- worlds used by several rows


def _backfill(runtime: float) -> tuple[World, list[PendingJob], PolicyConfig]:
    """A 16-GPU head behind a run that ends at NOW + 1000, and a small job behind the head."""
    head = gpu_jobs("nlp", "training", workers=2, name="head", submitted=0)
    small = gpu_jobs("nlp", "training", name="small", submitted=10, runtime=runtime)
    return cluster(2, Run("cv", "production", end=NOW + 1000)), head + small, team_config({"nlp": 16, "cv": 8})


def _plan_in_flight(
    victim_stopped: bool, requested_at: float | None = None
) -> tuple[World, list[PendingJob], PolicyConfig]:
    world = cluster(2, Run("nlp", "experiment", node=0, run_id="victim"), Run("cv", "production", node=1))
    if victim_stopped:
        world.finish(world.runs[0])
    world.plans = [PlanInFlight("nlp-prod-1x8", ("victim",), (Slot(0, "n0", tuple(range(8))),), requested_at)]
    jobs = gpu_jobs("nlp", "production") + gpu_jobs("cv", "production", submitted=-50, name="rival")
    return world, jobs, team_config({"nlp": 8, "cv": 8})


def _plan_and_a_node_that_freed_itself() -> tuple[World, list[PendingJob], PolicyConfig]:
    world = cluster(3, Run("nlp", "experiment", node=0, run_id="victim"), Run("cv", "production", node=1))
    world.plans = [PlanInFlight("nlp-prod-1x8", ("victim",), (Slot(0, "n0", tuple(range(8))),))]
    return world, gpu_jobs("nlp", "production"), team_config({"nlp": 8, "cv": 8})


_BUSY_NODE = cluster(1, Run("cv", "production"))
_LOST_PLAN = PlanInFlight("nlp-prod-1x8", ("gone",), (Slot(0, "n0", tuple(range(8))),))

SIM_ONLY_UNDER_LOCAL = NoExecutor(("sim",), (("local", "local"),))
"""A job with only a `sim` section while the one running executor is the local one."""


def _held_out_of_line(d: Decisions) -> None:
    held = explanation(d, "nlp-prod-1x8")
    assert [r.code for r in held.reasons] == [Code.NO_EXECUTOR] and held.position == 0
    assert held.reasons[0].detail("executors") == "local" and held.reasons[0].detail("sections") == "sim"
    assert held.factors.total > 0  # scored as any waiting job is
    assert explanation(d, "nlp-trai-1x8-1").position == 1  # the held job is not ahead of it


def _no_executor_rows() -> list[Row]:
    held = {"nlp-prod-1x8": SIM_ONLY_UNDER_LOCAL}
    says = {"nlp-prod-1x8": "no running executor can run this job: it has only a `sim` section; the local"
            " executor runs jobs with a `local` section (a command)"}
    jobs = gpu_jobs("nlp", "production") + gpu_jobs("nlp", "training", n=2, submitted=100)
    return [
        Row(f"{policy}: a job no running executor can run waits (NO_EXECUTOR) out of line; the next starts",
            cluster(1, unrunnable=held), jobs, team_config({"nlp": 8}), admits=("nlp-trai-1x8-0",),
            reasons={"nlp-prod-1x8": (Code.NO_EXECUTOR,)}, no_eta=("nlp-prod-1x8",), says=says,
            policy=policy, check=_held_out_of_line)
        for policy in ("rota", "fifo", "kueue", "slurm")
    ] + [
        Row("a job no running executor can run preempts no one for GPUs it could not use",
            cluster(1, Run("cv", "experiment"), unrunnable=held), gpu_jobs("nlp", "production"),
            team_config({"nlp": 8, "cv": 0}), admits=(), victims=(),
            reasons={"nlp-prod-1x8": (Code.NO_EXECUTOR,)}, says=says),
        Row("a job with a section the running executor needs is not held: it preempts as before",
            cluster(1, Run("cv", "experiment")), gpu_jobs("nlp", "production"),
            team_config({"nlp": 8, "cv": 0}), admits=(), victims=("run-cv-expe-0",)),
    ]


ROWS: list[Row] = [
    *_no_executor_rows(),
    # ------------------------------------------------------------ ordering
    Row("tiers are strict: production before an older training job", cluster(1),
        gpu_jobs("nlp", "training", submitted=0) + gpu_jobs("nlp", "production", submitted=5000),
        team_config({"nlp": 8}), admits=("nlp-prod-1x8",)),
    Row("within a team, the older job goes first", cluster(1), gpu_jobs("nlp", "training", n=2, submitted=100),
        team_config({"nlp": 8}), admits=("nlp-trai-1x8-0",)),
    Row("fair share: the team with less decayed usage goes first", cluster(1, usage={"heavy": 1e7, "light": 1e3}),
        gpu_jobs("heavy", submitted=0) + gpu_jobs("light", submitted=500), team_config({"heavy": 8, "light": 8}),
        admits=("light-trai-1x8",), check=_factors_below_a_fair_user),
    Row("a drained node takes no new placement: a gang that needs it waits for capacity",
        cluster(2, drained=(0,)), gpu_jobs("nlp", workers=2), team_config({"nlp": 16}),
        admits=(), reasons={"nlp-trai-2x8": (Code.INSUFFICIENT_CAPACITY,)},
        says={"nlp-trai-2x8": "8 of 16 are free"}),
    Row("a drained node takes no new placement: a job goes to the node still ready",
        cluster(2, drained=(0,)), gpu_jobs("nlp"), team_config({"nlp": 16}),
        admits=("nlp-trai-1x8",), check=_on_nodes("n1")),
    Row("quota headroom: a team under its quota goes before one at it",
        cluster(3, Run("busy", "training"), drained=(1,)),
        gpu_jobs("busy", submitted=0) + gpu_jobs("idle", submitted=10), team_config({"busy": 8, "idle": 8}),
        admits=("idle-trai-1x8",), check=_no_headroom_at_quota),
    Row("age is capped: two jobs older than the cap score the same age", cluster(1, Run("nlp", "production")),
        gpu_jobs("nlp", n=2, submitted=0), team_config({"nlp": 8}, age_cap_s=1000.0), check=_age_capped),
    Row("score breakdown: queue weight follows the tier and total is the sum", cluster(1, Run("nlp", "production")),
        gpu_jobs("nlp", "experiment") + gpu_jobs("nlp", "training"), team_config({"nlp": 8}), check=_breakdown_sums),
    # ------------------------------------------------------------ quotas
    # Its ETA: when its team's own run frees the quota (started at -3600, the default 14400 s runtime).
    Row("borrowing limit: no borrowing beyond it, even on an idle cluster", cluster(4, Run("nlp", "training")),
        gpu_jobs("nlp"), team_config({"nlp": 8}, borrowing={"nlp": 0}),
        admits=(), reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)}, etas={"nlp-trai-1x8": NOW + 800}),
    Row("borrowing: idle GPUs above the quota are lent, and reported as borrowed", cluster(4),
        gpu_jobs("nlp", workers=3), team_config({"nlp": 8, "cv": 16}), admits=("nlp-trai-3x8",), check=_borrowed_16),
    Row("lending limit: the unlendable part of an idle quota is kept back", cluster(4),
        gpu_jobs("nlp", workers=4, name="big") + gpu_jobs("nlp", workers=3, name="fits", submitted=1),
        team_config({"nlp": 0, "cv": 16}, lending={"cv": 8}),
        admits=("fits",), reasons={"big": (Code.QUOTA_EXCEEDED,)}),
    Row("capacity nobody owns can be borrowed by a team without quota", cluster(2),
        gpu_jobs("stranger", workers=2), team_config({"nlp": 8}), admits=("stranger-trai-2x8",)),
    # ------------------------------------------------------------ placement
    Row("gangs are all or nothing: no partial start", cluster(2, Run("cv", "production", node=1, gpus=4)),
        gpu_jobs("nlp", workers=2), team_config({"nlp": 16, "cv": 16}),
        admits=(), reasons={"nlp-trai-2x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("best fit: a small job goes to the fullest node that fits, keeping whole nodes free",
        cluster(3, Run("cv", "production", node=2, gpus=6)), gpu_jobs("nlp", gpus=2),
        team_config({"nlp": 8, "cv": 16}), admits=("nlp-trai-1x2",), check=_on_nodes("n2")),
    Row("rack required: the gang lands inside one rack", cluster(4, Run("cv", "production", node=1), racks=2),
        gpu_jobs("nlp", workers=2, rack="required"), team_config({"nlp": 16}),
        admits=("nlp-trai-2x8",), check=_on_nodes("n2", "n3")),
    Row("rack required but split free GPUs: FRAGMENTATION",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=2),
        gpu_jobs("nlp", workers=2, rack="required"), team_config({"nlp": 16, "cv": 16}),
        reasons={"nlp-trai-2x8": (Code.FRAGMENTATION,)}),
    Row("rack preferred: falls back to several racks",
        cluster(4, Run("cv", "production", node=1), Run("cv", "production", node=3), racks=2),
        gpu_jobs("nlp", workers=2, rack="preferred"), team_config({"nlp": 16}), admits=("nlp-trai-2x8",)),
    Row("too large for the whole cluster: EXCEEDS_CLUSTER, no ETA", cluster(2), gpu_jobs("nlp", workers=3),
        team_config({"nlp": 16}), reasons={"nlp-trai-3x8": (Code.EXCEEDS_CLUSTER,)}, no_eta=("nlp-trai-3x8",)),
    Row("a flavor no node has: NO_MATCHING_FLAVOR", cluster(1), gpu_jobs("nlp", flavor="h100"),
        team_config({"nlp": 8}), reasons={"nlp-trai-1x8": (Code.NO_MATCHING_FLAVOR,)}, no_eta=("nlp-trai-1x8",)),
    Row("enough free GPUs, but not on one node: FRAGMENTATION",
        cluster(2, Run("cv", "production", node=0, gpus=4), Run("cv", "production", node=1, gpus=4)),
        gpu_jobs("nlp"), team_config({"nlp": 8, "cv": 8}),
        reasons={"nlp-trai-1x8": (Code.FRAGMENTATION,)}, check=_fragmentation_counts_free),
    # ------------------------------------------------------------ backfill
    Row("backfill: a short job runs when it ends before the head's reservation", *_backfill(500.0),
        admits=("small",)),
    Row("backfill: a long job may not delay the head: RESERVED_FOR_HIGHER_PRIORITY", *_backfill(5000.0),
        admits=(), reasons={"small": (Code.RESERVED_FOR_HIGHER_PRIORITY,)}, check=_reserved_for_head),
    Row("ETA: a blocked job's ETA is when running work is expected to end", *_backfill(5000.0),
        check=_eta_of_head),
    # ------------------------------------------------------------ reasons
    Row("INSUFFICIENT_CAPACITY gives the numbers", _BUSY_NODE, gpu_jobs("nlp"), team_config({"nlp": 0, "cv": 8}),
        reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY,)}, check=_capacity_message),
    Row("jobs short of the same GPUs share one INSUFFICIENT_CAPACITY reason (memory at 1M pending)", _BUSY_NODE,
        gpu_jobs("nlp", n=3), team_config({"nlp": 8}), check=_one_shared_capacity_reason),
    Row("PRIORITY counts the jobs and GPUs ahead", _BUSY_NODE, gpu_jobs("nlp", n=3), team_config({"nlp": 8}),
        check=_two_ahead),
    Row("queue diagnosis: long waits on quota are blamed on the quota", cluster(4, Run("nlp", "training")),
        gpu_jobs("nlp", n=3, submitted=0), team_config({"nlp": 8}, borrowing={"nlp": 0}), check=_blamed_on_quota),
    # ------------------------------------------------------------ preemption (Rota)
    Row("production preempts lower-tier, resumable work before work that cannot checkpoint",
        cluster(2, Run("nlp", "experiment", node=0, resumable=False, run_id="fragile"),
                Run("nlp", "training", node=1, run_id="saver")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 16}),
        victims=("saver",), reasons={"nlp-prod-1x8": (Code.WAITING_FOR_PREEMPTION,)}, check=_loses_nothing),
    Row("among resumable victims, the lowest tier goes first",
        cluster(2, Run("nlp", "training", node=0, run_id="train"), Run("nlp", "experiment", node=1, run_id="exp")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 16}), victims=("exp",)),
    # The cheapest victim first (least work since its checkpoint) frees only 4 of the 8 GPUs.
    Row("a victim with two workers on one node frees its GPUs there once, not twice",
        cluster(1, Run("nlp", node=[0, 0], gpus=2, checkpoint=NOW - 10, run_id="pair"),
                Run("nlp", node=0, gpus=4, checkpoint=NOW - 3600, run_id="quad")),
        gpu_jobs("nlp", "training"), team_config({"nlp": 8}), victims=("pair", "quad"), check=_whole_node_target),
    Row("minimum runtime: a run that just started is never a victim", cluster(1, Run("nlp", started=NOW - 100)),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), victims=()),
    Row("preemption budget: a job preempted too often is never a victim again",
        cluster(1, Run("nlp", preemptions=team_config().max_preemptions_per_job)),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), victims=()),
    Row("a plan is made only when the freed GPUs really fit the gang",
        cluster(2, Run("nlp", node=0), Run("nlp", "production", node=1)),
        gpu_jobs("nlp", "production", workers=2), team_config({"nlp": 16}),
        victims=(), reasons={"nlp-prod-2x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("production never preempts another team's in-quota training work", cluster(1, Run("cv", "training")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 0, "cv": 8}), victims=()),
    Row("reclaim: a team within its quota takes back what another team borrowed",
        cluster(2, Run("cv", "training", node=0, run_id="cv-own"),
                Run("cv", "training", node=1, run_id="cv-borrowed", started=-100.0)),
        gpu_jobs("nlp", "training"), team_config({"nlp": 8, "cv": 8}), check=_why("reclaim", borrowed=True)),
    Row("production work is a victim only as a last resort",
        cluster(2, Run("cv", "production", node=0, run_id="cv-prod"),
                Run("cv", "production", node=1, run_id="cv-prod-borrowed")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8, "cv": 0}), check=_why("last_resort", borrowed=True)),
    # The tier's wait target (`long_wait_s`) is 3600 s here.
    Row("no victims while the GPUs that free themselves come within the wait target",
        cluster(1, Run("cv", end=NOW + 600, run_id="ends-soon")), gpu_jobs("nlp", "training", submitted=NOW),
        team_config({"nlp": 8}), victims=(), reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("victims once the GPUs that free themselves would come too late for the wait target",
        cluster(1, Run("cv", end=NOW + 7200, run_id="ends-late")), gpu_jobs("nlp", "training", submitted=NOW),
        team_config({"nlp": 8}), victims=("ends-late",)),
    Row("victims once the job has waited its wait target, however soon GPUs are expected",
        cluster(1, Run("cv", end=NOW + 600, run_id="ends-soon")), gpu_jobs("nlp", "training", submitted=NOW - 3600),
        team_config({"nlp": 8}), victims=("ends-soon",)),
    Row("production does not destroy work that cannot checkpoint either, however long it waited",
        cluster(1, Run("nlp", resumable=False)), gpu_jobs("nlp", "production", submitted=NOW - 86_400),
        team_config({"nlp": 8}), victims=(), reasons={"nlp-prod-1x8": (Code.INSUFFICIENT_CAPACITY,)}),
    Row("with the loss cap lifted, production may destroy work that cannot checkpoint",
        cluster(1, Run("nlp", resumable=False, run_id="fragile")), gpu_jobs("nlp", "production", submitted=NOW - 3600),
        team_config({"nlp": 8}, max_lost_gpu_s_per_plan=None), victims=("fragile",)),
    Row("a training job may not destroy work that cannot checkpoint (loss cap)",
        cluster(1, Run("nlp", resumable=False)), gpu_jobs("nlp", "training"), team_config({"nlp": 8}), victims=()),
    # nlp is over its quota, so it cannot reclaim: only lower-tier work is a victim, and of
    # that only what loses nothing under the loss cap.
    Row("over its quota, a training job stops another team's experiment work that can checkpoint",
        cluster(2, Run("nlp", node=0, resumable=False, run_id="fragile"), Run("cv", node=1, run_id="saver")),
        gpu_jobs("nlp", "training"), team_config({"nlp": 8, "cv": 0}), victims=("saver",), check=_loses_nothing),
    Row("plan in flight: the preemptor waits for its victims (WAITING_FOR_PREEMPTION)", *_plan_in_flight(False),
        victims=(), reasons={"nlp-prod-1x8": (Code.WAITING_FOR_PREEMPTION,)}),
    Row("a waiting preemptor's ETA is when its victims will have saved, not its queue's turn",
        *_plan_in_flight(False, requested_at=NOW - 10), check=_eta_when_its_victims_have_saved),
    Row("a plan in flight gives way to GPUs that freed themselves: start there, drop the plan",
        *_plan_and_a_node_that_freed_itself(), admits=("nlp-prod-1x8",),
        check=_starts_on_the_free_node_and_gives_up_its_plan),
    Row("freed GPUs are held for the preemptor: an older rival cannot take them", *_plan_in_flight(True),
        admits=("nlp-prod-1x8",), check=_via_plan_on_n0),
    Row("a plan whose target was taken by someone else is abandoned",
        cluster(1, Run("cv", "production", run_id="squatter"), plans=(_LOST_PLAN,)),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), check=_abandoned),
    # ------------------------------------------------------------ baselines
    Row("fifo: the head blocks everything behind it, whatever its tier", cluster(2, Run("cv", "training")),
        gpu_jobs("nlp", "experiment", workers=2, name="head") + gpu_jobs("nlp", "production", name="prod", submitted=5),
        team_config({"nlp": 16}), admits=(), victims=(), reasons={"prod": (Code.PRIORITY,)}, policy="fifo"),
    Row("kueue BestEffortFIFO: a blocked head does not block smaller jobs",
        cluster(2, Run("cv", "training", end=NOW + 10)),
        gpu_jobs("nlp", "training", workers=2, name="head") + gpu_jobs("nlp", "training", name="long", runtime=1e6, submitted=5),
        team_config({"nlp": 16, "cv": 8}), admits=("long",), policy="kueue"),
    Row("kueue victims: other ClusterQueues first, then the most recently admitted",
        cluster(3, Run("nlp", node=0, run_id="own-low"), Run("cv", "training", node=1, run_id="cv-old", started=-9000),
                Run("cv", "training", node=2, run_id="cv-new", started=-10)),
        gpu_jobs("nlp", "training"), team_config({"nlp": 16, "cv": 0}), victims=("cv-new",), policy="kueue"),
    Row("kueue below its quota, with no room for the job: borrowed GPUs and its own lower tiers go, to fit within quota",
        cluster(4, Run("cv", "training", node=0, run_id="cv-1"), Run("cv", "training", node=1, run_id="cv-2"),
                Run("cv", "experiment", node=2, run_id="cv-exp"),
                Run("nlp", "training", node=3, gpus=4, run_id="nlp-a", started=-200),
                Run("nlp", "training", node=3, gpus=4, run_id="nlp-b", started=-100)),
        gpu_jobs("nlp", "production", workers=2), team_config({"nlp": 16, "cv": 16}),
        victims=("cv-exp", "nlp-b", "nlp-a"), policy="kueue"),
    Row("kueue at its quota: only its own lower tiers are victims, not the borrowers",
        cluster(4, Run("cv", "training", node=0, run_id="cv-1"), Run("cv", "experiment", node=1, run_id="cv-exp"),
                Run("nlp", "training", node=2, run_id="nlp-low"), Run("nlp", "production", node=3)),
        gpu_jobs("nlp", "production"), team_config({"nlp": 16, "cv": 8}), victims=("nlp-low",), policy="kueue"),
    Row("kueue has no minimum runtime: a fresh run is a victim", cluster(1, Run("nlp", started=NOW - 1, run_id="fresh")),
        gpu_jobs("nlp", "production"), team_config({"nlp": 8}), victims=("fresh",), policy="kueue"),
    Row("slurm partition priority: any team's lower-tier job is preemptable",
        cluster(1, Run("cv", "training", run_id="cv-train")), gpu_jobs("nlp", "production"),
        team_config({"nlp": 0, "cv": 8}), victims=("cv-train",), policy="slurm"),
    Row("slurm victims: the lowest partition tier first",
        cluster(2, Run("cv", "training", node=0, run_id="train", started=-10),
                Run("cv", "experiment", node=1, run_id="exp", started=-9000)),
        gpu_jobs("nlp", "production"), team_config({}), victims=("exp",), policy="slurm"),
    Row("slurm multifactor: classic fair share orders teams within a tier",
        cluster(1, usage={"heavy": 1e7, "light": 0.0}), gpu_jobs("heavy") + gpu_jobs("light", submitted=100),
        team_config({}), admits=("light-trai-1x8",), policy="slurm"),
    # What a new user met on `rota up` with the example config: each wait is explained in terms
    # the user can act on, and every start the policy can foresee has an ETA.
    Row("GPUs lent to runs under their minimum runtime: when they can be taken back is the ETA",
        cluster(1, Run("nlp", "training", started=NOW - 100, end=NOW + 7200)), gpu_jobs("vision", "production",
        submitted=NOW), team_config({"vision": 8, "nlp": 0}), victims=(),
        reasons={"vision-prod-1x8": (Code.INSUFFICIENT_CAPACITY,)},
        etas={"vision-prod-1x8": NOW + 200 + team_config().checkpoint_save_s},
        says={"vision-prod-1x8": "within its quota and has lent 8 GPUs to nlp: they can be taken back at"}),
    Row("first in line behind two runs with declared runtimes: the ETA is the first one's end",
        cluster(2, Run("cv", "training", node=0, end=NOW + 1000), Run("cv", "training", node=1, end=NOW + 2000)),
        gpu_jobs("nlp", "training", submitted=NOW), team_config({"nlp": 0, "cv": 16}), victims=(),
        reasons={"nlp-trai-1x8": (Code.INSUFFICIENT_CAPACITY,)}, etas={"nlp-trai-1x8": NOW + 1000}),
    Row("over its borrowing limit: says how many more GPUs the limit would have to allow",
        cluster(2, Run("nlp", "training", node=0)), gpu_jobs("nlp", "training", submitted=NOW),
        team_config({"nlp": 8, "cv": 8}, borrowing={"nlp": 0}), reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)},
        says={"nlp-trai-1x8": "insufficient borrowing limit for gpu: 8 more needed"}),
    Row("another team keeps its idle quota from lending: says how many more GPUs it needs",
        cluster(2, Run("nlp", "training", node=0)), gpu_jobs("nlp", "training", submitted=NOW),
        team_config({"nlp": 8, "cv": 8}, lending={"cv": 0}), reasons={"nlp-trai-1x8": (Code.QUOTA_EXCEEDED,)},
        says={"nlp-trai-1x8": "insufficient unused quota to borrow for gpu: 8 more needed"}),
    Row("slurm backfill: a long job may not delay a reserved head", *_backfill(5000.0),
        admits=(), reasons={"small": (Code.RESERVED_FOR_HIGHER_PRIORITY,)}, policy="slurm"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_scenario(row: Row) -> None:
    run_row(row)


def run_row(row: Row) -> Decisions:
    """Decide the row's world and check every outcome the row names."""
    snapshot = row.world.snapshot(row.pending)
    d = POLICIES[row.policy](snapshot, NOW, row.config)
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    for a in d.admissions:
        if a.job_id in row.starts_on:
            assert a.flavor == row.starts_on[a.job_id], (a.job_id, a.flavor)
        assert {flavor_of[s.node] for s in a.placement} == {a.flavor}, a
    if row.causes is not None:
        assert tuple((x.flavor, x.cause) for x in d.diagnoses) == row.causes, d.diagnoses
    if row.admits is not None:
        assert tuple(a.job_id for a in d.admissions) == row.admits
    if row.victims is not None:
        assert tuple(v.run_id for p in d.plans for v in p.victims) == row.victims
    for job_id, leading in row.reasons.items():
        codes = tuple(r.code for r in explanation(d, job_id).reasons)
        assert codes[: len(leading)] == leading, (job_id, codes)
    for job_id in row.no_eta:
        assert explanation(d, job_id).eta is None, job_id
    for job_id, eta in row.etas.items():
        assert explanation(d, job_id).eta == pytest.approx(eta), job_id
    for job_id, words in row.says.items():
        message = explanation(d, job_id).reasons[0].message
        assert words in message, (job_id, message)
    if row.check is not None:
        row.check(d)
    # Every pending job that was not admitted is explained, with a reason first.
    waiting = {j.job_id for j in row.pending} - {a.job_id for a in d.admissions}
    assert {e.job_id for e in d.pending} == waiting
    assert all(e.reasons for e in d.pending)
    return d


def test_multi_round_preemption_then_admission() -> None:
    """Round 1 plans; the victim stops; round 2 admits the preemptor on the held GPUs."""
    world = cluster(1, Run("nlp", run_id="victim"))
    config = team_config({"nlp": 8})
    job = gpu_jobs("nlp", "production")
    first = POLICIES["rota"](world.snapshot(job), NOW, config)
    assert [v.run_id for p in first.plans for v in p.victims] == ["victim"]
    plan = first.plans[0]
    world.finish(world.runs[0])
    world.plans = [PlanInFlight(plan.preemptor_job_id, ("victim",), plan.target)]
    second = POLICIES["rota"](world.snapshot(job), NOW + 60, config)
    assert [a.job_id for a in second.admissions] == ["nlp-prod-1x8"]
    assert second.admissions[0].placement == plan.target
