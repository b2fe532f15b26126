"""`rota cluster drain --deadline` on the `local` executor, with real processes that save real
checkpoints (examples/train_plain.py): of two runs on the drained node, the one expected to
end before the deadline finishes there; the other is noticed, acknowledges, stops `drained`,
and resumes on the other node from the checkpoint it acknowledged. The drain spends no
preemption budget, and `rota cluster nodes`, `rota trace` and `rota why` say `drain`."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.rota_cli import isolated_env, moved_by_drain, rota, rota_up, training_job, wait_for

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).with_name("drain.rota.yaml")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return isolated_env(tmp_path_factory.mktemp("rota-drain"))


@pytest.fixture(scope="module")
def stack(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with rota_up(env, "local", "--config", str(CONFIG)) as process:
        yield process


def job(tmp: Path, name: str, steps: int, declared_s: int) -> Path:
    backend = {"local": {"command": [sys.executable, "examples/train_plain.py"]}}
    return training_job(tmp, name, "nlp", "training", steps, backend=backend,
                        declared_s=declared_s)


def nodes_of(env: dict[str, str]) -> dict[str, str]:
    """Job id → the node its run is on, from one `rota cluster nodes`."""
    return {r["job_id"]: str(node["node"]) for node in rota(env, "cluster", "nodes")
            for r in node["runs"]}


def wait_node(env: dict[str, str], name: str, state: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        [node] = rota(env, "cluster", "nodes", name)
        if node["state"] == state:
            return node
        time.sleep(0.5)
    raise AssertionError(f"node {name} still {node.get('state')} after {timeout} s: {node}")


def test_a_drain_lets_a_short_run_finish_and_moves_the_long_one_from_its_checkpoint(
    stack: subprocess.Popen[bytes], env: dict[str, str], tmp_path: Path
) -> None:
    # The long run declares two hours (it would outlive the deadline); the short one 90 s.
    long = rota(env, "submit", "-f", str(job(tmp_path, "long", 2400, 7200)))
    wait_for(env, long["job_id"], {"running"}, 60)
    short = rota(env, "submit", "-f", str(job(tmp_path, "short", 800, 90)))
    wait_for(env, short["job_id"], {"running"}, 60)
    placed = nodes_of(env)
    drained = placed[long["job_id"]]
    assert placed[short["job_id"]] == drained, "both 8-GPU runs pack onto one node"
    time.sleep(3)  # a few checkpoints behind the long run

    answer = rota(env, "cluster", "drain", drained, "--deadline", "10m", "--reason", "firmware")
    assert answer["node"] == drained and answer["reason"] == "firmware"
    [node] = rota(env, "cluster", "nodes", drained)
    assert node["state"] in ("draining", "drained") and node["deadline"]

    # The long run moves: noticed, acknowledged, stopped `drained`, resumed elsewhere.
    story = moved_by_drain(env, long["job_id"], 180)
    assert story.requested["data"]["node"] == drained
    [noticed] = [e for e in rota(env, "trace", long["job_id"])["timeline"]
                 if e["type"] == "PreemptionNoticed"]
    assert noticed["data"]["reason"] == "drain" and "drain" in noticed["summary"]
    assert nodes_of(env)[long["job_id"]] != drained  # no new placement on the drained node
    [plan] = rota(env, "preemptions", "--job", long["job_id"])
    assert plan["reason"] == "drain" and [v["outcome"] for v in plan["victims"]] == ["acked"]

    # The short run was left alone and finishes where it was, in one run.
    done = wait_for(env, short["job_id"], {"finished", "failed"}, 120)
    assert done["state"] == "finished" and done["attempts"] == 1
    assert not any(e["type"] == "PreemptionNoticed"
                   for e in rota(env, "trace", short["job_id"])["timeline"])

    # Empty now: drained. Undrained: ready again.
    wait_node(env, drained, "drained", 60)
    rota(env, "cluster", "undrain", drained)
    wait_node(env, drained, "ready", 30)
    finished = wait_for(env, long["job_id"], {"finished", "failed"}, 240)
    assert finished["state"] == "finished"
