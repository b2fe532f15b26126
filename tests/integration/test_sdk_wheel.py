"""What a job image gets from `pip install rota-sdk`: the rota-sdk and rota-contracts wheels,
built by `uv build`, installed alone into a fresh virtual environment (their requirements from
PyPI), run an example job's resume path against real NATS: a preemption notice, the job's
checkpoint acknowledged to the executor's side, Rota's SIGTERM, then attempt 2 resuming from
that checkpoint and ending where an uninterrupted run ends.

Without PyPI (or uv) the module's tests do not run and say so in one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.harness import eventually
from tests.integration.run_protocol import executor_side
from tests.integration.test_sdk import run_env, send_notice

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_plain.py"
KNOBS = {"TRAIN_STEPS": "400", "TRAIN_CHECKPOINT_EVERY": "50"}


def _not_run(why: str) -> None:
    pytest.skip(f"NOT RUN: the rota-sdk wheel test: {why}")


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The interpreter of a fresh virtual environment holding the two wheels and their
    requirements, and nothing of this workspace."""
    uv = shutil.which("uv")
    if uv is None:
        _not_run("no `uv` on PATH to build the wheels")
    assert uv is not None
    root = tmp_path_factory.mktemp("sdk-wheel")
    wheels = root / "wheels"
    for package in ("rota-contracts", "rota-sdk"):
        subprocess.run([uv, "build", "--package", package, "--wheel", "--out-dir", str(wheels)],
                       cwd=REPO, check=True, capture_output=True, timeout=120)
    venv = root / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    installed = subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), "--find-links", str(wheels),
         "rota-sdk"], env=env, capture_output=True, text=True, timeout=300)
    if installed.returncode != 0:
        last = (installed.stderr.strip().splitlines() or [""])[-1].strip()
        _not_run(f"`uv pip install rota-sdk` failed (is PyPI reachable?): {last}")
    yield python


def job_env(**extra: str) -> dict[str, str]:
    """A job's environment: none of the test's interpreter, virtual environment or ROTA_*."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **KNOBS, **extra}


def test_the_wheels_hold_the_sdk_and_nothing_of_the_services(sdk_python: Path) -> None:
    code = ("import importlib.util, json\n"
            "names = ['rota.sdk', 'rota.data_order', 'rota.contracts', 'rota.service', 'rota.bus',"
            " 'rota.cli', 'rota_policy', 'sqlalchemy', 'faststream', 'pgserver']\n"
            "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in names}))")
    out = subprocess.run([str(sdk_python), "-c", code], env=job_env(), cwd=sdk_python.parent,
                         capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert {n for n, there in found.items() if there} == {
        "rota.sdk", "rota.data_order", "rota.contracts"}


async def run_job(python: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The example to its end, outside the event loop that serves the test's NATS client."""
    return await asyncio.to_thread(subprocess.run, [str(python), str(TRAIN)], env=env,
                                   capture_output=True, text=True, timeout=300)


def final_checkpoint(output: str) -> dict[str, object]:
    found = re.search(r"final checkpoint (file://\S+)", output)
    assert found, output
    state: dict[str, object] = json.loads(Path(unquote(urlparse(found.group(1)).path)).read_text())
    return state


async def test_an_example_job_resumes_from_its_acknowledged_checkpoint(
        sdk_python: Path, nc: Client, endpoints: Endpoints, tmp_path: Path) -> None:
    whole = await run_job(sdk_python, job_env(ROTA_CHECKPOINT_DIR=str(tmp_path / "whole"),
                                              TRAIN_STEP_S="0"))
    assert whole.returncode == 0, whole.stdout + whole.stderr

    run_id, job_id, token = new_id(), new_id(), "t" * 24
    rota_env = {**{k: v for k, v in run_env(endpoints, run_id, job_id, token).items()
                   if k != "ROTA_RESUME_FROM"}, "ROTA_ATTEMPT": "1"}
    async with executor_side(nc, run_id) as executor:
        job = await asyncio.create_subprocess_exec(
            str(sdk_python), str(TRAIN), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=job_env(**rota_env, TRAIN_STEP_S="0.02",
                        ROTA_CHECKPOINT_DIR=str(tmp_path / "attempt-1")))
        assert job.stdout is not None
        lines: list[str] = []
        while not any(" step 50:" in line for line in lines):  # attached and reporting
            line = (await asyncio.wait_for(job.stdout.readline(), 60)).decode()
            assert line, "".join(lines)
            lines.append(line)
        notice_id = new_id()
        await send_notice(nc, run_id, job_id, "checkpoint_and_stop", notice_id)
        acknowledged = await eventually(lambda: _acknowledgement(executor.reports, notice_id), 30)
        job.send_signal(signal.SIGTERM)  # Rota's stop, once the checkpoint is acknowledged
        rest, _ = await asyncio.wait_for(job.communicate(), 60)
        assert job.returncode == 143, "".join(lines) + rest.decode()
    step = int(re.search(r"step-(\d+)\.json", acknowledged).group(1))  # type: ignore[union-attr]
    assert 50 <= step < 400  # preempted mid-run: the resume has work left

    resumed = await run_job(sdk_python, job_env(
        ROTA_CHECKPOINT_DIR=str(tmp_path / "attempt-2"), TRAIN_STEP_S="0",
        ROTA_RESUME_FROM=acknowledged))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed from step {step} ({acknowledged})" in resumed.stdout
    assert final_checkpoint(resumed.stdout) == final_checkpoint(whole.stdout)


async def _acknowledgement(reports: list[object], notice_id: str) -> str | None:
    for report in reports:
        if getattr(report, "notice_id", None) == notice_id:
            uri = getattr(report, "checkpoint_uri", None)
            return uri if isinstance(uri, str) else None
    return None
