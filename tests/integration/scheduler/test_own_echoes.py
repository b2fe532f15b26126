"""The leader skips, unread, the echo of a JobPending it committed (its view has it already),
and reads every other JobPending, another process's or one it does not remember."""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota_scheduler import intake

from tests.integration.scheduler.test_lease_during_cycle import _submitted, scheduler_on


def _pending(nc: Client, job_id: str, code: str, seq: int) -> tuple[str, Msg]:
    event = m.JobPending(job_id=job_id, team="nlp", queue="training", position=3,
                         reasons=[m.WaitReason(code=code, message="waits", details={})],
                         factors=m.ScoreFactors())
    env = envelope(event, source="scheduler", job_id=job_id)
    return env.id, Msg(nc, subject=intake.JOB_PENDING, headers={"Nats-Msg-Id": env.id},
                       reply=f"$JS.ACK.ROTA_EVT.view.1.{seq}.{seq}.0.0", data=env.to_bytes())


async def test_only_the_echo_of_its_own_job_pending_is_skipped(
    endpoints: Endpoints, nc: Client
) -> None:
    scheduler = scheduler_on(endpoints)
    job_id = new_id()
    scheduler.intake.take(_submitted(nc, job_id))
    job = scheduler.view.jobs[job_id]

    own_id, own = _pending(nc, job_id, "QUOTA_EXCEEDED", 2)
    scheduler.intake.sent_pending([{"id": own_id, "subject": intake.JOB_PENDING}])
    scheduler.intake.dirty.clear()
    scheduler.intake.take(own)
    assert job.pending_fingerprint is None  # not read: the commit had folded it in
    assert scheduler.intake.last_seq == 2 and not scheduler.intake.dirty.is_set()
    assert scheduler.intake.own_pending == {}

    _, again = _pending(nc, job_id, "QUOTA_EXCEEDED", 3)  # not remembered: read
    scheduler.intake.take(again)
    assert job.pending_fingerprint is not None
    assert job.pending_fingerprint.codes == ("QUOTA_EXCEEDED",)
    assert scheduler.intake.last_seq == 3 and scheduler.intake.dirty.is_set()


async def test_it_remembers_a_bounded_number_of_its_own(endpoints: Endpoints) -> None:
    scheduler = scheduler_on(endpoints)
    rows = [{"id": str(i), "subject": intake.JOB_PENDING} for i in range(intake.OWN_ECHOES_KEPT + 5)]
    scheduler.intake.sent_pending([*rows, {"id": "other", "subject": "rota.evt.allocation.proposed"}])
    assert len(scheduler.intake.own_pending) == intake.OWN_ECHOES_KEPT
    assert "0" not in scheduler.intake.own_pending and str(intake.OWN_ECHOES_KEPT + 4) in scheduler.intake.own_pending
