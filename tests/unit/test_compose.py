"""compose.yaml, checked without Docker (none runs on the build machine).

- It is a valid Compose file: the Compose specification's JSON Schema (vendored, see
  `compose_spec/README.md`).
- Everything it points at exists: bind-mounted files, the Dockerfile, named volumes, the
  services that `depends_on` names; host ports are not published twice.
- The six Rota services serve /metrics where Prometheus scrapes them, and Grafana's
  datasources point at the Prometheus and Jaeger of the file.
- The services' environment is what the code reads: every ROTA_* a settings field, every
  OTEL_* a standard OpenTelemetry variable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import opentelemetry.environment_variables as otel_api_env
import opentelemetry.sdk.environment_variables as otel_sdk_env
import pytest
import yaml
from rota.cli.stack import SERVICES
from rota.config import load_config
from rota.settings import Settings
from rota_console.settings import ConsoleSettings
from rota_preemption.settings import PreemptionSettings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).with_name("compose_spec") / "compose-spec.json"


def load_compose() -> dict[str, Any]:
    # safe_load resolves the `x-rota` anchor and its `<<` merges, as Compose does.
    doc: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return doc


COMPOSE = load_compose()
SVC: dict[str, dict[str, Any]] = COMPOSE["services"]


def rota_services() -> dict[str, dict[str, Any]]:
    """The compose services that run one of the six Rota services: `python -m rota_<name>`
    (the console, which has no metrics, tables or events, is checked on its own)."""
    return {name: svc for name, svc in SVC.items()
            if svc.get("command", [])[:2] == ["python", "-m"] and name != "console"}


def environment(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def port_pairs(svc: dict[str, Any]) -> list[tuple[int, int]]:
    """(host, container) of each published port, short syntax."""
    pairs = []
    for spec in svc.get("ports", []):
        host, _, container = str(spec).rpartition(":")
        pairs.append((int(host.rsplit(":", 1)[-1]), int(container.split("/")[0])))
    return pairs


def bind_mounts(svc: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in svc.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        mounts.append((source, target))
    return mounts


def test_compose_is_valid_against_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    # The spec's schema is written to draft 7 (`definitions`, `id`); say so, rather than let
    # the library guess from a `$schema` URI it does not know.
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(COMPOSE), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def test_the_schema_check_catches_a_mistake() -> None:
    broken = {**COMPOSE, "services": {**SVC, "nats": {**SVC["nats"], "portz": ["1:1"]}}}
    assert not jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).is_valid(broken)


def test_the_six_services_come_from_one_image_built_from_deploy() -> None:
    rota = rota_services()
    assert sorted(rota) == sorted(SERVICES)
    for name, svc in rota.items():
        assert svc["command"] == ["python", "-m", f"rota_{name}"]
        assert svc["image"] == "rota:dev"
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        assert svc["build"]["dockerfile"].startswith("deploy/")


def test_images_are_pinned_and_files_and_volumes_exist() -> None:
    named = set(COMPOSE.get("volumes", {}))
    for name, svc in SVC.items():
        image = svc.get("image", "")
        assert ":" in image and not image.endswith(":latest"), (name, image)
        for source, target in bind_mounts(svc):
            assert target.startswith("/"), (name, target)
            if source.startswith("."):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in named, (name, source)
        for dependency in svc.get("depends_on", []):
            assert dependency in SVC, (name, dependency)


def test_no_host_port_is_published_twice() -> None:
    published = [host for svc in SVC.values() for host, _ in port_pairs(svc)]
    assert len(published) == len(set(published))


def test_config_files_that_services_read_are_real() -> None:
    for name, svc in rota_services().items():
        mounts = dict((target, source) for source, target in bind_mounts(svc))
        config = environment(svc)["ROTA_CONFIG"]
        assert config in mounts, name
        load_config(ROOT / mounts[config])
    nats = SVC["nats"]
    config_arg = nats["command"][nats["command"].index("-c") + 1]
    source = dict((t, s) for s, t in bind_mounts(nats))[config_arg]
    assert "jetstream" in (ROOT / source).read_text()


def test_every_service_serves_metrics_where_prometheus_scrapes() -> None:
    prometheus = SVC["prometheus"]
    config_path = next(s for s, t in bind_mounts(prometheus)
                       if t == "/etc/prometheus/prometheus.yml")
    scrape = yaml.safe_load((ROOT / config_path).read_text())["scrape_configs"]
    targets = {job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
               for job in scrape}
    container_ports = set()
    for name, svc in rota_services().items():
        env = environment(svc)
        port = int(env["ROTA_METRICS_PORT"])
        container_ports.add(port)
        assert env["ROTA_METRICS_HOST"] == "0.0.0.0", "else nothing outside the container reaches it"
        assert port in {int(p) for p in svc.get("expose", [])}, name
        assert port in {container for _, container in port_pairs(svc)}, name
        assert targets[name] == [f"{name}:{port}"], name
    assert len(container_ports) == 1, "every service on the same container port"
    for job, hosts in targets.items():
        for target in hosts:
            host = target.split(":")[0]
            assert host == "localhost" or host in SVC, (job, target)


def test_grafana_provisions_the_dashboards_and_datasources_of_this_file() -> None:
    grafana = SVC["grafana"]
    mounts = dict((t, s) for s, t in bind_mounts(grafana))
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    providers = yaml.safe_load((provisioning / "dashboards" / "rota.yml").read_text())["providers"]
    for provider in providers:
        assert provider["options"]["path"] in mounts
        assert list((ROOT / mounts[provider["options"]["path"]]).glob("*.json"))
    home = environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / mounts[str(Path(home).parent)] / Path(home).name).is_file()
    datasources = yaml.safe_load((provisioning / "datasources" / "datasources.yml").read_text())
    published = {name: {c for _, c in port_pairs(svc)} for name, svc in SVC.items()}
    for source in datasources["datasources"]:
        url = urlsplit(source["url"])
        assert url.hostname in SVC and url.port in published[url.hostname], source


def settings_variables() -> set[str]:
    names = set()
    for model in (Settings, PreemptionSettings, ConsoleSettings):
        prefix = str(model.model_config.get("env_prefix", "")).upper()
        names |= {prefix + field.upper() for field in model.model_fields}
    return names


def standard_otel_variables() -> set[str]:
    return {value for module in (otel_api_env, otel_sdk_env) for key, value in vars(module).items()
            if key.startswith("OTEL_") and isinstance(value, str)}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_environment_matches_what_the_code_reads(name: str) -> None:
    env = environment(SVC[name])
    rota = {k for k in env if k.startswith("ROTA_")}
    otel = {k for k in env if k.startswith("OTEL_")}
    assert rota | otel == set(env), "only ROTA_* and OTEL_* variables configure Rota"
    assert rota <= settings_variables(), rota - settings_variables()
    assert otel <= standard_otel_variables(), otel - standard_otel_variables()
    # The values parse as the settings do at start.
    Settings.model_validate({k.removeprefix("ROTA_").lower(): v for k, v in env.items()
                             if k.startswith("ROTA_") and not k.startswith("ROTA_PREEMPTION_")})


def test_traces_go_to_the_otlp_receiver_of_this_file() -> None:
    for name, svc in rota_services().items():
        env = environment(svc)
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint.hostname in SVC, name
        receiver = SVC[str(endpoint.hostname)]
        assert endpoint.port in {c for _, c in port_pairs(receiver)}, name
        assert endpoint.hostname in svc["depends_on"], name


def test_the_console_serves_its_port_as_its_own_identity_of_the_generated_keys() -> None:
    console = SVC["console"]
    assert console["command"] == ["python", "-m", "rota_console"]
    assert console["image"] == "rota:dev"
    env = environment(console)
    assert set(env) <= settings_variables(), set(env) - settings_variables()
    settings = ConsoleSettings.model_validate(
        {k.removeprefix("ROTA_CONSOLE_").lower(): v for k, v in env.items()
         if k.startswith("ROTA_CONSOLE_")})
    assert settings.bind == "0.0.0.0", "else nothing outside the container reaches it"
    assert (settings.port, settings.port) in port_pairs(console)
    mounts = dict((target, source) for source, target in bind_mounts(console))
    assert env["ROTA_NATS_CREDS"] == "/auth/creds/console.creds" and mounts["/auth"] == "nats-auth"
    load_config(ROOT / mounts[env["ROTA_CONFIG"]])
    assert "nats" in console["depends_on"]
