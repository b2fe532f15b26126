"""The demo's story on a live stack, with every service's /metrics scraped during and after it.

The issue's table is the contract: every family is present, each in the service that knows the
fact, with values the story makes certain (two victims acked, none forced; nine runs started,
seven finished and two preempted; vision borrowed above its quota; an email was sent).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rota import metrics
from rota.cli.running import Executor, Stack
from rota.demo.runner import _play
from rota.demo.story import CONFIG, SCRIPT, SIM_SPEED, Story
from rota.settings import Settings

from tests.integration.notifier.fakes import SmtpSink

RESTARTS = 3
"""Runs the demo stops and requeues, each started again: its two preemption victims and the
run its node drain moves."""

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""(sample name, sorted labels) -> value."""


def scrape(url: str) -> tuple[set[str], Samples]:
    """The families (as PromQL names them: counters with `_total`) and every sample."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    families, samples = set(), {}
    for family in text_string_to_metric_families(text):
        families.add(f"{family.name}_total" if family.type == "counter" else family.name)
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


async def play_and_watch(stack: Stack, story: Story, url: str) -> dict[str, Samples]:
    """Play the demo while polling the scheduler's gauges; keep each series' peak."""
    peaks: dict[str, Samples] = defaultdict(dict)

    async def watch() -> None:
        while True:
            _, samples = await asyncio.to_thread(scrape, url)
            for key, value in samples.items():
                peaks["scheduler"][key] = max(value, peaks["scheduler"].get(key, value))
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        assert stack.endpoints is not None
        await _play(stack.settings, stack.endpoints.nats_url, story, None)
    finally:
        watcher.cancel()
    return peaks


async def settled(urls: dict[str, str]) -> dict[str, tuple[set[str], Samples]]:
    """Scrape every service once the story's last facts have been counted everywhere."""
    result: dict[str, tuple[set[str], Samples]] = {}
    for _ in range(60):
        result = {name: await asyncio.to_thread(scrape, url) for name, url in urls.items()}
        sched, execu, notif = (result[n][1] for n in ("scheduler", "executor", "notifier"))
        if (total(sched, "rota_running_jobs") == 0
                and total(execu, "rota_jobs_finished_total") >= len(SCRIPT) + RESTARTS
                and total(notif, "rota_notifications_total", outcome="sent") >= 1):
            break
        await asyncio.sleep(0.5)
    return result


def test_every_metric_of_the_issue_after_the_demo(tmp_path: Path) -> None:
    smtp = SmtpSink()
    smtp.start()
    settings = Settings(home=tmp_path, nats_url=None, database_url=None)
    stack = Stack(settings, CONFIG, Executor.sim, extra_env={
        "ROTA_SIM_SPEED": str(SIM_SPEED), "ROTA_SCHEDULER_TICK_S": "0.5",
        "ROTA_LOG_LEVEL": "WARNING", "ROTA_SMTP_HOST": "127.0.0.1",
        "ROTA_SMTP_PORT": str(smtp.port), "ROTA_SMTP_STARTTLS": "false",
    }, say=lambda text: None)
    story = Story()
    try:
        summary = stack.start()
        urls = {name: info["metrics"] for name, info in summary["services"].items()}
        peaks = asyncio.run(play_and_watch(stack, story, urls["scheduler"]))
        final = asyncio.run(settled(urls))
    finally:
        stack.stop()
        smtp.stop()

    failed = [check for check, passed in story.checks() if not passed]
    assert not failed, (failed, story.log)
    assert len(set(urls.values())) == len(urls), "each service has its own port"

    # Every family of the issue, each exported by the service that owns it and no other.
    exported = {name: families for name, (families, _) in final.items()}
    assert set().union(*exported.values()) >= metrics.NAMES
    for owner, families in metrics.OWNERS.items():
        for family in families:
            name = metrics.family_name(family)
            holders = {service for service, names in exported.items() if name in names}
            assert holders == {owner}, (name, holders)
    for service, (_, samples) in final.items():
        lag = total(samples, "rota_outbox_lag_seconds")
        assert 0 <= lag < 30, (service, lag)

    sched, peak = final["scheduler"][1], peaks["scheduler"]
    starts = len(SCRIPT) + RESTARTS  # every job once, and each run stopped and requeued again
    assert total(sched, "rota_queue_wait_seconds_count") == starts
    assert total(sched, "rota_queue_wait_seconds_count", queue="production", team="nlp",
                 flavor="gpu") == 1
    assert total(sched, "rota_queue_wait_seconds_sum") > 0
    assert total(peak, "rota_queue_pending_jobs", queue="training", team="vision") >= 1
    assert total(peak, "rota_running_jobs") >= 4
    assert total(sched, "rota_running_jobs") == 0
    assert total(sched, "rota_gpus_capacity", flavor="gpu") == 32
    assert total(peak, "rota_gpus_allocated", team="nlp", flavor="gpu") == 16
    assert total(peak, "rota_quota_used_ratio", team="vision", flavor="gpu") > 1  # borrowed
    assert total(sched, "rota_team_usage_gpu_seconds", team="vision") > 0
    assert total(sched, "rota_schedule_cycle_seconds_count") > 0
    # A proposal the ledger rejects is proposed again, so "at least".
    assert total(sched, "rota_scheduler_decisions_total", decision="admit") >= starts
    assert total(sched, "rota_scheduler_decisions_total", decision="preempt") >= 1
    assert total(sched, "rota_scheduler_decisions_total", decision="hold") >= 1

    pre = final["preemption"][1]
    assert total(pre, "rota_preemptions_total", outcome="acked") == 2
    assert total(pre, "rota_preemptions_total", outcome="acked", tier="experiment") == 1
    assert total(pre, "rota_preemptions_total", outcome="forced") == 0
    # Every acknowledged notice: the two preemptions' victims and the run the drain moved
    # (a drain spends no budget, so it is not in rota_preemptions_total).
    assert total(pre, "rota_preemption_ack_seconds_count") == 3
    assert 0 < total(pre, "rota_preemption_ack_seconds_sum") < 3 * 120  # within the grace
    assert {dict(ls)["team"] for (n, ls) in pre if n == "rota_lost_gpu_seconds_total"} == {
        "vision", "research"}
    # Both acknowledged: they saved, then made no progress while their stop came.
    assert total(pre, "rota_lost_gpu_seconds_total") == 0

    ex = final["executor"][1]
    assert total(ex, "rota_jobs_finished_total", outcome="finished") == len(SCRIPT)
    assert total(ex, "rota_jobs_finished_total", outcome="preempted") == 2
    assert total(ex, "rota_jobs_finished_total", outcome="failed") == 0
    assert total(ex, "rota_job_runtime_seconds_count") == starts
    # Simulated seconds: the shortest job runs 600 of them.
    assert total(ex, "rota_job_runtime_seconds_sum") > 600

    sent = total(final["notifier"][1], "rota_notifications_total", channel="email", outcome="sent")
    assert sent >= 1 and len(smtp.messages) >= sent
