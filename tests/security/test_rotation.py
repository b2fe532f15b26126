"""The attack on rotation: a copy of the executor's credentials taken before
`rota auth init --rotate` must be worth nothing after it. Against a real nats-server on
Rota's generated config: the server refuses the old key once restarted, and a `RunFinished`
the old key signs (let through by a server without auth) is not believed, while what it
signed before the rotation still is, for replays."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from rota.auth.jwt import claims_of
from rota.auth.keys import ADMIN, AuthDir
from rota.auth.senders import Roster, SenderCheck, Signer
from rota.bus.batch import forged
from rota.bus.broker import ensure_streams
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.embedded import EmbeddedNats
from rota.ids import new_id

JOB, RUN = "01a00000-0000-7000-8000-00000000d001", "01a00000-0000-7000-8000-00000000d002"
FINISHED = EVENT_SUBJECTS["RunFinished"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[EmbeddedNats, AuthDir]]:
    auth = AuthDir(tmp_path / "auth").ensure()
    embedded = EmbeddedNats(tmp_path, config=auth.server_conf)
    embedded.start()
    yield embedded, auth
    embedded.stop()


def _finished_signed_by(creds: Path) -> tuple[bytes, dict[str, str]]:
    body = envelope(m.RunFinished(run_id=RUN, job_id=JOB, exit_code=0), source="executor",
                    job_id=JOB, run_id=RUN).to_bytes()
    return body, {"Nats-Msg-Id": new_id(), **Signer.from_creds(creds).headers(body)}


async def _publish_as_admin(url: str, auth: AuthDir, body: bytes,
                            headers: dict[str, str]) -> None:
    """What a misconfigured server would let anyone do: store a message on any subject."""
    admin = await nats.connect(url, user_credentials=str(auth.creds_path(ADMIN)))
    await ensure_streams(admin.jetstream())
    await admin.jetstream().publish(FINISHED, body, stream=STREAM_EVT, headers=headers)
    await admin.close()


async def _stored_finished(url: str, auth: AuthDir) -> list[Msg]:
    admin = await nats.connect(url, user_credentials=str(auth.creds_path(ADMIN)))
    sub = await admin.jetstream().pull_subscribe(FINISHED, stream=STREAM_EVT)
    msgs = await sub.fetch(10, timeout=5)
    await admin.close()
    return msgs


async def test_old_executor_credentials_neither_connect_nor_are_believed_after_rotation(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    embedded, auth = server
    stolen = tmp_path / "stolen-executor.creds"
    shutil.copy(auth.creds_path("executor"), stolen)
    before_body, before_headers = _finished_signed_by(stolen)
    await _publish_as_admin(embedded.url, auth, before_body, before_headers)

    auth.rotate_services(grace_s=0)
    embedded.stop()
    embedded.restart()

    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(embedded.url, user_credentials=str(stolen),
                           allow_reconnect=False, max_reconnect_attempts=0)
    current = await nats.connect(embedded.url, user_credentials=str(auth.creds_path("executor")),
                                 allow_reconnect=False)
    await current.close()

    after_body, after_headers = _finished_signed_by(stolen)
    await _publish_as_admin(embedded.url, auth, after_body, after_headers)
    check = SenderCheck(Roster.load(auth.roster))
    stored = await _stored_finished(embedded.url, auth)
    assert [msg.data for msg in stored] == [before_body, after_body]
    # Signed before the cut-over: still believed (a replay reads it); after: refused.
    assert [forged(msg, check, "attack") for msg in stored] == [False, True]


def test_a_retired_key_is_believed_only_for_what_the_server_stored_before_its_cut_over(
    tmp_path: Path
) -> None:
    auth = AuthDir(tmp_path / "auth").ensure()
    old = tmp_path / "old-executor.creds"
    shutil.copy(auth.creds_path("executor"), old)
    auth.rotate_services(grace_s=600)
    roster = Roster.load(auth.roster)
    old_key = Signer.from_creds(old).public
    cut_over = roster.retired[old_key]
    body, headers = _finished_signed_by(old)
    check = SenderCheck(roster)
    assert check.refusal(FINISHED, headers, body, stored_at=cut_over - 1) is None
    assert "retired" in str(check.refusal(FINISHED, headers, body, stored_at=cut_over))
    assert "retired" in str(check.refusal(FINISHED, headers, body, stored_at=None))
    new_body, new_headers = _finished_signed_by(auth.creds_path("executor"))
    assert check.refusal(FINISHED, new_headers, new_body, stored_at=cut_over + 1) is None
    # The account JWT the server loads revokes the old key's JWTs.
    account = auth.account_public_file.read_text().strip()
    account_jwt = next(line.split(": ", 1)[1] for line in auth.server_conf.read_text().splitlines()
                       if line.strip().startswith(f"{account}:"))
    assert old_key in claims_of(account_jwt)["nats"]["revocations"]
