"""A narrowed queue's suffix minima find no job that the plain scan would find (`next_fitting`).

The walk asks `next_fitting` for the next job of a queue past its window that fits the free
GPUs and that no reservation holds back. When the smallest request and the shortest runtime
from a position on (possibly two jobs') are already held back, the answer is None at once;
otherwise it scans. The reference here is the scan alone, job by job, through the walk's reservation
check.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota_policy import PendingJob, PendingQueue
from rota_policy.admission.backfill import Reservation
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import Cycle
from rota_policy.cycle.walkstate import WalkState
from rota_policy.nominate.ordering import next_fitting

from tests.unit.policy.builders import World, team_config

NOW = 50_000.0

jobs_st = st.lists(
    st.tuples(
        st.sampled_from((1, 2, 4, 4, 8, 8, 16)),
        # Mostly estimates, some on a release time (where a reservation may start); a job
        # without one takes the default runtime, which makes suffix minima say nothing.
        st.sampled_from((400.0, 800.0, 1_200.0, 1_600.0, *[20_000.0] * 8, 30.0, None, -5.0)),
    ),
    max_size=16,
)
reservations_st = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), max_size=3)
"""(k, spare): a reservation that starts at the k-th release, NOW + 400 s x k."""


@settings(max_examples=400, deadline=None)
@given(
    jobs_st, st.lists(st.integers(0, 8), min_size=4, max_size=4), reservations_st,
    st.integers(0, 20), st.integers(0, 8), st.booleans(),
)  # fmt: skip
def test_suffix_minima_find_what_the_scan_finds(
    shapes: list[tuple[int, float | None]],
    busy: list[int],
    reserved: list[tuple[int, int]],
    most: int,
    start: int,
    some_always: bool,
) -> None:
    world = World(nodes=4)
    for node, gpus in enumerate(busy):
        if gpus:
            world.run("b", "training", node=node, gpus=gpus, end=NOW + 400.0 * (node + 1))
    jobs = tuple(
        PendingJob(f"j{i:02d}", "nlp", Tier.training, "gpu", 1, gpus, float(i), runtime)
        for i, (gpus, runtime) in enumerate(shapes)
    )
    cy = Cycle(world.snapshot(list(jobs)), NOW, team_config({"nlp": 8}), ROTA_RULES)
    book = cy.book("gpu")
    for k, (at, spare) in enumerate(reserved):
        book.reservations.append(Reservation(f"r{k}", 1, 8, NOW + 400.0 * at, spare, NOW + 10_000.0))
    w = WalkState(cy)
    queue = PendingQueue(Tier.training, "nlp", "gpu", jobs)
    always = frozenset({jobs[len(jobs) // 2].job_id}) if some_always and jobs else frozenset()
    expected = next(
        (p for p in range(start, len(jobs))
         if jobs[p].job_id in always or (jobs[p].gpus <= most and not w.held_back(jobs[p]))),
        None,
    )  # fmt: skip
    assert next_fitting(queue, start, most, always, w.held_back, w.holds_back_all) == expected
    for pos in range(len(jobs)):
        rest = jobs[pos:]
        assert queue.least_from(pos) == (
            min(j.gpus for j in rest), min(j.runtime_estimate_s or 0.0 for j in rest)
        )
