"""Explanations stay fresh: after the cluster changes (a flavor fills up, a run ends), `rota
why` (the API the CLI uses), the console's job page and the explanation the scheduler published
(the read model's, which `rota jobs`, the notifier and `rota trace` read) agree with a fresh
explanation within two scheduler cycles, on the whole stack (`rota up`'s `Stack`, embedded NATS
and PostgreSQL, the `sim` executor, the example config). `rota why` and the console are fresh
because the scheduler's leader explains the job on request; the published one because the
scheduler republishes what changed beyond its tolerance.

A fresh explanation is what a new scheduler would say: the test folds the event stream into a
`ClusterView` of its own, as a new leader does, and asks the policy about the job. Cycles are
counted on the scheduler's /metrics (`rota_schedule_cycle_seconds_count`). Nothing is timed:
every wait is for an event, a count or an answer, each with a generous deadline.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from prometheus_client.parser import text_string_to_metric_families
from rota.cli.client import connected, request
from rota.cli.running import Executor, Stack
from rota.config import load_config
from rota.contracts import messages as m
from rota.contracts import parse_any
from rota.contracts import subjects as s
from rota.settings import Settings
from rota_policy import PendingExplanation, policy_config_from, schedule
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.staleness import TIME_IN_WORDS, eta_tolerance_s, words
from rota_scheduler.view import ClusterView

from tests.builders import spec_doc

pytestmark = pytest.mark.e2e

DEADLINE_S = 120.0
CONFIG = load_config()  # the example config, which the stack runs without --config
POLICY = policy_config_from(CONFIG)
T = TypeVar("T")


@dataclass
class Live:
    settings: Settings
    console_url: str
    metrics_url: str
    platform_creds: Path
    home: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    home = tmp_path_factory.mktemp("freshness-home")
    settings = Settings(home=home, nats_url=None, database_url=None)
    stack = Stack(settings, None, Executor.sim, extra_env={"ROTA_LOG_LEVEL": "WARNING"},
                  say=lambda text: None)
    try:
        summary = stack.start()
        assert summary["console"]["state"] == "ready", (home / "logs" / "console.log").read_text()
        assert stack.endpoints is not None and stack.endpoints.nats_creds
        yield Live(settings, summary["console"]["url"], summary["services"]["scheduler"]["metrics"],
                   Path(stack.endpoints.nats_creds), home)
    finally:
        stack.stop()


async def eventually(check: Callable[[], Awaitable[T | None]], what: str) -> T:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = await check()
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.1)
    pytest.fail(f"not within {DEADLINE_S:.0f} s: {what}")


class Fold:
    """The event stream folded into a view of the cluster, as a new scheduler leader does."""

    def __init__(self) -> None:
        self.view = ClusterView(CONFIG)
        self.seq = 0

    async def on_event(self, msg: Msg) -> None:
        env = parse_any(msg.data, max_bytes=1 << 22)
        self.view.apply(env.data, env.occurred_at.timestamp())
        self.seq = msg.metadata.sequence.stream

    def state(self, job_id: str) -> str | None:
        job = self.view.jobs.get(job_id)
        return None if job is None else job.phase

    def holds_gpus(self, job_id: str) -> bool:
        return any(a.job_id == job_id for a in self.view.allocations.values())

    def explain(self, job_id: str, now: float) -> PendingExplanation:
        decisions = schedule(policy_snapshot(self.view, now, frozenset({job_id})), now, POLICY)
        [fresh] = [e for e in decisions.pending if e.job_id == job_id]
        return fresh


def disagreement(shown: dict[str, Any], fresh: PendingExplanation, now: float) -> str | None:
    """What `shown` (an answer of `rota why`, or the console's page) says that a fresh
    explanation does not, within the tolerance the scheduler republishes by; None if nothing."""
    reasons = [(r["code"], TIME_IN_WORDS.sub("<time>", r["message"]))
               for r in shown.get("reasons") or []]
    expected = [(r.code.value, TIME_IN_WORDS.sub("<time>", r.message)) for r in fresh.reasons]
    if reasons != expected:
        return f"reasons {reasons} != fresh {expected}"
    # A time in the words is held to the ETA's tolerance, as the scheduler republishes by.
    _, shown_times = words(r["message"] for r in shown["reasons"])
    _, fresh_times = words(r.message for r in fresh.reasons)
    for old, new in zip(shown_times, fresh_times, strict=True):
        if abs(old - new) > eta_tolerance_s(old, now):
            return f"a time in the words is {old - new:+.0f} s from fresh, beyond its tolerance"
    if shown.get("position") != fresh.position:
        return f"position {shown.get('position')} != fresh {fresh.position}"
    eta = shown.get("eta")
    if (eta is None) != (fresh.eta is None):
        return f"eta {eta} != fresh {fresh.eta}"
    if eta is not None and fresh.eta is not None:
        from datetime import datetime

        at = datetime.fromisoformat(str(eta).replace("Z", "+00:00")).timestamp()
        if abs(at - fresh.eta) > eta_tolerance_s(at, now):
            return f"eta {eta} is {at - fresh.eta:+.0f} s from fresh, beyond its tolerance"
    return None


def cycles(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rota_schedule_cycle_seconds_count":
                return float(sample.value)
    return 0.0


async def test_why_and_the_console_agree_with_a_fresh_explanation_within_two_cycles(
        live: Live) -> None:
    async with connected(live.settings) as conn, httpx.AsyncClient(base_url=live.console_url) as web:
        logged = await web.post("/login", data={"creds": live.platform_creds.read_text()},
                                headers={"Accept": "application/json"})
        assert logged.status_code == 200, logged.text
        fold = Fold()
        await conn.nc.jetstream().subscribe("rota.evt.>", cb=fold.on_event, ordered_consumer=True,
                                            deliver_policy=DeliverPolicy.ALL)

        async def submit(**spec: Any) -> str:
            job = m.SubmitJob.model_validate(spec_doc(flavor="a100", **spec))
            result = await request(live.settings, s.api_submit(job.team), job)
            return str(result["job_id"])

        async def in_state(job_id: str, state: str) -> bool:
            return fold.state(job_id) == state

        async def fresh_within_two_cycles(waiting: list[str], change: str) -> None:
            """Two cycles after the change, what the API and the console show for each
            waiting job is what a fresh explanation says."""
            start = await asyncio.to_thread(cycles, live.metrics_url)

            async def two_more() -> bool:
                return await asyncio.to_thread(cycles, live.metrics_url) >= start + 2
            await eventually(two_more, f"two scheduler cycles after {change}")
            js = conn.nc.jetstream()
            last = (await js.stream_info(s.STREAM_EVT)).state.last_seq

            async def read_up_to_last() -> bool:
                info = await js.consumer_info(s.STREAM_EVT, "submission-projection")
                return (fold.seq >= last and info.delivered.stream_seq >= last
                        and info.num_ack_pending == 0)
            await eventually(read_up_to_last, "the read model and the fold at the stream's end")
            now = time.time()
            positions = []
            for job_id in waiting:
                fresh = fold.explain(job_id, now)
                why = await request(live.settings, s.API_JOB_WHY, m.GetJob(job_id=job_id))
                assert why["fresh"] is True  # the scheduler's leader explained it on request
                assert disagreement(why, fresh, now) is None, (change, disagreement(why, fresh, now))
                # What the scheduler published: the read model, which `rota jobs`, the
                # notifier and `rota trace` read, is as fresh without being asked.
                row = await request(live.settings, s.API_JOB_GET, m.GetJob(job_id=job_id))
                published = row["wait"]
                assert disagreement(published, fresh, now) is None, (
                    change, "published", disagreement(published, fresh, now))
                page = (await web.get(f"/jobs/{job_id}", params={"format": "json"})).json()
                assert disagreement(page, fresh, now) is None, (change, disagreement(page, fresh, now))
                positions.append(why["position"])
            assert len(set(positions)) == len(positions), positions  # one place each in a100's queue

        # research borrows 8 a100 GPUs for an hour; two vision experiments of 4x8 wait behind it.
        borrower = await submit(team="research", user="dave", queue="experiment",
                                declared_runtime_s=3600, name="borrower")
        await eventually(lambda: in_state(borrower, "running"), "the borrower running")
        waiting = [await submit(team="vision", user="carol", queue="experiment", workers=4,
                                declared_runtime_s=1800, name=f"wide-{i}") for i in range(2)]

        async def explained() -> bool:
            for job_id in waiting:
                why = await request(live.settings, s.API_JOB_WHY, m.GetJob(job_id=job_id))
                if why["reasons"][0]["code"] == "NOT_YET_SCHEDULED":
                    return False
            return True
        await eventually(explained, "both waits explained")

        # The flavor fills up: nlp's training job takes the 24 free a100 GPUs.
        filler = await submit(team="nlp", user="alice", queue="training", workers=3,
                              declared_runtime_s=7200, name="filler")
        await eventually(lambda: in_state(filler, "running"), "the filler running")
        await fresh_within_two_cycles(waiting, "a100 filled up")

        # A run ends: the filler is cancelled and its GPUs come back.
        cancel = m.CancelJob(job_id=filler, team="nlp", reason="freshness test")
        await request(live.settings, s.api_cancel("nlp"), cancel)

        async def released() -> bool:
            return fold.state(filler) == "cancelled" and not fold.holds_gpus(filler)
        await eventually(released, "the filler's GPUs released")
        await fresh_within_two_cycles(waiting, "the filler's run ended")
