"""Where NATS and PostgreSQL are: from `ROTA_*` settings, else from the running `rota up`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rota.settings import Settings


class NotRunningError(RuntimeError):
    pass


@dataclass(frozen=True)
class Endpoints:
    nats_url: str
    database_url: str
    # The admin credentials of an embedded NATS with auth on, for the CLI on this machine.
    nats_creds: str | None = None


def write_runtime_file(path: Path, endpoints: Endpoints, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"nats_url": endpoints.nats_url, "database_url": endpoints.database_url,
                    "nats_creds": endpoints.nats_creds, "pid": pid})
    )
    tmp.replace(path)


def running_creds(settings: Settings) -> str | None:
    """The admin `.creds` of the `rota up` running under `ROTA_HOME`, if it has auth on."""
    try:
        creds = json.loads(settings.runtime_file.read_text()).get("nats_creds")
    except (OSError, ValueError, AttributeError):
        return None
    return creds if isinstance(creds, str) else None


def resolve(settings: Settings, *, need_database: bool = True) -> Endpoints:
    """Clients that only talk to NATS (the CLI) pass `need_database=False`."""
    nats_url, database_url = settings.nats_url, settings.database_url
    if nats_url and (database_url or not need_database):
        return Endpoints(nats_url, database_url or "")
    try:
        running = json.loads(settings.runtime_file.read_text())
    except (OSError, ValueError):
        missing = " and ".join(
            name for name, value in
            (("ROTA_NATS_URL", nats_url), ("ROTA_DATABASE_URL", database_url or not need_database))
            if not value
        )
        raise NotRunningError(
            f"{missing} not set and no `rota up` is running under {settings.home}: start one "
            "with `rota up`, or point at the home of a running one with ROTA_HOME=<its .rota>"
            " (unset, the nearest .rota at or above the working directory)"
        ) from None
    return Endpoints(nats_url or running["nats_url"], database_url or running["database_url"])
