"""The console's typed settings, from `ROTA_CONSOLE_*` variables (the NATS ones stay `ROTA_*`)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROTA_CONSOLE_", extra="ignore")

    bind: str = Field("127.0.0.1", description="The address the console listens on.")
    port: int = Field(8089, ge=0, le=65_535, description="The console's HTTP port.")
    jaeger_url: str | None = Field(
        None, description="Jaeger's UI, e.g. http://127.0.0.1:16686: a job's trace id links "
        "to <url>/trace/<trace id>. No link when unset.")
    trusted_header: str | None = Field(
        None, description="Behind the platform's proxy: the request header that names the "
        "viewer's team (`*` for a platform viewer, who sees every team). Unset: viewers log in "
        "with their team's credentials. Set it only when the proxy strips the header from "
        "what clients send.")
    session_secret: SecretStr | None = Field(
        None, description="Signs the session cookie; a random one per start when unset, so "
        "a restart logs everyone out.")
    secure_cookies: bool = Field(
        False, description="Mark the session cookie Secure (the console is served over HTTPS).")
    sample_interval_s: float = Field(
        5.0, gt=0, description="How often the fair-share plot samples the teams' GPU use.")
    history_points: int = Field(720, ge=2, le=100_000, description="Fair-share samples kept.")
