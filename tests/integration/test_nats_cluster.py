"""Rota's streams on a NATS cluster of three embedded servers (`rota up --nats-cluster 3`), in
operator mode as `rota up` runs them: streams at 3 replicas, R1 refused on a cluster unless
asked, and the stream leader killed with SIGKILL under load and restarted, with nothing lost,
nothing doubled and the consumer not stuck. The stall the kill causes is printed (run with
`-s`), never asserted."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig
from rota.auth.keys import ADMIN, AuthDir
from rota.bus.broker import SingleReplicaOnCluster, check_replicas, ensure_streams
from rota.cli.stack import wait_for_jetstream
from rota.contracts.subjects import STREAM_EVT, STREAM_SUBJECTS
from rota.embedded import EmbeddedNatsCluster
from rota.ids import new_id
from rota.lease import ensure_bucket

MESSAGES = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedNatsCluster, AuthDir]]:
    home = tmp_path_factory.mktemp("nats-cluster")
    auth = AuthDir(home / "auth").ensure()
    servers = EmbeddedNatsCluster(home, 3, config=auth.server_conf)
    servers.start()
    yield servers, auth
    servers.stop()


@pytest.fixture(scope="module")
async def admin(cluster: tuple[EmbeddedNatsCluster, AuthDir]) -> AsyncIterator[Client]:
    servers, auth = cluster
    nc = await nats.connect(servers.urls, user_credentials=str(auth.creds_path(ADMIN)),
                            max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    await wait_for_jetstream(nc.jetstream())
    yield nc
    await nc.close()


async def test_one_replica_on_a_cluster_is_refused_unless_asked(admin: Client) -> None:
    js = admin.jetstream()
    await ensure_streams(js, 1)
    with pytest.raises(SingleReplicaOnCluster) as info:
        await check_replicas(js)
    assert "ROTA_STREAM_REPLICAS=3" in str(info.value) and "ROTA_EVT" in str(info.value)
    await check_replicas(js, allow_single=True)
    # `rota migrate` with ROTA_STREAM_REPLICAS=3 updates them in place.
    assert sorted(await ensure_streams(js, 3)) == sorted(STREAM_SUBJECTS)
    await check_replicas(js)
    for name in STREAM_SUBJECTS:
        assert (await js.stream_info(name)).config.num_replicas == 3

        async def peers(stream: str = name) -> int:
            cluster = (await js.stream_info(stream)).cluster
            return len(cluster.replicas or []) if cluster else 0

        for _ in range(100):  # the new replicas join the stream's group
            if await peers() == 2:
                break
            await asyncio.sleep(0.1)
        assert await peers() == 2
    bucket = await ensure_bucket(js, "rota_scheduler_lease", 10.0, 3)
    assert (await bucket.status()).stream_info.config.num_replicas == 3


def _leader_index(servers: EmbeddedNatsCluster, leader: str) -> int:
    return next(i for i, node in enumerate(servers.nodes) if node.name == leader)


async def test_killing_the_stream_leader_under_load_loses_nothing(
    cluster: tuple[EmbeddedNatsCluster, AuthDir], admin: Client
) -> None:
    servers, _ = cluster
    js = admin.jetstream()
    await ensure_streams(js, 3)
    info = await js.stream_info(STREAM_EVT)
    assert info.cluster is not None and info.cluster.leader is not None
    before = info.state.messages
    victim = _leader_index(servers, info.cluster.leader)
    subject = f"rota.evt.cluster.{new_id()[-8:]}"
    sub = await js.pull_subscribe(subject, durable="cluster-test", stream=STREAM_EVT,
                                  config=ConsumerConfig(ack_wait=5))
    ids = [new_id() for _ in range(MESSAGES)]
    acked_at: list[float] = []
    received: list[str] = []
    third = asyncio.Event()

    async def publish_all() -> None:
        """As the outbox relay does: each message sent until acked, under its own
        Nats-Msg-Id, so a retry after a lost ack is dropped by the stream, not doubled."""
        for index, msg_id in enumerate(ids):
            while True:
                try:
                    await js.publish(subject, msg_id.encode(), stream=STREAM_EVT, timeout=1,
                                     headers={"Nats-Msg-Id": msg_id})
                    acked_at.append(time.monotonic())
                    if len(acked_at) == MESSAGES // 3:
                        third.set()
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            if index % 100 == 0:
                await asyncio.sleep(0.01)

    async def consume() -> None:
        while len(set(received)) < MESSAGES:
            try:
                batch = await sub.fetch(100, timeout=1)
            except Exception:
                continue
            for msg in batch:
                received.append(msg.data.decode())
                # Not acked (its server died): redelivered after ack_wait, counted once below.
                with contextlib.suppress(Exception):
                    await msg.ack()

    publisher, consumer = asyncio.create_task(publish_all()), asyncio.create_task(consume())
    await third.wait()
    killed_at = time.monotonic()
    node = servers.nodes[victim]
    assert node.process is not None
    node.process.kill()  # SIGKILL: no goodbye to the others
    node.process.wait()
    await asyncio.sleep(2.0)
    node.restart()
    restarted_at = time.monotonic()
    await asyncio.wait_for(publisher, 120)
    await asyncio.wait_for(consumer, 120)

    after = await js.stream_info(STREAM_EVT)
    assert after.state.messages - before == MESSAGES  # nothing lost, nothing doubled
    assert set(received) == set(ids)
    consumer_info = await js.consumer_info(STREAM_EVT, "cluster-test")
    assert consumer_info.num_pending == 0 and consumer_info.num_ack_pending == 0
    stall = max(b - a for a, b in itertools.pairwise(acked_at) if a >= killed_at - 1)
    print(f"\nNATS cluster: ROTA_EVT leader {node.name} killed with SIGKILL after "
          f"{MESSAGES // 3} acks; longest wait between two acks {stall * 1000:.0f} ms; new "
          f"leader {after.cluster.leader if after.cluster else '?'}; "
          f"restarted {restarted_at - killed_at:.1f} s after the kill; "
          f"{len(received) - MESSAGES} redeliveries")
    for _ in range(100):  # the restarted server catches up with the log it missed
        replicas = (await js.stream_info(STREAM_EVT)).cluster
        assert replicas is not None
        peers = {p.name: p for p in replicas.replicas or []}
        if node.name == replicas.leader or (node.name in peers and peers[node.name].current):
            break
        await asyncio.sleep(0.2)
    else:
        pytest.fail(f"{node.name} did not catch up after its restart")
    await sub.unsubscribe()
    await js.delete_consumer(STREAM_EVT, "cluster-test")


def test_the_cluster_keeps_a_store_per_server(
        cluster: tuple[EmbeddedNatsCluster, AuthDir]) -> None:
    servers, _ = cluster
    stores = {Path(node.args[node.args.index("--store_dir") + 1]) for node in servers.nodes}
    assert len(stores) == 3 and all(store.is_dir() for store in stores)
