"""The job-side SDK: learn of a preemption notice, save, acknowledge. For training loops.

    from rota import sdk
    run = sdk.attach()                      # reads ROTA_* from the environment
    start = load(run.resume_from)           # None on the first attempt
    for step in range(start, total):
        train_one_step()
        if run.preemption_requested:        # a notice arrived on rota.ctl.run.<run_id>
            uri = save_checkpoint(step)
            run.acknowledge(uri)            # RunCheckpointed with the run token
            break                           # Rota stops the run and resumes it from `uri`

The listener runs on its own thread with its own event loop, so a synchronous (PyTorch-style)
loop only reads a flag. The wire protocol is in contracts/README.md for other languages.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT

ENV_VARS = (
    "ROTA_RUN_ID", "ROTA_JOB_ID", "ROTA_RUN_TOKEN", "ROTA_ATTEMPT", "ROTA_NATS_URL",
    "ROTA_CONTROL_SUBJECT", "ROTA_ACK_SUBJECT", "ROTA_RESUME_FROM", "ROTA_CHECKPOINT_DIR",
    "ROTA_WORKER_INDEX", "ROTA_WORKERS",
)
MAX_NOTICE_BYTES = 64 * 1024


class SdkError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    job_id: str
    run_token: str
    nats_url: str
    control_subject: str
    ack_subject: str
    attempt: int = 1
    resume_from: str | None = None
    checkpoint_dir: str | None = None
    worker_index: int = 0
    workers: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunInfo:
        env = os.environ if env is None else env
        missing = [v for v in ENV_VARS[:5] if not env.get(v)]
        if missing:
            raise SdkError(f"not inside a Rota run: {', '.join(missing)} unset")
        run_id = env["ROTA_RUN_ID"]
        return cls(
            run_id=run_id, job_id=env["ROTA_JOB_ID"], run_token=env["ROTA_RUN_TOKEN"],
            nats_url=env["ROTA_NATS_URL"], attempt=int(env["ROTA_ATTEMPT"]),
            control_subject=env.get("ROTA_CONTROL_SUBJECT") or f"rota.ctl.run.{run_id}",
            ack_subject=env.get("ROTA_ACK_SUBJECT") or EVENT_SUBJECTS["RunCheckpointed"],
            resume_from=env.get("ROTA_RESUME_FROM") or None,
            checkpoint_dir=env.get("ROTA_CHECKPOINT_DIR") or None,
            worker_index=int(env.get("ROTA_WORKER_INDEX", "0")),
            workers=int(env.get("ROTA_WORKERS", "1")),
        )


@dataclass
class Run:
    info: RunInfo
    notice: m.PreemptionNotice | None = None
    _requested: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _nc: Client | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None

    @property
    def resume_from(self) -> str | None:
        return self.info.resume_from

    @property
    def preemption_requested(self) -> bool:
        return self._requested.is_set()

    def wait_for_preemption(self, timeout: float | None = None) -> bool:
        return self._requested.wait(timeout)

    def acknowledge(self, checkpoint_uri: str, timeout: float = 10.0) -> None:
        """Tell Rota the checkpoint is saved. Only the worker with index 0 needs to call this."""
        if self._loop is None:
            raise SdkError("the run is not attached")
        future = asyncio.run_coroutine_threadsafe(self._publish_ack(checkpoint_uri), self._loop)
        future.result(timeout)

    async def _publish_ack(self, checkpoint_uri: str) -> None:
        assert self._nc is not None
        ack = m.RunCheckpointed(
            run_id=self.info.run_id, job_id=self.info.job_id, checkpoint_uri=checkpoint_uri,
            run_token=self.info.run_token,
            notice_id=self.notice.notice_id if self.notice else None,
        )
        env = envelope(ack, source=f"run/{self.info.run_id}", job_id=self.info.job_id,
                       run_id=self.info.run_id)
        await self._nc.jetstream().publish(
            self.info.ack_subject, env.to_bytes(), stream=STREAM_EVT,
            headers={"Nats-Msg-Id": env.id, "Rota-Type": env.type},
        )

    async def _listen(self) -> None:
        self._nc = await nats.connect(self.info.nats_url, max_reconnect_attempts=-1)
        js = self._nc.jetstream()

        async def on_message(msg: Msg) -> None:
            try:
                notice = parse(msg.data, m.PreemptionNotice, max_bytes=MAX_NOTICE_BYTES).data
            except ValueError:
                return  # not for us, or not readable: a notice must be a valid envelope
            if notice.run_id != self.info.run_id:
                return
            if notice.action == "withdrawn":
                if self.notice and self.notice.notice_id == notice.notice_id:
                    self.notice = None
                    self._requested.clear()
                return
            self.notice = notice
            self._requested.set()

        # An ordered consumer from the start of the subject: a notice sent before this
        # process subscribed is still seen.
        await js.subscribe(self.info.control_subject, cb=on_message, ordered_consumer=True,
                           deliver_policy=DeliverPolicy.ALL)
        self._ready.set()

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        loop.run_forever()

    def start(self, timeout: float = 10.0) -> Run:
        thread = threading.Thread(target=self._thread_main, name="rota-sdk", daemon=True)
        thread.start()
        if not self._ready.wait(timeout):
            raise SdkError(f"could not reach NATS at {self.info.nats_url} in {timeout:.0f} s")
        if self._error is not None:
            raise SdkError(f"could not listen for notices: {self._error}")
        return self

    def close(self) -> None:
        if self._loop is not None and self._nc is not None:
            asyncio.run_coroutine_threadsafe(self._nc.close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)


def attach(env: Mapping[str, str] | None = None) -> Run:
    """Start listening for this run's notices; raises `SdkError` outside a Rota run."""
    return Run(RunInfo.from_env(env)).start()
