"""The PyTorch variant of `train_plain.py`: a small MLP, `torch.save` checkpoints, Rota's SDK.

torch is not a dependency of the workspace (uv would fetch a multi-GB CUDA build); see
examples/README.md for running this with a torch you install yourself. It uses the GPUs in
`CUDA_VISIBLE_DEVICES` (set by the local executor) when CUDA is available, else the CPU.

- resumes from `ROTA_RESUME_FROM` (a `file://` path to a `.pt` checkpoint);
- checkpoints to `ROTA_CHECKPOINT_DIR` every TRAIN_CHECKPOINT_EVERY steps and reports it;
- on a preemption notice (delivered through `run.on_preemption`), saves, acknowledges, exits 0.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import torch  # type: ignore[import-not-found]  # installed by the user, not the workspace
from rota import sdk

STEPS = int(os.environ.get("TRAIN_STEPS", "2000"))
CHECKPOINT_EVERY = int(os.environ.get("TRAIN_CHECKPOINT_EVERY", "200"))


def say(text: str) -> None:
    print(f"[train_torch] {text}", flush=True)


def save(directory: Path, step: int, model: Any, optimizer: Any) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:08d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)  # atomic: never resume from half a file
    return path.resolve().as_uri()


def main() -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    directory = Path(sdk.checkpoint_dir() or tempfile.mkdtemp(prefix="train_torch-"))
    torch.manual_seed(0)
    true_w = torch.randn(16, 1, device=device)

    step = 0
    if (uri := sdk.resume_from()) is not None:
        state = torch.load(Path(unquote(urlparse(uri).path)), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        say(f"resumed from step {step} ({uri})")
    say(f"training on {device}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")

    stop = threading.Event()
    try:
        run: sdk.Run | None = sdk.attach()
    except sdk.SdkError as exc:
        say(f"not inside a Rota run ({exc}); training without preemption support")
        run = None
    if run is not None:
        run.on_preemption(lambda notice: stop.set())

    loss = torch.tensor(float("nan"))  # a run resumed at its last step trains no more
    try:
        while step < STEPS:
            x = torch.randn(256, 16, device=device)
            loss = torch.nn.functional.mse_loss(model(x), x @ true_w)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if stop.is_set() and run is not None:
                uri = save(directory, step, model, optimizer)
                run.acknowledge(uri)
                say(f"preemption notice: saved step {step} to {uri}; acknowledged; exiting")
                return 0
            if step % CHECKPOINT_EVERY == 0:
                uri = save(directory, step, model, optimizer)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"step {step}: loss {loss.item():.4f}; checkpoint {uri}")
        say(f"finished {STEPS} steps: loss {loss.item():.4f}")
        return 0
    finally:
        if run is not None:
            run.close()


if __name__ == "__main__":
    sys.exit(main())
