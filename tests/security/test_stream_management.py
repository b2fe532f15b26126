"""Least privilege on JetStream, against a real nats-server on Rota's generated config: no
service identity may create, update, purge or delete a stream (or a KV bucket, or another's
consumer), while each still does everything it uses: find the streams as they should be,
consume its own streams, replay the events (the scheduler) and hold its lease."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig
from rota.auth.keys import ADMIN, AuthDir
from rota.auth.permissions import LEASE_BUCKETS, SERVICE_STREAMS, SERVICES
from rota.bus.broker import require_streams
from rota.cli.stack import prepare_streams
from rota.contracts.subjects import STREAM_CMD, STREAM_CTL, STREAM_EVT
from rota.embedded import EmbeddedNats
from rota.endpoints import Endpoints
from rota.lease import Lease
from rota.settings import Settings

from tests.integration.security.test_permissions import Identity

SAMPLE = {STREAM_CMD: "rota.cmd.run.start", STREAM_EVT: "rota.evt.job.submitted",
          STREAM_CTL: "rota.ctl.run.01a00000-0000-7000-8000-00000000e001"}

MANAGEMENT = ["$JS.API.STREAM.PURGE.ROTA_EVT", "$JS.API.STREAM.DELETE.ROTA_CMD",
              "$JS.API.STREAM.UPDATE.ROTA_CTL", "$JS.API.STREAM.CREATE.ROTA_MINE",
              "$JS.API.STREAM.MSG.DELETE.ROTA_EVT", "$JS.API.STREAM.PURGE.KV_rota_ledger_lease",
              "$JS.API.STREAM.DELETE.KV_rota_scheduler_lease",
              "$JS.API.CONSUMER.DELETE.ROTA_EVT.notifier-events"]


@pytest.fixture(scope="module")
def server(secure_nats: tuple[EmbeddedNats, AuthDir]) -> tuple[EmbeddedNats, AuthDir]:
    return secure_nats


@pytest.fixture(scope="module")
async def admin(server: tuple[EmbeddedNats, AuthDir]) -> AsyncIterator[Client]:
    """The admin's step (`rota up`, `rota migrate`): streams and buckets; then a message in
    each stream and the notifier's durable."""
    embedded, auth = server
    creds = str(auth.creds_path(ADMIN))
    await prepare_streams(Settings(nats_creds=creds), Endpoints(embedded.url, "", creds))
    nc = await nats.connect(embedded.url, user_credentials=creds)
    for stream, subject in SAMPLE.items():
        await nc.jetstream().publish(subject, b"{}", stream=stream)
    await nc.jetstream().add_consumer(STREAM_EVT, durable_name="notifier-events")
    yield nc
    await nc.close()


async def _messages(admin: Client) -> dict[str, int]:
    js = admin.jetstream()
    return {stream: (await js.stream_info(stream)).state.messages for stream in SAMPLE}


@pytest.mark.parametrize("service", SERVICES)
async def test_no_service_may_manage_a_stream(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, service: str
) -> None:
    embedded, auth = server
    before = await _messages(admin)
    identity = await Identity().connect(embedded.url, auth.creds_path(service), "_INBOX")
    assert identity.nc is not None
    for api in MANAGEMENT:
        await identity.nc.publish(api, b"{}", reply="_INBOX.refused")
        assert await identity.refused(api), (service, api)
    await identity.nc.close()
    assert await _messages(admin) == before
    js = admin.jetstream()
    await js.consumer_info(STREAM_EVT, "notifier-events")
    for bucket in LEASE_BUCKETS.values():
        await js.key_value(bucket)


@pytest.mark.parametrize("service", SERVICES)
async def test_each_service_still_does_what_it_uses(
    server: tuple[EmbeddedNats, AuthDir], admin: Client, service: str
) -> None:
    embedded, auth = server
    identity = await Identity().connect(embedded.url, auth.creds_path(service), "_INBOX")
    assert identity.nc is not None
    js = identity.nc.jetstream()
    await require_streams(js)  # they are as wanted: it reads them and writes nothing
    for stream in SERVICE_STREAMS[service]:
        durable = f"{service}-probe-{stream.lower()}"
        sub = await js.pull_subscribe(SAMPLE[stream], durable=durable, stream=stream,
                                      config=ConsumerConfig(max_deliver=5))
        current = (await js.consumer_info(stream, durable)).config
        current.max_ack_pending = 100
        await js.add_consumer(stream, config=current)  # a durable brought up to date
        [msg] = await sub.fetch(1, timeout=5)
        await msg.ack_sync()
        await sub.unsubscribe()
        assert [c.name for c in await js.consumers_info(stream)]
    if service == "scheduler":  # its replay: an ordered consumer over every event
        replay = await js.subscribe("rota.evt.>", ordered_consumer=True)
        assert (await replay.next_msg(timeout=5)).subject == SAMPLE[STREAM_EVT]
        await replay.unsubscribe()
    if (bucket := LEASE_BUCKETS.get(service)) is not None:
        lease = Lease(js, f"{service}-probe", 6.0, bucket=bucket, key=f"probe-{service}")
        assert await lease.try_acquire()
        assert await lease.renew()
        await lease.release()
    assert identity.errors == []
    await identity.nc.close()


async def test_the_admin_still_manages_streams(admin: Client) -> None:
    js = admin.jetstream()
    await js.add_stream(name="ROTA_SCRATCH", subjects=["scratch.>"])
    await js.purge_stream("ROTA_SCRATCH")
    assert await js.delete_stream("ROTA_SCRATCH")
