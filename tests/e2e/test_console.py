"""The web console in Debian's Chromium, against the whole stack on embedded defaults (the
`Stack` of `rota up`, console included) while the `sim` demo story plays.

One story per module: the tests run in file order and each waits, with a deadline, for the
part of the story it looks at. Screenshots of every page go to test-artifacts/console/.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
import pytest
from rota.auth.jwt import read_creds
from rota.auth.keys import AuthDir
from rota.cli.running import Executor, Stack
from rota.demo.runner import _play
from rota.demo.story import CONFIG, SIM_SPEED, Story
from rota.settings import Settings
from rota_console.pages import PAGE_MODELS

from tests.e2e.console_browser import LAPTOP, PHONE, Viewer, chromium, log_in
from tests.e2e.up import ROTA

pytestmark = pytest.mark.e2e
__all__ = ["chromium"]

T = TypeVar("T")


def eventually(check: Callable[[], T | None], what: str, deadline_s: float = 120) -> T:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if (found := check()) is not None and found is not False:
            return found
        time.sleep(0.2)
    pytest.fail(f"not within {deadline_s:.0f} s: {what}")


@dataclass
class Demo:
    stack: Stack
    story: Story
    url: str
    home: Path
    creds: dict[str, Path]
    player: threading.Thread


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    home = tmp_path_factory.mktemp("console-home")
    settings = Settings(home=home, nats_url=None, database_url=None)
    stack = Stack(settings, CONFIG, Executor.sim, extra_env={
        "ROTA_SIM_SPEED": str(SIM_SPEED), "ROTA_SCHEDULER_TICK_S": "0.5",
        "ROTA_LOG_LEVEL": "WARNING", "ROTA_CONSOLE_SAMPLE_INTERVAL_S": "1"}, say=lambda text: None)
    try:
        summary = stack.start()
        console = summary["console"]
        assert console["state"] == "ready", (home / "logs" / "console.log").read_text()
        auth = AuthDir(home / "auth")
        creds = {team: auth.issue_team(team, None, home / f"{team}.creds")
                 for team in ("nlp", "vision", "research")}
        creds["platform"] = Path(stack.endpoints.nats_creds or "")  # type: ignore[union-attr]
        story = Story()
        player = threading.Thread(target=lambda: asyncio.run(
            _play(settings, stack.endpoints.nats_url, story, None)), daemon=True)  # type: ignore[union-attr]
        player.start()
        yield Demo(stack, story, console["url"], home, creds, player)
        player.join(timeout=150)
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def viewers(demo: Demo, chromium: Any) -> dict[str, Viewer]:
    """Logged in before the story gets far: nlp on a phone, the others on a laptop."""
    return {team: log_in(chromium, demo.url, path, viewport=PHONE if team == "nlp" else LAPTOP)
            for team, path in demo.creds.items()}


def swaps(viewer: Viewer) -> list[dict[str, Any]]:
    recorded: list[dict[str, Any]] = viewer.page.evaluate("window.__swaps")
    return recorded


IDLE_GREY = "rgb(230, 233, 239)"


def _style(viewer: Viewer, selector: str, prop: str) -> list[str]:
    found: list[str] = viewer.page.eval_on_selector_all(
        selector, f"els => els.map(e => getComputedStyle(e).{prop})")
    return found


def test_a_waiting_jobs_score_legend_has_its_segments_colours(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    platform = viewers["platform"]

    def a_waiting_job_with_a_score() -> str | None:
        # Five jobs of 8 GPUs on 32 GPUs at the start: one of them waits, with a score.
        for job in demo.story.jobs.values():
            found = platform.json(f"/jobs/{job.job_id}") if job.job_id else (404, {})
            if found[0] == 200 and found[1]["state"] == "pending" and found[1]["factors"]:
                return job.job_id
        return None

    job_id = eventually(a_waiting_job_with_a_score, "a waiting job with score factors", 60)
    platform.goto(f"/jobs/{job_id}")
    swatches = _style(platform, ".legend .swatch", "backgroundColor")
    segments = _style(platform, ".bar .seg", "backgroundColor")
    assert swatches and swatches == segments, (swatches, segments)  # each its segment's colour
    assert IDLE_GREY not in swatches and len(set(swatches)) == min(len(swatches), 4)
    platform.shot("job-waiting")


def test_the_queue_page_shows_the_borrowers_live_and_the_cluster_picture_changes_when_production_starts(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    platform, nlp, vision = viewers["platform"], viewers["nlp"], viewers["vision"]

    def vision_borrows() -> bool | None:
        vision.goto("/cluster")
        return vision.page.locator(".gpu.borrowed").count() > 0 or None

    # vision borrows nlp's idle quota: its borrowed GPUs are hatched over vision's colour.
    eventually(vision_borrows, "a borrowed GPU of vision's on its cluster picture", 60)
    hatches = _style(vision, ".gpu.borrowed", "backgroundImage")
    assert hatches and all("repeating-linear-gradient" in h for h in hatches), hatches
    assert set(_style(vision, ".gpu.borrowed", "backgroundColor")) == {"rgb(242, 142, 43)"}
    assert "repeating-linear-gradient" in _style(vision, ".legend .swatch.borrowed",
                                                 "backgroundImage")[0]
    vision.shot("cluster-borrowed")
    platform.goto("/queues")
    nlp.goto("/cluster")
    first = [(g["team"], g["tier"]) for g in _cells(nlp)]
    assert ("nlp", "production") not in first
    # Neither page is reloaded from here on: what changes comes over the live feed.
    eventually(lambda: any("vision" in (s["borrowers"] or "") and "research" in (s["borrowers"] or "")
                           for s in swaps(platform)),
               "the live queue page names vision and research as borrowers")
    platform.shot("queues-borrowing")  # most likely still showing them: not asserted
    eventually(lambda: nlp.page.locator(".gpu.tier-production").count() == 16 or None,
               "16 production GPUs of nlp on the live cluster picture")
    nlp.shot("cluster-phone")
    platform.goto("/cluster")
    platform.shot("cluster")
    pictures = [[(team, tier) for team, tier, _ in s["cells"]] for s in swaps(nlp)]
    after = next(i for i, p in enumerate(pictures) if ("nlp", "production") in p)
    others = [p.count(("another team", "")) for p in pictures[:after]]
    # Before production: the other teams held more than their 16 GPUs, nlp's idle quota.
    assert others and max(others) > 16, others


def _cells(viewer: Viewer) -> list[dict[str, str]]:
    cells: list[dict[str, str]] = viewer.page.eval_on_selector_all(
        ".gpu", "els => els.map(e => ({team: e.dataset.team, tier: e.dataset.tier}))")
    return cells


def test_a_victims_job_page_shows_notice_then_ack_then_resume(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    vision = viewers["vision"]
    job_id = eventually(lambda: demo.story.jobs["vision-train-c"].job_id or None, "the victim's id")
    eventually(lambda: demo.story.jobs["vision-train-c"].resumed_from, "the victim resumed", 150)

    def timeline_with_the_resume() -> list[list[str]] | None:
        # The page reads the read model, which may fold the resume a moment after the story
        # saw it on the stream (it gathers events for up to 0.2 s; DECISIONS 96).
        vision.goto(f"/jobs/{job_id}")
        shown: list[list[str]] = vision.page.eval_on_selector_all(
            "[data-testid=timeline] > li", "els => els.map(e => [e.dataset.type, e.innerText])")
        kinds = [kind for kind, _ in shown]
        stops = [i for i, kind in enumerate(kinds) if kind == "RunStopped"]
        return shown if stops and "RunStarted" in kinds[stops[0]:] else None

    entries = eventually(timeline_with_the_resume, "the resume on the victim's page", 30)
    kinds = [kind for kind, _ in entries]
    noticed = kinds.index("PreemptionNoticed")
    acked = next(i for i, (kind, text) in enumerate(entries)
                 if kind == "RunCheckpointed" and i > noticed and "acknowledg" in text)
    stopped = kinds.index("RunStopped", acked)
    resumed = kinds.index("RunStarted", stopped)
    assert noticed < acked < stopped < resumed
    ack_uri = vision.page.locator("[data-testid=timeline] > li").nth(acked).locator("code.uri").inner_text()
    assert ack_uri in entries[resumed][1], "the resume uses the acknowledged checkpoint"
    assert "suffered" in vision.page.locator(".plan").first.inner_text()
    vision.shot("job-victim")


def test_the_fair_share_and_preemption_pages_show_the_story(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    platform = viewers["platform"]
    # The demo's production job preempts nlp's borrowers, and a node drain moves a run: each
    # plan says which it is (a drain has no preemptor team).
    plans = platform.page.locator("section.plan")

    def both_plans_acked() -> list[str] | None:
        platform.goto("/preemptions")
        texts = [plans.nth(i).inner_text() for i in range(plans.count())]
        nlp = any("of nlp" in t and "acked" in t for t in texts)
        drain = any(t.startswith("drain of a node") and "acked" in t for t in texts)
        return texts if nlp and drain else None

    texts = eventually(both_plans_acked, "nlp's preemption and the drain, acknowledged", 120)
    assert all(" of None" not in t for t in texts), texts
    # A checkpoint URI is cut to its column, whole in its title.
    cells = platform.page.locator("td.checkpoint code.uri")
    assert cells.count() > 0
    for i in range(cells.count()):
        cell = cells.nth(i)
        assert cell.get_attribute("title") == cell.inner_text()
        assert cell.evaluate("e => e.getBoundingClientRect().width") <= 16 * 16  # 16rem
        assert cell.evaluate("e => e.scrollWidth > e.clientWidth || e.innerText.length < 30")
    platform.shot("preemptions")
    # The preemptor's own page: what it caused, victim by victim.
    prod = demo.story.jobs["nlp-prod-release"].job_id
    platform.goto(f"/jobs/{prod}")
    caused = platform.page.locator("[data-role=caused] [data-testid=caused-victims] tbody tr")
    rows = [caused.nth(i).inner_text() for i in range(caused.count())]
    assert rows and any("research-sweep" in r or "vision-train" in r for r in rows), rows
    assert any("acked" in r for r in rows), rows
    assert all("\u2013\t\u2013\t\u2013" not in r for r in rows), rows  # notice, deadline, ack known
    platform.shot("job-preemptor")
    nlp = viewers["nlp"]
    nlp.goto(f"/jobs/{prod}")
    theirs = nlp.page.locator("[data-role=caused] [data-testid=caused-victims]").inner_text()
    assert "another team" in theirs and "research-sweep" not in theirs and "vision-train" not in theirs
    platform.goto("/fairshare")
    lines = platform.page.locator("[data-testid=fairshare-plot] polyline")
    assert lines.count() == 3
    assert all(lines.nth(i).get_attribute("points") for i in range(3))
    platform.shot("fairshare")
    eventually(lambda: demo.story.finished or None, "the story ends", 150)
    assert [c for c, ok in demo.story.checks() if not ok] == []


def _submit(demo: Demo, *args: str) -> str:
    env = {"ROTA_HOME": str(demo.home), "ROTA_CONFIG": str(CONFIG), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([ROTA, "submit", "--team", "nlp", "--user", "alice", "--queue",
                           "training", "--flavor", "gpu", "--name", "to-cancel", "--resumable",
                           "--sim-duration", "3600", *args],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_team_cannot_see_or_cancel_another_teams_job_and_can_cancel_its_own(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    nlp, vision = viewers["nlp"], viewers["vision"]
    job_id = _submit(demo, "--gpus", "8")
    # The page reads the read model, which may record the job a moment after its reply.
    eventually(lambda: nlp.json(f"/jobs/{job_id}")[0] == 200 or None, "the job is listed", 30)
    nlp.goto(f"/jobs/{job_id}")
    assert nlp.page.locator("[data-testid=cancel]").count() == 1
    answer = vision.goto(f"/jobs/{job_id}")
    assert answer.status == 404 and "to-cancel" not in vision.page.content()
    vision.errors.remove("Failed to load resource: the server responded with a status of 404 "
                         "(Not Found)")  # that 404 is the point
    vision.goto("/queues")
    # Vision's page offers no cancel of it; its own valid token in a hand-made form is refused
    # by the team scoping, not by the token.
    token = vision.page.get_attribute("meta[name=csrf-token]", "content")
    forged = vision.page.request.post(f"{demo.url}/jobs/{job_id}/cancel",
                                      form={"csrf": token or "", "confirm": "yes"},
                                      headers={"Accept": "application/json"})
    assert forged.status == 404 and forged.json()["error"]["code"] == "JOB_NOT_FOUND"
    status, page = nlp.json(f"/jobs/{job_id}")
    assert status == 200 and page["state"] != "cancelled"
    asked: list[str] = []

    def answer_dialog(dialog: Any, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    # Declined: nothing happens.
    nlp.page.once("dialog", lambda dialog: answer_dialog(dialog, False))
    nlp.page.click("[data-testid=cancel]")
    eventually(lambda: asked or None, "the confirmation dialog", 10)
    assert "to-cancel" in asked[0]
    assert nlp.json(f"/jobs/{job_id}")[1]["state"] != "cancelled"
    # Confirmed: cancelled.
    nlp.page.once("dialog", lambda dialog: answer_dialog(dialog, True))
    nlp.page.click("[data-testid=cancel]")
    eventually(lambda: nlp.json(f"/jobs/{job_id}")[1]["state"] == "cancelled" or None,
               "the job is cancelled", 30)
    nlp.goto(f"/jobs/{job_id}")
    assert nlp.page.locator("[data-testid=cancel]").count() == 0
    nlp.shot("job-cancelled-phone")


def test_every_page_has_a_json_twin_that_validates_and_renders_without_console_errors(
        demo: Demo, viewers: dict[str, Viewer]) -> None:
    platform, research = viewers["platform"], viewers["research"]
    victim = demo.story.jobs["research-sweep"].job_id
    urls = {"queues": "/queues", "job": f"/jobs/{victim}", "cluster": "/cluster",
            "fairshare": "/fairshare", "preemptions": "/preemptions", "jobs": "/jobs"}
    secrets = [part for path in demo.creds.values() for part in read_creds(path.read_text())]
    for viewer in (platform, research):
        for name, url in urls.items():
            status, doc = viewer.json(url)
            assert status == 200, (name, doc)
            jsonschema.validate(doc, PAGE_MODELS[name].model_json_schema())
            assert viewer.goto(url).status == 200
            shown = viewer.page.content() + json.dumps(doc)
            assert not [s for s in secrets if s in shown], f"a secret on {url}"
    platform.goto("/queues")
    platform.shot("queues")
    # Search from the queue page's box, then narrow by team on the jobs list.
    platform.page.fill("input[name=q]", "vision-train")
    platform.page.press("input[name=q]", "Enter")
    platform.page.wait_for_url("**/jobs?q=vision-train")
    names = platform.page.eval_on_selector_all("[data-testid=jobs] tbody tr[data-job] td:nth-child(2)",
                                               "els => els.map(e => e.innerText)")
    assert sorted(names) == ["vision-train-a", "vision-train-b", "vision-train-c"], names
    platform.page.select_option("select[name=state]", "finished")
    platform.page.click("[data-testid=job-filters] button[type=submit]")
    platform.page.wait_for_url("**/jobs?q=vision-train*state=finished*")
    states = platform.page.eval_on_selector_all("[data-testid=jobs] tbody tr[data-job] td.state",
                                                "els => els.map(e => e.innerText)")
    assert set(states) <= {"finished"}
    platform.shot("jobs-search")
    research.goto("/jobs?q=vision-train")
    assert research.page.locator("[data-testid=jobs] tbody tr[data-job]").count() == 0
    assert research.goto("/jobs?team=vision").status == 403
    research.errors.remove("Failed to load resource: the server responded with a status of 403 "
                           "(Forbidden)")  # that 403 is the point
    research.goto(f"/jobs/{victim}")
    research.shot("job")
    # What research may not see: another team's job, and whose the other GPUs are.
    other = demo.story.jobs["vision-train-a"].job_id
    assert research.json(f"/jobs/{other}")[0] == 404
    status, preemptions = research.json("/preemptions")
    assert all(v["team"] in ("research", "another team")
               for p in preemptions["plans"] for v in p["victims"])
    errors = {team: v.errors for team, v in viewers.items() if v.errors}
    assert errors == {}, errors
