"""The Helm chart `deploy/helm/rota`, rendered by `tests/helm_render.py` (a renderer of the
subset of Go templates the chart uses, NOT helm, which cannot be installed here), each manifest
checked against the Kubernetes OpenAPI schema with kubernetes-validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rota.config.loader import parse_config

from tests.helm_render import TemplateError, render_chart

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "rota"
SERVICES = {"submission", "ledger", "scheduler", "preemption", "notifier", "executor"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", [{}, {"auth": {"secretName": "rota-auth"}, "natsUrl": "nats://x:4222",
                                         "executor": {"namespace": "training", "podsNatsUrl": "nats://n:4222"}}],
                         ids=["defaults", "auth-and-own-nats"])
def test_every_manifest_passes_the_kubernetes_schema(values: dict[str, Any]) -> None:
    docs = render_chart(CHART, values)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_six_services_as_deployments_the_scheduler_twice_scraped_by_prometheus() -> None:
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in by_kind(render_chart(CHART), "Deployment")}
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
        assert env["ROTA_NATS_URL"]["value"] == "nats://rota-nats:4222"
    executor = deployments["executor"]["spec"]["template"]["spec"]
    assert executor["serviceAccountName"] == "rota-executor"
    env = {e["name"]: e.get("value") for e in executor["containers"][0]["env"]}
    assert env["ROTA_EXECUTOR"] == "kubernetes" and env["ROTA_KUBE_NAMESPACE"] == "rota"
    assert "serviceAccountName" not in deployments["ledger"]["spec"]["template"]["spec"]


def test_rbac_is_least_privilege_a_role_for_run_objects_and_nodes_read_only() -> None:
    docs = render_chart(CHART, {"executor": {"namespace": "training"}})
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
    (config,) = [d for d in by_kind(render_chart(CHART), "ConfigMap") if d["metadata"]["name"] == "rota-config"]
    parse_config(yaml.safe_load(config["data"]["rota.yaml"]), source="the chart's rota.yaml")


def test_the_dashboards_ship_as_configmaps() -> None:
    maps = [d for d in by_kind(render_chart(CHART), "ConfigMap") if "grafana_dashboard" in d["metadata"].get("labels", {})]
    shipped = sorted((CHART.parents[1] / "grafana" / "dashboards").glob("*.json"))
    assert sorted(next(iter(m["data"])) for m in maps) == [p.name for p in shipped]
    for m in maps:
        (name, text), = m["data"].items()
        assert text.strip() == (CHART / "dashboards" / name).read_text().strip()


def test_nats_is_the_official_chart_with_jetstream_and_three_replicas() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (nats,) = chart["dependencies"]
    assert (nats["name"], nats["repository"]) == ("nats", "https://nats-io.github.io/k8s/helm/charts/")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["nats"]["config"]
    assert values["jetstream"]["enabled"] is True and values["cluster"]["replicas"] == 3


def test_the_renderer_refuses_what_it_does_not_support(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "Chart.yaml").write_text("name: t\nversion: 0.1.0\n")
    (tmp_path / "values.yaml").write_text("a: {b: 1}\n")
    (tmp_path / "templates" / "x.yaml").write_text("k: {{ .Values.a.b | upper }}\n")
    with pytest.raises(TemplateError, match="unsupported function 'upper'"):
        render_chart(tmp_path)
    (tmp_path / "templates" / "x.yaml").write_text("{{- range $k, $v := .Values.a }}\n{{ $k }}: {{ $v | quote }}\n{{- end }}\n")
    assert render_chart(tmp_path) == [{"b": "1"}]


def test_the_console_is_a_deployment_and_a_service_with_its_own_identity() -> None:
    docs = render_chart(CHART, {"auth": {"secretName": "rota-auth"}, "console": {"trustedHeader": "X-Rota-Team"}})
    (console,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "rota-console"]
    (container,) = console["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["command"] == ["python", "-m", "rota_console"]
    assert env["ROTA_NATS_CREDS"] == "/auth/creds/console.creds"
    assert env["ROTA_CONSOLE_TRUSTED_HEADER"] == "X-Rota-Team" and env["ROTA_CONSOLE_BIND"] == "0.0.0.0"
    assert "ROTA_DATABASE_URL" not in env  # it reads only through the NATS API
    (service,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "rota-console"]
    assert service["spec"]["ports"][0]["port"] == 8089
    assert not [d for d in render_chart(CHART, {"console": {"enabled": False}})
                if d["metadata"]["name"] == "rota-console"]


def test_replicas_of_partitioned_services_are_statefulsets_that_know_their_index() -> None:
    values = {"services": {"submission": {"replicas": 2}, "executor": {"replicas": 3},
                           "ledger": {"replicas": 2}}}
    docs = render_chart(CHART, values)
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
    env = {e["name"] for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "ROTA_REPLICAS" not in env and "ROTA_REPLICA" not in env


def test_more_than_one_coordinator_is_refused() -> None:
    with pytest.raises(TemplateError, match="the coordinator runs as one instance"):
        render_chart(CHART, {"services": {"preemption": {"replicas": 2}}})
