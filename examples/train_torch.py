"""The PyTorch variant of `train_plain.py`: a small MLP, `torch.save` checkpoints, Rota's SDK.

torch is not a dependency of the workspace (uv would fetch a multi-GB CUDA build); see
examples/README.md for running this with a torch you install yourself. It uses the GPUs in
`CUDA_VISIBLE_DEVICES` (set by the local executor) when CUDA is available, else the CPU.

- trains on a fixed synthetic data set in batches that `rota.data_order` chooses;
- checkpoints everything that decides what comes next: model, optimizer, step, the data
  order (epoch and position) and torch's random-number states, so a resumed run trains on
  the same batches as an uninterrupted one and ends bit for bit where it would have ended;
- resumes from `ROTA_RESUME_FROM` (a `file://` path to a `.pt` checkpoint);
- checkpoints to `ROTA_CHECKPOINT_DIR` every TRAIN_CHECKPOINT_EVERY steps and reports it;
- on a preemption notice, saves, acknowledges, waits for Rota's SIGTERM, exits 143;
- on SIGTERM without a notice (a forced stop, a cancel), saves, reports, exits 143;
- when it finishes, saves a last checkpoint and prints a digest of the final state.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import torch  # type: ignore[import-not-found]  # installed by the user, not the workspace
from rota import sdk
from rota.data_order import EpochOrder

STEPS = int(os.environ.get("TRAIN_STEPS", "2000"))
CHECKPOINT_EVERY = int(os.environ.get("TRAIN_CHECKPOINT_EVERY", "200"))
STEP_S = float(os.environ.get("TRAIN_STEP_S", "0"))  # extra seconds per step, to watch it
EXAMPLES, BATCH, DATA_SEED = 4000, 256, 0  # 4000/256: each epoch ends with a short batch


def say(text: str) -> None:
    print(f"[train_torch] {text}", flush=True)


def rng_states() -> dict[str, Any]:
    """The generators that dropout, augmentation or a random init would draw from."""
    states: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["cpu"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save(directory: Path, step: int, model: Any, optimizer: Any, order: EpochOrder) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:08d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "data_order": order.state(), "rng": rng_states()}, tmp)
    os.replace(tmp, path)  # atomic: never resume from half a file
    return path.resolve().as_uri()


def digest(model: Any, optimizer: Any) -> str:
    """Equal digests: the two runs ended with the same bits in every weight and moment."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    for state in optimizer.state_dict()["state"].values():
        for key in sorted(state):
            value = state[key]
            h.update(value.detach().cpu().contiguous().numpy().tobytes()
                     if torch.is_tensor(value) else repr(value).encode())
    return h.hexdigest()


def main() -> int:
    # First, before anything can be stopped: a SIGTERM before the handler kills the process.
    stopped = sdk.sigterm_received()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # The data and the initial weights come from fixed seeds, so every attempt has the same.
    data_gen = torch.Generator().manual_seed(DATA_SEED)
    true_w = torch.randn(16, 1, generator=data_gen)
    inputs = torch.randn(EXAMPLES, 16, generator=data_gen)
    targets = inputs @ true_w + 0.01 * torch.randn(EXAMPLES, 1, generator=data_gen)
    inputs, targets = inputs.to(device), targets.to(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    order = EpochOrder(size=EXAMPLES, seed=DATA_SEED)
    directory = Path(sdk.checkpoint_dir() or tempfile.mkdtemp(prefix="train_torch-"))

    step = 0
    if (uri := sdk.resume_from()) is not None:
        state = torch.load(Path(unquote(urlparse(uri).path)), map_location=device,
                           weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order = EpochOrder.from_state(state["data_order"])
        restore_rng_states(state["rng"])
        step = int(state["step"])
        say(f"resumed from step {step} ({uri})")
    say(f"training on {device}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")

    try:
        run: sdk.Run | None = sdk.attach()
    except sdk.SdkError as exc:
        say(f"not inside a Rota run ({exc}); training without preemption support")
        run = None

    loss = torch.tensor(float("nan"))  # a run resumed at its last step trains no more
    try:
        while step < STEPS:
            batch = torch.tensor(order.next_batch(BATCH), device=device)
            loss = torch.nn.functional.mse_loss(model(inputs[batch]), targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if STEP_S:
                time.sleep(STEP_S)
            if run is not None and run.preemption_requested:
                uri = save(directory, step, model, optimizer, order)
                code = run.acknowledge_and_wait(uri)  # no more work; wait for the stop
                say(f"preemption notice: saved step {step} to {uri}; acknowledged; exiting"
                    f" with {code} on Rota's stop")
                return code
            if stopped.is_set():
                uri = save(directory, step, model, optimizer, order)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"SIGTERM: saved step {step} to {uri}; exiting")
                return sdk.STOPPED_EXIT_CODE
            if step % CHECKPOINT_EVERY == 0:
                uri = save(directory, step, model, optimizer, order)
                if run is not None:
                    run.report_checkpoint(uri)
                say(f"step {step}: loss {loss.item():.4f}; checkpoint {uri}")
        uri = save(directory, step, model, optimizer, order)
        say(f"finished {STEPS} steps: loss {loss.item():.4f}; final checkpoint {uri}; state"
            f" sha256 {digest(model, optimizer)}")
        return 0
    finally:
        if run is not None:
            run.close()


if __name__ == "__main__":
    sys.exit(main())
