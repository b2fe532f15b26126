"""The Helm chart `deploy/helm/rota`, linted and rendered by real Helm v4 (`tests/helm.py`: the
binary deploy/kube-dev/build.sh builds), each manifest also checked against the Kubernetes
OpenAPI schema with kubernetes-validate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rota.config.loader import parse_config

from tests.helm import CHART, HelmFailed, lint, template

pytestmark = pytest.mark.real_kube  # every test here runs the helm binary
SERVICES = {"submission", "ledger", "scheduler", "preemption", "notifier", "executor"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", [{}, {"auth": {"secretName": "rota-auth"}, "natsUrl": "nats://x:4222",
                                         "executor": {"namespace": "training", "podsNatsUrl": "nats://n:4222"}}],
                         ids=["defaults", "auth-and-own-nats"])
def test_every_manifest_passes_the_kubernetes_schema(values: dict[str, Any]) -> None:
    docs = template(values=values)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_six_services_as_deployments_the_scheduler_twice_scraped_by_prometheus() -> None:
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in by_kind(template(), "Deployment")}
    deployments.pop("console")
    assert deployments.keys() == SERVICES
    assert deployments["scheduler"]["spec"]["replicas"] == 2
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        (container,) = pod["spec"]["containers"]
        assert container["command"] == ["python", "-m", f"rota_{name}"]
        env = {e["name"]: e for e in container["env"]}
        assert env["ROTA_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "rota-database", "key": "url"}
        assert env["ROTA_NATS_URL"]["value"] == "nats://nats:4222"
    executor = deployments["executor"]["spec"]["template"]["spec"]
    assert executor["serviceAccountName"] == "rota-executor"
    env = {e["name"]: e.get("value") for e in executor["containers"][0]["env"]}
    assert env["ROTA_EXECUTOR"] == "kubernetes" and env["ROTA_KUBE_NAMESPACE"] == "rota"
    assert "serviceAccountName" not in deployments["ledger"]["spec"]["template"]["spec"]


def test_rbac_is_least_privilege_a_role_for_run_objects_and_nodes_read_only() -> None:
    docs = template(values={"executor": {"namespace": "training"}})
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "training"
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules == {(("batch",), ("jobs",)): {"get", "list", "watch", "create", "delete"},
                     (("",), ("pods",)): {"get", "list", "watch", "patch", "delete"},
                     (("",), ("services", "secrets")): {"get", "create", "delete"}}
    (cluster_role,) = by_kind(docs, "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "rota-executor", "namespace": "rota"}


def test_rota_yaml_comes_from_a_configmap_and_is_valid() -> None:
    (config,) = [d for d in by_kind(template(), "ConfigMap") if d["metadata"]["name"] == "rota-config"]
    parse_config(yaml.safe_load(config["data"]["rota.yaml"]), source="the chart's rota.yaml")


def test_the_dashboards_ship_as_configmaps() -> None:
    maps = [d for d in by_kind(template(), "ConfigMap") if "grafana_dashboard" in d["metadata"].get("labels", {})]
    shipped = sorted((CHART.parents[1] / "grafana" / "dashboards").glob("*.json"))
    assert sorted(next(iter(m["data"])) for m in maps) == [p.name for p in shipped]
    for m in maps:
        (name, text), = m["data"].items()
        assert text.strip() == (CHART / "dashboards" / name).read_text().strip()


def test_helm_lint_passes_strict_with_the_defaults_and_with_every_option() -> None:
    lint()
    lint(values={"auth": {"secretName": "rota-auth"}, "natsUrl": "nats://x:4222",
                 "executor": {"namespace": "training", "podsNatsUrl": "nats://n:4222"},
                 "services": {"executor": {"replicas": 3}}})


def test_by_default_rota_uses_the_existing_nats_at_nats_url() -> None:
    docs = template(values={"natsUrl": "nats://nats.messaging:4222"})
    urls = {e["value"] for d in by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet")
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "ROTA_NATS_URL"}
    assert urls == {"nats://nats.messaging:4222"}
    with pytest.raises(HelmFailed, match="natsUrl: the URL of an existing NATS"):
        template(values={"natsUrl": ""})


def test_the_bundled_nats_once_its_dependency_is_declared_gets_the_nats_values(tmp_path: Path) -> None:
    """Chart.yaml carries the official NATS chart's declaration commented out (it is not vendored
    and Helm refuses a declared dependency missing from charts/). Uncommented as its comment says,
    with a STAND-IN chart named nats in charts/ (not the official one, which cannot be fetched
    here), Helm passes the `nats:` values to it and Rota's pods use its Service."""
    chart = tmp_path / "rota"
    shutil.copytree(CHART, chart)
    lines = (chart / "Chart.yaml").read_text().splitlines()
    start = lines.index("# dependencies:")
    lines[start:start + 5] = [line.removeprefix("# ") for line in lines[start:start + 5]]
    (chart / "Chart.yaml").write_text("\n".join(lines) + "\n")
    (nats,) = yaml.safe_load((chart / "Chart.yaml").read_text())["dependencies"]
    assert (nats["name"], nats["repository"], nats["condition"]) == (
        "nats", "https://nats-io.github.io/k8s/helm/charts/", "nats.enabled")
    stand_in = chart / "charts" / "nats"
    (stand_in / "templates").mkdir(parents=True)
    (stand_in / "Chart.yaml").write_text("apiVersion: v2\nname: nats\nversion: 1.2.0\n")
    (stand_in / "templates" / "values.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stand-in-nats-values}\n"
        "data: {config: {{ .Values.config | toJson | quote }}}\n")

    docs = template(chart, sets=["nats.enabled=true"])
    (values,) = [d for d in docs if d["metadata"]["name"] == "stand-in-nats-values"]
    config = yaml.safe_load(values["data"]["config"])
    assert config["jetstream"]["enabled"] is True and config["cluster"]["replicas"] == 3
    (scheduler,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "rota-scheduler"]
    env = {e["name"]: e.get("value") for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ROTA_NATS_URL"] == "nats://rota-nats:4222"
    assert not [d for d in template(chart) if d["metadata"]["name"] == "stand-in-nats-values"]


def test_the_console_is_a_deployment_and_a_service_with_its_own_identity() -> None:
    docs = template(values={"auth": {"secretName": "rota-auth"}, "console": {"trustedHeader": "X-Rota-Team"}})
    (console,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "rota-console"]
    (container,) = console["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["command"] == ["python", "-m", "rota_console"]
    assert env["ROTA_NATS_CREDS"] == "/auth/creds/console.creds"
    assert env["ROTA_CONSOLE_TRUSTED_HEADER"] == "X-Rota-Team" and env["ROTA_CONSOLE_BIND"] == "0.0.0.0"
    assert "ROTA_DATABASE_URL" not in env  # it reads only through the NATS API
    (service,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "rota-console"]
    assert service["spec"]["ports"][0]["port"] == 8089
    assert not [d for d in template(values={"console": {"enabled": False}})
                if d["metadata"]["name"] == "rota-console"]


def test_replicas_of_partitioned_services_are_statefulsets_that_know_their_index() -> None:
    values = {"services": {"submission": {"replicas": 2}, "executor": {"replicas": 3},
                           "ledger": {"replicas": 2}}}
    docs = template(values=values)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    sets = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in by_kind(docs, "StatefulSet")}
    assert sets.keys() == {"submission", "executor", "ledger"}
    for name, count in (("submission", 2), ("executor", 3), ("ledger", 2)):
        spec = sets[name]["spec"]
        assert spec["replicas"] == count and spec["podManagementPolicy"] == "Parallel"
        env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["ROTA_REPLICAS"]["value"] == str(count)
        assert env["ROTA_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['apps.kubernetes.io/pod-index']")
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]
                   for d in by_kind(docs, "Deployment")}
    # One replica, or the scheduler's leader and standby: a Deployment, with no index.
    assert deployments == {"notifier", "preemption", "scheduler", "console"}
    scheduler = next(d for d in by_kind(docs, "Deployment")
                     if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler")
    scheduler_env = {e["name"] for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "ROTA_REPLICAS" not in scheduler_env and "ROTA_REPLICA" not in scheduler_env


def test_more_than_one_coordinator_is_refused() -> None:
    with pytest.raises(HelmFailed, match="the coordinator runs as one instance"):
        template(values={"services": {"preemption": {"replicas": 2}}})
