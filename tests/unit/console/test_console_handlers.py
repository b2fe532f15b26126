"""The console's handlers over a fake API: scoping by subject, JSON twins, the one write."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel
from rota.auth.keys import ADMIN, AuthDir
from rota.contracts import messages as m
from rota.settings import Settings
from rota_console.access import LoginRefused, Trust, identity_of, verify
from rota_console.app import build
from rota_console.pages import PAGE_MODELS
from rota_console.reader import PLATFORM, ApiFailure, Reader
from rota_console.settings import ConsoleSettings
from starlette.testclient import TestClient

from tests.unit.console.fixtures import CONFIG, allocation, job, summary_row

HEADER = "X-Rota-Team"
OURS = job("ours", "nlp", state="running")
THEIRS = job("theirs", "vision", state="pending", reasons=["PRIORITY"])


class FakeApi(Reader):
    """Answers like the services do: a team-scoped subject sees only that team's jobs."""

    def __init__(self) -> None:
        super().__init__(nc=None)  # type: ignore[arg-type]
        self.asked: list[str] = []
        self.cancelled: list[tuple[str, str]] = []
        self.listed: list[dict[str, Any]] = []

    async def request(self, subject: str, data: BaseModel) -> Any:
        self.asked.append(subject)
        if isinstance(data, m.ListJobs):
            self.listed.append({k: v for k, v in data.model_dump().items()
                                if k in ("search", "state", "queue", "user", "offset", "limit",
                                         "team", "name")})
        parts = subject.split(".")
        team = parts[4] if subject.startswith("rota.api.") and len(parts) == 5 else None
        visible = [j for j in (OURS, THEIRS) if team in (None, j["team"])]
        if subject.startswith("rota.api.cancel."):
            assert isinstance(data, m.CancelJob)
            self.cancelled.append((parts[3], data.job_id))
            return {"job_id": data.job_id, "state": "cancelled"}
        if subject.startswith("rota.api.queues.summary"):
            return [r for r in (summary_row("nlp"), summary_row("vision", borrowed=2))
                    if team in (None, r["team"])]
        if subject.startswith("rota.api.jobs.list"):
            return visible
        if subject.startswith(("rota.api.job.why", "rota.api.job.trace")):
            assert isinstance(data, m.GetJob)
            found = next((j for j in visible if j["job_id"] == data.job_id), None)
            if found is None:
                raise ApiFailure("JOB_NOT_FOUND", f"no job {data.job_id}", "job_id")
            if "why" in subject:
                return {"state": found["state"], "reasons": found["wait"] and found["wait"]["reasons"]}
            return {"job": found, "timeline": [], "preemptions": [], "trace_id": "ab" * 16}
        if subject == "rota.sys.notifier.list":
            return [{"kind": "started", "channel": "email", "status": "sent",
                     "recipient": "alice@example.com"}]
        if subject == "rota.sys.ledger.allocations":
            return {"allocations": [allocation(OURS["job_id"], "nlp", "training", "node-0", [0, 1]),
                                    allocation("x", "vision", "training", "node-1", [0], borrowed=1)]}
        if subject == "rota.sys.preemption.plans":
            return [{"plan_id": "p1", "preemptor_job_id": THEIRS["job_id"], "preemptor_team": "vision",
                     "preemptor_queue": "production", "state": "completed", "reason": "RECLAIM",
                     "victims": [{"job_id": OURS["job_id"], "team": "nlp", "gpus": 4,
                                  "outcome": "acked", "lost_gpu_seconds": 12.5},
                                 {"job_id": "x", "job_name": "secret-sweep", "team": "research",
                                  "gpus": 2, "outcome": "forced", "lost_gpu_seconds": 99.0}]}]
        raise AssertionError(f"unexpected subject {subject}")


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def client(api: FakeApi, tmp_path: Path) -> TestClient:
    config = tmp_path / "rota.yaml"
    import yaml

    config.write_text(yaml.safe_dump(CONFIG.model_dump(mode="json")))
    app = build(ConsoleSettings(trusted_header=HEADER), Settings(config=config))
    app.state.console.reader = api  # no lifespan: the fake stands in for NATS
    # The proxy beside the console: the header is believed only from a trusted peer.
    return TestClient(app, follow_redirects=False, client=("127.0.0.1", 50000))


def test_a_team_viewer_asks_only_its_own_teams_subjects(client: TestClient, api: FakeApi) -> None:
    page = client.get("/queues?format=json", headers={HEADER: "nlp"}).json()
    assert {r["team"] for tier in page["tiers"] for r in tier["rows"]} == {"nlp"}
    assert [j["name"] for j in page["jobs"]] == ["ours"]
    assert all(s.endswith(".nlp") for s in api.asked if s.startswith("rota.api."))


def test_another_teams_job_is_not_found_exactly_like_a_missing_one(client: TestClient) -> None:
    answer = client.get(f"/jobs/{THEIRS['job_id']}", headers={HEADER: "nlp",
                                                             "Accept": "application/json"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "JOB_NOT_FOUND"
    html = client.get(f"/jobs/{THEIRS['job_id']}", headers={HEADER: "nlp"})
    assert html.status_code == 404 and "theirs" not in html.text


def test_each_page_has_a_json_twin_that_validates_against_its_model(client: TestClient) -> None:
    urls = {"queues": "/queues", "job": f"/jobs/{OURS['job_id']}", "cluster": "/cluster",
            "fairshare": "/fairshare", "preemptions": "/preemptions", "jobs": "/jobs"}
    for name, url in urls.items():
        by_accept = client.get(url, headers={HEADER: "nlp", "Accept": "application/json"})
        by_query = client.get(f"{url}?format=json", headers={HEADER: "nlp"})
        html = client.get(url, headers={HEADER: "nlp"})
        assert by_accept.status_code == by_query.status_code == html.status_code == 200, url
        assert html.headers["content-type"].startswith("text/html")
        jsonschema.validate(by_query.json(), PAGE_MODELS[name].model_json_schema())
        assert by_accept.json().keys() == by_query.json().keys()


def test_the_cluster_shows_another_teams_gpus_without_saying_whose(client: TestClient) -> None:
    page = client.get("/cluster?format=json", headers={HEADER: "nlp"}).json()
    cells = [g for n in page["nodes"] for g in n["gpus"] if g["team"]]
    assert {g["team"] for g in cells} == {"nlp", "another team"}
    assert all(g["job_id"] is None for g in cells if g["team"] == "another team")
    assert next(g for g in cells if g["team"] == "nlp")["job_name"] == "ours"


def _csrf(client: TestClient, team: str) -> str:
    html = client.get(f"/jobs/{OURS['job_id']}", headers={HEADER: team}).text
    marker = 'name="csrf" value="'
    return html.split(marker, 1)[1].split('"', 1)[0]


def test_cancel_needs_the_forms_token_and_a_confirmation(client: TestClient, api: FakeApi) -> None:
    token = _csrf(client, "nlp")
    url = f"/jobs/{OURS['job_id']}/cancel"
    headers = {HEADER: "nlp", "Accept": "application/json"}
    assert client.post(url, data={"csrf": "forged", "confirm": "yes"}, headers=headers).json()[
        "error"]["field"] == "csrf"
    assert client.post(url, data={"csrf": token}, headers=headers).json()["error"][
        "field"] == "confirm"
    assert api.cancelled == []
    assert client.post(url, data={"csrf": token, "confirm": "yes"}, headers=headers).json()["ok"]
    assert api.cancelled == [("nlp", OURS["job_id"])]


def test_no_team_cancels_another_teams_job(client: TestClient, api: FakeApi) -> None:
    token = _csrf(client, "nlp")
    answer = client.post(f"/jobs/{THEIRS['job_id']}/cancel", data={"csrf": token, "confirm": "yes"},
                         headers={HEADER: "nlp", "Accept": "application/json"})
    assert answer.status_code == 404 and api.cancelled == []


def test_the_platform_sees_every_team_but_cancels_nothing(client: TestClient, api: FakeApi) -> None:
    page = client.get(f"/jobs/{THEIRS['job_id']}?format=json", headers={HEADER: PLATFORM}).json()
    assert page["job"]["team"] == "vision" and not page["can_cancel"]
    assert "rota.api.job.trace" in api.asked  # the unscoped subject


def test_an_unknown_team_or_no_header_is_refused(client: TestClient) -> None:
    assert client.get("/queues?format=json", headers={HEADER: "nobody"}).status_code == 403
    assert client.get("/queues?format=json").status_code == 401
    assert client.get("/queues").headers["location"] == "/login?next=/queues"


def test_a_notification_shows_its_kind_and_status_but_not_its_recipient(client: TestClient) -> None:
    html = client.get(f"/jobs/{OURS['job_id']}", headers={HEADER: "nlp"}).text
    assert "started" in html and "alice@example.com" not in html


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> AuthDir:
    return AuthDir(tmp_path_factory.mktemp("auth")).ensure()


def test_login_reads_the_team_from_team_credentials_and_the_platform_from_the_admins(
        auth: AuthDir, tmp_path: Path) -> None:
    team = auth.issue_team("nlp", "alice", tmp_path / "nlp.creds")
    trust = Trust.of(Settings(nats_roster=auth.roster))
    assert identity_of(team.read_text(), trust).viewer.team == "nlp"
    assert identity_of(auth.creds_path(ADMIN).read_text(), trust).viewer.team == PLATFORM


def test_login_while_nats_is_unreachable_is_refused_not_left_waiting(
        auth: AuthDir, tmp_path: Path) -> None:
    team = auth.issue_team("nlp", "alice", tmp_path / "nlp.creds")
    trust = Trust.of(Settings(nats_roster=auth.roster))
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{closed.getsockname()[1]}"
    # The guard only turns a hang into a failure: nats-py retried such a connect for ever.
    login = asyncio.wait_for(verify(team.read_text(), url, trust), timeout=60)
    with pytest.raises(LoginRefused, match=r"^creds: the NATS server"):
        asyncio.run(login)


@pytest.mark.parametrize("text", ["", "not a creds file", "x" * 20_000])
def test_login_refuses_what_is_not_credentials_naming_the_field(text: str) -> None:
    with pytest.raises(LoginRefused, match=r"^creds: "):
        identity_of(text, Trust())


def test_login_refuses_a_services_credentials(auth: AuthDir) -> None:
    with pytest.raises(LoginRefused, match="service"):
        identity_of(auth.creds_path("scheduler").read_text(), Trust())


def test_a_team_sees_the_preemptions_its_jobs_took_part_in_without_others_names(
        client: TestClient) -> None:
    html = client.get("/preemptions", headers={HEADER: "nlp"})
    assert html.status_code == 200
    assert "another team" in html.text and "secret-sweep" not in html.text
    assert "research" not in html.text


def test_the_jobs_list_asks_the_teams_own_subject_with_the_filters(
        client: TestClient, api: FakeApi) -> None:
    page = client.get("/jobs?q=our&state=running&queue=training&user=alice&offset=50&format=json",
                      headers={HEADER: "nlp"}).json()
    assert [j["name"] for j in page["jobs"]] == ["ours"] and page["teams"] == ["nlp"]
    assert api.asked[-1] == "rota.api.jobs.list.nlp"
    assert api.listed[-1] == {"search": "our", "state": "running", "queue": "training",
                              "user": "alice", "offset": 50, "limit": 51, "team": None,
                              "name": None}
    html = client.get("/jobs?q=our", headers={HEADER: "nlp"}).text
    assert 'value="our"' in html and "theirs" not in html


def test_the_jobs_list_refuses_another_team_and_a_bad_user_naming_the_field(
        client: TestClient, api: FakeApi) -> None:
    other = client.get("/jobs?team=vision&format=json", headers={HEADER: "nlp"})
    assert other.status_code == 403 and other.json()["error"]["field"] == "team"
    bad = client.get("/jobs?user=Not%20A%20User&format=json", headers={HEADER: PLATFORM})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "user"
    assert "rota.api.jobs.list.vision" not in api.asked


def test_a_borrowed_gpus_colour_is_a_custom_property_so_its_hatching_is_not_overridden(
        client: TestClient) -> None:
    html = client.get("/cluster", headers={HEADER: PLATFORM}).text
    assert 'class="gpu used tier-training borrowed"' in html
    assert "style=\"background" not in html and 'style="--c: ' in html


def test_the_job_page_shows_no_raw_time_in_its_summary(client: TestClient, api: FakeApi) -> None:
    asked = api.request

    async def with_a_summary(subject: str, data: BaseModel) -> Any:
        answer = await asked(subject, data)
        if "job.why" in subject:
            return {**answer, "summary": "running since 2026-12-07 13:20:09.701757+00:00 (attempt 1)"}
        return answer

    api.request = with_a_summary  # type: ignore[method-assign]
    html = client.get(f"/jobs/{OURS['job_id']}", headers={HEADER: "nlp"}).text
    summary = html.split('data-testid="summary">', 1)[1].split("</p>", 1)[0]
    assert '<time datetime="2026-12-07T13:20:09.701757+00:00"' in summary
    assert ">13:20:09</time>" in summary and " ago)</span> (attempt 1)" in summary
