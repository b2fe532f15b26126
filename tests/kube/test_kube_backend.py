"""The `kubernetes` backend through the real kubernetes-asyncio client and a kubeconfig,
against the FAKE API server in `tests/fake_kube_apiserver.py` (no real cluster runs here).

The executor's bookkeeping is replaced by a recording Reporter: these tests are about what
the backend creates, when it says a gang started or ended, and that it never reports an end
while a pod still holds GPUs. The executor service end to end is in tests/integration."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rota.config.model import Node
from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer, PodPlan
from tests.kube.harness import NS, make_backend, phases, record, until


async def test_a_gang_of_4x8_is_pinned_started_and_finished(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record()
    await backend.start(run, "tok-1")
    await until(lambda: phases(fake, run) == ["Running"] * 4)
    await until(lambda: backend.runs[run.run_id].started)
    # Each pod on its worker's own node, with its eight GPUs, the Secret and Service owned by the Job.
    by_index = {p["metadata"]["annotations"][k.INDEX_ANNOTATION]: p
                for p in fake.pods_of(k.object_name(run.run_id))}
    assert {i: p["spec"]["nodeName"] for i, p in by_index.items()} == {
        "0": "gpu-0", "1": "gpu-1", "2": "gpu-2", "3": "gpu-3"}
    job = fake.get("jobs", k.object_name(run.run_id), NS)
    assert job is not None
    for plural, name in (("secrets", k.secret_name(run.run_id)), ("services", k.object_name(run.run_id)),
                         ("poddisruptionbudgets", k.object_name(run.run_id))):
        obj = fake.get(plural, name, NS)
        assert obj is not None, plural
        assert obj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    budget = fake.get("poddisruptionbudgets", k.object_name(run.run_id), NS)
    assert budget is not None and budget["spec"] == {
        "minAvailable": 4, "selector": {"matchLabels": {k.LABEL_RUN: run.run_id}}}
    secret = fake.get("secrets", k.secret_name(run.run_id), NS)
    assert secret is not None and secret["stringData"]["run-token"] == "tok-1"
    assert run.run_id not in reporter.ended_runs
    fake.exit_pods(k.object_name(run.run_id), 0)
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.ended_runs[run.run_id].code == 0
    assert reporter.pods_left_at_end[run.run_id] == 0
    assert fake.get("jobs", k.object_name(run.run_id), NS) is None
    assert fake.get("poddisruptionbudgets", k.object_name(run.run_id), NS) is None


async def test_a_gang_with_a_pod_that_never_starts_is_torn_down_and_lost(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends, start_timeout_s=120)
    fake.set_node("gpu-3", gpus=4)  # worker 3 wants 8: its pod stays unschedulable
    run = record()
    await backend.start(run, "tok")
    await until(lambda: sorted(phases(fake, run)) == ["Pending", "Running", "Running", "Running"])
    await asyncio.sleep(0.2)
    assert run.run_id not in reporter.ended_runs  # three of four is not a start, nor a failure yet
    assert not backend.runs[run.run_id].started
    clock.advance(121)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert exit.lost, "the job must requeue, not fail"
    assert "worker 3: unschedulable" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0


async def test_an_image_that_cannot_be_pulled_is_named_in_the_loss(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends, start_timeout_s=30)
    run = record(workers=2)
    fake.plans[k.object_name(run.run_id)] = PodPlan(reason="ErrImagePull")
    await backend.start(run, "tok")
    await until(lambda: all(p["status"].get("containerStatuses")
                            for p in fake.pods_of(k.object_name(run.run_id))) and len(phases(fake, run)) == 2)
    clock.advance(31)
    await until(lambda: run.run_id in reporter.ended_runs)
    assert "ErrImagePull" in reporter.ended_runs[run.run_id].detail


@pytest.mark.parametrize(("code", "reason", "expected"), [
    (137, "OOMKilled", "worker 1 failed: OOMKilled (exit code 137)"),
    (3, "Error", "worker 1 failed: Error (exit code 3)"),
])
async def test_a_failed_worker_fails_the_run_with_its_reason(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any], code: int, reason: str,
        expected: str) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    fake.exit_pods(k.object_name(run.run_id), code, reason, index=1)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert (exit.code, exit.detail, exit.lost) == (code, expected, False)
    assert reporter.pods_left_at_end[run.run_id] == 0  # the surviving worker was stopped first


async def test_stop_deletes_foreground_and_ends_only_after_the_last_pod_is_gone(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    fake.plans[k.object_name(run.run_id)] = PodPlan(stops_on_term_after_s=1.0)
    await backend.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    backend.noticed(replace(run, notice_id="n-1", notice_at=datetime(2026, 1, 1, tzinfo=UTC)))
    await until(lambda: all(p["metadata"]["annotations"].get(k.ANNOTATION_NOTICE, "").startswith(
        '{"notice_id": "n-1"') for p in fake.pods_of(k.object_name(run.run_id))))
    await backend.stop(run)
    (delete,) = [b for verb, plural, b in fake.received if verb == "delete" and plural == "jobs"]
    assert delete["propagationPolicy"] == "Foreground"
    await asyncio.sleep(0.5)  # terminating pods still hold their GPUs
    terminating = fake.pods_of(k.object_name(run.run_id))
    assert len(terminating) == 2
    # The garbage collector gives each pod its own grace period: the executor's, from the template.
    assert [p["metadata"]["deletionGracePeriodSeconds"] for p in terminating] == [5, 5]
    assert run.run_id not in reporter.ended_runs
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.pods_left_at_end[run.run_id] == 0


async def test_the_kill_grace_reaches_each_pod_so_a_pod_deaf_to_sigterm_is_killed_after_it(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends, grace_s=1)
    run = record(workers=2)
    fake.plans[k.object_name(run.run_id)] = PodPlan(stops_on_term_after_s=3600)  # ignores SIGTERM
    await backend.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    assert all(p["spec"]["terminationGracePeriodSeconds"] == 1
               for p in fake.pods_of(k.object_name(run.run_id)))
    await backend.stop(run)
    # Killed after the executor's grace, not the 30 s a pod gets when its spec says nothing.
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.pods_left_at_end[run.run_id] == 0


@pytest.mark.parametrize("loss", ["NotReady", "deleted"])
async def test_a_node_lost_mid_run_ends_the_run_lost_once_its_pods_are_gone(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any], loss: str) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends)
    # The nodes of rota.yaml are watched whether or not a run is on them.
    backend.config_nodes = [Node(name=f"gpu-{i}", flavor="h100", gpus=8) for i in range(2)]
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    if loss == "NotReady":
        fake.set_node("gpu-1", ready=False)
        # Withdrawn from placement at once; its run is left alone for the grace.
        await until(lambda: ("gpu-1", "NotReady") in reporter.node_reports)
        await asyncio.sleep(0.3)
        assert run.run_id not in reporter.ended_runs
        clock.advance(backend.node_lost_grace_s)
    else:
        fake.remove_node("gpu-1")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert exit.lost and f"gpu-1 ({loss})" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0
    if loss == "NotReady":  # its kubelet never confirmed: the executor had to force the delete
        forced = [b for verb, plural, b in fake.received if verb == "delete" and plural == "pods"]
        assert forced and all(b["gracePeriodSeconds"] == 0 for b in forced)
    assert ("gpu-1", loss) in reporter.node_reports  # withdrawn from placement
    # Back: offered again, and a new run there starts.
    if loss == "deleted":
        fake.add_node("gpu-1", 8)
    else:
        fake.set_node("gpu-1", ready=True)
    await until(lambda: reporter.node_reports[-1] == ("gpu-1", None))
    again = record(workers=2, run_id="0190a7b2-0000-7000-8000-000000000002")
    await backend.start(again, "tok")
    await until(lambda: backend.runs[again.run_id].started)


async def test_a_short_not_ready_blip_changes_nothing_for_the_run(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, clock = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    fake.set_node("gpu-1", ready=False)
    await until(lambda: ("gpu-1", "NotReady") in reporter.node_reports)
    clock.advance(backend.node_lost_grace_s - 1)
    fake.set_node("gpu-1", ready=True)
    await until(lambda: reporter.node_reports[-1] == ("gpu-1", None))
    clock.advance(10)  # past the grace from the first NotReady: the blip is forgotten
    await asyncio.sleep(0.3)
    assert run.run_id not in reporter.ended_runs and phases(fake, run) == ["Running"] * 2


async def test_a_cordon_drains_the_node_instead_of_losing_its_runs(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    backend.config_nodes = [Node(name=f"gpu-{i}", flavor="h100", gpus=8) for i in range(2)]
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    fake.set_node("gpu-1", cordoned=True)
    await until(lambda: ("gpu-1", backend.drain_deadline_s, "cordoned") in reporter.drain_reports)
    await asyncio.sleep(0.3)
    assert run.run_id not in reporter.ended_runs  # Rota's drain moves it, after its checkpoint
    assert not any(node == "gpu-1" and problem for node, problem in reporter.node_reports)
    fake.set_node("gpu-1", cordoned=False)
    await until(lambda: reporter.drain_reports[-1] == ("gpu-1", None, "uncordoned"))
    assert len(reporter.drain_reports) == 2  # each once


async def test_a_restarted_executor_adopts_by_label_and_never_creates_twice(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    first, _, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await first.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    second, reporter, _ = await make_backend(fake, tmp_path, backends)
    await second.adopt(run)
    await second.start(run, "tok")  # a redelivered start meets a 409, and adopts
    jobs = [b for verb, plural, b in fake.received if verb == "create" and plural == "jobs"]
    assert len(jobs) == 2 and len(fake.list("jobs")) == 1
    await until(lambda: second.runs[run.run_id].started)
    lists = fake.lists["pods"]
    fake.compact()  # ends the watches; their next one, from an old resourceVersion, gets 410 Gone
    await until(lambda: fake.lists["pods"] >= lists + 2)  # both backends re-listed
    fake.exit_pods(k.object_name(run.run_id), 0)
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.ended_runs[run.run_id].code == 0


async def test_adopting_a_run_whose_job_was_never_created_creates_it(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, _, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=1)
    await backend.adopt(run)
    await until(lambda: phases(fake, run) == ["Running"])
    secret = fake.get("secrets", k.secret_name(run.run_id), NS)
    assert secret is not None and secret["stringData"]["run-token"] == "fresh-token"


@pytest.mark.parametrize(("pod_template", "status", "words"), [
    ({"spec": {"dnsPolicy": 3}}, "400", "dnsPolicy"),  # cannot be decoded: the wrong type
    ({"spec": {"volumes": [{"emptyDir": {}}]}}, "422", "name"),  # decoded, but invalid: no name
])
async def test_a_template_the_api_server_refuses_ends_the_run_with_its_message(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any], pod_template: dict[str, Any],
        status: str, words: str) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=1, pod_template=pod_template)  # what submission would refuse
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert status in exit.detail and words in exit.detail
    assert not exit.lost
    assert fake.list("jobs") == []


async def test_at_start_the_backend_says_where_rota_yaml_and_the_cluster_differ(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    for i in range(5):  # the fixture's nodes, given a flavor label
        node = fake.get("nodes", f"gpu-{i}")
        assert node is not None
        node["metadata"]["labels"]["nvidia.com/gpu.product"] = "h100"
    backend, _, _ = await make_backend(fake, tmp_path, backends)
    await until(lambda: len(backend.nodes) == 5)
    backend.config_nodes = [Node(name=f"gpu-{i}", flavor="h100", gpus=8, rack="rack-0") for i in range(4)] + [
        Node(name="ghost", flavor="h100", gpus=8)]
    found = backend.compare_inventory()
    assert found == ["node ghost is in rota.yaml but not a GPU node of the cluster: nothing placed there can start",
                     "node gpu-4 (8 x h100) is in the cluster but not in rota.yaml: Rota never places work on it"]
