"""Builders for the executor's unit tests: run records without a database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rota.contracts.job import JobSpec, WorkerPlacement
from rota.ids import new_id
from rota_executor.backend import RunRecord

from tests.builders import spec_doc

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(*, sim: dict[str, Any] | None = None, resumable: bool = True,
           resume_from: str | None = None, gpus: tuple[int, ...] = (0, 1),
           job_id: str | None = None, **values: Any) -> RunRecord:
    overrides: dict[str, Any] = {"resumable": resumable, "gpus_per_worker": len(gpus)}
    if sim is not None:
        overrides["sim"] = sim
    spec = JobSpec.model_validate(spec_doc(**overrides))
    base: dict[str, Any] = dict(
        run_id=new_id(), job_id=job_id or new_id(), attempt=1, backend="sim", spec=spec,
        placement=[WorkerPlacement(worker=0, node="h100-0", gpus=list(gpus))],
        state="running", started_at=T0, resume_from=resume_from,
        last_checkpoint_uri=resume_from,
    )
    base.update(values)
    return RunRecord(**base)
