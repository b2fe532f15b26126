"""A team's (or anyone's) attacks on the web console: naming oneself the platform, riding a
viewer's session from another site, keeping a session past logout or past the credentials'
expiry, passing a run's JWT off as the admin's, and malformed input."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.auth.jwt import USER, KeyPair, creds, encode
from rota.auth.keys import ADMIN, AuthDir, run_creds
from rota.clock import FakeClock
from rota.settings import Settings
from rota_console import access
from rota_console.app import build
from rota_console.settings import ConsoleSettings
from starlette.testclient import TestClient

from tests.unit.console.fixtures import CONFIG
from tests.unit.console.test_console_handlers import OURS, FakeApi

HEADER = "X-Rota-Team"
PROXY = ("127.0.0.1", 50000)
OUTSIDER = ("203.0.113.9", 40000)


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> AuthDir:
    return AuthDir(tmp_path_factory.mktemp("auth")).ensure()


def console(tmp_path: Path, auth: AuthDir, *, peer: tuple[str, int] = PROXY,
            clock: FakeClock | None = None, **settings: Any) -> tuple[TestClient, FakeApi]:
    config = tmp_path / "rota.yaml"
    config.write_text(yaml.safe_dump(CONFIG.model_dump(mode="json")))
    rota = Settings(config=config, nats_roster=auth.roster)
    app = build(ConsoleSettings(**settings), rota, clock) if clock else build(
        ConsoleSettings(**settings), rota)
    api = FakeApi()
    app.state.console.reader = api
    return TestClient(app, follow_redirects=False, raise_server_exceptions=False,
                      client=peer), api


# ---------------------------------------------------------------- trusted header

def test_a_client_that_is_not_the_proxy_cannot_name_itself_the_platform(
        tmp_path: Path, auth: AuthDir) -> None:
    client, api = console(tmp_path, auth, peer=OUTSIDER, trusted_header=HEADER)
    answer = client.get("/queues?format=json", headers={HEADER: "*"})
    assert answer.status_code == 403 and answer.json()["error"]["field"] == "peer"
    assert api.asked == []


def test_without_the_proxys_secret_the_header_is_not_believed(tmp_path: Path, auth: AuthDir) -> None:
    client, api = console(tmp_path, auth, trusted_header=HEADER, trusted_proxy_secret="s3cret")
    assert client.get("/queues?format=json", headers={HEADER: "*"}).status_code == 403
    wrong = {HEADER: "*", "X-Rota-Proxy-Secret": "guess"}
    assert client.get("/queues?format=json", headers=wrong).status_code == 403
    assert api.asked == []
    right = {HEADER: "*", "X-Rota-Proxy-Secret": "s3cret"}
    assert client.get("/queues?format=json", headers=right).status_code == 200


def test_a_repeated_team_header_is_refused_not_read_first_wins(tmp_path: Path, auth: AuthDir) -> None:
    client, api = console(tmp_path, auth, trusted_header=HEADER)
    answer = client.get("/queues?format=json", headers=[(HEADER, "nlp"), (HEADER, "*")])
    assert answer.status_code == 400 and answer.json()["error"]["field"] == HEADER
    assert api.asked == []


# ---------------------------------------------------------------- cross-site writes

def _token(client: TestClient, headers: dict[str, str]) -> str:
    html = client.get(f"/jobs/{OURS['job_id']}", headers=headers).text
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_a_cross_site_cancel_with_no_session_and_no_token_is_refused(
        tmp_path: Path, auth: AuthDir) -> None:
    """The proxy adds the viewer's team to a forged form post; the browser sends no cookie."""
    client, api = console(tmp_path, auth, trusted_header=HEADER)
    answer = client.post(f"/jobs/{OURS['job_id']}/cancel", data={"confirm": "yes"},
                         headers={HEADER: "nlp", "Accept": "application/json"})
    assert answer.status_code == 403 and answer.json()["error"]["field"] == "csrf"
    assert api.cancelled == []


@pytest.mark.parametrize("site", [{"Origin": "https://evil.example"}, {"Origin": "null"},
                                  {"Sec-Fetch-Site": "cross-site"},
                                  {"Sec-Fetch-Site": "same-site"}])
def test_a_post_a_browser_says_came_from_another_site_is_refused(
        tmp_path: Path, auth: AuthDir, site: dict[str, str]) -> None:
    client, api = console(tmp_path, auth, trusted_header=HEADER)
    token = _token(client, {HEADER: "nlp"})
    answer = client.post(f"/jobs/{OURS['job_id']}/cancel", data={"csrf": token, "confirm": "yes"},
                         headers={HEADER: "nlp", "Accept": "application/json", **site})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "CROSS_SITE"
    assert api.cancelled == []
    own = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    assert client.post(f"/jobs/{OURS['job_id']}/cancel", data={"csrf": token, "confirm": "yes"},
                       headers={HEADER: "nlp", "Accept": "application/json", **own}).status_code == 200


# ---------------------------------------------------------------- logins and sessions

class _Connected:
    async def close(self) -> None:
        return None


@pytest.fixture
def nats_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NATS server's check of the credentials passes (it is not what is attacked here)."""
    async def connect(*args: Any, **kwargs: Any) -> _Connected:
        return _Connected()

    monkeypatch.setattr(access.nats, "connect", connect)


def _log_in(client: TestClient, creds_text: str) -> int:
    return client.post("/login", data={"creds": creds_text},
                       headers={"Accept": "application/json"}).status_code


def test_a_copy_of_the_cookie_is_worthless_after_logout(
        tmp_path: Path, auth: AuthDir, nats_accepts: None) -> None:
    client, _ = console(tmp_path, auth)
    assert _log_in(client, auth.issue_team("nlp", "alice", tmp_path / "a.creds").read_text()) == 200
    stolen = dict(client.cookies)
    assert client.get("/queues?format=json").status_code == 200
    assert client.post("/logout").status_code == 303
    client.cookies.clear()
    client.cookies.update(stolen)
    assert client.get("/queues?format=json").status_code == 401


def test_a_session_ends_when_its_credentials_expire(
        tmp_path: Path, auth: AuthDir, nats_accepts: None) -> None:
    clock = FakeClock(datetime.now(UTC))
    client, _ = console(tmp_path, auth, clock=clock)
    creds_file = auth.issue_team("nlp", "alice", tmp_path / "a.creds", expires_in_s=600)
    assert _log_in(client, creds_file.read_text()) == 200
    assert client.get("/queues?format=json").status_code == 200
    clock.advance(601)
    assert client.get("/queues?format=json").status_code == 401


def test_a_jwt_that_names_itself_admin_is_not_the_platform(
        tmp_path: Path, auth: AuthDir, nats_accepts: None) -> None:
    """The run-scoped signing key (the executor's) can sign any name and tags; the server
    accepts such a JWT, bound to the run template."""
    seed = auth.run_signing_key.read_text().strip()
    account = auth.account_public_file.read_text().strip()
    named_admin = run_creds(ADMIN, seed, account)
    user = KeyPair.create(USER)
    team_tagged = creds(encode({"sub": user.public, "name": "nlp", "nats": {
        "type": "user", "version": 2, "issuer_account": account, "tags": ["team:vision"]}},
        KeyPair.from_seed(seed)), user.seed)
    client, _ = console(tmp_path, auth)
    assert _log_in(client, named_admin) == 401
    assert _log_in(client, team_tagged) == 401
    assert _log_in(client, auth.creds_path(ADMIN).read_text()) == 200
    assert client.get("/queues?format=json").json()["viewer"] == "*"


def test_logins_from_one_address_are_limited(tmp_path: Path, auth: AuthDir) -> None:
    client, _ = console(tmp_path, auth, login_attempts_per_minute=3)
    answers = [_log_in(client, "not creds") for _ in range(4)]
    assert answers == [401, 401, 401, 429]


# ---------------------------------------------------------------- every response

@pytest.mark.parametrize("url", ["/queues", "/queues?format=json", "/static/console.css",
                                 "/login", "/no-such-page", "/jobs/zz"])
def test_every_response_carries_the_security_headers(tmp_path: Path, auth: AuthDir, url: str) -> None:
    client, _ = console(tmp_path, auth, trusted_header=HEADER)
    headers = client.get(url, headers={HEADER: "nlp"}).headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize("job_id", ["zz", "not-an-id", "1234567", "0" * 40])
def test_a_malformed_job_id_is_the_requests_fault_not_a_server_error(
        tmp_path: Path, auth: AuthDir, job_id: str) -> None:
    client, _ = console(tmp_path, auth, trusted_header=HEADER)
    for path in (f"/jobs/{job_id}", f"/jobs/{job_id}?format=json"):
        answer = client.get(path, headers={HEADER: "nlp"})
        assert answer.status_code in (400, 404), (path, answer.status_code)
    answer = client.get(f"/jobs/{job_id}?format=json", headers={HEADER: "nlp"}).json()
    assert answer["error"]["field"] == "job_id"
