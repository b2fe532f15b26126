"""Defence in depth on a server whose permissions are wide open (the test server has no auth
at all): a consumer believes an event only when an owner of its type signed it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg
from rota.auth.keys import AuthDir
from rota.auth.senders import Roster, SenderCheck, Signer
from rota.bus.batch import Retry, message_consumer
from rota.bus.broker import ensure_streams
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, RUN_STOP, STREAM_CMD, STREAM_EVT
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota.metrics import FORGED_MESSAGES

JOB, RUN = "01a00000-0000-7000-8000-00000000c001", "01a00000-0000-7000-8000-00000000c002"


def _finished() -> bytes:
    return envelope(m.RunFinished(run_id=RUN, job_id=JOB, exit_code=0), source="executor",
                    job_id=JOB, run_id=RUN).to_bytes()


def _signed(auth: AuthDir, service: str, body: bytes) -> dict[str, str]:
    return {"Nats-Msg-Id": new_id(), **Signer.from_creds(auth.creds_path(service)).headers(body)}


async def _handled(endpoints: Endpoints, auth: AuthDir, subject: str, stream: str,
                   sends: list[tuple[bytes, dict[str, str]]]) -> list[bytes]:
    """Publish `sends`, then run a checked consumer over them; what reached its handler."""
    nc = await nats.connect(endpoints.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    start = (await js.stream_info(stream)).state.last_seq
    for body, headers in sends:
        await js.publish(subject, body, stream=stream, headers=headers)
    seen: list[bytes] = []

    async def handler(msg: Msg) -> None:
        seen.append(msg.data)

    durable = f"senders-{new_id()[-12:]}"
    await js.add_consumer(stream, durable_name=durable, filter_subject=subject,
                          deliver_policy=nats.js.api.DeliverPolicy.BY_START_SEQUENCE,
                          opt_start_seq=start + 1)
    consumer = message_consumer(subject, stream, durable, 16, handler, max_ack_pending=100)
    check = SenderCheck(Roster.load(auth.roster))
    task = asyncio.create_task(consumer.run(js, ack_wait_s=30, retry=Retry(0.1), senders=check))
    for _ in range(100):
        info = await js.consumer_info(stream, durable)
        if info.num_ack_pending == 0 and info.num_pending == 0 and info.delivered.stream_seq \
                >= start + len(sends):
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await js.delete_consumer(stream, durable)
    await nc.close()
    return seen


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> AuthDir:
    return AuthDir(tmp_path_factory.mktemp("auth")).ensure()


def _forged_count(subject: str) -> float:
    return FORGED_MESSAGES.labels(subject)._value.get()  # type: ignore[attr-defined, no-any-return]


async def test_only_an_owner_signed_event_is_believed(endpoints: Endpoints, auth: AuthDir) -> None:
    subject = EVENT_SUBJECTS["RunFinished"]
    genuine, tampered_base = _finished(), _finished()
    tampered_headers = _signed(auth, "executor", tampered_base)
    tampered = tampered_base.replace(b'"exit_code":0', b'"exit_code":1')
    before = _forged_count(subject)
    sends: list[tuple[bytes, dict[str, Any]]] = [
        (genuine, _signed(auth, "executor", genuine)),          # the owner: believed
        (_finished(), {"Nats-Msg-Id": new_id()}),                # unsigned: refused
        (forged := _finished(), _signed(auth, "ledger", forged)),  # not its owner: refused
        (tampered, tampered_headers),                            # body changed: refused
    ]
    seen = await _handled(endpoints, auth, subject, STREAM_EVT, sends)
    assert seen == [genuine]
    assert _forged_count(subject) - before == 3


async def test_a_stop_command_needs_its_owners_signature(
    endpoints: Endpoints, auth: AuthDir
) -> None:
    stop = envelope(m.StopRun(run_id=RUN, job_id=JOB, reason=m.StopReason.cancelled),
                    source="preemption").to_bytes()
    forged = envelope(m.StopRun(run_id=RUN, job_id=JOB, reason=m.StopReason.cancelled),
                      source="preemption").to_bytes()
    seen = await _handled(endpoints, auth, RUN_STOP, STREAM_CMD, [
        (stop, _signed(auth, "preemption", stop)), (forged, {"Nats-Msg-Id": new_id()})])
    assert seen == [stop]


async def test_an_acknowledgement_is_believed_only_when_the_executor_signed_it(
    endpoints: Endpoints, auth: AuthDir
) -> None:
    """A run reports to the executor by request; on the stream, an ack not signed by the
    executor is a forgery, whatever its source says."""
    signed = envelope(m.RunCheckpointed(run_id=RUN, job_id=JOB, checkpoint_uri="s3://b/1",
                                        notice_id=new_id()), source="executor",
                      job_id=JOB, run_id=RUN).to_bytes()
    unsigned = [envelope(m.RunCheckpointed(run_id=RUN, job_id=JOB, checkpoint_uri=f"s3://b/{n}",
                                           notice_id=new_id()), source=source,
                         job_id=JOB, run_id=RUN).to_bytes()
                for n, source in ((2, f"run/{RUN}"), (3, "executor"))]
    seen = await _handled(endpoints, auth, EVENT_SUBJECTS["RunCheckpointed"], STREAM_EVT, [
        (signed, _signed(auth, "executor", signed)),
        *((body, {"Nats-Msg-Id": new_id()}) for body in unsigned)])
    assert seen == [signed]


def test_keys_survive_a_new_start_and_rotation_keeps_old_ones(tmp_path: Path) -> None:
    first = AuthDir(tmp_path).ensure()
    before = Roster.load(first.roster).services
    again = AuthDir(tmp_path).ensure()
    assert Roster.load(again.roster).services == before
    again.rotate_services()
    after = Roster.load(again.roster).services
    assert set(before) < set(after) and len(after) == 2 * len(before)
