"""The console's typed settings, from `ROTA_CONSOLE_*` variables (the NATS ones stay `ROTA_*`)."""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr, field_validator
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
        "with their team's credentials. Believed only from `trusted_proxies` and, when "
        "`trusted_proxy_secret` is set, with that secret; the proxy must strip the header "
        "from what clients send.")
    trusted_proxies: list[str] = Field(
        ["127.0.0.1/32", "::1/128"], description="With `trusted_header`: the addresses "
        "(CIDR) a request must come from for its header to be believed, as JSON, e.g. "
        "'[\"10.0.0.0/8\"]'. Loopback by default: a proxy beside the console.")
    trusted_proxy_secret: SecretStr | None = Field(
        None, description="With `trusted_header`: a secret the proxy sends in "
        "`X-Rota-Proxy-Secret` on every request; a request without it is refused.")
    allowed_origins: list[str] = Field(
        [], description="Origins (`https://console.example.com`) a state-changing request "
        "may come from besides the console's own Host, as JSON: for a proxy that rewrites Host.")
    session_secret: SecretStr | None = Field(
        None, description="Signs the session cookie; a random one per start when unset.")
    session_max_age_s: float = Field(
        12 * 3600.0, gt=0, le=30 * 86_400, description="The longest a login lasts; shorter "
        "when the credentials expire sooner.")
    login_attempts_per_minute: int = Field(
        10, ge=1, le=10_000, description="Logins one client address may try per minute.")
    secure_cookies: bool = Field(
        False, description="Mark the session cookie Secure (the console is served over HTTPS).")
    sample_interval_s: float = Field(
        5.0, gt=0, description="How often the fair-share plot samples the teams' GPU use.")
    history_points: int = Field(720, ge=2, le=100_000, description="Fair-share samples kept.")

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(f"{text!r} is not an address or a CIDR network") from None
        return value

    def trusted_proxies_allow(self, host: str | None) -> bool:
        """Whether a request from `host` may name its viewer by `trusted_header`."""
        try:
            peer = ipaddress.ip_address(host or "")
        except ValueError:
            return False
        # A dual-stack listener reports an IPv4 proxy as ::ffff:a.b.c.d.
        mapped = peer.ipv4_mapped if isinstance(peer, ipaddress.IPv6Address) else None
        return any(address in ipaddress.ip_network(n, strict=False)
                   for n in self.trusted_proxies for address in (peer, mapped) if address)
