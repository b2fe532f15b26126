"""A local run that the executor, restarted with another backend, cannot continue: its
processes are told to stop, so the job does not go on using GPUs the ledger gives out again."""

from __future__ import annotations

import subprocess
import sys

from rota_executor import procs
from rota_executor.backend import WorkerProcess
from rota_executor.runs import stop_orphaned_processes

from tests.unit.executor.runs import record


def test_the_processes_of_a_local_run_no_backend_watches_are_stopped() -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                           start_new_session=True)
    try:
        started = procs.start_time(job.pid)
        run = record(backend="local", processes=[WorkerProcess(0, job.pid, started)])
        assert stop_orphaned_processes(run) == [job.pid]
        assert job.wait(timeout=10) == -15  # SIGTERM
        # Gone, or a pid reused by another process since: nothing is signalled.
        assert stop_orphaned_processes(run) == []
        reused = record(backend="local", processes=[WorkerProcess(0, job.pid, "1")])
        assert stop_orphaned_processes(reused) == []
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_a_run_with_no_recorded_process_has_nothing_to_stop() -> None:
    assert stop_orphaned_processes(record(backend="kubernetes")) == []
