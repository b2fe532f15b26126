"""The executor service on its kubernetes backend: real NATS JetStream and PostgreSQL, the
service as its own process with ROTA_EXECUTOR=kubernetes and a kubeconfig, and the FAKE API
server of `tests/fake_kube_apiserver.py` standing in for a cluster (none runs here)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer, PodPlan
from tests.integration.executor.conftest import executor_process, started
from tests.integration.executor.helpers import start_run, stop_run, wait_event
from tests.integration.harness import ServiceProcess, events, eventually, stream_last_seq

GANG = (0, 1, 2, 3, 4, 5, 6, 7)


@pytest.fixture(scope="module")
async def fake() -> AsyncIterator[FakeKubeApiServer]:
    server = FakeKubeApiServer()
    await server.start()
    for i in range(4):  # the example rota.yaml's h100 pool
        server.add_node(f"h100-{i}", 8, labels={"nvidia.com/gpu.product": "h100"})
    yield server
    await server.close()


def kube_env(fake: FakeKubeApiServer, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {"ROTA_EXECUTOR": "kubernetes",
            "ROTA_KUBECONFIG": str(fake.kubeconfig(home / "kubeconfig")),
            "ROTA_KUBE_NAMESPACE": "rota", "ROTA_KUBE_START_TIMEOUT_S": "3",
            "ROTA_KILL_GRACE_S": "5", "ROTA_EXECUTOR_POLL_INTERVAL_S": "0.1",
            # A NotReady node loses its runs after this grace (300 s by default).
            "ROTA_NODE_LOST_GRACE_S": "2"}


@pytest.fixture(scope="module")
async def executor(endpoints: Endpoints, nc: Client, executor_home: Path,
                   fake: FakeKubeApiServer) -> AsyncIterator[ServiceProcess]:
    async for service in started(endpoints, nc, executor_home, **kube_env(fake, executor_home)):
        yield service


def spec() -> dict[str, Any]:
    return {"kubernetes": {"image": "train:1", "command": ["torchrun", "train.py"]}}


def pods(fake: FakeKubeApiServer, run_id: str) -> list[dict[str, Any]]:
    return fake.pods_of(k.object_name(run_id))


async def running(fake: FakeKubeApiServer, run_id: str) -> bool:
    found = pods(fake, run_id)
    return bool(found) and all(p["status"].get("phase") == "Running" for p in found)


async def test_a_run_becomes_a_job_whose_pods_finish(
        nc: Client, executor: ServiceProcess, fake: FakeKubeApiServer) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec=spec(), gpus=GANG, node="h100-2")
    await wait_event(nc, run.run_id, since, "RunStarted")
    await eventually(lambda: running(fake, run.run_id), timeout=20)
    (pod,) = pods(fake, run.run_id)
    assert pod["spec"]["nodeName"] == "h100-2"
    assert pod["metadata"]["labels"][k.LABEL_JOB] == run.job_id
    assert pod["metadata"]["labels"][k.LABEL_TEAM] == "nlp"
    fake.exit_pods(k.object_name(run.run_id), 0)
    finished = await wait_event(nc, run.run_id, since, "RunFinished")
    assert finished["data"]["exit_code"] == 0
    assert fake.get("jobs", k.object_name(run.run_id), "rota") is None


async def test_a_stop_is_reported_only_after_the_pods_are_gone(
        nc: Client, executor: ServiceProcess, fake: FakeKubeApiServer) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec=spec(), gpus=GANG, node="h100-0")
    fake.plans[k.object_name(run.run_id)] = PodPlan(stops_on_term_after_s=2.0)
    await eventually(lambda: running(fake, run.run_id), timeout=20)
    await stop_run(nc, run, reason="preempted")

    async def terminating() -> bool:
        return any(p["metadata"].get("deletionTimestamp") for p in pods(fake, run.run_id))

    await eventually(terminating, timeout=20)
    stopped = await wait_event(nc, run.run_id, since, "RunStopped")
    assert stopped["data"]["reason"] == "preempted"
    assert pods(fake, run.run_id) == []


async def test_a_gang_that_cannot_start_is_lost_and_requeued(
        nc: Client, executor: ServiceProcess, fake: FakeKubeApiServer) -> None:
    since = await stream_last_seq(nc)
    fake.set_node("h100-3", gpus=4)  # the run wants 8 there: its pod stays unschedulable
    try:
        run = await start_run(nc, spec=spec(), gpus=GANG, node="h100-3")
        stopped = await wait_event(nc, run.run_id, since, "RunStopped", timeout=30)
    finally:
        fake.set_node("h100-3", gpus=8)
    assert stopped["data"]["reason"] == "lost"  # the job goes back to its queue
    assert pods(fake, run.run_id) == []


async def test_a_node_lost_is_withdrawn_then_restored_and_its_run_requeued(
        nc: Client, executor: ServiceProcess, fake: FakeKubeApiServer) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec=spec(), gpus=GANG, node="h100-2")
    await eventually(lambda: running(fake, run.run_id), timeout=20)
    fake.set_node("h100-2", ready=False)
    try:
        stopped = await wait_event(nc, run.run_id, since, "RunStopped", timeout=30)
        assert stopped["data"]["reason"] == "lost"
        withdrawn = await node_event(nc, since, "NodeWithdrawn", "h100-2")
        assert withdrawn["data"]["reason"] == "NotReady" and withdrawn["source"] == "executor"
    finally:
        fake.set_node("h100-2", ready=True)
    await node_event(nc, since, "NodeRestored", "h100-2")


async def node_event(nc: Client, since: int, type_: str, node: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        for event in await events(nc, "rota.evt.node.>", since_seq=since):
            if event["type"] == type_ and event["data"]["node"] == node:
                return event
        return None

    event: dict[str, Any] = await eventually(found, timeout=20, interval=0.3)
    return event


async def test_a_restarted_executor_adopts_its_run(
        nc: Client, endpoints: Endpoints, executor: ServiceProcess, executor_home: Path,
        fake: FakeKubeApiServer) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec=spec(), gpus=GANG, node="h100-1")
    await eventually(lambda: running(fake, run.run_id), timeout=20)
    executor.stop()
    fresh = executor_process(endpoints, executor_home, **kube_env(fake, executor_home))
    fresh.start()
    try:
        await fresh.wait_ready(nc)
        fake.exit_pods(k.object_name(run.run_id), 0)
        await wait_event(nc, run.run_id, since, "RunFinished", timeout=30)
        jobs = [b for verb, plural, b in fake.received if verb == "create" and plural == "jobs"
                and b["metadata"]["labels"][k.LABEL_RUN] == run.run_id]
        assert len(jobs) == 1  # adopted, never created twice
    finally:
        fresh.stop()
