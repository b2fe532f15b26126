"""A queue's prefix sums carry over to the queue that follows it (`PendingQueue.followed_by`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota_policy import PendingJob, PendingQueue

Change = tuple[str, int]


def _job(i: int) -> PendingJob:
    return PendingJob(
        job_id=f"j{i}", team="nlp", tier=Tier.training, flavor="gpu", workers=1 + i % 3,
        gpus_per_worker=1 + i % 4, submitted_at=float(i),
        runtime_estimate_s=None if i % 5 == 0 else 60.0 * (1 + i % 7),
    )  # fmt: skip


changes = st.lists(
    st.tuples(st.sampled_from(("head", "tail", "middle", "none")), st.integers(0, 10)), max_size=30
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20), changes, st.booleans())
def test_carried_sums_equal_sums_from_scratch(start: int, steps: list[Change], ask_every_time: bool) -> None:
    jobs = [_job(i) for i in range(start)]
    queue = PendingQueue(Tier.training, "nlp", "gpu", tuple(jobs))
    queue.sums()
    born = start
    for kind, n in steps:
        if kind == "head":
            del jobs[:n]
        elif kind == "tail":
            jobs.extend(_job(born + i) for i in range(n))
            born += n
        elif kind == "middle" and len(jobs) > 2:
            del jobs[len(jobs) // 2]
        queue = queue.followed_by(tuple(jobs))
        fresh = PendingQueue(Tier.training, "nlp", "gpu", tuple(jobs))
        assert (queue.min_gpus, queue.min_runtime_s) == (fresh.min_gpus, fresh.min_runtime_s)
        if ask_every_time or kind == "none":
            for lo in range(len(jobs) + 1):
                for hi in range(lo, len(jobs) + 1):
                    assert queue.sums().between(lo, hi) == fresh.sums().between(lo, hi)
