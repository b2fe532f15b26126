"""Typed settings, read from `ROTA_*` environment variables. Secrets come only from here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROTA_", extra="ignore")

    home: Path = Field(Path(".rota"), description="Where embedded NATS and PostgreSQL keep data.")
    config: Path | None = Field(None, description="The rota.yaml to load; the example if unset.")
    nats_url: str | None = Field(None, description="An existing NATS server; embedded if unset.")
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_token: SecretStr | None = None
    nats_creds: Path | None = Field(None, description="A NATS .creds file (JWT + NKey).")
    database_url: str | None = Field(
        None, description="An existing PostgreSQL (postgresql+asyncpg://...); embedded if unset."
    )
    log_level: str = "INFO"
    max_message_bytes: int = Field(64 * 1024, ge=1024)
    outbox_poll_interval_s: float = Field(0.5, gt=0)
    outbox_batch_size: int = Field(100, ge=1, le=10_000)
    request_timeout_s: float = Field(5.0, gt=0)
    stream_replicas: int = Field(1, ge=1, le=5)
    ack_wait_s: float = Field(30.0, gt=0, description="Redelivery after this long without an ack.")
    retry_delay_s: float = Field(2.0, ge=0, description="Delay before retrying a failed message.")

    @property
    def runtime_file(self) -> Path:
        """Written by `rota up`: the endpoints that other CLI commands connect to."""
        return self.home / "run" / "endpoints.json"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
