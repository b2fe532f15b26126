"""A training loop that takes part in Rota's checkpoint-aware preemption, in plain Python.

It fits a toy linear model with SGD on a small fixed data set, one example per step, and:

- resumes from `ROTA_RESUME_FROM` (a `file://` checkpoint) when Rota restarts it, with the
  model *and* the data order (`rota.data_order`: epoch and position), so a resumed run sees
  the same examples in the same order as an uninterrupted one and ends bit for bit where it
  would have ended;
- saves a checkpoint file in `ROTA_CHECKPOINT_DIR` every few steps and reports it, so a
  preemption loses little work;
- on a preemption notice, saves, acknowledges with the checkpoint URI, then waits for Rota's
  SIGTERM and exits 143 (`Run.acknowledge_and_wait`, the job-side contract);
- on SIGTERM without a notice (a forced stop, a cancel), saves, reports, and exits 143;
- saves a last checkpoint when it finishes, so two runs can be compared.

Run it under the local executor (`rota up --executor local`) with a spec such as
`local: {command: [python, examples/train_plain.py]}`. Outside Rota it simply trains.
Knobs: TRAIN_STEPS (300), TRAIN_STEP_S (0.1 s of "work" per step), TRAIN_CHECKPOINT_EVERY (50).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from rota import sdk
from rota.data_order import EpochOrder

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
STEP_S = float(os.environ.get("TRAIN_STEP_S", "0.1"))
CHECKPOINT_EVERY = int(os.environ.get("TRAIN_CHECKPOINT_EVERY", "50"))
TRUE_W, TRUE_B = 3.0, -1.0
EXAMPLES, DATA_SEED = 37, 0  # 37: epochs end mid-way between checkpoints, which tests that too


def say(text: str) -> None:
    print(f"[train_plain] {text}", flush=True)


def dataset() -> list[tuple[float, float]]:
    """Fixed by its seed, so every attempt has the same examples."""
    rng = random.Random(DATA_SEED)
    xs = [rng.uniform(-1, 1) for _ in range(EXAMPLES)]
    return [(x, TRUE_W * x + TRUE_B + rng.gauss(0, 0.01)) for x in xs]


def save(directory: Path, step: int, w: float, b: float, order: EpochOrder) -> str:
    """Write the checkpoint atomically (a crash mid-write leaves the previous one intact).
    JSON keeps a float exactly (shortest repr round-trips), so a resume is bit for bit."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:08d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "w": w, "b": b, "data_order": order.state()}))
    os.replace(tmp, path)
    return path.resolve().as_uri()


def load(uri: str) -> dict[str, Any]:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise SystemExit(f"cannot resume from {uri!r}: only file:// checkpoints are supported")
    state: dict[str, Any] = json.loads(Path(unquote(parsed.path)).read_text())
    return state


def main() -> int:
    # First, before anything can be stopped: a SIGTERM before the handler kills the process.
    stopped = sdk.sigterm_received()
    try:
        run: sdk.Run | None = sdk.attach()
    except sdk.SdkError as exc:
        say(f"not inside a Rota run ({exc}); training without preemption support")
        run = None
    directory = Path(sdk.checkpoint_dir() or tempfile.mkdtemp(prefix="train_plain-"))
    say(f"pid {os.getpid()}, attempt {os.environ.get('ROTA_ATTEMPT', '-')}, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")

    data = dataset()
    step, w, b, order = 0, 0.0, 0.0, EpochOrder(size=len(data), seed=DATA_SEED)
    if (uri := sdk.resume_from()) is not None:
        state = load(uri)
        step, w, b = int(state["step"]), float(state["w"]), float(state["b"])
        order = EpochOrder.from_state(state["data_order"])
        say(f"resumed from step {step} ({uri})")
    else:
        say("starting from scratch")

    try:
        while step < STEPS:
            [i] = order.next_batch(1)
            x, y = data[i]
            error = (w * x + b) - y
            w, b = w - 0.1 * error * x, b - 0.1 * error
            time.sleep(STEP_S)
            step += 1
            if run is not None and run.preemption_requested:
                uri = save(directory, step, w, b, order)
                code = run.acknowledge_and_wait(uri)  # no more work; wait for the stop
                say(f"preemption notice: saved step {step} to {uri}; acknowledged; exiting"
                    f" with {code} on Rota's stop")
                return code
            if stopped.is_set():
                uri = save(directory, step, w, b, order)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"SIGTERM: saved step {step} to {uri}; exiting")
                return sdk.STOPPED_EXIT_CODE
            if step % CHECKPOINT_EVERY == 0:
                uri = save(directory, step, w, b, order)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"step {step}: w={w:.3f} b={b:.3f}; checkpoint {uri}")
        uri = save(directory, step, w, b, order)
        say(f"finished {STEPS} steps: w={w:.3f} b={b:.3f} (true {TRUE_W}, {TRUE_B}); final"
            f" checkpoint {uri}")
        return 0
    finally:
        if run is not None:
            run.close()


if __name__ == "__main__":
    sys.exit(main())
