"""Run real service processes against real servers, and talk to them over NATS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import STREAM_CMD, STREAM_EVT
from rota.endpoints import Endpoints

ACK_WAIT_S = 2.0


@dataclass
class ServiceProcess:
    name: str
    endpoints: Endpoints
    log_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        env = dict(os.environ)
        env.update(
            ROTA_NATS_URL=self.endpoints.nats_url,
            ROTA_DATABASE_URL=self.endpoints.database_url,
            ROTA_ACK_WAIT_S=str(ACK_WAIT_S),
            ROTA_RETRY_DELAY_S="0.5",
            ROTA_OUTBOX_POLL_INTERVAL_S="0.2",
            ROTA_LOG_LEVEL="INFO",
        )
        env.update(self.extra_env)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", f"rota_{self.name}"], env=env, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        return self

    def log(self) -> str:
        return (self.log_dir / f"{self.name}.log").read_text(errors="replace")

    async def wait_ready(self, nc: Client, timeout: float = 60.0) -> None:
        """Until this process answers a ping; another instance of the service answering on
        the same subject (a leader, for its standby) does not count."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            if await _answers_ping(nc, f"rota.sys.ping.{self.name}", self.process.pid):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{self.name} not ready in {timeout} s:\n{self.log()[-3000:]}")

    @contextlib.asynccontextmanager
    async def serving(self, nc: Client) -> AsyncIterator[ServiceProcess]:
        """Started and ready inside the block, and stopped after it, even when it never
        became ready: a process left behind would go on taking a later test's messages."""
        self.start()
        try:
            await self.wait_ready(nc)
            yield self
        finally:
            self.stop()

    async def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {timeout} s")
            await asyncio.sleep(0.1)
        return self.process.returncode

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


TEAM_SUBMIT_DURABLES = "submission-team-"
"""Submission's durable per team, made afresh (after `submission-submit`) when it starts."""

SUBMISSION_CONSUMERS = (
    (STREAM_CMD, "submission-submit", "rota.cmd.submit.*"),
    (STREAM_CMD, "submission-cancel", "rota.cmd.cancel.*"),
    (STREAM_EVT, "submission-projection", "rota.evt.>"),
)


async def fresh_consumers(nc: Client, consumers: tuple[tuple[str, str, str], ...]) -> None:
    """Recreate a service's durable consumers for this session: the test's ack wait, and only
    messages from now on. The servers may hold earlier sessions' commands and events, which
    a service starting with brand-new consumers would otherwise replay first."""
    js = nc.jetstream()
    for info in await js.consumers_info(STREAM_CMD):  # submission's per-team durables
        if (info.name or "").startswith(TEAM_SUBMIT_DURABLES):
            await js.delete_consumer(STREAM_CMD, info.name)
    for stream, durable, subject in consumers:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(stream, durable)
        await js.add_consumer(stream, ConsumerConfig(
            durable_name=durable, filter_subject=subject, deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S, max_ack_pending=1000,
        ))


async def api(nc: Client, subject: str, data: Any, *, raw: bytes | None = None) -> m.ApiReply:
    body = raw if raw is not None else envelope(data, source="test").to_bytes()
    reply = await nc.request(subject, body, timeout=10)
    return m.ApiReply.model_validate(json.loads(reply.data)["data"])


async def publish_command(nc: Client, subject: str, body: bytes, msg_id: str) -> None:
    await nc.jetstream().publish(subject, body, stream=STREAM_CMD,
                                 headers={"Nats-Msg-Id": msg_id})


async def events_with_headers(
    nc: Client, subject: str, *, since_seq: int = 0, stream: str = STREAM_EVT
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Every message on `subject` in `stream` (ROTA_EVT) after stream sequence `since_seq`,
    with its headers."""
    js = nc.jetstream()
    config = ConsumerConfig(
        filter_subject=subject,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=since_seq + 1,
    )
    sub = await js.pull_subscribe(subject, stream=stream, config=config)
    found: list[tuple[dict[str, Any], dict[str, str]]] = []
    try:
        while True:
            try:
                batch = await sub.fetch(256, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                break
            for msg in batch:
                found.append((json.loads(msg.data), dict(msg.headers or {})))
                await msg.ack()
    finally:
        await sub.unsubscribe()
    return found


async def events(
    nc: Client, subject: str, *, since_seq: int = 0, stream: str = STREAM_EVT
) -> list[dict[str, Any]]:
    """Every message on `subject` in `stream` (ROTA_EVT) after stream sequence `since_seq`."""
    return [doc for doc, _ in await events_with_headers(nc, subject, since_seq=since_seq,
                                                        stream=stream)]


async def stream_last_seq(nc: Client, stream: str = STREAM_EVT) -> int:
    info = await nc.jetstream().stream_info(stream)
    return int(info.state.last_seq)


async def eventually(check: Any, timeout: float = 15.0, interval: float = 0.2) -> Any:
    """Poll an async predicate until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met in {timeout} s (last value: {last!r})")


async def _answers_ping(nc: Client, subject: str, pid: int, wait_s: float = 0.5) -> bool:
    """Whether the instance with `pid` is among those answering one ping within `wait_s`."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subject, b"", reply=inbox)
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except Exception:  # nats' TimeoutError: nobody else answered
                return False
            with contextlib.suppress(ValueError, KeyError, TypeError):
                if int(json.loads(msg.data)["pid"]) == pid:
                    return True
        return False
    finally:
        await sub.unsubscribe()
