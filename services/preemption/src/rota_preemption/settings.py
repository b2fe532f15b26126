"""The coordinator's own settings, from `ROTA_PREEMPTION_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PreemptionSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROTA_PREEMPTION_", extra="ignore")

    timer_interval_s: float = Field(
        1.0, gt=0, le=60,
        description="How often deadlines are checked: a forced stop goes out at most this late.",
    )
