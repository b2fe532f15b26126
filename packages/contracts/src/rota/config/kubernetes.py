"""The `kubernetes:` section of `rota.yaml`: what a team's pod template may name and mount when
its jobs run on the `kubernetes` executor.

Safe when absent: a run may name only the service account `default`, mount only emptyDir,
configMap, downwardAPI, projected (never a service-account token), and the Secrets and
PersistentVolumeClaims its team is given here, which is none. Everything else a team could use
to take over the runs' namespace or the node (host paths, host namespaces, privileged
containers, another run's Secret) is refused at submission whatever this section says: see
`rota.k8s.pod_policy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from rota.contracts.common import TeamName

KubeName = Annotated[str, StringConstraints(
    min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
"""An object's name in Kubernetes (a DNS-1123 subdomain): a Secret, a claim, a ServiceAccount."""

ROTA_OWN_PREFIX = "rota-"
"""Rota's own objects: each run's Secret `rota-<run_id>-run` (its token and NATS credentials),
the chart's auth and database Secrets (`rota-auth`, `rota-database`) and service accounts. No
team may name one, whatever `rota.yaml` says."""

VolumeType = Literal["emptyDir", "configMap", "downwardAPI", "projected", "secret",
                     "persistentVolumeClaim", "csi", "ephemeral"]
"""The volume types Pod Security Admission's `restricted` level admits; no other (hostPath,
nfs, iscsi...) can be allowed."""

DEFAULT_VOLUME_TYPES: tuple[VolumeType, ...] = (
    "emptyDir", "configMap", "downwardAPI", "projected", "secret", "persistentVolumeClaim")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TeamMounts(_Strict):
    """What one team's runs may name beyond what every team may."""

    secrets: list[KubeName] = Field(
        default_factory=list,
        description="Secrets in the runs' namespace this team may mount, read through env, or"
        " pull images with.")
    pvcs: list[KubeName] = Field(
        default_factory=list,
        description="PersistentVolumeClaims in the runs' namespace this team may mount.")
    service_accounts: list[KubeName] = Field(
        default_factory=list, description="ServiceAccounts this team's runs may run as.")


class KubernetesPolicy(_Strict):
    """What a job's `kubernetes:` template may name; see the module's docstring."""

    service_accounts: list[KubeName] = Field(
        default_factory=lambda: ["default"],
        description="ServiceAccounts any team's runs may run as (a run never gets its token).")
    volume_types: list[VolumeType] = Field(
        default_factory=lambda: list(DEFAULT_VOLUME_TYPES),
        description="The volume types a run may use; Secrets and claims only those its team is"
        " given in `teams`.")
    teams: dict[TeamName, TeamMounts] = Field(
        default_factory=dict, description="Per team: the Secrets, claims and service accounts"
        " it may name.")

    def team(self, team: str) -> TeamMounts:
        return self.teams.get(team) or TeamMounts()

    def service_accounts_of(self, team: str) -> frozenset[str]:
        return frozenset([*self.service_accounts, *self.team(team).service_accounts])


def is_rota_own(name: str) -> bool:
    return name.startswith(ROTA_OWN_PREFIX)


def policy_issues(policy: KubernetesPolicy, teams: Iterable[str]) -> list[tuple[str, str]]:
    """(key path, rule) for what the model alone cannot see: teams that must exist, and names
    of Rota's own objects, which no team may be given."""
    known = set(teams)
    issues: list[tuple[str, str]] = []
    for i, account in enumerate(policy.service_accounts):
        if is_rota_own(account):
            issues.append((f"kubernetes.service_accounts.{i}",
                           f"{account!r}: names starting {ROTA_OWN_PREFIX!r} are Rota's own"))
    for team, mounts in policy.teams.items():
        if team not in known:
            issues.append((f"kubernetes.teams.{team}", "unknown team (not in teams)"))
        for key in ("secrets", "pvcs", "service_accounts"):
            for i, name in enumerate(getattr(mounts, key)):
                if is_rota_own(name):
                    issues.append((f"kubernetes.teams.{team}.{key}.{i}",
                                   f"{name!r}: names starting {ROTA_OWN_PREFIX!r} are Rota's own"
                                   " (run Secrets, the chart's auth and database Secrets)"))
    return issues
