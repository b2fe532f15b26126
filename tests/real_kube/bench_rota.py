"""Rota's side of the benchmark: the whole stack (`rota up`'s, with embedded NATS and
PostgreSQL) and the `kubernetes` executor on the bench cluster; jobs submitted as `SubmitJob`
commands on the submission stream, as `rota submit` sends them."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import yaml
from rota.cli.running import Executor, Stack
from rota.config.model import RotaConfig
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import STREAM_CMD, submit
from rota.settings import get_settings

from tests.real_kube.bench_observe import BenchJob


@dataclass
class RotaSide:
    home: Path
    config: RotaConfig
    kubeconfig: Path
    namespace: str
    say: Callable[[str], None] = print
    stack: Stack | None = field(default=None, init=False)

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        config_path = self.home / "rota.yaml"
        config_path.write_text(yaml.safe_dump(self.config.model_dump(mode="json", exclude_none=True)))
        settings = get_settings().model_copy(update={"home": self.home})
        self.stack = Stack(settings, config_path, Executor.kubernetes, console=False,
                           extra_env={"ROTA_KUBECONFIG": str(self.kubeconfig.resolve()),
                                      "ROTA_KUBE_NAMESPACE": self.namespace, "ROTA_LOG_LEVEL": "WARNING",
                                      "ROTA_KILL_GRACE_S": "0", "ROTA_EXECUTOR_POLL_INTERVAL_S": "0.5"},
                           say=lambda text: self.say(f"rota: {text}"))
        summary = self.stack.start()
        # On a busy machine a service may still be starting when `start` gives up waiting:
        # the clock must not run while the executor is not there yet.
        deadline = time.monotonic() + 180
        while not all(s["state"] == "ready" for s in summary["services"].values()):
            ready = self.stack._wait_ready()
            summary["services"] = {n: {"state": "ready" if ok else "starting"} for n, ok in ready.items()}
            if time.monotonic() > deadline:
                raise TimeoutError(f"Rota's services not ready: {summary['services']}")
        time.sleep(2)  # the executor's first list of nodes and pods

    def pids(self) -> list[int]:
        assert self.stack is not None
        out = [p.process.pid for p in self.stack.processes if p.process is not None]
        infra = self.stack.infra
        if infra is not None and infra.nats is not None and infra.nats.process is not None:
            out.append(infra.nats.process.pid)
        if infra is not None and infra.postgres is not None and infra.postgres.pid is not None:
            out.append(infra.postgres.pid)
        return out

    def stop(self) -> None:
        if self.stack is not None:
            self.stack.stop()

    def submitter(self, annotations: Callable[[BenchJob], dict[str, str]]) -> Any:
        assert self.stack is not None and self.stack.endpoints is not None
        url, creds = self.stack.endpoints.nats_url, self.stack.endpoints.nats_creds

        async def run(_api: Any, jobs: list[BenchJob], start: float, submitted: dict[str, float]) -> None:
            nc = await nats.connect(url, user_credentials=creds)
            js = nc.jetstream()
            try:
                for job in jobs:
                    await asyncio.sleep(max(0.0, start + job.submit_s - time.monotonic()))
                    spec = m.SubmitJob(
                        name=job.job_id, team=job.team, user=job.team, queue=job.tier, flavor="h100",
                        workers=job.workers, gpus_per_worker=job.gpus_per_worker, resumable=job.resumable,
                        declared_runtime_s=max(1, math.ceil(2 * job.runtime_s)),
                        submission_id=f"bench-{job.job_id}",
                        kubernetes={"image": "rota:bench", "command": ["train"],
                                    "pod_template": {"metadata": {"annotations": annotations(job)}}})
                    env = envelope(spec, source="bench")
                    submitted[job.job_id] = time.monotonic()
                    await js.publish(submit(job.team), env.to_bytes(), stream=STREAM_CMD,
                                     headers={"Nats-Msg-Id": env.id})
            finally:
                await nc.close()

        return run
