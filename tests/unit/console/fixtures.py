"""Small builders for the console's tests: API rows as the services answer them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rota.config import parse_config

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

CONFIG = parse_config({
    "cluster": {"flavors": [{"name": "gpu"}],
                "node_pools": [{"name": "node", "flavor": "gpu", "count": 2, "gpus_per_node": 4}]},
    "queues": {"production": {"weight": 3.0, "long_wait_threshold_s": 600},
               "training": {"weight": 2.0, "long_wait_threshold_s": 3600},
               "experiment": {"weight": 1.0, "long_wait_threshold_s": 3600}},
    "teams": {"nlp": {"quota": {"gpu": 4}}, "vision": {"quota": {"gpu": 4}},
              "research": {"quota": {"gpu": 0}}},
}, source="test")


def job(name: str, team: str = "nlp", *, queue: str = "training", state: str = "pending",
        waited_s: float = 60, reasons: list[str] | None = None, job_id: str | None = None,
        **extra: Any) -> dict[str, Any]:
    job_id = job_id or f"01a00000-0000-7000-8000-{abs(hash(name)) % 10**12:012d}"
    wait = ({"reasons": [{"code": c, "message": f"{c.lower()} says why", "details": {}}
                         for c in reasons or []], "eta": None, "position": 1}
            if state == "pending" else None)
    return {"job_id": job_id, "short_id": job_id[-12:], "name": name, "team": team,
            "user_name": "alice", "queue": queue, "flavor": "gpu", "workers": 1,
            "gpus_per_worker": 4, "gpus": 4, "state": state,
            "submitted_at": (NOW - timedelta(seconds=waited_s)).isoformat(),
            "wait": wait, "borrowed_gpus": 0, **extra}


def allocation(job_id: str, team: str, queue: str, node: str, gpus: list[int], *,
               borrowed: int = 0, run_id: str | None = None) -> dict[str, Any]:
    return {"run_id": run_id or f"run-{job_id}", "job_id": job_id, "team": team, "queue": queue,
            "flavor": "gpu", "gpus": len(gpus), "borrowed_gpus": borrowed,
            "placement": [{"worker": 0, "node": node, "gpus": gpus}]}


def summary_row(team: str, queue: str = "training", *, in_use: int = 4, borrowed: int = 0,
                quota: int = 4) -> dict[str, Any]:
    return {"queue": queue, "team": team, "flavor": "gpu", "pending_jobs": 0, "pending_gpus": 0,
            "running_jobs": 1, "gpus_in_use": in_use, "borrowed_gpus": borrowed,
            "oldest_pending_at": None, "quota": quota}
