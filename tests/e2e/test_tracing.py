"""One trace per job, and the decision record, on the live stack.

Six services on embedded defaults and the sim executor, exporting OTLP to a receiver in this
test, and the notifier mailing a local SMTP server. Research borrows the only node with an
experiment; nlp's production job reclaims it. Then:
- each job is one connected trace rooted at its submission, with the attributes of every
  decision, grant, notice, ack, stop, run event and send, and the two traces link each other;
- `rota trace` shows the preemption with its reason, the ack time and the notification.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from rota import waits
from rota.cli.running import Executor, Stack
from rota.formats import moment
from rota.settings import Settings
from rota.tracing import job_root_span_id, trace_id_hex

from tests.e2e.otlp import Receiver, Span
from tests.integration.notifier.fakes import SmtpSink

pytestmark = pytest.mark.e2e

ROTA = str(Path(sys.executable).parent / "rota")
CONFIG = Path(__file__).with_name("tracing.rota.yaml")
SERVICES = {"rota-submission", "rota-scheduler", "rota-ledger", "rota-preemption",
            "rota-executor", "rota-notifier"}


@dataclass
class Scenario:
    env: dict[str, str]
    receiver: Receiver
    smtp: SmtpSink
    victim: str
    preemptor: str

    def trace(self, job_id: str) -> list[Span]:
        return [s for s in self.receiver.snapshot() if s.trace_id == trace_id_hex(job_id)]


def rota(env: dict[str, str], *args: str, json_out: bool = True) -> Any:
    result = subprocess.run([ROTA, *args, *(["--json"] if json_out else [])], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if json_out else result.stdout


def until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    """`timeout` bounds a failure, not a pass: generous, as CI runs this beside other work."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout} s: {what}")


def job_file(tmp: Path, name: str, team: str, user: str, queue: str, duration_s: float,
             declared_s: float | None = None) -> Path:
    doc = {"name": name, "team": team, "user": user, "queue": queue, "flavor": "gpu",
           "workers": 1, "gpus_per_worker": 8, "resumable": True,
           "declared_runtime_s": int(declared_s or duration_s), "submission_id": f"tracing-{name}",
           "sim": {"duration_s": duration_s, "checkpoint_interval_s": 60.0,
                   "checkpoint_save_s": 10.0}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def state(env: dict[str, str], job_id: str) -> str:
    return str(rota(env, "job", job_id)["state"])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    home = tmp_path_factory.mktemp("rota-tracing")
    receiver = Receiver().start()
    smtp = SmtpSink()
    smtp.start()
    stack = Stack(
        Settings(home=home, nats_url=None, database_url=None), CONFIG, Executor.sim,
        extra_env={
            "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "200", "ROTA_SIM_SPEED": "30",
            "ROTA_SCHEDULER_TICK_S": "0.5", "ROTA_SMTP_HOST": "127.0.0.1",
            "ROTA_SMTP_PORT": str(smtp.port), "ROTA_SMTP_STARTTLS": "false",
            "ROTA_NOTIFIER_POLL_INTERVAL_S": "0.2",
        },
        say=lambda *_: None)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(home)
    try:
        stack.start()
        tmp = tmp_path_factory.mktemp("jobs")
        victim = rota(env, "submit", "-f", str(
            # It declares two hours, too late for production's wait target: production preempts.
            job_file(tmp, "sweep", "research", "dave", "experiment", 300, 7200)))["job_id"]
        until("the sweep runs", lambda: state(env, victim) == "running", 60)
        time.sleep(1.5)  # past its minimum runtime
        preemptor = rota(env, "submit", "-f", str(
            job_file(tmp, "release", "nlp", "alice", "production", 60)))["job_id"]
        until("both finish", lambda: {state(env, victim), state(env, preemptor)} == {"finished"},
              120)
        until("the victim is mailed", lambda: smtp.to("dave@example.com"), 30)
        scenario = Scenario(env, receiver, smtp, victim, preemptor)
        # Each service exports in its own batches: wait for the last spans of the story.
        until("the last spans are exported", lambda: any(
            s.name.startswith("rota.notifier.send") for s in scenario.trace(victim))
            and len(named(scenario.trace(victim), "rota.decide admit")) == 2
            and all(named(scenario.trace(j), "rota.executor.RunFinished")
                    for j in (victim, preemptor)), 40)
        time.sleep(1.0)
        yield scenario
    finally:
        stack.stop()
        smtp.stop()
        receiver.stop()


def named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def test_each_job_is_one_connected_trace_rooted_at_its_submission(scenario: Scenario) -> None:
    everything = scenario.receiver.snapshot()
    for job_id in (scenario.victim, scenario.preemptor):
        spans = scenario.trace(job_id)
        [root] = [s for s in spans if s.parent_id is None]
        assert root.name == "rota.job.submit" and root.service == "rota-submission"
        assert root.span_id == f"{job_root_span_id(job_id):016x}"
        ids = {s.span_id for s in spans}
        orphans = [(s.service, s.name) for s in spans if s.parent_id and s.parent_id not in ids]
        assert not orphans, orphans
        assert {s.service for s in spans} >= SERVICES, {s.service for s in spans}
        # A span that says it is about this job is in this job's trace, never another's.
        strays = [(s.name, s.trace_id) for s in everything
                  if s.attributes.get("rota.job_id") == job_id and s.trace_id != root.trace_id]
        assert not strays, strays


def test_decisions_and_every_step_carry_their_attributes(scenario: Scenario) -> None:
    mine, theirs = scenario.trace(scenario.preemptor), scenario.trace(scenario.victim)
    [plan] = named(mine, "rota.decide preempt")
    attrs = plan.attributes
    assert attrs["rota.job_id"] == scenario.preemptor and attrs["rota.decision"] == "preempt"
    assert attrs["rota.reason"] and attrs["rota.victims"] == [scenario.victim]
    assert attrs["rota.expected_lost_gpu_seconds"] >= 0 and "rota.factor.total" in attrs
    holds = named(mine, "rota.decide hold")
    assert holds and all(h.attributes["rota.reason"] and "rota.factor.fairshare" in h.attributes
                         for h in holds)
    for spans in (mine, theirs):
        admits = named(spans, "rota.decide admit")
        assert admits and all(a.attributes["rota.decision"] == "admit" and a.attributes["rota.reason"]
                              for a in admits)
        assert named(spans, "rota.ledger.granted")
        assert named(spans, "rota.executor.RunStarted")
        assert named(spans, "rota.executor.RunFinished")
    [admit] = named(mine, "rota.decide admit")
    assert admit.attributes["rota.reason"] == "freed_by_preemption"
    assert len(named(theirs, "rota.decide admit")) == 2, sorted(  # the first run and the resume
        (s.service, s.name) for s in theirs if s.service in ("rota-scheduler", "rota-ledger"))
    [notice] = named(theirs, "rota.preemption.notice")
    [ack] = named(theirs, "rota.preemption.ack")
    [stop] = named(theirs, "rota.preemption.stop")
    assert ack.attributes["rota.verdict"] == "accepted" and stop.attributes["rota.forced"] is False
    assert named(theirs, "rota.executor.RunStopped")
    assert named(mine, "rota.preemption.completed")
    sends = [s for s in theirs if s.name == "rota.notifier.send preemption_noticed"]
    assert sends and sends[0].attributes["rota.channel"] == "email"
    # The ack's span nests under the checkpoint event that carried it, the stop under the ack.
    by_id = {s.span_id: s for s in theirs}

    def ancestors(span: Span) -> list[str]:
        names = []
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
            names.append(span.name)
        return names

    assert "rota.preemption.ack" in ancestors(stop)
    assert "rota.executor.RunCheckpointed" in ancestors(ack), ancestors(ack)
    assert notice.attributes["rota.preemptor_job_id"] == scenario.preemptor


def test_victim_and_preemptor_traces_link_each_other(scenario: Scenario) -> None:
    victim_trace, preemptor_trace = trace_id_hex(scenario.victim), trace_id_hex(scenario.preemptor)
    [plan] = named(scenario.trace(scenario.preemptor), "rota.decide preempt")
    assert victim_trace in {link.trace_id for link in plan.links}
    [chosen] = named(scenario.trace(scenario.victim), "rota.decide preempted")
    assert {(link.trace_id, link.span_id) for link in chosen.links} == {(preemptor_trace, plan.span_id)}
    [notice] = named(scenario.trace(scenario.victim), "rota.preemption.notice")
    assert preemptor_trace in {link.trace_id for link in notice.links}


def test_rota_trace_shows_the_preemption_its_ack_and_the_notification(scenario: Scenario) -> None:
    record = rota(scenario.env, "trace", scenario.victim)
    assert record["trace_id"] == trace_id_hex(scenario.victim)
    [plan] = record["preemptions"]
    assert plan["role"] == "suffered" and plan["preemptor_job_id"] == scenario.preemptor
    assert plan["reason"] and plan["acked_at"] and plan["ack_checkpoint_uri"]
    assert plan["noticed_at"] <= plan["acked_at"] <= plan["stopped_at"]
    assert plan["outcome"] == "acked"
    assert any(d["decision"] == "preempted" and d["reason"] == plan["reason"]
               for d in record["decisions"])
    holds = [d for d in record["decisions"] if d["decision"] == "hold"]
    assert all(d["reasons"] and d["factors"] for d in holds)
    sent = [n for n in record["notifications"] if n["kind"] == "preemption_noticed"]
    assert sent and sent[0]["status"] == "sent" and sent[0]["channel"] == "email"

    caused = rota(scenario.env, "trace", scenario.preemptor)
    [plan_caused] = caused["preemptions"]
    assert plan_caused["role"] == "caused" and plan_caused["victims"][0]["outcome"] == "acked"
    assert any(d["decision"] == "preempt" and d["factors"] for d in caused["decisions"])

    text = " ".join(rota(scenario.env, "trace", scenario.victim, json_out=False).split())
    # The plan's rule in words (`rota:lower_tier` reads "its runs are in a lower queue").
    assert "suffered" in text and waits.plan_reason(plan["reason"]) in text
    assert f"acked {moment(plan['acked_at'])}" in text
    assert "preemption_noticed to user:research/dave by email: sent" in text
