"""The attacks of the trust-boundary issue, against a real nats-server running Rota's
generated operator-mode config: each forgery is refused by the server itself.

The server starts here, not from ROTA_NATS_URL: the point is the shipped permissions, which
an unauthenticated test server does not have.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from rota.auth.keys import ADMIN, AuthDir, run_creds
from rota.auth.permissions import run_inbox, team_inbox
from rota.bus.broker import ensure_streams
from rota.contracts.subjects import (
    EVENT_SUBJECTS,
    RUN_PROTOCOL,
    STREAM_CMD,
    STREAM_CTL,
    STREAM_EVT,
    feed,
    run_checkpoint,
    team_feed,
)
from rota.embedded import EmbeddedNats
from rota.flushed import flushed

RUN = "01a00000-0000-7000-8000-00000000a001"
OTHER_RUN = "01a00000-0000-7000-8000-00000000b002"


@pytest.fixture(scope="module")
def server(secure_nats: tuple[EmbeddedNats, AuthDir]) -> tuple[EmbeddedNats, AuthDir]:
    return secure_nats


class Identity:
    """A connection and the errors the server sent it (permission violations arrive here)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: Client | None = None

    async def connect(self, url: str, creds: Path, inbox: str) -> Identity:
        async def record(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        self.nc = await nats.connect(url, user_credentials=str(creds), inbox_prefix=inbox,
                                     error_cb=record, allow_reconnect=False)
        return self

    async def refused(self, subject: str, action: str = "publish") -> bool:
        """Whether the server answered a violation naming `subject` (asked after a round trip,
        so the error has arrived if there is one)."""
        assert self.nc is not None
        await flushed(self.nc)
        for _ in range(20):
            if any(f"violation for {action} to \"{subject.lower()}\"" in e
                   or f"violation for {action} to {subject.lower()}" in e for e in self.errors):
                return True
            await asyncio.sleep(0.05)
        return False


@pytest.fixture(scope="module")
async def admin(server: tuple[EmbeddedNats, AuthDir]) -> AsyncIterator[Client]:
    embedded, auth = server
    nc = await nats.connect(embedded.url, user_credentials=str(auth.creds_path(ADMIN)))
    await ensure_streams(nc.jetstream())
    yield nc
    await nc.close()


async def _count(admin: Client, stream: str, subject: str) -> int:
    info = await admin.jetstream().stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def _team(server: tuple[EmbeddedNats, AuthDir], tmp: Path, team: str) -> Identity:
    embedded, auth = server
    creds = auth.issue_team(team, "mallory", tmp / f"{team}.creds")
    return await Identity().connect(embedded.url, creds, team_inbox(team))


async def _run(server: tuple[EmbeddedNats, AuthDir], tmp: Path, run_id: str) -> Identity:
    embedded, auth = server
    path = tmp / f"{run_id}.creds"
    path.write_text(run_creds(run_id, auth.run_signing_key.read_text().strip(),
                              auth.account_public_file.read_text().strip()))
    return await Identity().connect(embedded.url, path, run_inbox(run_id))


FORGED_EVENTS = ["RunFinished", "AllocationGranted", "JobSubmitted", "AllocationReleased",
                 "PreemptionCompleted", "RunStarted", "BudgetUsageRecorded"]


@pytest.mark.parametrize("event", FORGED_EVENTS)
async def test_a_team_cannot_publish_any_event(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, tmp_path: Path, event: str
) -> None:
    subject = EVENT_SUBJECTS[event]
    before = await _count(admin, STREAM_EVT, subject)
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    await team.nc.publish(subject, b'{"forged": true}')
    assert await team.refused(subject)
    assert await _count(admin, STREAM_EVT, subject) == before
    await team.nc.close()


@pytest.mark.parametrize("subject", ["rota.cmd.run.stop", "rota.cmd.run.start",
                                     "rota.cmd.submit.vision", "rota.cmd.cancel.vision",
                                     "rota.api.cancel.vision", "rota.api.submit.vision",
                                     "rota.api.submit", "rota.api.jobs.list",
                                     "rota.api.job.get.vision", "rota.sys.ledger.allocations"])
async def test_a_team_cannot_command_or_ask_for_another_team_or_for_services(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path, subject: str
) -> None:
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    await team.nc.publish(subject, b"{}")
    assert await team.refused(subject)
    await team.nc.close()


@pytest.mark.parametrize("api", ["$JS.API.STREAM.PURGE.ROTA_EVT", "$JS.API.STREAM.DELETE.ROTA_CTL",
                                 "$JS.API.STREAM.INFO.ROTA_CMD", "$JS.API.STREAM.MSG.GET.ROTA_CMD",
                                 "$JS.API.CONSUMER.CREATE.ROTA_EVT"])
async def test_a_team_has_no_jetstream_api(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, tmp_path: Path, api: str
) -> None:
    events = (await admin.jetstream().stream_info(STREAM_EVT)).state.messages
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    await team.nc.publish(api, b"{}")
    assert await team.refused(api)
    assert (await admin.jetstream().stream_info(STREAM_EVT)).state.messages == events
    await admin.jetstream().stream_info(STREAM_CTL)  # still there
    await team.nc.close()


@pytest.mark.parametrize("subject", ["rota.evt.>", "rota.cmd.>", "rota.ctl.run.*", "_INBOX.>",
                                     f"{team_inbox('vision')}.>"])
async def test_a_team_reads_no_stream_and_no_one_elses_replies(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path, subject: str
) -> None:
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    await team.nc.subscribe(subject)
    assert await team.refused(subject, "subscription")
    await team.nc.close()


async def test_a_team_may_submit_for_itself_and_ask_on_its_own_subjects(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, tmp_path: Path
) -> None:
    before = await _count(admin, STREAM_CMD, "rota.cmd.submit.nlp")
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    ack = await team.nc.jetstream().publish("rota.cmd.submit.nlp", b"{}", stream=STREAM_CMD)
    assert ack.stream == STREAM_CMD
    assert await _count(admin, STREAM_CMD, "rota.cmd.submit.nlp") == before + 1

    # A request on its own query subject reaches a responder, and the reply reaches it.
    async def respond(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(json.dumps({"subject": msg.subject}).encode())

    await admin.subscribe("rota.api.jobs.list.nlp", cb=respond)
    await flushed(admin)
    reply = await team.nc.request("rota.api.jobs.list.nlp", b"{}", timeout=5)
    assert json.loads(reply.data) == {"subject": "rota.api.jobs.list.nlp"}
    assert team.errors == []
    await team.nc.close()


async def test_a_run_reads_its_own_notices_and_reports_to_the_executor_and_nothing_else(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, tmp_path: Path
) -> None:
    await admin.jetstream().publish(f"rota.ctl.run.{RUN}", b"mine", stream=STREAM_CTL)
    await admin.jetstream().publish(f"rota.ctl.run.{OTHER_RUN}", b"theirs", stream=STREAM_CTL)
    embedded, auth = server
    executor = await Identity().connect(embedded.url, auth.creds_path("executor"), "_INBOX")
    assert executor.nc is not None

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"recorded")

    await executor.nc.subscribe(run_checkpoint(RUN), cb=answer)
    await flushed(executor.nc)
    run = await _run(server, tmp_path, RUN)
    assert run.nc is not None
    js = run.nc.jetstream()
    own = await js.get_last_msg(STREAM_CTL, f"rota.ctl.run.{RUN}", direct=True)
    assert own.data == b"mine"
    await run.nc.subscribe(f"rota.ctl.run.{RUN}")
    # Its report reaches the executor, and the executor's answer reaches the run.
    assert (await run.nc.request(run_checkpoint(RUN), b"{}", timeout=5)).data == b"recorded"
    assert run.errors == []

    other = f"$JS.API.DIRECT.GET.{STREAM_CTL}.rota.ctl.run.{OTHER_RUN}"
    await run.nc.publish(other, b"")
    assert await run.refused(other)
    # Nothing of another run's (its notices, its reports and their token) is readable.
    for subject in (f"rota.ctl.run.{OTHER_RUN}", "rota.cmd.run.start", "rota.evt.>", "_INBOX.>",
                    run_checkpoint(OTHER_RUN), RUN_PROTOCOL):
        await run.nc.subscribe(subject)
        assert await run.refused(subject, "subscription"), subject
    # It may not report for another run, nor publish the acknowledgement event itself.
    for forged in ("rota.evt.run.finished", "rota.evt.allocation.released", "rota.cmd.run.stop",
                   f"rota.ctl.run.{OTHER_RUN}", "rota.cmd.submit.nlp",
                   "$JS.API.STREAM.MSG.GET.ROTA_CMD", EVENT_SUBJECTS["RunCheckpointed"],
                   run_checkpoint(OTHER_RUN)):
        await run.nc.publish(forged, b"{}")
        assert await run.refused(forged), forged
    await run.nc.close()
    await executor.nc.close()


@pytest.mark.parametrize("service", ["submission", "ledger", "scheduler", "preemption",
                                     "notifier"])
async def test_no_service_but_the_executor_reads_a_runs_reports(
    server: tuple[EmbeddedNats, AuthDir], service: str
) -> None:
    embedded, auth = server
    identity = await Identity().connect(embedded.url, auth.creds_path(service), "_INBOX")
    assert identity.nc is not None
    for subject in (RUN_PROTOCOL, run_checkpoint(RUN)):
        await identity.nc.subscribe(subject)
        assert await identity.refused(subject, "subscription"), subject
    await identity.nc.close()


async def test_a_team_follows_its_own_feed_and_no_one_elses(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    embedded, auth = server
    submission = await Identity().connect(embedded.url, auth.creds_path("submission"), "_INBOX")
    assert submission.nc is not None
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    own = await team.nc.subscribe(team_feed("nlp"))
    await flushed(team.nc)
    await submission.nc.publish(feed("nlp", EVENT_SUBJECTS["RunStarted"]), b"started")
    assert (await own.next_msg(timeout=5)).data == b"started"
    for subject in (team_feed("vision"), "rota.feed.>", "rota.feed.*.run.started"):
        await team.nc.subscribe(subject)
        assert await team.refused(subject, "subscription"), subject
    # Only the submission service feeds a team.
    await team.nc.publish(feed("nlp", EVENT_SUBJECTS["RunStarted"]), b"forged")
    assert await team.refused(feed("nlp", EVENT_SUBJECTS["RunStarted"]))
    await team.nc.close()
    await submission.nc.close()


@pytest.mark.parametrize(("service", "subject"), [
    ("ledger", "rota.evt.run.finished"), ("executor", "rota.evt.allocation.granted"),
    ("notifier", "rota.evt.job.submitted"), ("submission", "rota.cmd.run.stop"),
    ("preemption", "rota.evt.allocation.released"), ("scheduler", "rota.evt.run.finished"),
])
async def test_a_service_publishes_only_what_it_owns(
    server: tuple[EmbeddedNats, AuthDir], service: str, subject: str
) -> None:
    embedded, auth = server
    identity = await Identity().connect(embedded.url, auth.creds_path(service), "_INBOX")
    assert identity.nc is not None
    await identity.nc.publish(subject, b"{}")
    assert await identity.refused(subject)
    await identity.nc.close()


async def test_credentials_signed_by_another_account_are_refused(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    embedded, _ = server
    stranger = AuthDir(tmp_path / "stranger").ensure()
    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(embedded.url, user_credentials=str(stranger.creds_path(ADMIN)),
                           allow_reconnect=False, max_reconnect_attempts=0)
    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(embedded.url, allow_reconnect=False, max_reconnect_attempts=0)
