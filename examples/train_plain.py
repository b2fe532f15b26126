"""A training loop that takes part in Rota's checkpoint-aware preemption, in plain Python.

It fits a toy linear model with SGD, one small step at a time, and:

- resumes from `ROTA_RESUME_FROM` (a `file://` checkpoint) when Rota restarts it;
- saves a checkpoint file in `ROTA_CHECKPOINT_DIR` every few steps and reports it, so a
  preemption loses little work;
- on a preemption notice, saves, acknowledges with the checkpoint URI, and exits 0;
- on SIGTERM (Rota stopping it without a notice), saves, reports, and exits 143.

Run it under the local executor (`rota up --executor local`) with a spec such as
`local: {command: [python, examples/train_plain.py]}`. Outside Rota it simply trains.
Knobs: TRAIN_STEPS (300), TRAIN_STEP_S (0.1 s of "work" per step), TRAIN_CHECKPOINT_EVERY (50).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from urllib.parse import unquote, urlparse

from rota import sdk

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
STEP_S = float(os.environ.get("TRAIN_STEP_S", "0.1"))
CHECKPOINT_EVERY = int(os.environ.get("TRAIN_CHECKPOINT_EVERY", "50"))
TRUE_W, TRUE_B = 3.0, -1.0


def say(text: str) -> None:
    print(f"[train_plain] {text}", flush=True)


def save(directory: Path, step: int, w: float, b: float) -> str:
    """Write the checkpoint atomically (a crash mid-write leaves the previous one intact)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:08d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "w": w, "b": b}))
    os.replace(tmp, path)
    return path.resolve().as_uri()


def load(uri: str) -> tuple[int, float, float]:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise SystemExit(f"cannot resume from {uri!r}: only file:// checkpoints are supported")
    state = json.loads(Path(unquote(parsed.path)).read_text())
    return int(state["step"]), float(state["w"]), float(state["b"])


def main() -> int:
    try:
        run: sdk.Run | None = sdk.attach()
    except sdk.SdkError as exc:
        say(f"not inside a Rota run ({exc}); training without preemption support")
        run = None
    directory = Path(sdk.checkpoint_dir() or tempfile.mkdtemp(prefix="train_plain-"))
    say(f"pid {os.getpid()}, attempt {os.environ.get('ROTA_ATTEMPT', '-')}, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")

    step, w, b = 0, 0.0, 0.0
    if (uri := sdk.resume_from()) is not None:
        step, w, b = load(uri)
        say(f"resumed from step {step} ({uri})")
    else:
        say("starting from scratch")

    terminated = False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        nonlocal terminated
        terminated = True  # finish the current step, then save and leave

    signal.signal(signal.SIGTERM, on_sigterm)
    rng = random.Random(step)
    try:
        while step < STEPS:
            x = rng.uniform(-1, 1)
            error = (w * x + b) - (TRUE_W * x + TRUE_B + rng.gauss(0, 0.01))
            w, b = w - 0.1 * error * x, b - 0.1 * error
            time.sleep(STEP_S)
            step += 1
            if run is not None and run.preemption_requested:
                uri = save(directory, step, w, b)
                run.acknowledge(uri)
                say(f"preemption notice: saved step {step} to {uri}; acknowledged; exiting")
                return 0
            if terminated:
                uri = save(directory, step, w, b)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"SIGTERM: saved step {step} to {uri}; exiting")
                return 143
            if step % CHECKPOINT_EVERY == 0:
                uri = save(directory, step, w, b)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"step {step}: w={w:.3f} b={b:.3f}; checkpoint {uri}")
        say(f"finished {STEPS} steps: w={w:.3f} b={b:.3f} (true {TRUE_W}, {TRUE_B})")
        return 0
    finally:
        if run is not None:
            run.close()


if __name__ == "__main__":
    sys.exit(main())
