"""Each run's own NATS credentials, minted by the executor when it launches the run.

The run-scoped signing key can sign nothing but run identities: the server grants a user it
signed only the run template (its own notices, its own acknowledgement), bound to the run id
in the user's name. The file is written beside the run's log, readable by its owner only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rota.auth.keys import run_creds
from rota.settings import Settings


@dataclass(frozen=True)
class RunMinter:
    signing_seed: str
    account_public: str
    directory: Path

    @classmethod
    def from_settings(cls, settings: Settings, directory: Path) -> RunMinter | None:
        """None when this executor has no run signing key: its runs connect without
        credentials, which only a NATS without auth accepts."""
        if settings.nats_run_signing_key is None or not settings.nats_account:
            return None
        seed = settings.nats_run_signing_key.read_text().strip()
        return cls(seed, settings.nats_account, directory)

    def mint(self, run_id: str) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{run_id}.creds"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(run_creds(run_id, self.signing_seed, self.account_public))
        return path

    def forget(self, run_id: str) -> None:
        (self.directory / f"{run_id}.creds").unlink(missing_ok=True)
