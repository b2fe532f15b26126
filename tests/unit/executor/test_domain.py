"""The executor's rules: placement checks, outcomes, lost work, a local run's environment."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from rota.config import load_config
from rota.contracts import messages as m
from rota.contracts.job import LocalRun, WorkerPlacement
from rota_executor.backend import Exit
from rota_executor.domain import lost_gpu_seconds, outcome, placement_problem
from rota_executor.local import run_env

from tests.unit.executor.runs import T0, record


def nodes_by_name() -> dict:  # type: ignore[type-arg]
    return {node.name: node for node in load_config(None).expanded_nodes()}


def wp(node: str, *gpus: int, worker: int = 0) -> WorkerPlacement:
    return WorkerPlacement(worker=worker, node=node, gpus=list(gpus))


def test_placements_must_name_real_nodes_and_gpus() -> None:
    assert placement_problem([wp("h100-0", 0, 1)], nodes_by_name()) is None
    assert "no node" in (placement_problem([wp("h100-99", 0)], nodes_by_name()) or "")
    assert "no GPU 8" in (placement_problem([wp("h100-0", 8)], nodes_by_name()) or "")
    twice = [wp("h100-0", 1), wp("h100-0", 1, worker=1)]
    assert "granted twice" in (placement_problem(twice, nodes_by_name()) or "")


def test_lost_work_counts_from_the_last_checkpoint_or_from_the_start() -> None:
    run = record(last_checkpoint_uri="file:///c", last_checkpoint_at=T0 + timedelta(seconds=70))
    assert lost_gpu_seconds(run, T0 + timedelta(seconds=100), 1.0) == 2 * 30
    assert lost_gpu_seconds(run, T0 + timedelta(seconds=100), 60.0) == 2 * 30 * 60
    fresh = record()
    assert lost_gpu_seconds(fresh, T0 + timedelta(seconds=100), 1.0) == 200
    not_resumable = record(resumable=False, last_checkpoint_at=T0 + timedelta(seconds=90))
    assert lost_gpu_seconds(not_resumable, T0 + timedelta(seconds=100), 1.0) == 200


def test_an_acknowledged_run_loses_nothing_while_it_waits_for_its_stop() -> None:
    acked = T0 + timedelta(seconds=70)
    run = record(last_checkpoint_uri="file:///c", last_checkpoint_at=acked,
                 notice_acked_at=acked)
    assert lost_gpu_seconds(run, T0 + timedelta(seconds=100), 1.0) == 0
    # A checkpoint older than the ack: the work between them is lost, the wait after is not.
    older = record(last_checkpoint_at=T0 + timedelta(seconds=60), notice_acked_at=acked)
    assert lost_gpu_seconds(older, T0 + timedelta(seconds=100), 1.0) == 2 * 10


def test_exit_codes_decide_finished_or_failed() -> None:
    end = T0 + timedelta(seconds=10)
    ok = outcome(record(), Exit(0), stop_reason=None, stop_forced=False, ended_at=end, time_scale=1)
    assert ok.state == "finished" and isinstance(ok.event, m.RunFinished)
    bad = outcome(record(), Exit(3), stop_reason=None, stop_forced=False, ended_at=end,
                  time_scale=1)
    assert bad.state == "failed" and isinstance(bad.event, m.RunFailed)
    assert bad.event.exit_code == 3 and bad.event.error == "exit code 3"


def test_a_requested_stop_is_a_stop_whatever_the_exit_code() -> None:
    run = record(last_checkpoint_uri="file:///c", last_checkpoint_at=T0 + timedelta(seconds=5))
    result = outcome(run, Exit(-9, "killed by SIGKILL"), stop_reason="preempted",
                     stop_forced=True, ended_at=T0 + timedelta(seconds=10), time_scale=1)
    assert result.state == "stopped"
    assert result.event == m.RunStopped(run_id=run.run_id, job_id=run.job_id,
                                        reason=m.StopReason.preempted, forced=True,
                                        checkpoint_uri="file:///c", lost_gpu_seconds=10)


def test_exiting_after_acknowledging_a_notice_is_a_preemption_not_a_finish() -> None:
    run = record(notice_id="0190aaaa-0000-7000-8000-0000000000aa", notice_acked_at=T0,
                 last_checkpoint_uri="file:///c", last_checkpoint_at=T0)
    result = outcome(run, Exit(0), stop_reason=None, stop_forced=False,
                     ended_at=T0 + timedelta(seconds=1), time_scale=1)
    assert isinstance(result.event, m.RunStopped)
    assert result.event.reason == m.StopReason.preempted and not result.event.forced
    assert result.event.checkpoint_uri == "file:///c"


def test_a_local_run_env_carries_the_protocol_and_only_safe_host_variables() -> None:
    spec_env = {"TRAIN_STEPS": "5", "ROTA_RUN_TOKEN": "spoofed"}
    run = record(resume_from="file:///ckpt/1", gpus=(2, 3))
    run = type(run)(**{**run.__dict__, "spec": run.spec.model_copy(
        update={"local": LocalRun(command=["python", "x.py"], env=spec_env)})})
    env = run_env(run, run.placement[0], run_token="t" * 32, nats_url="nats://n:4222",
                  checkpoint_dir=Path("/home/r/checkpoints/j"),
                  base={"PATH": "/bin", "ROTA_DATABASE_URL": "postgresql://secret"})
    assert env["PATH"] == "/bin" and "ROTA_DATABASE_URL" not in env
    assert env["TRAIN_STEPS"] == "5" and env["ROTA_RUN_TOKEN"] == "t" * 32
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["ROTA_CONTROL_SUBJECT"] == f"rota.ctl.run.{run.run_id}"
    assert env["ROTA_ACK_SUBJECT"] == f"rota.run.checkpoint.{run.run_id}"
    assert env["ROTA_RESUME_FROM"] == "file:///ckpt/1"
    assert (env["ROTA_WORKER_INDEX"], env["ROTA_WORKERS"]) == ("0", "1")


def test_a_lost_run_is_stopped_lost_with_its_checkpoint_so_the_job_requeues() -> None:
    run = record(last_checkpoint_uri="s3://ck/1", last_checkpoint_at=T0 + timedelta(seconds=60))
    result = outcome(run, Exit(None, "node gpu-3 lost", lost=True), stop_reason=None,
                     stop_forced=False, ended_at=T0 + timedelta(seconds=100), time_scale=1.0)
    assert result.state == "stopped"
    assert isinstance(result.event, m.RunStopped)
    assert (result.event.reason, result.event.checkpoint_uri) == (m.StopReason.lost, "s3://ck/1")
    assert result.event.lost_gpu_seconds == 2 * 40.0


def test_a_gpu_share_gets_its_gpu_and_its_fraction_and_whole_gpus_no_fraction() -> None:
    from rota.contracts.job import WorkerPlacement

    whole = record(gpus=(2,))
    shared = record(gpus=(1,), placement=[WorkerPlacement(worker=0, node="h100-0", gpus=[1], gpu_share=0.75)])
    args: dict[str, Any] = dict(run_token="t" * 32, nats_url="nats://n:4222",
                                checkpoint_dir=Path("/c"), base={})
    env = run_env(shared, shared.placement[0], **args)
    assert (env["CUDA_VISIBLE_DEVICES"], env["ROTA_GPU_SHARE"]) == ("1", "0.75")
    assert "ROTA_GPU_SHARE" not in run_env(whole, whole.placement[0], **args)
