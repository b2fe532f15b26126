"""The getting-started tutorial (docs/tutorial.md), followed command by command against a real
`rota up` (embedded NATS JetStream and PostgreSQL, the shipped example configuration, the
`sim` executor), so that the tutorial cannot rot.

The commands are read from the page itself: every line starting with `$ ` in a ```console
block, in order, with the lines after it as the output the page shows. `STEPS` below names, for
each command, the facts its output must state, as regular expressions: each must match the
output the page shows (the page claims it) and the output the command really prints (the
claim holds). A command added to, removed from or reordered in the page fails the test until
`STEPS` says what it should print. A step whose facts take time to become true (the
preemption waits for the sweep's minimum runtime, five minutes) is asked again until they
hold or its timeout passes.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.rota_cli import REPO, ROTA

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs" / "tutorial.md"
UP_TIMEOUT_S = 600.0
ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@dataclass(frozen=True)
class Shown:
    """One command of the page and the output the page shows for it."""

    command: str
    output: str


@dataclass(frozen=True)
class Step:
    command: str
    facts: tuple[str, ...]
    timeout_s: float = 60.0


STEPS = (
    Step("uv run rota up", (r"NATS +nats://\S+ \(embedded, auth on\)", r"Executor +sim",
                            r"scheduler +(ready|starting)", r"Console +(http://\S+) \(ready\)",
                            r"Log in +paste or choose (\S+admin\.creds)", "Rota is up")),
    Step("uv run rota submit --team nlp --user alice --queue training --flavor h100 --gpus 16 "
         "--name llm-pretrain --resumable --runtime 7200", (rf"^{ID}$",)),
    Step("uv run rota jobs", (r"llm-pretrain +nlp +training +16 h100 +running",)),
    Step("SWEEP=$(uv run rota submit -f examples/jobs/sweep.yaml)", ()),
    Step("uv run rota queues", (r"experiment +research +h100 +0 \(0\) +1 +16/8 +8",)),
    Step("RELEASE=$(uv run rota submit -f examples/jobs/release.yaml)", ()),
    Step("uv run rota why $RELEASE", (
        r"release-eval \S+ — pending in production \(vision\)",
        r"because +too few free GPUs: needs 8 h100 GPUs; 0 are free",
        r"can be taken back at .* when the borrowers' minimum runtime ends",
        r"it would start now on a100", r"eta +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
        r"position 1 in the h100 queue")),
    Step("uv run rota preemptions", (r"completed +\S+ +acked +\d+[smhd] +0\.0 GPU-s",),
         timeout_s=600),
    Step("uv run rota jobs", (r"release-eval +vision +production +8 h100 +running",
                              r"lr-sweep +research +experiment +16 h100 +pending")),
    Step("uv run rota why $SWEEP", (r"lr-sweep \S+ — pending in experiment \(research\)",
                                    r"because +over its team's quota",
                                    r"resume +sim://\S+")),
    Step("uv run rota trace $SWEEP", (
        r"submission +submitted: 2x8 h100 to experiment by research/dave",
        r"scheduler +admit: proposed 16 GPUs .*\(8 borrowed\)",
        r"executor +run \S+ started \(attempt 1\)",
        r"scheduler +chosen as a victim for production job \S+: its runs are in a lower queue",
        r"preemption +notice sent: checkpoint and stop by \S+ \S+ UTC \(grace 120 s\)",
        r"executor +acknowledged the notice with checkpoint (sim://\S+)",
        r"executor +run stopped \(preempted\), checkpoint sim://\S+",
        r"ledger +released 16 GPUs", r"preemption +preemption completed: \S+ acked",
        r"suffered \S+ for production job")),
    Step("uv run rota trace $SWEEP", (
        r"executor +run \S+ started \(attempt 2\), resuming from (sim://\S+)",), timeout_s=600),
)


def shown_commands(markdown: str) -> list[Shown]:
    """Every `$ ` command of the page's ```console blocks, with the lines the page shows
    after it."""
    found: list[Shown] = []
    for block in re.findall(r"^```console\n(.*?)^```", markdown, flags=re.M | re.S):
        command: str | None = None
        output: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    found.append(Shown(command, "\n".join(output)))
                command, output = line[2:].strip(), []
            else:
                output.append(line)
        if command is not None:
            found.append(Shown(command, "\n".join(output)))
    return found


def test_the_page_and_the_steps_name_the_same_commands_and_facts() -> None:
    shown = shown_commands(PAGE.read_text())
    assert [s.command for s in shown] == [s.command for s in STEPS]
    for page, step in zip(shown, STEPS, strict=True):
        for fact in step.facts:
            assert re.search(fact, page.output, flags=re.M), (
                f"docs/tutorial.md no longer shows {fact!r} after `{step.command}`")


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG", "ROTA_HOME")}
    # Not under pytest's own temporary root: embedded PostgreSQL runs as another user, which
    # must reach the directory, and pytest sessions running side by side reset that root's
    # mode.
    home = Path(tempfile.mkdtemp(prefix="rota-tutorial-"))
    try:
        # Wide enough that no line the facts read is wrapped.
        yield {**env, "ROTA_HOME": str(home / ".rota"), "COLUMNS": "250"}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def start_rota_up(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`rota up` as the page runs it (no --json): its output up to "Rota is up"."""
    process = subprocess.Popen([ROTA, "up"], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    stderr = process.stderr
    # A thread reads the lines: `select` on the pipe and `readline` on its buffered reader
    # miss lines that arrived in the same read, which wait in the buffer while `select`
    # waits for more that never comes (`rota up` is quiet once it is up).
    arrived: queue.Queue[str | None] = queue.Queue()

    def read_lines() -> None:
        for line in stderr:
            arrived.put(line)
        arrived.put(None)

    threading.Thread(target=read_lines, daemon=True).start()
    lines: list[str] = []
    # Generous: on a loaded machine the first start (initdb, migrations, six services and the
    # console) takes minutes; `rota up` itself waits up to 60 s for the services.
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not any("Rota is up" in line for line in lines):
        try:
            line = arrived.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        lines.append(line.rstrip("\n"))
    output = "\n".join(lines)
    if "Rota is up" not in output:
        process.kill()
        pytest.fail(f"rota up was not up in {UP_TIMEOUT_S:g} s:\n{output}")
    return process, output


@pytest.fixture(scope="module")
def stack(env: dict[str, str]) -> Iterator[str]:
    process, output = start_rota_up(env)
    try:
        yield output
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def run(command: str, env: dict[str, str], variables: dict[str, str], *,
        retry_errors: bool = False) -> str | None:
    """One command of the page, in bash, with `uv run rota` as this environment's `rota` and
    the shell variables earlier commands set. `NAME=$(command)` sets NAME to its output."""
    assignment = re.fullmatch(r"(\w+)=\$\((.*)\)", command)
    line = assignment.group(2) if assignment else command
    line = line.replace("uv run rota ", f"{ROTA} ", 1)
    result = subprocess.run(["bash", "-c", line], env={**env, **variables}, cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    if retry_errors and result.returncode != 0:
        return None
    assert result.returncode == 0, f"`{command}` exited {result.returncode}: {result.stderr}"
    if assignment:
        assert re.fullmatch(ID, result.stdout.strip()), result.stdout
        variables[assignment.group(1)] = result.stdout.strip()
    return result.stdout + result.stderr


def until_true(step: Step, env: dict[str, str], variables: dict[str, str], *,
               retry_errors: bool = False) -> list[re.Match[str]]:
    """Runs the step until every fact holds in its output, or fails with the last output."""
    deadline = time.monotonic() + step.timeout_s
    while True:
        output = run(step.command, env, variables, retry_errors=retry_errors) or ""
        matches = [re.search(fact, output, flags=re.M) for fact in step.facts]
        if all(matches):
            return [m for m in matches if m is not None]
        if time.monotonic() > deadline:
            missing = [f for f, m in zip(step.facts, matches, strict=True) if m is None]
            pytest.fail(f"`{step.command}` did not say {missing} in {step.timeout_s:g} s:\n{output}")
        time.sleep(2)


# rota up (minutes on a loaded machine), the victim's minimum runtime (5 min), the production
# job's run (3 min), and every command in between.
@pytest.mark.timeout(1800)
def test_the_tutorial_runs_as_written(stack: str, env: dict[str, str]) -> None:
    [up, *rest] = STEPS
    matches = [re.search(fact, stack, flags=re.M) for fact in up.facts]
    assert all(matches), f"rota up did not say {up.facts}:\n{stack}"
    console, creds = matches[3].group(1), matches[4].group(1)  # type: ignore[union-attr]
    # Step 5: the console answers where `rota up` said, and the file it says to log in with
    # is there.
    with urllib.request.urlopen(f"{console}/queues", timeout=10) as page:
        assert page.status == 200 and 'id="creds"' in page.read().decode()
    assert Path(creds).is_file() and Path(creds).is_relative_to(env["ROTA_HOME"])

    # On a loaded machine a service may still say `starting` (the page says so): the steps
    # begin once the submission service answers.
    until_true(Step("uv run rota jobs", (r"^JOB +NAME|^no jobs",), timeout_s=180), env, {},
               retry_errors=True)
    variables: dict[str, str] = {}
    found = {}
    for step in rest:
        found[step.command, step.facts] = until_true(step, env, variables)
    # The checkpoint the sweep acknowledged is the one its second run resumed from.
    acknowledged = found["uv run rota trace $SWEEP", STEPS[-2].facts][5].group(1)
    resumed = found["uv run rota trace $SWEEP", STEPS[-1].facts][0].group(1)
    assert acknowledged == resumed
    submitted = found[STEPS[1].command, STEPS[1].facts][0].group(0)
    assert variables["SWEEP"] != submitted != variables["RELEASE"]
