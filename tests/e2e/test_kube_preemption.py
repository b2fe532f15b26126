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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.rota_cli import REPO, rota, rota_up, training_job, wait_for
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
    # The sweep declares two hours: its GPUs would come too late for production's wait target,
    # so production preempts rather than waits (DECISIONS 43).
    sweep = rota(env, "submit", "-f", str(job_file(tmp_path, "sweep", "research", "experiment", 400, 7200)))
    wait_for(env, sweep["job_id"], {"running"}, 60)
    time.sleep(3)  # past its minimum runtime, with a few checkpoints behind it
    release = rota(env, "submit", "-f", str(job_file(tmp_path, "release", "nlp", "production", 40)))

    done = wait_for(env, release["job_id"], {"finished", "failed"}, 120)
    assert done["state"] == "finished"
    victim = wait_for(env, sweep["job_id"], {"finished", "failed"}, 180)
    assert victim["state"] == "finished" and victim["attempts"] == 2

    timeline = rota(env, "trace", sweep["job_id"])["timeline"]
    kinds = [entry["type"] for entry in timeline]
    for expected in ("PreemptionRequested", "PreemptionNoticed", "RunCheckpointed", "RunStopped",
                     "PreemptionCompleted", "RunFinished"):
        assert expected in kinds, (expected, kinds)
    [ack] = [e for e in timeline if e["type"] == "RunCheckpointed" and e["data"].get("notice_id")]
    checkpoint = ack["data"]["checkpoint_uri"]
    [stopped] = [e for e in timeline if e["type"] == "RunStopped"]
    assert stopped["data"]["reason"] == "preempted" and not stopped["data"]["forced"]
    restarts = [e for e in timeline if e["type"] == "RunStarted"]
    assert [r["data"]["attempt"] for r in restarts] == [1, 2]
    assert restarts[1]["data"]["resumed_from"] == checkpoint

    release_trace = rota(env, "trace", release["job_id"])["timeline"]
    release_start = next(e["at"] for e in release_trace if e["type"] == "RunStarted")
    assert stopped["at"] <= release_start  # the preemptor ran only on GPUs already freed
    # Each run was one Job, deleted in the foreground; the victim's two runs were two Jobs.
    deletes = [b for verb, plural, b in fake.received if verb == "delete" and plural == "jobs"]
    assert deletes and all(b["propagationPolicy"] == "Foreground" for b in deletes)
    created = [b["metadata"]["labels"]["rota.dev/job-id"] for verb, plural, b in fake.received
               if verb == "create" and plural == "jobs"]
    assert created.count(sweep["job_id"]) == 2 and created.count(release["job_id"]) == 1
    assert rota(env, "allocations")["allocations"] == []  # every GPU back in the ledger
    assert fake.containers is not None
    logs = [p.read_text() for p in fake.containers.root.glob("*.log")]
    assert any("resum" in log.lower() for log in logs), logs  # the second pod loaded the checkpoint
