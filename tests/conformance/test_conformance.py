"""A client built from `contracts/` alone, against a running Rota (`rota up --executor local`).

No `rota` import: the producer and the job speak NATS (nats-py) and check every message they
see against `contracts/schemas/` (jsonschema). The `rota` command only plays the operator: it
starts the stack and issues each team its credentials. As two teams, the test:
- submits, resubmits, cancels and queries, matching each answer to its command;
- sends bad input on both paths, and gets a rejection naming its command for each;
- plays the job side of a preemption (`job_side.py`, run by the local executor): notice,
  acknowledgement with the run token, stop, and a resume from the acknowledged checkpoint.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.conformance.job_side import uuid7

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent
CONTRACTS = HERE.parents[1] / "contracts"
ROTA = str(Path(sys.executable).parent / "rota")
JOB_SIDE = str(HERE / "job_side.py")
SCHEMAS = {path.stem: json.loads(path.read_text())
           for path in (CONTRACTS / "schemas").glob("*.json")}
Doc = dict[str, Any]


def conform(doc: Doc) -> Doc:
    """The message, once its type's schema accepts it."""
    jsonschema.validate(doc, SCHEMAS[doc["type"]], format_checker=jsonschema.FormatChecker())
    return doc


def refused_by_schema(doc: Doc) -> bool:
    try:
        conform(doc)
    except jsonschema.ValidationError:
        return True
    return False


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def message(type_: str, data: Doc, **header: Any) -> Doc:
    return {"id": uuid7(), "type": type_, "version": 1, "occurred_at": now(),
            "source": "conformance", "job_id": None, "run_id": None, "data": data, **header}


def spec(team: str, name: str, queue: str, gpus: int, role: str, out: Path,
         declared_s: int = 600) -> Doc:
    return {"name": name, "team": team, "user": team, "queue": queue, "flavor": "gpu",
            "workers": 1, "gpus_per_worker": gpus, "resumable": True,
            "declared_runtime_s": declared_s, "submission_id": f"conformance-{name}-{uuid.uuid4().hex[:8]}",
            "local": {"command": [sys.executable, JOB_SIDE],
                      "env": {"CONFORMANCE_ROLE": role, "CONFORMANCE_OUT": str(out)}}}


def traceparent() -> tuple[str, str]:
    trace_id = uuid.uuid4().hex
    return trace_id, f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"


# ---------------------------------------------------------------- the operator's part


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`rota up --executor local` on embedded servers, and credentials for two teams."""
    home = tmp_path_factory.mktemp("conformance-home")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG", "ROTA_NATS_CREDS")}
    env["ROTA_HOME"] = str(home)
    log = (home / "up.log").open("wb")
    process = subprocess.Popen(
        [ROTA, "up", "--executor", "local", "--config", str(HERE / "rota.yaml"), "--json"],
        env=env, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 180)
    line = process.stdout.readline() if ready else b""
    if not line:
        process.kill()
        pytest.fail(f"rota up not ready: {(home / 'up.log').read_text()[-3000:]}")
    summary = json.loads(line)
    creds = {}
    for team in ("nlp", "research"):
        issued = subprocess.run([ROTA, "creds", "issue", "--team", team, "--out",
                                 str(home / f"{team}.creds"), "--json"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert issued.returncode == 0, issued.stderr
        creds[team] = json.loads(issued.stdout)["creds"]
    out = home / "job-side"
    out.mkdir()
    yield {"nats_url": summary["nats_url"], "creds": creds, "out": out}
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


# ---------------------------------------------------------------- the producer's part


class Team:
    """One team's producer: its own connection, inbox prefix and live feed."""

    def __init__(self, name: str, nc: Client) -> None:
        self.name, self.nc = name, nc
        self.feed: list[tuple[Doc, dict[str, str]]] = []

    @classmethod
    async def connect(cls, name: str, stack: dict[str, Any]) -> Team:
        nc = await nats.connect(stack["nats_url"], user_credentials=stack["creds"][name],
                                inbox_prefix=f"_INBOX_team_{name}")
        team = cls(name, nc)
        await nc.subscribe(f"rota.feed.{name}.>", cb=team._on_feed)
        # Twice: nats-py's flush can put its PING on the wire before the SUB (DECISIONS 92).
        await nc.flush()
        await nc.flush()
        return team

    async def _on_feed(self, msg: Msg) -> None:
        self.feed.append((json.loads(msg.data), dict(msg.headers or {})))

    async def command(self, kind: str, body: bytes, msg_id: str,
                      trace: str | None = None) -> None:
        """A command on JetStream (`rota.cmd.<kind>.<team>`): a plain publish the stream
        acknowledges, which a team's credentials allow without any `$JS.API`."""
        headers = {"Nats-Msg-Id": msg_id, **({"traceparent": trace} if trace else {})}
        await self.nc.jetstream().publish(f"rota.cmd.{kind}.{self.name}", body, headers=headers)

    async def ask(self, subject: str, doc: Doc | bytes) -> Doc:
        """A request; the answer is an `ApiReply` envelope, and its `data` is returned."""
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        reply = await self.nc.request(subject, body, timeout=20)
        envelope = conform(json.loads(reply.data))
        assert envelope["type"] == "ApiReply"
        data: Doc = envelope["data"]
        return data

    async def answer(self, check: Callable[[Doc], bool], timeout: float = 60) -> Doc:
        """The first event on the feed for which `check` holds, once its schema accepts it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for doc, _ in self.feed:
                if check(doc):
                    return conform(doc)
            await asyncio.sleep(0.2)
        seen = [(d["type"], d.get("data", {}).get("command_id")) for d, _ in self.feed]
        raise AssertionError(f"{self.name}: no such event in {timeout} s; saw {seen}")

    def headers_of(self, doc: Doc) -> dict[str, str]:
        return next(h for d, h in self.feed if d["id"] == doc["id"])


def answering(command_id: str, type_: str | None = None) -> Callable[[Doc], bool]:
    return lambda doc: (doc["data"].get("command_id") == command_id
                        and (type_ is None or doc["type"] == type_))


def of_job(job_id: str, type_: str, **fields: Any) -> Callable[[Doc], bool]:
    return lambda doc: (doc["type"] == type_ and doc["job_id"] == job_id
                        and all(doc["data"].get(k) == v for k, v in fields.items()))


async def submit_and_cancel_and_query(nlp: Team, out: Path) -> None:
    job = spec("nlp", "conformance-sleeper", "training", 1, "sleep", out)
    _, trace = traceparent()
    submit = message("SubmitJob", job)
    await nlp.command("submit", json.dumps(conform(submit)).encode(), submit["id"], trace)
    submitted = await nlp.answer(answering(submit["id"], "JobSubmitted"))
    job_id = submitted["job_id"]
    assert submitted["data"]["submission_id"] == job["submission_id"]

    again = message("SubmitJob", job)
    await nlp.command("submit", json.dumps(again).encode(), again["id"])
    duplicate = await nlp.answer(answering(again["id"]))
    assert duplicate["type"] == "JobResubmitted" and duplicate["data"]["duplicate"] is True
    assert duplicate["job_id"] == job_id

    by_reply = await nlp.ask("rota.api.submit.nlp", message("SubmitJob", job))
    assert by_reply["ok"] and by_reply["result"]["job_id"] == job_id
    assert by_reply["result"]["duplicate"] is True

    listed = await nlp.ask("rota.api.jobs.list.nlp", message("ListJobs", {"limit": 10}))
    [row] = [r for r in listed["result"] if r["job_id"] == job_id]
    short = row["short_id"]
    assert job_id.endswith(short) and len(short) == 12
    for query in ("get", "why", "trace"):
        got = await nlp.ask(f"rota.api.job.{query}.nlp", message("GetJob", {"job_id": short}))
        assert got["ok"], (query, got)
    summary = await nlp.ask("rota.api.queues.summary.nlp", message("SummarizeQueues", {}))
    assert summary["ok"] and all(r["team"] == "nlp" for r in summary["result"])

    cancel = message("CancelJob", {"job_id": job_id, "team": "nlp", "reason": "conformance"})
    await nlp.command("cancel", json.dumps(conform(cancel)).encode(), cancel["id"])
    cancelled = await nlp.answer(answering(cancel["id"], "JobCancelled"))
    assert cancelled["job_id"] == job_id
    got = await nlp.ask("rota.api.job.get.nlp", message("GetJob", {"job_id": job_id}))
    assert got["result"]["state"] == "cancelled"
    # Nothing of nlp's holds GPUs any more before research borrows them all.
    for _ in range(150):
        summary = await nlp.ask("rota.api.queues.summary.nlp", message("SummarizeQueues", {}))
        if all(r["gpus_in_use"] == 0 for r in summary["result"]):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"nlp still holds GPUs: {summary}")


def bad_submits(out: Path) -> list[tuple[str, bytes, str, str | None, str | None]]:
    """(command id, body, code, field, submission id) of bad SubmitJob commands."""
    cases: list[tuple[str, bytes, str, str | None, str | None]] = []
    for name, change, field in (("workers", {"workers": "2"}, "data.workers"),
                                ("resumable-yes", {"resumable": "yes"}, "data.resumable"),
                                ("resumable-off", {"resumable": "off"}, "data.resumable"),
                                ("unknown-field", {"gpus": 8}, "data.gpus")):
        job = {**spec("nlp", f"bad-{name}", "training", 1, "quick", out), **change}
        doc = message("SubmitJob", job)
        assert refused_by_schema(doc), name
        cases.append((doc["id"], json.dumps(doc).encode(), "INVALID_FIELD", field,
                      job["submission_id"]))
    job = spec("nlp", "bad-version", "training", 1, "quick", out)
    doc = message("SubmitJob", job, version="1")
    assert refused_by_schema(doc)
    cases.append((doc["id"], json.dumps(doc).encode(), "INVALID_FIELD", "version",
                  job["submission_id"]))
    job = {**spec("nlp", "bad-team", "training", 1, "quick", out), "team": "research"}
    doc = message("SubmitJob", job)  # valid, but not nlp's to send
    cases.append((doc["id"], json.dumps(conform(doc)).encode(), "UNAUTHORISED", "team",
                  job["submission_id"]))
    cases.append((uuid7(), b"{not json", "MALFORMED_JSON", None, None))
    return cases


async def bad_input_is_rejected_and_correlated(nlp: Team, out: Path) -> None:
    trace_id, trace = traceparent()
    cases = bad_submits(out)
    for command_id, body, _, _, _ in cases:
        await nlp.command("submit", body, command_id, trace)
    missing = message("CancelJob", {"job_id": uuid7(), "team": "nlp"})
    await nlp.command("cancel", json.dumps(conform(missing)).encode(), missing["id"])
    cases.append((missing["id"], b"", "JOB_NOT_FOUND", "job_id", None))
    for command_id, _, code, field, submission_id in cases:
        rejected = await nlp.answer(answering(command_id, "JobRejected"))
        assert (rejected["data"]["code"], rejected["data"]["field"]) == (code, field)
        assert rejected["data"]["submission_id"] == submission_id, code
    first = await nlp.answer(answering(cases[0][0], "JobRejected"))
    assert nlp.headers_of(first)["traceparent"].split("-")[1] == trace_id

    # The same on request/reply: the reply names the request; a bad submit is an event too.
    for subject, doc, code, field in (
        ("rota.api.jobs.list.nlp", message("ListJobs", {"limit": "2"}), "INVALID_FIELD",
         "data.limit"),
        ("rota.api.job.get.nlp", message("GetJob", {"job_id": uuid7()[:8]}, version="1"),
         "INVALID_FIELD", "version"),
        ("rota.api.job.get.nlp", message("GetJob", {"job_id": uuid7()}), "JOB_NOT_FOUND",
         "job_id"),
        ("rota.api.submit.nlp", message("SubmitJob", {
            **spec("nlp", "bad-off", "training", 1, "quick", out), "resumable": "off"}),
         "INVALID_FIELD", "data.resumable"),
        ("rota.api.queues.summary.nlp", message("SummarizeQueues", {"team": "research"}),
         "UNAUTHORISED", "team"),
    ):
        reply = await nlp.ask(subject, doc)
        assert not reply["ok"] and reply["command_id"] == doc["id"], subject
        assert (reply["error"]["code"], reply["error"]["field"]) == (code, field), subject
        if doc["type"] == "SubmitJob":
            assert reply["submission_id"] == doc["data"]["submission_id"]
            await nlp.answer(answering(doc["id"], "JobRejected"))


# ---------------------------------------------------------------- the job's part


def job_records(out: Path, run_id: str) -> list[Doc]:
    path = out / f"{run_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def wait_record(out: Path, run_id: str, kind: str, timeout: float = 60) -> Doc:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in job_records(out, run_id) if r["kind"] == kind]
        if found:
            return found[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id}: no {kind!r} in {job_records(out, run_id)}")


async def a_preemption_played_by_the_job(nlp: Team, research: Team, out: Path) -> None:
    # The victim declares two hours: production would wait past its wait target, so it preempts.
    victim_spec = spec("research", "conformance-victim", "experiment", 8, "victim", out, 7200)
    submit = message("SubmitJob", victim_spec)
    await research.command("submit", json.dumps(conform(submit)).encode(), submit["id"])
    victim = (await research.answer(answering(submit["id"], "JobSubmitted")))["job_id"]
    first = await research.answer(of_job(victim, "RunStarted", attempt=1), timeout=120)
    run_id = first["data"]["run_id"]
    await wait_record(out, run_id, "ready")  # its periodic checkpoint is reported
    await asyncio.sleep(1.5)  # past the minimum runtime

    preemptor_spec = spec("nlp", "conformance-preemptor", "production", 8, "quick", out)
    submit = message("SubmitJob", preemptor_spec)
    await nlp.command("submit", json.dumps(conform(submit)).encode(), submit["id"])
    preemptor = (await nlp.answer(answering(submit["id"], "JobSubmitted")))["job_id"]

    await research.answer(of_job(victim, "PreemptionNoticed"), timeout=120)
    acked = (await wait_record(out, run_id, "acked", timeout=120))["checkpoint_uri"]
    ack = await research.answer(of_job(victim, "RunCheckpointed", checkpoint_uri=acked))
    assert ack["data"]["notice_id"] is not None and "run_token" not in ack["data"]
    stopped = await research.answer(of_job(victim, "RunStopped"), timeout=120)
    assert stopped["data"]["reason"] == "preempted" and stopped["data"]["forced"] is False
    assert stopped["data"]["checkpoint_uri"] == acked
    await nlp.answer(of_job(preemptor, "RunFinished"), timeout=180)
    resumed = await research.answer(of_job(victim, "RunStarted", attempt=2), timeout=180)
    assert resumed["data"]["resumed_from"] == acked
    await research.answer(of_job(victim, "RunFinished"), timeout=120)

    records = job_records(out, run_id)
    [notice] = {r["raw"]: r for r in records if r["kind"] == "notice"}.values()
    notice_doc = conform(json.loads(notice["raw"]))
    assert notice_doc["type"] == "PreemptionNotice"
    assert notice_doc["data"]["ack_subject"] == f"rota.run.checkpoint.{run_id}"
    replies = {r["label"]: (r["request_id"], conform(json.loads(r["raw"]))["data"])
               for r in records if r["kind"] == "reply"}
    assert replies["periodic"][1]["result"] == {"recorded": True}
    assert replies["ack"][1]["result"] == {"recorded": True}
    assert replies["second-worker-ack"][1]["result"] == {"recorded": False}
    wrong_id, wrong = replies["wrong-token"]
    assert not wrong["ok"] and wrong["command_id"] == wrong_id
    assert (wrong["error"]["code"], wrong["error"]["field"]) == ("UNAUTHORISED", "run_token")
    assert {r["kind"] for r in records} >= {"sigterm", "exit"}
    [again] = [r for r in job_records(out, resumed["data"]["run_id"]) if r["kind"] == "started"]
    assert again["resume_from"] == acked and again["attempt"] == "2"

    trace = await research.ask("rota.api.job.trace.research",
                               message("GetJob", {"job_id": victim}))
    [plan] = trace["result"]["preemptions"]
    assert plan["ack_checkpoint_uri"] == acked and plan["outcome"] == "acked"
    hidden = await research.ask("rota.api.job.get.research",
                                message("GetJob", {"job_id": preemptor}))
    assert hidden["error"]["code"] == "JOB_NOT_FOUND"  # nlp's job, not research's to see


async def test_a_client_built_from_the_contracts_alone(stack: dict[str, Any]) -> None:
    nlp = await Team.connect("nlp", stack)
    research = await Team.connect("research", stack)
    try:
        await submit_and_cancel_and_query(nlp, stack["out"])
        await bad_input_is_rejected_and_correlated(nlp, stack["out"])
        await a_preemption_played_by_the_job(nlp, research, stack["out"])
        for team in (nlp, research):
            for doc, _ in team.feed:  # every message either team saw
                conform(doc)
            assert all(doc["type"] != "PreemptionNoticed" or doc["data"]["team"] == team.name
                       for doc, _ in team.feed)
    finally:
        await nlp.nc.close()
        await research.nc.close()


def test_the_client_imports_nothing_from_rota() -> None:
    for path in HERE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "rota" or n.startswith(("rota.", "rota_")) for n in names), (
                path.name, names)
