"""The AsyncAPI document against what a client really holds: every subject a team's or a
run's credentials allow is a channel of the document, every channel the document gives them
is allowed by those credentials, correlation is `data.command_id`; and the official AsyncAPI
parser (@asyncapi/parser, contracts/validate) finds no error in it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.auth.jwt import claims_of, read_creds
from rota.auth.keys import AuthDir
from rota.contracts.compat import subject_covers
from rota.contracts.subjects import TEAM_QUERIES

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
VALIDATE = CONTRACTS / "validate"
TEAM = "nlp"
RUN_ID = "01a00000-0000-7000-8000-00000000e001"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CONTRACTS / "asyncapi.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> AuthDir:
    return AuthDir(tmp_path_factory.mktemp("auth")).ensure()


def _team_claims(auth: AuthDir, tmp: Path) -> dict[str, Any]:
    jwt, _ = read_creds(auth.issue_team(TEAM, "ada", tmp / "nlp.creds").read_text())
    nats: dict[str, Any] = claims_of(jwt)["nats"]
    return nats


def _run_template(auth: AuthDir) -> dict[str, Any]:
    """The run identity's permissions as the server gets them: the run-scoped signing key's
    template in the account JWT of `server.conf`, bound to one run id."""
    conf = auth.server_conf.read_text()
    account_public = auth.account_public_file.read_text().strip()
    jwt = re.search(rf"{account_public}: (\S+)", conf)
    assert jwt is not None
    [scope] = claims_of(jwt.group(1))["nats"]["signing_keys"]
    bound = json.dumps(scope["template"]).replace("{{name()}}", RUN_ID)
    template: dict[str, Any] = json.loads(bound)
    return template


def _channels(document: dict[str, Any], identity: str, action: str,
              values: dict[str, str]) -> dict[str, str]:
    """Concrete subject -> channel address, of each operation the document gives `identity`
    (Rota `receive`s what the identity publishes, `send`s what it subscribes to)."""
    found = {}
    for operation in document["operations"].values():
        refs = {r["$ref"].rsplit("/", 1)[-1] for r in operation.get("security", [])}
        if identity not in refs or operation["action"] != action:
            continue
        channel_id = operation["channel"]["$ref"].removeprefix("#/channels/")
        address = document["channels"][channel_id.replace("%7B", "{").replace("%7D", "}")][
            "address"]
        subject = address
        for name, value in values.items():
            subject = subject.replace(f"{{{name}}}", value)
        found[subject] = address
    return found


def _check(allowed: list[str], channels: dict[str, str], inbox: str) -> None:
    for subject in allowed:
        if subject.startswith(f"{inbox}."):
            continue  # replies, on the inbox: the reply channels of the requests
        assert any(subject_covers(subject, c) for c in channels), \
            f"{subject!r} is allowed but no channel of the document is under it"
    for channel, address in channels.items():
        assert any(subject_covers(a, channel) for a in allowed), \
            f"the document gives {address!r}, which the credentials refuse"


def test_a_team_credentials_and_the_document_agree(
    document: dict[str, Any], auth: AuthDir, tmp_path: Path
) -> None:
    claims = _team_claims(auth, tmp_path)
    publish = _channels(document, "team", "receive", {"team": TEAM})
    _check(claims["pub"]["allow"], publish, "_INBOX_team_nlp")
    _check(claims["sub"]["allow"], _channels(document, "team", "send", {"team": TEAM}),
           "_INBOX_team_nlp")
    for query in TEAM_QUERIES:
        assert f"{query}.{TEAM}" in publish
    assert f"rota.api.ping.{TEAM}" in publish
    assert "rota.api.job.get" not in publish  # the platform's view of every team
    assert f"inbox:_INBOX_team_{TEAM}" in claims["tags"] and f"team:{TEAM}" in claims["tags"]


def test_a_run_credentials_and_the_document_agree(document: dict[str, Any],
                                                  auth: AuthDir) -> None:
    template = _run_template(auth)
    values = {"run_id": RUN_ID}
    publish = _channels(document, "run", "receive", values)
    _check(template["pub"]["allow"], publish, f"_INBOX_run_{RUN_ID}")
    _check(template["sub"]["allow"], _channels(document, "run", "send", values),
           f"_INBOX_run_{RUN_ID}")
    assert f"$JS.API.DIRECT.GET.ROTA_CTL.rota.ctl.run.{RUN_ID}" in publish


def test_every_request_has_its_reply_and_correlates_by_command_id(
        document: dict[str, Any]) -> None:
    messages = document["components"]["messages"]
    assert not any("correlation_id" in json.dumps(m.get("correlationId", {}))
                   for m in messages.values())
    reply = messages["reply:ApiReply:Message"]
    assert reply["correlationId"]["location"] == "$message.payload#/data/command_id"
    for name, message in messages.items():
        if ":SubmitJob:" in name or ":GetJob:" in name:
            assert message["correlationId"]["location"] == "$message.payload#/id"
        if name.endswith(":JobRejected:Message"):
            assert message["correlationId"]["location"] == "$message.payload#/data/command_id"
    for name, operation in document["operations"].items():
        if name.startswith(("rota.api.", "rota.sys.", "rota.run.", "$JS.API.")):
            assert "reply" in operation, name
        assert operation["security"], f"{name}: nobody may use it"


def test_the_servers_name_every_identity(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert {"team", "run", "admin", "console", "service-submission"} <= set(schemes)
    assert schemes["team"]["x-rota-permissions"]["inbox_prefix"] == "_INBOX_team_<team>"
    for server in document["servers"].values():
        assert len(server["security"]) == len(schemes)


def test_the_official_asyncapi_parser_accepts_the_document() -> None:
    if shutil.which("node") is None or not (VALIDATE / "node_modules").is_dir():
        pytest.skip("AsyncAPI parser NOT RUN: needs node and `npm ci` in contracts/validate "
                    "(.ci/run does both)")
    out = subprocess.run(["node", "validate.mjs", str(CONTRACTS / "asyncapi.yaml")],
                         cwd=VALIDATE, capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout)
    assert result["ok"], result["errors"]
    assert out.returncode == 0
    assert "rota.api.job.get.{team}" in result["channels"]
    assert "rota.api.ping.{team}" in result["channels"]
    assert result["security"]["team"] == "asymmetricEncryption"
