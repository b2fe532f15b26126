"""An API server under load answers 429 Too Many Requests (with Retry-After), and a failing
one 500, 502, 503 or 504. None of these says anything about the run: the backend tries again,
with bounded backoff that honours Retry-After, and never ends a run for good on one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.kube.harness import NS, make_backend, phases, record, until


async def test_a_start_answered_429_waits_as_told_and_creates_the_job(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends)
    fake.fail_next("create", "jobs", 429, times=2, retry_after_s=3)
    run = record(workers=2)
    before = clock.now()
    await backend.start(run, "tok")
    assert (clock.now() - before).total_seconds() >= 6  # Retry-After, twice, on the injected clock
    await until(lambda: backend.runs[run.run_id].started)
    assert run.run_id not in reporter.ended_runs
    assert len(fake.list("jobs")) == 1


async def test_a_start_that_keeps_meeting_503_is_not_ended_and_creates_everything_once_it_heals(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    fake.fail_next("create", "secrets", 503, times=12)  # more than one call's retries
    run = record(workers=1)
    await backend.start(run, "tok")
    assert run.run_id not in reporter.ended_runs
    await until(lambda: backend.runs[run.run_id].started)
    secret = fake.get("secrets", k.secret_name(run.run_id), NS)
    assert secret is not None and secret["stringData"]["run-token"] == "tok"
    assert fake.get("services", k.object_name(run.run_id), NS) is not None
    assert run.run_id not in reporter.ended_runs


async def test_a_start_whose_api_server_never_recovers_is_lost_at_the_start_timeout_not_failed(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends, start_timeout_s=120)
    fake.fail_next("create", "jobs", 500, times=10_000)
    run = record(workers=1)
    await backend.start(run, "tok")
    assert run.run_id not in reporter.ended_runs
    clock.advance(121)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert exit.lost and "500" in exit.detail


async def test_a_create_that_took_effect_but_lost_its_answer_is_not_made_twice(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    fake.fail_next("create", "jobs", 504, after_applying=True)
    run = record(workers=1)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    assert len(fake.list("jobs")) == 1
    assert run.run_id not in reporter.ended_runs


async def test_a_pin_that_failed_is_sent_again_until_it_succeeds(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    fake.fail_next("patch", "pods", 500, times=12)  # more than one pass's retries
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    await until(lambda: backend.runs[run.run_id].started)
    assert run.run_id not in reporter.ended_runs


async def test_a_stop_whose_delete_meets_429_still_ends_the_run_once_the_pods_are_gone(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=1)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    fake.fail_next("delete", "jobs", 429, times=12)
    await backend.stop(run)
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.pods_left_at_end[run.run_id] == 0
