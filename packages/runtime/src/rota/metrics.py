"""Prometheus metrics: one catalog for all of Rota, served by each service on its own port.

Every metric Rota exports is defined here, so a dashboard can be checked against `NAMES`, and
each service registers only the families whose facts it knows (`OWNERS`). A family therefore
appears in exactly one service's `/metrics`: a `sum()` in a dashboard never adds another
service's idle zeros, and an empty family means "that service is not reporting", not zero.
`rota_outbox_lag_seconds` is the exception: every service has an outbox, so every service
reports its own (Prometheus' `job`/`instance` labels tell them apart).

Labels stay bounded: tiers, teams, flavors, reasons and outcomes come from the configuration
or from enums, never job or run ids.

`ROTA_METRICS_PORT` turns the HTTP endpoint on; unset (the default for a service started by
hand or inside a test) serves nothing. `rota up` gives each service a distinct free port.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import ParamSpec
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rota.contracts import Tier
from rota.settings import Settings

log = logging.getLogger("rota.metrics")

P = ParamSpec("P")

# `*_created` series double every counter and histogram and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class SnapshotGauge(Collector):
    """A labelled gauge replaced whole, once per computation.

    The scheduler recomputes queue lengths and GPU use from its view after every cycle.
    Swapping one dict keeps a scrape (on the HTTP thread) from ever seeing half of a cycle,
    and label sets that vanished (a queue that emptied) vanish from the exposition too, which
    `Gauge.clear()` followed by `set()` could not promise between the two calls.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] = ()) -> None:
        self._name = name
        self._documentation = documentation
        self.labelnames = labelnames
        self._values: dict[tuple[str, ...], float] = {}

    def set_all(self, values: Mapping[tuple[str, ...], float]) -> None:
        for labels in values:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self._name}: expected labels {self.labelnames}, got {labels}")
        self._values = dict(values)

    def value(self, *labels: str) -> float | None:
        return self._values.get(tuple(labels))

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self._name, self._documentation, labels=list(self.labelnames))

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for labels, value in sorted(self._values.items()):
            family.add_metric(list(labels), value)
        return [family]


_SECONDS_WAIT = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
_SECONDS_RUN = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)
_SECONDS_ACK = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
_SECONDS_CYCLE = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# ---------------------------------------------------------------- scheduler

QUEUE_WAIT = Histogram(
    "rota_queue_wait_seconds", "Time a job waited in its queue before a run of it started"
    " (from submit, or from the preemption that requeued it).",
    ["queue", "team", "flavor"], buckets=_SECONDS_WAIT, registry=None)
QUEUE_PENDING = SnapshotGauge(
    "rota_queue_pending_jobs", "Pending jobs by queue, team and primary wait reason.",
    ("queue", "team", "reason"))
RUNNING_JOBS = SnapshotGauge("rota_running_jobs", "Jobs with a run started and not ended.")
PREEMPTION_DEFERRED = SnapshotGauge(
    "rota_preemption_deferred_jobs", "Pending jobs that their queue's preemption delay keeps, in"
    " the last cycle, from stopping anyone while GPUs may still free themselves, by queue.",
    ("queue",))
GPUS_ALLOCATED = SnapshotGauge(
    "rota_gpus_allocated", "GPUs the ledger granted, by team and flavor.", ("team", "flavor"))
GPUS_CAPACITY = SnapshotGauge("rota_gpus_capacity", "GPUs in the cluster by flavor.", ("flavor",))
QUOTA_USED_RATIO = SnapshotGauge(
    "rota_quota_used_ratio", "GPUs allocated over nominal quota (above 1: borrowing);"
    " teams with no quota of a flavor have no series for it.", ("team", "flavor"))
TEAM_USAGE = SnapshotGauge(
    "rota_team_usage_gpu_seconds", "Each team's historical usage in GPU-seconds, decayed with"
    " the fair-share half-life (the input of fair share).", ("team",))
BUDGET_USED_GPU_HOURS = SnapshotGauge(
    "rota_budget_used_gpu_hours", "GPU-hours each team used of a flavor this budget period;"
    " only teams with a budget of that flavor.", ("team", "flavor"))
BUDGET_GPU_HOURS = SnapshotGauge(
    "rota_budget_gpu_hours", "Each team's GPU-hour budget of a flavor per period.", ("team", "flavor"))
SCHEDULE_CYCLE = Histogram(
    "rota_schedule_cycle_seconds", "Duration of one scheduling cycle, decide and commit.",
    buckets=_SECONDS_CYCLE, registry=None)
DECISIONS = Counter(
    "rota_scheduler_decisions", "Decisions recorded in the scheduler's decision log.",
    ["decision"], registry=None)
DECISION_KINDS = ("admit", "hold", "preempt", "stop", "grow")

# ---------------------------------------------------------------- preemption coordinator

PREEMPTIONS = Counter(
    "rota_preemptions", "Preempted runs by the victim's tier and how the preemption ended.",
    ["tier", "outcome"], registry=None)
PREEMPTION_OUTCOMES = ("acked", "forced", "aborted", "shrunk")
"""`shrunk`: an elastic victim that saved and restarts smaller on GPUs it kept (DECISIONS 81)."""
DRAIN_STOPS = Counter(
    "rota_drain_stops", "Runs stopped for a node drain (a preemption with the reason drain,"
    " not counted in rota_preemptions), by the run's tier and how its stop ended.",
    ["tier", "outcome"], registry=None)
PREEMPTION_ACK = Histogram(
    "rota_preemption_ack_seconds", "From a victim's notice to its checkpoint acknowledgement.",
    buckets=_SECONDS_ACK, registry=None)
GROWS = Counter(
    "rota_grows", "Elastic runs grown on idle GPUs (not preemptions), by how the grow ended:"
    " grown, aborted (no checkpoint in time; it ran on as it was), finished.", ["outcome"],
    registry=None)
GROW_OUTCOMES = ("grown", "aborted", "finished")
LOST_GPU_SECONDS = Counter(
    "rota_lost_gpu_seconds", "GPU-seconds of work lost by preempted runs (since their last"
    " checkpoint), by the victim's team.", ["team"], registry=None)

# ---------------------------------------------------------------- executor

JOB_RUNTIME = Histogram(
    "rota_job_runtime_seconds", "Run time of each ended run (simulated time on the sim"
    " backend).", buckets=_SECONDS_RUN, registry=None)
JOBS_FINISHED = Counter(
    "rota_jobs_finished", "Runs that ended, by outcome: finished, failed, preempted, cancelled,"
    " deadline.", ["outcome"], registry=None)
RUN_OUTCOMES = ("finished", "failed", "preempted", "cancelled", "deadline", "lost", "resized",
                "drained")

# ---------------------------------------------------------------- notifier

NOTIFICATIONS = Counter(
    "rota_notifications", "Notification send attempts by channel and result (sent, retrying,"
    " dead).", ["channel", "outcome"], registry=None)
NOTIFICATION_CHANNELS = ("slack", "email")
NOTIFICATION_OUTCOMES = ("sent", "retrying", "dead")

# ---------------------------------------------------------------- every service

OUTBOX_LAG = Gauge(
    "rota_outbox_lag_seconds", "Age of the oldest outbox row not yet published (0: none).",
    registry=None)

FORGED_MESSAGES = Counter(
    "rota_forged_messages_total", "Messages refused because their sender may not send them.",
    ("subject",), registry=None)

Family = Counter | Gauge | Histogram | SnapshotGauge

OWNERS: dict[str, tuple[Family, ...]] = {
    "scheduler": (QUEUE_WAIT, QUEUE_PENDING, RUNNING_JOBS, GPUS_ALLOCATED, GPUS_CAPACITY,
                  QUOTA_USED_RATIO, TEAM_USAGE, BUDGET_USED_GPU_HOURS, BUDGET_GPU_HOURS,
                  SCHEDULE_CYCLE, DECISIONS, PREEMPTION_DEFERRED),
    "preemption": (PREEMPTIONS, DRAIN_STOPS, PREEMPTION_ACK, LOST_GPU_SECONDS, GROWS),
    "executor": (JOB_RUNTIME, JOBS_FINISHED),
    "notifier": (NOTIFICATIONS,),
}
EVERY_SERVICE: tuple[Family, ...] = (OUTBOX_LAG, FORGED_MESSAGES)


def family_name(family: Family) -> str:
    """The name as exposed: counters gain `_total` in the exposition."""
    name = next(iter(family.describe())).name
    return f"{name}_total" if isinstance(family, Counter) else name


def _families() -> Iterator[Family]:
    for owned in OWNERS.values():
        yield from owned
    yield from EVERY_SERVICE


NAMES: frozenset[str] = frozenset(family_name(f) for f in _families())
"""Every metric family Rota exports, as PromQL sees it (a histogram's `_bucket`, `_sum` and
`_count` series belong to its family)."""


def _zero_known_labels() -> None:
    # Known label values start at 0, so `rate()` and "acked vs forced" panels have a series to
    # draw from the first scrape rather than only after the first event of each kind.
    for tier in Tier:
        for outcome in PREEMPTION_OUTCOMES:
            PREEMPTIONS.labels(tier=tier.value, outcome=outcome)
            DRAIN_STOPS.labels(tier=tier.value, outcome=outcome)
    for outcome in GROW_OUTCOMES:
        GROWS.labels(outcome=outcome)
    for kind in DECISION_KINDS:
        DECISIONS.labels(decision=kind)
    for run_outcome in RUN_OUTCOMES:
        JOBS_FINISHED.labels(outcome=run_outcome)
    for channel in NOTIFICATION_CHANNELS:
        for result in NOTIFICATION_OUTCOMES:
            NOTIFICATIONS.labels(channel=channel, outcome=result)


_zero_known_labels()

KNOWN_LABEL_VALUES: dict[str, tuple[tuple[str, ...], ...]] = {
    family_name(f): tuple(getattr(f, "_metrics", {})) for f in _families()}
"""Each family's label values known in advance (those started at 0), as they were at import,
before a service or a test counted anything: the metrics reference lists these."""

REGISTRY = CollectorRegistry(auto_describe=True)
for _standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_standard)

_lock = threading.Lock()
_registered: set[int] = set()
_server: WSGIServer | None = None


def never_raises(record: Callable[P, None]) -> Callable[P, None]:
    """For the hooks services call on their hot paths: a metric is not worth a failed
    scheduling cycle or an unreported run, so a bug in one is logged and swallowed."""

    @functools.wraps(record)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            record(*args, **kwargs)
        except Exception:
            log.exception("recording metrics in %s failed", record.__qualname__)

    return guarded


def register(service: str) -> None:
    """Add `service`'s families to the process registry. Idempotent: tests build several
    services in one process, and a family may be registered only once."""
    with _lock:
        for family in (*OWNERS.get(service, ()), *EVERY_SERVICE):
            if id(family) not in _registered:
                REGISTRY.register(family)
                _registered.add(id(family))


def serve(service: str, settings: Settings) -> int | None:
    """Start the `/metrics` endpoint when `ROTA_METRICS_PORT` is set; returns the bound port.

    One endpoint per process (a daemon thread): a second call returns the first's port.
    """
    global _server
    register(service)
    if settings.metrics_port is None:
        return None
    with _lock:
        if _server is None:
            _server, _thread = start_http_server(
                settings.metrics_port, addr=settings.metrics_host, registry=REGISTRY)
            log.info("%s: metrics on http://%s:%d/metrics", service, settings.metrics_host,
                     _server.server_port)
        return int(_server.server_port)
