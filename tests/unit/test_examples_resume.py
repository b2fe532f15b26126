"""The example training scripts, interrupted by SIGTERM and resumed from the checkpoint they
saved, end bit for bit where an uninterrupted run ends (issue 19: the data order restarted).

`train_plain.py` runs always. `train_torch.py` runs where an interpreter with torch is found:
`ROTA_TORCH_PYTHON`, else `/tmp/torchvenv/bin/python` (examples/README.md), else this one if
it has torch; torch is not a dependency of the workspace."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NOT_A_RUN = ("ROTA_RUN_ID", "ROTA_JOB_ID", "ROTA_RUN_TOKEN", "ROTA_RESUME_FROM")


def torch_python() -> str | None:
    for candidate in (os.environ.get("ROTA_TORCH_PYTHON"), "/tmp/torchvenv/bin/python"):
        if candidate and Path(candidate).exists():
            return candidate
    return sys.executable if importlib.util.find_spec("torch") else None


def env_for(tmp: Path, name: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_RUN}
    # This checkout's rota first: a torch venv may hold an install of another checkout.
    path = os.pathsep.join(str(REPO / p) for p in ("packages/sdk/src", "packages/contracts/src"))
    return {**env, "ROTA_CHECKPOINT_DIR": str(tmp / name), **extra,
            "PYTHONPATH": os.pathsep.join(filter(None, (path, env.get("PYTHONPATH"))))}


def run_through(python: str, script: str, env: dict[str, str]) -> str:
    done = subprocess.run([python, str(EXAMPLES / script)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run_until_sigterm(python: str, script: str, env: dict[str, str], after: str) -> str:
    """Start the script, send SIGTERM once it printed `after`; returns its output."""
    process = subprocess.Popen([python, str(EXAMPLES / script)], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if after in line:
            process.send_signal(signal.SIGTERM)
            break
    lines.extend(process.stdout)
    assert process.wait(120) == 143, "".join(lines)  # its own handler: saved, then exit 143
    return "".join(lines)


def uri_after(text: str, marker: str) -> str:
    found = re.search(re.escape(marker) + r".*?(file://\S+?);?(?:\s|$)", text)
    assert found, text
    return found.group(1)


def interrupted_and_resumed(python: str, script: str, tmp: Path, knobs: dict[str, str],
                            after: str) -> tuple[str, str, int]:
    cut = run_until_sigterm(python, script, env_for(tmp, "cut", **knobs), after)
    saved = uri_after(cut, "SIGTERM: saved step")
    step = int(re.search(r"SIGTERM: saved step (\d+)", cut).group(1))  # type: ignore[union-attr]
    resumed = run_through(python, script,
                          env_for(tmp, "resumed", **knobs, ROTA_RESUME_FROM=saved))
    assert f"resumed from step {step}" in resumed
    return cut, resumed, step


def test_train_plain_interrupted_and_resumed_ends_where_an_uninterrupted_run_ends(
        tmp_path: Path) -> None:
    knobs = {"TRAIN_STEPS": "120", "TRAIN_CHECKPOINT_EVERY": "10"}
    whole = run_through(sys.executable, "train_plain.py",
                        env_for(tmp_path, "whole", **knobs, TRAIN_STEP_S="0"))
    # Slow steps, so the SIGTERM lands mid-run and not after the end.
    _, resumed, step = interrupted_and_resumed(
        sys.executable, "train_plain.py", tmp_path, {**knobs, "TRAIN_STEP_S": "0.01"},
        after="step 40:")
    assert 40 <= step < 120  # cut mid-run: the resume had work left to do
    final = [json.loads(Path(unquote(urlparse(uri_after(text, "final checkpoint")).path))
                        .read_text()) for text in (whole, resumed)]
    assert final[0] == final[1]  # w and b to the last bit, and the same place in the data
    assert final[0]["step"] == 120


@pytest.mark.skipif(torch_python() is None, reason="no interpreter with torch (see module doc)")
def test_train_torch_interrupted_and_resumed_ends_bit_for_bit_where_an_uninterrupted_run_ends(
        tmp_path: Path) -> None:
    python = torch_python()
    assert python is not None
    knobs = {"TRAIN_STEPS": "300", "TRAIN_CHECKPOINT_EVERY": "20"}
    whole = run_through(python, "train_torch.py", env_for(tmp_path, "whole", **knobs))
    _, resumed, step = interrupted_and_resumed(python, "train_torch.py", tmp_path, knobs,
                                               after="step 40:")
    assert step < 300
    digests = [re.search(r"state sha256 ([0-9a-f]{64})", t) for t in (whole, resumed)]
    assert digests[0] and digests[1] and digests[0].group(1) == digests[1].group(1)
