"""The job-side SDK: learn of a preemption notice, save, acknowledge. For training loops.

    from rota import sdk
    run = sdk.attach()                      # reads ROTA_* from the environment
    start = load(run.resume_from)           # None on the first attempt
    for step in range(start, total):
        train_one_step()
        if run.preemption_requested:        # a notice arrived on rota.ctl.run.<run_id>
            uri = save_checkpoint(step)
            return run.acknowledge_and_wait(uri)   # recorded; then wait for Rota's SIGTERM: 143

The listener runs on its own thread with its own event loop, so a synchronous (PyTorch-style)
loop only reads a flag. The wire protocol is in contracts/README.md for other languages.

Also:

    with sdk.attach() as run:               # closes the NATS connection on the way out
        run.on_preemption(lambda notice: stop_soon.set())   # called on the SDK's thread
        ...
        run.report_checkpoint(uri)          # a periodic checkpoint: less work lost if preempted

    stopped = sdk.sigterm_received()        # an Event set on SIGTERM (a stop without notice)
    sdk.resume_from()                       # ROTA_RESUME_FROM without attaching, or None
    sdk.checkpoint_dir()                    # ROTA_CHECKPOINT_DIR, or None
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

from rota.auth.permissions import run_inbox
from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import STREAM_CTL, run_checkpoint
from rota.flushed import flushed

ENV_VARS = (
    "ROTA_RUN_ID", "ROTA_JOB_ID", "ROTA_RUN_TOKEN", "ROTA_ATTEMPT", "ROTA_NATS_URL",
    "ROTA_CONTROL_SUBJECT", "ROTA_ACK_SUBJECT", "ROTA_RESUME_FROM", "ROTA_CHECKPOINT_DIR",
    "ROTA_WORKER_INDEX", "ROTA_WORKERS",
)
MAX_NOTICE_BYTES = 64 * 1024

log = logging.getLogger("rota.sdk")

NoticeCallback = Callable[[m.PreemptionNotice], None]

STOPPED_EXIT_CODE = 128 + signal.SIGTERM  # 143: "ended by Rota's SIGTERM", as shells report it
# After an ack, StopRun is sent in the same transaction and SIGTERM follows within a second
# or so; the bound is for an executor that is away, after which exiting by itself is right.
STOP_WAIT_S = 120.0

_sigterm = threading.Event()
_sigterm_lock = threading.Lock()
_sigterm_installed = False


def sigterm_received() -> threading.Event:
    """An event that is set when this process gets SIGTERM, which is how Rota stops a run.

    The handler is installed on the first call, which must come from the main thread (a
    Python rule for signal handlers); it replaces any SIGTERM handler the script had. Call it
    early: a SIGTERM that arrives before it kills the process (exit -15), which Rota still
    counts as stopped, but a script gets no chance to save.
    """
    global _sigterm_installed
    with _sigterm_lock:
        if not _sigterm_installed:
            signal.signal(signal.SIGTERM, lambda signum, frame: _sigterm.set())
            _sigterm_installed = True
    return _sigterm


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
    nats_creds: str | None = None

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
            ack_subject=env.get("ROTA_ACK_SUBJECT") or run_checkpoint(run_id),
            resume_from=env.get("ROTA_RESUME_FROM") or None,
            checkpoint_dir=env.get("ROTA_CHECKPOINT_DIR") or None,
            worker_index=int(env.get("ROTA_WORKER_INDEX", "0")),
            workers=int(env.get("ROTA_WORKERS", "1")),
            nats_creds=env.get("ROTA_NATS_CREDS") or None,
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
    _callbacks: list[NoticeCallback] = field(default_factory=list)

    @property
    def resume_from(self) -> str | None:
        return self.info.resume_from

    @property
    def preemption_requested(self) -> bool:
        return self._requested.is_set()

    def wait_for_preemption(self, timeout: float | None = None) -> bool:
        return self._requested.wait(timeout)

    def on_preemption(self, callback: NoticeCallback) -> NoticeCallback:
        """Call `callback(notice)` when a notice arrives (at once if one is pending already).

        It runs on the SDK's listener thread: keep it short, e.g. set a flag or an event that
        the training loop checks. Usable as a decorator.
        """
        self._callbacks.append(callback)
        notice = self.notice
        if notice is not None and self._requested.is_set():
            self._call(callback, notice)
        return callback

    def _call(self, callback: NoticeCallback, notice: m.PreemptionNotice) -> None:
        try:
            callback(notice)
        except Exception:  # the listener must keep listening, whatever the callback does
            log.exception("rota.sdk: a preemption callback failed")

    def acknowledge(self, checkpoint_uri: str, timeout: float = 30.0, *,
                    progress_s: float | None = None) -> None:
        """Tell Rota the checkpoint is saved. Only the worker with index 0 needs to call this.

        Returns once the executor has recorded it; retried (the same report, so counted once)
        while the executor is away, until `timeout`. Raises `SdkError` if it is refused."""
        notice_id = self.notice.notice_id if self.notice else None
        self._publish(checkpoint_uri, notice_id, progress_s, timeout)

    def acknowledge_and_wait(self, checkpoint_uri: str, timeout: float = 30.0, *,
                             stop_wait_s: float = STOP_WAIT_S,
                             progress_s: float | None = None) -> int:
        """Acknowledge, then wait for Rota's stop; returns the exit code to leave with.

        This is the job-side contract after an acknowledgement (contracts/README.md, the
        job-side protocol, step 3): do no more work, wait for SIGTERM, exit 143. The SIGTERM
        handler goes in before the acknowledgement, so the stop, which follows the ack at
        once, always finds it. 0 when no stop came within `stop_wait_s` (the executor is
        away): any exit after an ack counts as stopped. Main thread only.
        """
        stopped = sigterm_received()
        self.acknowledge(checkpoint_uri, timeout, progress_s=progress_s)
        return STOPPED_EXIT_CODE if stopped.wait(stop_wait_s) else 0

    def report_checkpoint(self, checkpoint_uri: str, timeout: float = 30.0, *,
                          progress_s: float | None = None) -> None:
        """Report a periodic checkpoint (no notice): a later preemption then loses only the
        work done since. Only the worker with index 0 needs to call this."""
        self._publish(checkpoint_uri, None, progress_s, timeout)

    def _publish(self, checkpoint_uri: str, notice_id: str | None, progress_s: float | None,
                 timeout: float) -> None:
        if self._loop is None:
            raise SdkError("the run is not attached")
        future = asyncio.run_coroutine_threadsafe(
            self._report(checkpoint_uri, notice_id, progress_s, within_s=timeout), self._loop)
        future.result(timeout + 5.0)

    async def _report(self, checkpoint_uri: str, notice_id: str | None,
                      progress_s: float | None, *, within_s: float) -> None:
        assert self._nc is not None
        report = m.ReportCheckpoint(
            run_id=self.info.run_id, job_id=self.info.job_id, checkpoint_uri=checkpoint_uri,
            run_token=self.info.run_token, notice_id=notice_id, progress_s=progress_s,
        )
        body = envelope(report, source=f"run/{self.info.run_id}", job_id=self.info.job_id,
                        run_id=self.info.run_id).to_bytes()
        deadline = asyncio.get_running_loop().time() + within_s
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise SdkError(f"no answer to the checkpoint report within {within_s:.0f} s")
            try:
                answer = await self._nc.request(self.info.ack_subject, body,
                                                timeout=min(5.0, left))
            except (NatsTimeoutError, NoRespondersError):
                await asyncio.sleep(min(0.5, max(0.0, left - 0.01)))
                continue  # the executor is away: it is durable, so ask again
            reply = parse(answer.data, m.ApiReply, max_bytes=MAX_NOTICE_BYTES).data
            if not reply.ok:
                error = reply.error
                raise SdkError(f"checkpoint report refused: {error.code if error else '?'}: "
                               f"{error.message if error else ''}")
            return

    async def _listen(self) -> None:
        credentials: dict[str, str] = {}
        if self.info.nats_creds:
            # The run's own identity: it may read only its notices and replies under its
            # own inbox prefix (rota.auth.permissions.run_template).
            credentials = {"user_credentials": self.info.nats_creds,
                           "inbox_prefix": run_inbox(self.info.run_id)}
        self._nc = await nats.connect(self.info.nats_url, max_reconnect_attempts=-1,
                                      **credentials)
        js = self._nc.jetstream()

        async def on_message(msg: Msg) -> None:
            on_notice(msg.data)

        def on_notice(raw: bytes | None) -> None:
            try:
                notice = parse(raw or b"", m.PreemptionNotice, max_bytes=MAX_NOTICE_BYTES).data
            except ValueError:
                return  # not for us, or not readable: a notice must be a valid envelope
            if notice.run_id != self.info.run_id:
                return
            if notice.action == "withdrawn":
                if self.notice and self.notice.notice_id == notice.notice_id:
                    self.notice = None
                    self._requested.clear()
                return
            if self.notice is not None and self.notice.notice_id == notice.notice_id:
                return  # a redelivery: the callbacks were called already
            self.notice = notice
            self._requested.set()
            for callback in list(self._callbacks):
                self._call(callback, notice)

        # Live notices first, then the last one kept on the stream, so a notice sent before
        # this process subscribed is still seen; the last is all that matters (a withdrawal
        # follows its notice on the same subject), and a notice seen twice counts once.
        await self._nc.subscribe(self.info.control_subject, cb=on_message)
        await flushed(self._nc)
        try:
            last = await js.get_last_msg(STREAM_CTL, self.info.control_subject, direct=True)
        except NotFoundError:
            pass
        else:
            on_notice(last.data)
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
            self._nc = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def attach(env: Mapping[str, str] | None = None) -> Run:
    """Start listening for this run's notices; raises `SdkError` outside a Rota run."""
    return Run(RunInfo.from_env(env)).start()


def resume_from(env: Mapping[str, str] | None = None) -> str | None:
    """The checkpoint URI this run resumes from (`ROTA_RESUME_FROM`), or None on a fresh start."""
    env = os.environ if env is None else env
    return env.get("ROTA_RESUME_FROM") or None


def checkpoint_dir(env: Mapping[str, str] | None = None) -> str | None:
    """Where the executor suggests saving checkpoints (`ROTA_CHECKPOINT_DIR`), or None."""
    env = os.environ if env is None else env
    return env.get("ROTA_CHECKPOINT_DIR") or None
