"""A restarted executor adopts its runs by label. What it finds may be half done: a Job being
deleted (a teardown begun before the restart, or someone's `kubectl delete`), or a Job whose
Secret and Service were never created (a crash between the creates)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer, PodPlan
from tests.kube.harness import NS, make_backend, phases, record, until


@pytest.mark.parametrize("state", ["running", "stopping"])
async def test_a_job_being_deleted_is_adopted_as_a_teardown_in_progress(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any], state: str) -> None:
    first, _, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2, state=state)
    job_name = k.object_name(run.run_id)
    fake.plans[job_name] = PodPlan(stops_on_term_after_s=1.0)
    await first.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    backends[0][3].cancel()  # the first executor dies...
    job = fake.get("jobs", job_name, NS)
    assert job is not None
    fake.delete("jobs", job, propagation="Foreground")  # ...after its delete went out
    second, reporter, _ = await make_backend(fake, tmp_path, backends)
    await second.adopt(run)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    if state == "stopping":  # a stop was recorded: it is what ended the run
        assert (exit.detail, exit.lost) == ("stopped", False)
    else:  # nobody knows why: the job is requeued from its checkpoint
        assert exit.lost and "being deleted" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0
    assert not [b for verb, plural, b in fake.received if verb == "create" and plural == "jobs"][1:]


async def test_a_job_whose_secret_and_service_were_never_created_gets_them_on_adoption(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    run = record(workers=2)
    objects = k.run_objects(run_id=run.run_id, job_id=run.job_id, attempt=run.attempt, spec=run.spec,
                            placement=run.placement, namespace=NS, nats_url="nats://nats:4222",
                            run_token="lost-with-the-crash")
    fake.create("jobs", objects.job, NS)  # the executor died right after creating the Job
    await until(lambda: len(phases(fake, run)) == 2)
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    await backend.adopt(run)
    await until(lambda: backend.runs[run.run_id].started)
    secret = fake.get("secrets", k.secret_name(run.run_id), NS)
    assert secret is not None and secret["stringData"]["run-token"] == "fresh-token"
    job = fake.get("jobs", k.object_name(run.run_id), NS)
    service = fake.get("services", k.object_name(run.run_id), NS)
    assert job is not None and service is not None
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert run.run_id not in reporter.ended_runs
