"""The `local` backend: real subprocesses on this host, one per gang worker.

Nodes stay virtual: every worker runs here, whatever node the grant names, with
`CUDA_VISIBLE_DEVICES` set to that worker's granted GPU indices. Each worker runs under
`launcher.py` in a session of its own, so that:

- a stop signals the worker's whole process group (SIGTERM, then SIGKILL after the grace);
- the job survives a restart of the executor, which then adopts it by pid (and start time)
  and learns its exit code from the file the launcher writes.

A run ends when all its workers have exited. If one worker fails, the others are stopped:
a gang cannot go on without a member.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.clock import Clock
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.contracts.subjects import control, run_checkpoint

from rota_executor import launcher, procs
from rota_executor.backend import Exit, Reporter, RunRecord, WorkerProcess
from rota_executor.credentials import RunMinter

log = logging.getLogger("rota.executor.local")

# Only these reach a job from the executor's own environment: it holds database URLs and
# channel secrets that are none of a job's business.
PASSED_THROUGH = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME",
)


def run_env(
    run: RunRecord, worker: WorkerPlacement, *, run_token: str, nats_url: str,
    checkpoint_dir: Path, base: Mapping[str, str],
) -> dict[str, str]:
    """The environment of one worker: a few host variables, the spec's `local.env`, then the
    run's own variables, which the spec cannot override (a job cannot spoof another's token)."""
    env = {k: v for k, v in base.items() if k in PASSED_THROUGH}
    env["PYTHONUNBUFFERED"] = "1"  # so the log shows progress as it happens
    if run.spec.local is not None:
        env.update(run.spec.local.env)
    env.update({
        "ROTA_JOB_ID": run.job_id,
        "ROTA_RUN_ID": run.run_id,
        "ROTA_RUN_TOKEN": run_token,
        "ROTA_ATTEMPT": str(run.attempt),
        "ROTA_NATS_URL": nats_url,
        "ROTA_CONTROL_SUBJECT": control(run.run_id),
        "ROTA_ACK_SUBJECT": run_checkpoint(run.run_id),
        "ROTA_RESUME_FROM": run.resume_from or "",
        "ROTA_CHECKPOINT_DIR": str(checkpoint_dir),
        "ROTA_WORKER_INDEX": str(worker.worker),
        "ROTA_WORKERS": str(len(run.placement)),
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in worker.gpus),
    })
    if worker.gpu_share is not None:  # a GPU share: this fraction of its one GPU (DECISIONS 66)
        env["ROTA_GPU_SHARE"] = f"{worker.gpu_share:g}"
    return env


@dataclass
class Worker:
    process: WorkerProcess
    exit_file: Path
    child: subprocess.Popen[bytes] | None = None  # None once adopted after a restart
    exit: Exit | None = None

    def poll(self) -> Exit | None:
        if self.exit is not None:
            return self.exit
        if self.child is not None:
            code = self.child.poll()
            if code is None:
                return None
        elif procs.alive(self.process.pid, self.process.start):
            return None
        recorded = procs.read_exit(self.exit_file)
        if recorded is not None:
            self.exit = Exit(recorded[0], recorded[1])
        elif self.child is not None and self.child.returncode is not None:
            self.exit = Exit(self.child.returncode, launcher.describe(self.child.returncode))
        else:
            self.exit = Exit(None, "the process ended while the executor was away; no exit code")
        return self.exit


@dataclass
class Watched:
    run: RunRecord
    workers: list[Worker]
    term_at: float | None = None  # monotonic time of the SIGTERM
    killed: bool = False
    ending: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class LocalBackend:
    name = "local"
    needs: str | None = "local"
    time_scale = 1.0

    def __init__(
        self, reporter: Reporter, clock: Clock, *, home: Path, nats_url: str,
        kill_grace_s: float, poll_interval_s: float, python: str = sys.executable,
        minter: RunMinter | None = None,
    ) -> None:
        self.reporter = reporter
        self.clock = clock
        self.home = home.resolve()
        self.nats_url = nats_url
        self.kill_grace_s = kill_grace_s
        self.poll_interval_s = poll_interval_s
        self.python = python
        self.minter = minter
        self.watched: dict[str, Watched] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def unsupported(self, spec: JobSpec) -> str | None:
        if spec.local is None:
            return "the job has no `local` section (a command) for the local executor"
        return None

    def log_path(self, run_id: str, worker: int = 0) -> Path:
        name = f"{run_id}.log" if worker == 0 else f"{run_id}.{worker}.log"
        return self.home / "runs" / name

    def _exit_file(self, run_id: str, worker: int) -> Path:
        return self.home / "runs" / f"{run_id}.{worker}.exit"

    async def start(self, run: RunRecord, run_token: str) -> None:
        assert run.spec.local is not None
        checkpoint_dir = self.home / "checkpoints" / run.job_id
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (self.home / "runs").mkdir(parents=True, exist_ok=True)
        workers: list[Worker] = []
        creds = self.minter.mint(run.run_id) if self.minter is not None else None
        try:
            for placement in run.placement:
                env = run_env(run, placement, run_token=run_token, nats_url=self.nats_url,
                              checkpoint_dir=checkpoint_dir, base=os.environ)
                if creds is not None:
                    env["ROTA_NATS_CREDS"] = str(creds)
                exit_file = self._exit_file(run.run_id, placement.worker)
                child = self._launch(run.spec.local.command, env, exit_file,
                                     self.log_path(run.run_id, placement.worker))
                process = WorkerProcess(placement.worker, child.pid, procs.start_time(child.pid))
                workers.append(Worker(process, exit_file, child))
        except OSError as exc:
            for worker in workers:
                procs.signal_group(worker.process.pid, signal.SIGKILL)
            await self.reporter.ended(run.run_id, Exit(None, f"cannot start: {exc}"))
            return
        self.watched[run.run_id] = Watched(run, workers)
        log.info("local run %s started: pids %s, log %s", run.run_id,
                 [w.process.pid for w in workers], self.log_path(run.run_id))
        await self.reporter.launched(run.run_id, [w.process for w in workers])

    def _launch(self, command: list[str], env: dict[str, str], exit_file: Path,
                log_file: Path) -> subprocess.Popen[bytes]:
        # fork+exec returns at once; the job's own start-up happens in the child.
        exit_file.unlink(missing_ok=True)
        with log_file.open("ab") as out:
            return subprocess.Popen(
                [self.python, launcher.__file__, str(exit_file), "--", *command],
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def adopt(self, run: RunRecord) -> None:
        if not run.processes:
            # Recorded, then the executor died before it launched anything.
            if run.state == "stopping":
                await self.reporter.ended(run.run_id, Exit(None, "stopped before it started"))
            else:
                log.info("local run %s was never launched; launching it now", run.run_id)
                # Its first token was only in the memory of the executor that died.
                await self.start(run, await self.reporter.new_token(run.run_id))
            return
        workers = [Worker(p, self._exit_file(run.run_id, p.worker)) for p in run.processes]
        watched = Watched(run, workers)
        self.watched[run.run_id] = watched
        alive = [w.process.pid for w in workers if w.poll() is None]
        log.info("local run %s adopted after a restart: live pids %s", run.run_id, alive)
        if run.state == "stopping":
            self._terminate(watched)  # the stop may not have been signalled before the restart

    async def stop(self, run: RunRecord) -> None:
        watched = self.watched.get(run.run_id)
        if watched is None:
            await self.reporter.ended(run.run_id, Exit(None, "no process to stop"))
            return
        watched.run = run
        self._terminate(watched)

    def _terminate(self, watched: Watched) -> None:
        if watched.term_at is not None:
            return
        watched.term_at = time.monotonic()
        for worker in watched.workers:
            if worker.poll() is None:
                procs.signal_group(worker.process.pid, signal.SIGTERM)
        log.info("local run %s: SIGTERM sent; SIGKILL in %.0f s", watched.run.run_id,
                 self.kill_grace_s)

    def noticed(self, run: RunRecord) -> None:
        pass  # the job reads its notices itself

    def check(self) -> None:
        """One pass over every watched run: exits, gang failures, and overdue SIGKILLs."""
        for run_id, watched in list(self.watched.items()):
            if watched.ending:
                continue
            exits = [w.poll() for w in watched.workers]
            if all(e is not None for e in exits):
                watched.ending = True
                self._spawn(self._end(run_id, [e for e in exits if e is not None]))
                continue
            if any(e is not None and e.code != 0 for e in exits):
                self._terminate(watched)  # one worker failed: the gang cannot go on
            overdue = (watched.term_at is not None and not watched.killed
                       and time.monotonic() - watched.term_at >= self.kill_grace_s)
            if overdue:
                watched.killed = True
                for worker, exit in zip(watched.workers, exits, strict=True):
                    if exit is None:
                        procs.signal_group(worker.process.pid, signal.SIGKILL)
                log.warning("local run %s: still running %.0f s after SIGTERM; SIGKILL sent",
                            run_id, self.kill_grace_s)

    async def _end(self, run_id: str, exits: list[Exit]) -> None:
        if self.minter is not None:
            self.minter.forget(run_id)  # the run is over: its credentials are of no more use
        failed = [e for e in exits if e.code != 0]
        exit = failed[0] if failed else exits[0]
        if len(exits) > 1 and failed:
            exit = Exit(exit.code, f"{len(failed)} of {len(exits)} workers failed; {exit.detail}")
        try:
            await self.reporter.ended(run_id, exit)
        except Exception:
            log.exception("local run %s: reporting its end failed; retrying", run_id)
            if run_id in self.watched:
                self.watched[run_id].ending = False
            return
        self.watched.pop(run_id, None)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self) -> None:
        while True:
            try:
                self.check()
            except Exception:
                log.exception("local backend: checking processes failed")
            await asyncio.sleep(self.poll_interval_s)

    async def close(self) -> None:
        # Jobs keep running: a restarted executor adopts them. Only pending reports stop.
        for task in list(self._tasks):
            task.cancel()
        self.watched.clear()
