"""Typed settings, read from `ROTA_*` environment variables. Secrets come only from here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

HOME_NAME = ".rota"


def nearest_home(start: Path | None = None) -> Path | None:
    """The nearest `.rota` directory at or above `start` (the working directory), if any."""
    try:
        start = start or Path.cwd()
    except OSError:  # the working directory was removed
        return None
    for directory in (start, *start.parents):
        if (directory / HOME_NAME).is_dir():
            return directory / HOME_NAME
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROTA_", extra="ignore")

    home: Path = Field(Path(HOME_NAME), description="Where embedded NATS and PostgreSQL keep "
                       "data; unset, the nearest .rota at or above the working directory (as "
                       "git finds .git), else ./.rota.")
    config: Path | None = Field(None, description="The rota.yaml to load; the example if unset.")
    nats_url: str | None = Field(None, description="An existing NATS server; embedded if unset.")
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_token: SecretStr | None = None
    nats_creds: Path | None = Field(None, description="A NATS .creds file (JWT + NKey).")
    nats_run_signing_key: Path | None = Field(
        None, description="The executor's: the seed file of the run-scoped signing key, with "
        "which it mints each run's own credentials. Unset: runs connect without credentials.")
    nats_auth_dir: Path | None = Field(
        None, description="A directory made by `rota auth init`: a service connects with its "
        "creds/<service>.creds and checks senders with roster.json, and the executor mints runs "
        "with run-signing.nk, unless the variables of each are set.")
    nats_roster: Path | None = Field(
        None, description="The public keys of the services' identities (roster.json): with it, "
        "consumers refuse events and service commands not signed by an owner of their type.")
    nats_account: str | None = Field(
        None, description="The public key of Rota's NATS account, which run credentials name.")
    auth: bool = Field(
        True, description="`rota up` starts its embedded nats-server with authentication and "
        "authorization on (false only for debugging).")
    database_url: str | None = Field(
        None, description="An existing PostgreSQL (postgresql+asyncpg://...); embedded if unset."
    )
    log_level: str = "INFO"
    max_message_bytes: int = Field(64 * 1024, ge=1024)
    outbox_poll_interval_s: float = Field(0.5, gt=0)
    outbox_batch_size: int = Field(100, ge=1, le=10_000)
    request_timeout_s: float = Field(5.0, gt=0)
    stream_replicas: int = Field(
        1, ge=1, le=5, description="Replicas of each stream and lease bucket: 3 on a NATS "
        "cluster (`rota up --nats-cluster 3` sets it), so that losing a server loses nothing.")
    nats_cluster: int = Field(
        1, ge=1, le=5, description="`rota up`: embedded nats-servers, clustered on loopback "
        "when more than 1 (`--nats-cluster`).")
    allow_single_replica_on_cluster: bool = Field(
        False, description="Run with streams of one replica on a NATS cluster, which `rota "
        "up`, `rota migrate` and every service otherwise refuse: losing the server that holds "
        "one loses it.")
    cmd_max_age_s: float = Field(
        86_400.0, ge=60, description="How long ROTA_CMD keeps a command, handled or not: long "
        "enough to outlive a restart of its consumers.")
    cmd_max_msgs_per_subject: int = Field(
        100_000, ge=1_000, description="Commands ROTA_CMD keeps per subject (a team's submits, "
        "a team's cancels, every StartRun, every StopRun), the oldest going first: one team's "
        "flood evicts only its own.")
    evt_max_bytes: int | None = Field(
        None, ge=1024**3, description="ROTA_EVT's size, if bounded (within the server's "
        "JetStream store); full, it refuses new events (the outboxes keep them) rather than "
        "forget the oldest, which replays need. Unset: as large as the server's store.")
    ack_wait_s: float = Field(30.0, gt=0, description="Redelivery after this long without an ack.")
    retry_delay_s: float = Field(2.0, ge=0, description="Delay before retrying a failed message.")
    max_deliver: int = Field(
        5, ge=1, le=1000,
        description="Deliveries of a message whose handling fails; then the dead letter.")
    batch_window_s: float = Field(
        0.05, gt=0, le=5, description="How long a batch consumer waits to fill a batch.")
    # Prometheus (issue 6). Off unless a port is given: `rota up` gives each service its own.
    metrics_port: int | None = Field(
        None, ge=0, le=65_535, description="Serve /metrics on this port (0: any free one)."
    )
    metrics_host: str = Field(
        "127.0.0.1", description="The address /metrics binds; 0.0.0.0 in a container."
    )
    # Scale-out (issue 17): this process is replica `replica` of `replicas` of its service.
    replicas: int = Field(
        1, ge=1, le=64, description="How many replicas of this service run: its partitioned "
        "consumers split the jobs by hash (README, Scale-out).")
    replica: int = Field(0, ge=0, le=63, description="This replica's index, 0 .. replicas-1.")
    ledger_lease_ttl_s: float = Field(
        6.0, ge=1, description="With several ledger replicas: a flavor whose owner stops "
        "renewing its lease is taken over this soon after.")
    scheduler_tick_s: float = Field(2.0, gt=0, description="A cycle at least this often.")
    scheduler_debounce_s: float = Field(0.05, ge=0, description="Events this close share a cycle.")
    scheduler_lease_ttl_s: float = Field(6.0, ge=1, description="A standby leads this soon after.")
    scheduler_explain_interval_s: float = Field(
        10.0, ge=0, description="Every pending job's reasons and ETA are refreshed at least "
        "this often, and again as soon as the cluster changed, 500 jobs a cycle; new jobs are "
        "explained in the cycle that first sees them.")
    scheduler_explain_duty: float = Field(
        0.02, gt=0, le=1, description="At most this share of a core goes to refreshing every "
        "pending job: a deep queue is refreshed less often than the interval.")
    scheduler_gc_sweep_s: float = Field(
        3600.0, gt=0, description="The scheduler keeps its view frozen out of the garbage "
        "collector's full passes, and collects it whole this often (rota_scheduler.heap).")

    # The notifier's channels (issue 5). Secrets are SecretStr: they never print or log.
    slack_webhook_url: SecretStr | None = Field(None, description="A Slack incoming webhook.")
    slack_token: SecretStr | None = Field(
        None, description="A Slack bot token (xoxb-...) for the Web API: DMs and channels."
    )
    slack_api_url: str | None = Field(
        None, description="The Slack Web API base URL; Slack's own if unset."
    )
    smtp_host: str | None = Field(None, description="The SMTP server; email is off if unset.")
    smtp_port: int = Field(587, ge=1, le=65_535)
    smtp_user: str | None = None
    smtp_password: SecretStr | None = None
    smtp_from: str = "rota@localhost"
    smtp_starttls: bool | None = Field(
        None, description="True: require STARTTLS; False: never; unset: when the server offers it."
    )
    smtp_timeout_s: float = Field(30.0, gt=0)
    notifier_templates: Path | None = Field(
        None, description="A directory whose templates override the notifier's built-in ones."
    )
    notifier_max_attempts: int = Field(8, ge=1, le=100, description="Then the dead letter.")
    notifier_backoff_base_s: float = Field(10.0, gt=0)
    notifier_backoff_max_s: float = Field(900.0, gt=0)
    notifier_rate_limit: int = Field(
        10, ge=1, description="Messages per recipient and channel per window; then a digest."
    )
    notifier_rate_window_s: float = Field(3600.0, gt=0)
    notifier_max_event_age_s: float = Field(
        3600.0, gt=0, description="Older events (a replay) update state but notify nobody."
    )
    notifier_poll_interval_s: float = Field(1.0, gt=0)
    notifier_send_timeout_s: float = Field(
        60.0, gt=0, description="A send not marked done by then (a crash) is tried again."
    )

    # The executor (issue 4). Runs on the `sim` backend by default, so `rota up` needs no GPUs.
    executor: Literal["sim", "local", "kubernetes"] = Field(
        "sim", description="The executor's backend: simulated runs, local subprocesses, or "
        "one Indexed Job per run on Kubernetes.",
    )
    # The `kubernetes` backend (issue 14).
    kubeconfig: Path | None = Field(
        None, description="The kubeconfig the kubernetes backend uses; none: in-cluster config.")
    kube_context: str | None = Field(None, description="A kubeconfig context; none: its current.")
    kube_namespace: str = Field(
        "rota", min_length=1, max_length=63, description="Where runs' Jobs are created.")
    kube_gpu_resource: str = Field(
        "nvidia.com/gpu", min_length=1, description="The extended resource that counts GPUs.")
    kube_start_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="A gang whose pods are not all Running by then is "
        "torn down and reported lost, so that the job requeues.")
    kube_drain_deadline_s: float = Field(
        3600.0, ge=0, le=30 * 86_400, description="A cordon of a node with Rota runs drains it"
        " with this deadline: its runs checkpoint and move, as `rota cluster drain` does.")
    node_lost_grace_s: float = Field(
        300.0, ge=0, le=86_400, description="A node NotReady this long loses its runs (they"
        " requeue from their last checkpoint); shorter, it only takes no new placement.")
    kube_pods_nats_url: str | None = Field(
        None, description="The NATS URL as pods see it (in-cluster); none: the executor's own.")
    kube_checkpoint_dir: str = Field(
        "/checkpoints", description="ROTA_CHECKPOINT_DIR in the pods (a volume the job mounts).")
    sim_speed: float = Field(
        1.0, gt=0, le=1_000_000, description="Simulated seconds per wall second (60: a minute/s)."
    )
    sim_tick_s: float = Field(0.1, gt=0, le=60, description="How often simulated runs advance.")
    kill_grace_s: float = Field(
        30.0, ge=0, le=3600, description="SIGTERM, then SIGKILL after this long (local runs)."
    )
    executor_poll_interval_s: float = Field(
        0.2, gt=0, le=60, description="How often the local backend looks for exited processes."
    )
    executor_announce_interval_s: float = Field(
        30.0, gt=0, le=3600, description="How often the executor announces which jobs it can "
        "run (`ExecutorAnnounced`); the scheduler counts it gone after three intervals without.")

    # Decision records (issue 6): the scheduler's decision log and the read model's history
    # of finished jobs are kept this long, then pruned. 0 keeps them forever.
    decision_retention_s: float = Field(
        30 * 86_400.0, ge=0, description="How long decision records are kept (0: forever)."
    )
    decision_prune_interval_s: float = Field(
        3600.0, gt=0, description="How often records past their retention are pruned."
    )
    # Every service's published outbox rows and processed-message records. Keep them at least
    # as long as a message can be redelivered: the command and control streams' max age.
    inbox_retention_s: float = Field(
        7 * 86_400.0, ge=0,
        description="How long published outbox rows and processed-message ids are kept (0: forever).",
    )

    @model_validator(mode="after")
    def _home_found_upward(self) -> Settings:
        # Unset, the home is the nearest `.rota` at or above the working directory (as git
        # finds .git), so that every command works below where `rota up` ran.
        if "home" not in self.model_fields_set and not self.home.is_dir():
            self.home = nearest_home() or self.home
        return self

    @model_validator(mode="after")
    def _replica_in_range(self) -> Settings:
        if self.replica >= self.replicas:
            raise ValueError(f"ROTA_REPLICA={self.replica} must be below ROTA_REPLICAS="
                             f"{self.replicas}")
        return self

    @property
    def runtime_file(self) -> Path:
        """Written by `rota up`: the endpoints that other CLI commands connect to."""
        return self.home / "run" / "endpoints.json"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
