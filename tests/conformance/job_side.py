"""The job side of Rota's run protocol, from contracts/README.md alone: nats-py and the
standard library, no `rota` import. The local executor runs it as a job's command.

Roles (`CONFORMANCE_ROLE`):
- `victim`: on attempt 1, saves and reports a periodic checkpoint, then waits for the notice;
  acknowledges it with a new checkpoint, sends what a second worker and a stranger would
  (the same ack again with another URI; a wrong token), and waits for the stop, exiting 143
  on SIGTERM. On a later attempt it records `ROTA_RESUME_FROM` and exits 0.
- `quick`: records its environment and exits 0.
- `sleep`: sleeps until stopped.

Everything it sends and receives is appended to `CONFORMANCE_OUT/<run_id>.jsonl`, for the
test to check against the schemas.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

ENV = os.environ
# Read at import so the test can import `uuid7` from here; set whenever Rota runs this.
RUN_ID, JOB_ID = ENV.get("ROTA_RUN_ID", ""), ENV.get("ROTA_JOB_ID", "")


def out_dir() -> Path:
    return Path(ENV["CONFORMANCE_OUT"])


def record(kind: str, **fields: Any) -> None:
    with (out_dir() / f"{RUN_ID}.jsonl").open("a") as out:
        out.write(json.dumps({"kind": kind, **fields}) + "\n")


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits."""
    millis = int(datetime.now(UTC).timestamp() * 1000)
    value = millis << 80 | 0x7 << 76 | uuid.uuid4().int & ((1 << 76) - 1)
    value = value & ~(0b11 << 62) | 0b10 << 62  # the RFC 4122 variant
    return str(uuid.UUID(int=value))


def checkpoint(name: str) -> str:
    directory = Path(ENV.get("ROTA_CHECKPOINT_DIR") or out_dir())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{RUN_ID}-{name}.json"
    path.write_text(json.dumps({"run_id": RUN_ID, "name": name}))
    return path.resolve().as_uri()


def report(uri: str, notice_id: str | None, token: str) -> dict[str, Any]:
    return {"id": uuid7(), "type": "ReportCheckpoint", "version": 1,
            "occurred_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "source": f"run/{RUN_ID}", "job_id": JOB_ID, "run_id": RUN_ID,
            "data": {"run_id": RUN_ID, "job_id": JOB_ID, "checkpoint_uri": uri,
                     "run_token": token, "notice_id": notice_id}}


async def send(nc: nats.NATS, label: str, body: dict[str, Any]) -> dict[str, Any]:
    """One report as a request, resent until the executor answers (as the contract says)."""
    for _ in range(20):
        try:
            reply = await nc.request(ENV["ROTA_ACK_SUBJECT"], json.dumps(body).encode(), timeout=5)
        except (TimeoutError, NatsTimeoutError, NoRespondersError):
            await asyncio.sleep(0.5)
            continue
        text = reply.data.decode()
        record("reply", label=label, request_id=body["id"], raw=text)
        answer: dict[str, Any] = json.loads(text)
        return answer
    raise SystemExit(f"no answer to {label}")


async def victim(nc: nats.NATS) -> int:
    token = ENV["ROTA_RUN_TOKEN"]
    notices: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_notice(msg: Any) -> None:
        record("notice", raw=msg.data.decode())
        await notices.put(json.loads(msg.data))

    await nc.subscribe(ENV["ROTA_CONTROL_SUBJECT"], cb=on_notice)
    await nc.flush()
    try:  # a notice sent before we subscribed is the last message kept on the subject
        last = await nc.jetstream().get_last_msg("ROTA_CTL", ENV["ROTA_CONTROL_SUBJECT"],
                                                 direct=True)
        await on_notice(last)
    except NotFoundError:
        pass
    await send(nc, "periodic", report(checkpoint("periodic"), None, token))
    record("ready")
    while True:
        notice = await asyncio.wait_for(notices.get(), timeout=300)
        if notice["data"]["action"] == "checkpoint_and_stop":
            break
    notice_id = notice["data"]["notice_id"]
    acked = checkpoint("acked")
    await send(nc, "ack", report(acked, notice_id, token))
    await send(nc, "second-worker-ack", report(checkpoint("second"), notice_id, token))
    await send(nc, "wrong-token", report(acked, notice_id, "not-the-token-" + "x" * 20))
    record("acked", checkpoint_uri=acked)
    STOPPING.reports_sent = True
    if STOPPING.asked:
        leave()
    await asyncio.sleep(300)  # the stop (SIGTERM) ends us
    return 1


async def main() -> int:
    role = ENV.get("CONFORMANCE_ROLE", "quick")
    record("started", role=role, attempt=ENV.get("ROTA_ATTEMPT"),
           resume_from=ENV.get("ROTA_RESUME_FROM", ""), workers=ENV.get("ROTA_WORKERS"),
           worker_index=ENV.get("ROTA_WORKER_INDEX"))
    if role == "sleep":
        await asyncio.sleep(600)
        return 0
    if role == "quick" or ENV.get("ROTA_RESUME_FROM"):
        return 0
    creds = ENV.get("ROTA_NATS_CREDS")
    nc = await nats.connect(ENV["ROTA_NATS_URL"], inbox_prefix=f"_INBOX_run_{RUN_ID}",
                            **({"user_credentials": creds} if creds else {}))
    try:
        return await victim(nc)
    finally:
        await nc.close()


class STOPPING:
    """The stop may come before this job has sent everything it means to: it leaves then."""

    asked = False
    reports_sent = False


def leave() -> None:
    record("exit", code=143)
    os._exit(143)


def on_sigterm(signum: int, frame: object) -> None:
    record("sigterm")
    STOPPING.asked = True
    if STOPPING.reports_sent or ENV.get("CONFORMANCE_ROLE") != "victim" or ENV.get(
            "ROTA_RESUME_FROM"):
        leave()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.exit(asyncio.run(main()))
