"""Generates `contracts/asyncapi.yaml` and `contracts/schemas/*.json` from the models.

The AsyncAPI document comes from a FastStream broker that declares every channel Rota uses
with its typed envelope: commands and API requests as operations Rota receives, events and
control notices as operations Rota sends. No handler here ever runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI
from pydantic import BaseModel

from rota import __version__
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.envelope import (
    CONTROL_TYPES,
    EVENT_TYPES,
    MESSAGE_TYPES,
    Envelope,
)
from rota.contracts.job import JobSpec

RECEIVED: list[tuple[str, type[BaseModel], str]] = [
    ("rota.cmd.submit.{team}", m.SubmitJob, "JetStream ROTA_CMD; the team must match data.team."),
    ("rota.cmd.cancel.{team}", m.CancelJob, "JetStream ROTA_CMD."),
    (s.RUN_START, m.StartRun, "JetStream ROTA_CMD; consumed by the executor."),
    (s.RUN_STOP, m.StopRun, "JetStream ROTA_CMD; consumed by the executor."),
    ("rota.api.submit.{team}", m.SubmitJob, "Request/reply: the synchronous twin of submit."),
    (s.API_SUBMIT, m.SubmitJob, "Request/reply for trusted producers; no subject team check."),
    ("rota.api.cancel.{team}", m.CancelJob, "Request/reply: the synchronous twin of cancel."),
    (s.API_JOB_GET, m.GetJob, "Request/reply; answers an ApiReply envelope."),
    (s.API_JOB_WHY, m.GetJob, "Request/reply: every wait reason, the ETA and the score factors."),
    (s.API_JOB_TRACE, m.GetJob, "Request/reply: the job's timeline of decisions and events."),
    (s.API_JOBS_LIST, m.ListJobs, "Request/reply; answers an ApiReply envelope."),
    (s.API_QUEUES_SUMMARY, m.SummarizeQueues, "Request/reply; answers an ApiReply envelope."),
    (s.NOTIFICATIONS_LIST, m.ListNotifications, "Request/reply, answered by the notifier."),
    (s.PREEMPTION_PLANS, m.ListPreemptions,
     "Request/reply, answered by the preemption coordinator."),
    (s.LEDGER_ALLOCATIONS, m.ListAllocations,
     "Request/reply, answered by the ledger: allocations per run (the scheduler's rebuild)."),
]


def _receiver(model: type[BaseModel]) -> Any:
    async def handler(msg: Any) -> None:  # pragma: no cover - documentation only
        return None

    handler.__annotations__ = {"msg": Envelope[model], "return": None}  # type: ignore[valid-type]
    handler.__name__ = model.__name__
    return handler


def spec_broker() -> NatsBroker:
    broker = NatsBroker("nats://localhost:4222", description="Rota over NATS JetStream")
    for subject, model, note in RECEIVED:
        broker.subscriber(
            subject, title=f"{subject}:{model.__name__}", description=f"{model.__doc__ or ''} {note}"
        )(_receiver(model))
    for name, model in EVENT_TYPES.items():
        subject = s.EVENT_SUBJECTS[name]
        broker.publisher(
            subject, title=f"{subject}:{name}", schema=Envelope[model],  # type: ignore[valid-type]
            description=f"JetStream ROTA_EVT. {model.__doc__ or ''}".strip(),
        )
    for name, model in CONTROL_TYPES.items():
        broker.publisher(
            "rota.ctl.run.{run_id}", title=f"rota.ctl.run.{{run_id}}:{name}",
            schema=Envelope[model],  # type: ignore[valid-type]
            description=f"JetStream ROTA_CTL. {model.__doc__ or ''}".strip(),
        )
    return broker


def asyncapi_yaml() -> str:
    spec = AsyncAPI(
        spec_broker(), title="Rota", version=__version__,
        description="Messages of Rota, a checkpoint-aware queue for GPU training jobs. "
        "Every message is one envelope; see contracts/README.md.",
    )
    # FastStream orders channels by registration internals; sorted keys keep the file stable.
    document = yaml.safe_load(spec.to_specification().to_yaml())
    return yaml.safe_dump(document, sort_keys=True, width=100)


def json_schemas() -> dict[str, str]:
    schemas = {
        f"{name}.json": Envelope[model].model_json_schema()  # type: ignore[valid-type]
        for name, model in MESSAGE_TYPES.items()
    }
    schemas["JobSpec.json"] = JobSpec.model_json_schema()
    return {name: json.dumps(schema, indent=2, sort_keys=True) + "\n"
            for name, schema in sorted(schemas.items())}


def generated(root: Path) -> dict[Path, str]:
    from rota.auth.permissions import shipped_table

    files = {root / "asyncapi.yaml": asyncapi_yaml(),
             root / "permissions.json": json.dumps(shipped_table(), indent=2) + "\n"}
    files.update({root / "schemas" / name: text for name, text in json_schemas().items()})
    return files


def write(root: Path) -> list[Path]:
    files = generated(root)
    (root / "schemas").mkdir(parents=True, exist_ok=True)
    for stale in (root / "schemas").glob("*.json"):
        if stale not in files:
            stale.unlink()
    for path, text in files.items():
        path.write_text(text)
    return sorted(files)


def differences(root: Path) -> list[str]:
    """Files under `root` that differ from what the code generates (empty when in sync)."""
    files = generated(root)
    stale = [str(p) for p in (root / "schemas").glob("*.json") if p not in files]
    changed = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    return sorted(stale + changed)
