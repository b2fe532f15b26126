"""Debian's Chromium driven by Playwright, for the console's page tests: no browser download."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
ARTIFACTS = Path(os.environ.get("ROTA_TEST_ARTIFACTS",
                                Path(__file__).resolve().parents[2] / "test-artifacts")) / "console"

# Every swap of a live page is recorded, so a test can tell what the page showed between two
# of its looks, however slow its polling is.
RECORD_SWAPS = """
window.__swaps = [];
document.addEventListener("htmx:afterSettle", function () {
  var borrowers = document.querySelector("[data-testid=borrowers]");
  var cells = Array.from(document.querySelectorAll(".gpu")).map(function (g) {
    return [g.dataset.team, g.dataset.tier, g.classList.contains("borrowed")];
  });
  window.__swaps.push({borrowers: borrowers ? borrowers.innerText : null, cells: cells});
});
"""


@dataclass
class Viewer:
    """One browser context logged in as one team, with the console errors its pages logged."""

    page: Any
    base: str
    errors: list[str] = field(default_factory=list)

    def goto(self, path: str) -> Any:
        response = self.page.goto(self.base + path)
        self.page.wait_for_load_state("load")
        return response

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def json(self, path: str) -> Any:
        answer = self.page.request.get(self.base + path, headers={"Accept": "application/json"})
        return answer.status, answer.json()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium chromium-driver "
                    "(.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


def log_in(browser: Any, base: str, creds: Path, *, viewport: dict[str, int]) -> Viewer:
    context = browser.new_context(viewport=viewport)
    context.add_init_script(RECORD_SWAPS)
    page = context.new_page()
    viewer = Viewer(page, base)
    page.on("console", lambda msg: viewer.errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: viewer.errors.append(str(exc)))
    viewer.goto("/queues")  # not logged in: the login form, which comes back here
    page.fill("#creds", creds.read_text())
    page.click("form.login button[type=submit]")
    page.wait_for_url("**/queues")
    return viewer
