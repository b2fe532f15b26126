"""The bundled NATS (`deploy/helm/rota/charts/nats`, Rota's own sub-chart, on with
`nats.enabled`), rendered and linted by real Helm v4 (`tests/helm.py`); its nats.conf is also
checked by the real nats-server (`-t`) with the server.conf `rota auth init` writes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rota.auth.keys import AuthDir
from rota.embedded import nats_server_binary

from tests.helm import CHART, HelmFailed, lint, template, workloads
from tests.network_policy import PodAt, admits

pytestmark = pytest.mark.real_kube  # every test here runs the helm binary
SERVICES = {"submission", "ledger", "scheduler", "preemption", "notifier", "executor"}
BUNDLED = ["nats.enabled=true"]


def nats_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "nats"]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def nats_conf(docs: list[dict[str, Any]], release: str = "rota") -> str:
    return str(one(docs, "ConfigMap", f"{release}-nats-config")["data"]["nats.conf"])


def env_of_services(docs: list[dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    return {name: {e["name"]: e.get("value") for e in w["spec"]["template"]["spec"]["containers"][0]["env"]}
            for name, w in workloads(docs).items() if name in SERVICES}


def check_with_nats_server(docs: list[dict[str, Any]], root: Path, server_conf: str | None) -> None:
    """Lays out the pod's config volume (and auth volume) under `root` at their mount paths, as
    the kubelet would, and has nats-server test the config as the pod would start it."""
    pod = one(docs, "StatefulSet", "rota-nats")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_dir = root / mounts["config"].lstrip("/")
    config_dir.mkdir(parents=True)
    (config_dir / "nats.conf").write_text(nats_conf(docs))
    if server_conf is not None:
        (item,) = volumes["auth"]["secret"]["items"]
        assert item["key"] == "server.conf"
        auth_file = root / mounts["auth"].lstrip("/") / item["path"]
        auth_file.parent.mkdir(parents=True)
        auth_file.write_text(server_conf)
    assert container["command"] == ["nats-server", "--config", f"{mounts['config']}/nats.conf"]
    done = subprocess.run([str(nats_server_binary()), "--config", str(config_dir / "nats.conf"), "-t"],
                          capture_output=True, text=True, check=False, env={"POD_NAME": "rota-nats-0"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_by_default_no_nats_object_is_rendered_and_the_chart_lints() -> None:
    docs = template()
    assert not nats_objects(docs)
    assert not [d for d in docs if "nats" in d["metadata"]["name"] and d["kind"] != "NetworkPolicy"]
    assert all("ROTA_STREAM_REPLICAS" not in env for env in env_of_services(docs).values())
    lint()


def test_helm_lint_strict_passes_with_the_bundled_nats_and_every_manifest_fits_the_schema() -> None:
    lint(sets=BUNDLED)
    lint(values={"auth": {"enabled": False},
                 "nats": {"enabled": True, "auth": {"secretName": ""}, "allowNoAuth": True}})
    docs = template(sets=BUNDLED)
    assert {d["kind"] for d in nats_objects(docs)} == {
        "StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_the_dependency_is_declared_with_its_condition_and_the_chart_is_unpacked_beside_it() -> None:
    (dependency,) = yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    assert dependency["name"] == "nats" and dependency["condition"] == "nats.enabled"
    bundled = yaml.safe_load((CHART / "charts" / "nats" / "Chart.yaml").read_text())
    assert (bundled["name"], bundled["version"]) == ("nats", dependency["version"])


def test_three_servers_clustered_over_routes_with_jetstream_on_a_volume_each(tmp_path: Path) -> None:
    docs = template(sets=BUNDLED)
    statefulset = one(docs, "StatefulSet", "rota-nats")
    spec = statefulset["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "rota-nats-headless"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == "nats:2.11-alpine"
    store_mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}[claim["metadata"]["name"]]
    conf = nats_conf(docs)
    (store_dir,) = re.findall(r"jetstream \{\s*store_dir: (\S+)\s*\}", conf)
    assert store_dir == store_mount
    routes = re.findall(r"nats://(\S+):6222", conf)
    assert routes == [f"rota-nats-{i}.rota-nats-headless.rota.svc" for i in range(3)]
    assert "server_name: $POD_NAME" in conf
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    check_with_nats_server(docs, tmp_path, AuthDir(tmp_path / "auth-init").ensure().server_conf.read_text())


def test_the_image_the_replicas_and_the_volume_size_are_values(tmp_path: Path) -> None:
    docs = template(values={"nats": {"enabled": True, "replicas": 5, "image": {"tag": "2.11.9-alpine"},
                                     "jetstream": {"storage": {"size": "50Gi", "storageClassName": "fast"}}}})
    spec = one(docs, "StatefulSet", "rota-nats")["spec"]
    assert spec["replicas"] == 5
    assert spec["template"]["spec"]["containers"][0]["image"] == "nats:2.11.9-alpine"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert len(re.findall(r"nats://\S+:6222", nats_conf(docs))) == 5
    # One server: no cluster to route to, and a config nats-server still takes.
    single = template(values={"nats": {"enabled": True, "replicas": 1}})
    assert "cluster {" not in nats_conf(single)
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]
    check_with_nats_server(single, tmp_path, AuthDir(tmp_path / "auth-init").ensure().server_conf.read_text())


def test_rotas_services_reach_the_bundled_nats_by_the_url_they_are_given() -> None:
    docs = template(sets=BUNDLED, release="gpu", namespace="ml")
    urls = {e["value"] for w in workloads(docs).values() if w["metadata"]["labels"]["app.kubernetes.io/name"] == "rota"
            for e in w["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "ROTA_NATS_URL"}
    (url,) = urls
    parsed = re.fullmatch(r"nats://([^:]+):(\d+)", url)
    assert parsed, url
    host, port = parsed.groups()
    service_name, service_namespace, _ = host.split(".")
    service = one(docs, "Service", service_name)
    assert service["metadata"]["namespace"] == service_namespace == "ml"
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    pod_labels = one(docs, "StatefulSet", "gpu-nats")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    headless = one(docs, "Service", "gpu-nats-headless")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"].items() <= pod_labels.items()
    assert {p["port"] for p in headless["spec"]["ports"]} >= {6222}
    assert re.findall(r"nats://(\S+):6222", nats_conf(docs, "gpu"))[0] == "gpu-nats-0.gpu-nats-headless.ml.svc"


def test_rotas_streams_get_as_many_replicas_as_there_are_servers_up_to_five() -> None:
    envs = env_of_services(template(sets=BUNDLED))
    assert envs.keys() == SERVICES
    assert {env["ROTA_STREAM_REPLICAS"] for env in envs.values()} == {"3"}
    big = env_of_services(template(values={"nats": {"enabled": True, "replicas": 7}}))
    assert {env["ROTA_STREAM_REPLICAS"] for env in big.values()} == {"5"}  # JetStream's maximum


def test_a_nats_cluster_of_ones_own_gets_the_replicas_it_is_given() -> None:
    own = env_of_services(template(values={"natsUrl": "nats://nats.infra:4222",
                                           "streamReplicas": 3}))
    assert {env["ROTA_STREAM_REPLICAS"] for env in own.values()} == {"3"}


def test_the_server_is_ready_once_jetstream_is_on_per_its_monitoring_port() -> None:
    docs = template(sets=BUNDLED)
    (container,) = one(docs, "StatefulSet", "rota-nats")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/healthz?js-enabled-only=true"
    assert ports[probe["port"]] == 8222
    assert re.search(rf"^http_port: {ports[probe['port']]}$", nats_conf(docs), re.MULTILINE)
    assert ports["client"] == 4222 and ports["cluster"] == 6222


def test_the_server_runs_restricted_and_writes_only_its_volume_and_pid_file() -> None:
    pod = one(template(sets=BUNDLED), "StatefulSet", "rota-nats")["spec"]["template"]["spec"]
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = {m["name"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"data", "pid"}
    assert "emptyDir" in volumes["pid"] and "data" not in volumes  # data: the claim template


def test_the_server_includes_rotas_operator_config_from_the_auth_secret_and_nothing_else() -> None:
    docs = template(sets=BUNDLED)
    pod = one(docs, "StatefulSet", "rota-nats")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    (auth,) = [v for v in pod["volumes"] if "secret" in v]
    assert auth["secret"]["secretName"] == "rota-auth"
    assert auth["secret"]["items"] == [{"key": "server.conf", "path": "server.conf"}]
    (included,) = re.findall(r"^include (\S+)$", nats_conf(docs), re.MULTILINE)
    assert (Path(mounts["config"]) / included).resolve() == Path(mounts[auth["name"]]) / "server.conf"
    other = template(values={"auth": {"secretName": "identities"},
                             "nats": {"enabled": True, "auth": {"secretName": "identities"}}})
    (auth,) = [v for v in one(other, "StatefulSet", "rota-nats")["spec"]["template"]["spec"]["volumes"]
               if "secret" in v]
    assert auth["secret"]["secretName"] == "identities"


def test_a_bundled_nats_without_auth_or_with_auth_unlike_rotas_pods_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HelmFailed, match=r"nats\.auth\.secretName: the bundled NATS reads server\.conf "
                                         r"from Rota's auth Secret, \"identities\""):
        template(values={"auth": {"secretName": "identities"}}, sets=BUNDLED)
    with pytest.raises(HelmFailed, match=r"auth\.enabled=false\), so the bundled NATS must not demand them"):
        template(values={"auth": {"enabled": False}}, sets=BUNDLED)
    with pytest.raises(HelmFailed, match="the bundled NATS would run WITHOUT auth"):
        template(values={"auth": {"enabled": False}, "nats": {"enabled": True, "auth": {"secretName": ""}}})
    docs = template(values={"auth": {"enabled": False},
                            "nats": {"enabled": True, "auth": {"secretName": ""}, "allowNoAuth": True}})
    pod = one(docs, "StatefulSet", "rota-nats")["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "secret" in v]
    assert not re.search(r"^include ", nats_conf(docs), re.MULTILINE) and "NO AUTH" in nats_conf(docs)
    check_with_nats_server(docs, tmp_path, None)


def test_the_network_policy_lets_rota_reach_the_servers_and_the_servers_each_other() -> None:
    docs = template(sets=BUNDLED)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    pods = {name: PodAt("rota", w["spec"]["template"]["metadata"]["labels"]) for name, w in workloads(docs).items()}
    server = pods.pop("nats")
    stranger = PodAt("rota", {"app": "debug"})
    for source in pods.values():
        assert admits(policies, server, source, 4222)
        assert not admits(policies, server, source, 6222)
    assert admits(policies, server, server, 6222)  # the routes
    assert not admits(policies, server, stranger, 4222)
