"""The whole preemption story on the kubernetes executor: `rota up --executor kubernetes
--kubeconfig K` against the FAKE API server of `tests/fake_kube_apiserver.py` (no real cluster
runs here), whose fake kubelet runs each pod's container as a local process. The job is the
example training script: the victim gets the notice, checkpoints, acknowledges, its Job is
deleted in the foreground, and its next run (a new Job) resumes from that checkpoint."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.rota_cli import REPO, play_preemption, rota, rota_up, training_job
from tests.fake_kube_apiserver import FakeKubeApiServer, LocalContainers

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).with_name("local.rota.yaml")  # one node, `host`, of 8 GPUs


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApiServer]:
    """The fake server on an event loop of its own thread: the stack runs beside it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = FakeKubeApiServer(containers=LocalContainers(
        root=tmp_path_factory.mktemp("kubelet"), cwd=REPO))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    loop.call_soon_threadsafe(server.add_node, "host", 8)
    yield server
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(tmp_path_factory.mktemp("rota-kube"))
    env.update(ROTA_KUBE_NAMESPACE="rota", ROTA_KILL_GRACE_S="10", ROTA_EXECUTOR_POLL_INTERVAL_S="0.1")
    return env


@pytest.fixture(scope="module")
def stack(env: dict[str, str], fake: FakeKubeApiServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    kubeconfig = fake.kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    with rota_up(env, "kubernetes", "--kubeconfig", str(kubeconfig), "--config", str(CONFIG)) as process:
        yield process


def job_file(tmp: Path, name: str, team: str, queue: str, steps: int, declared_s: int = 120) -> Path:
    backend = {"kubernetes": {"image": "rota:dev", "command": ["python", "examples/train_plain.py"]}}
    return training_job(tmp, name, team, queue, steps, backend=backend, declared_s=declared_s)


def test_production_preempts_a_pod_that_checkpoints_and_resumes_in_a_new_job(
    stack: subprocess.Popen[bytes], env: dict[str, str], fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    story = play_preemption(env, job_file, tmp_path, settle_s=3)
    stopped = story.stopped

    release_trace = rota(env, "trace", story.release_id)["timeline"]
    release_start = next(e["at"] for e in release_trace if e["type"] == "RunStarted")
    assert stopped["at"] <= release_start  # the preemptor ran only on GPUs already freed
    # Each run was one Job, deleted in the foreground; the victim's two runs were two Jobs.
    deletes = [b for verb, plural, b in fake.received if verb == "delete" and plural == "jobs"]
    assert deletes and all(b["propagationPolicy"] == "Foreground" for b in deletes)
    created = [b["metadata"]["labels"]["rota.dev/job-id"] for verb, plural, b in fake.received
               if verb == "create" and plural == "jobs"]
    assert created.count(story.sweep_id) == 2 and created.count(story.release_id) == 1
    assert rota(env, "allocations")["allocations"] == []  # every GPU back in the ledger
    assert fake.containers is not None
    logs = [p.read_text() for p in fake.containers.root.glob("*.log")]
    assert any("resum" in log.lower() for log in logs), logs  # the second pod loaded the checkpoint
