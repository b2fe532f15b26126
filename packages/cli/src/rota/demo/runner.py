"""Runs the demo: a fresh Rota under ROTA_HOME/demo, the script, a live view, the verdict."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rota.cli.output import CommandFailed, console, emit_json, err_console, handled
from rota.cli.running import Executor, Stack
from rota.cli.up import ignore_signals, stopping_on_signals
from rota.demo.story import CONFIG, MAINTENANCE, SCRIPT, SIM_SPEED, TIME_LIMIT_S, Maintenance, Story

if TYPE_CHECKING:  # NATS and the contracts load when the demo starts
    from nats.aio.msg import Msg

    from rota.settings import Settings


def _view(story: Story, elapsed: float) -> Group:
    """Every job and event on one line each, in the terminal's width: a line that does not
    fit is cut with "…", so the view never jumps as rows wrap and unwrap."""
    table = Table(box=None, header_style="bold", expand=True, padding=(0, 1, 0, 0),
                  pad_edge=False)
    for column in ("JOB", "TEAM", "QUEUE", "GPUS", "STATE", "RUN"):
        table.add_column(column, no_wrap=True)
    table.add_column("WHY / NOTE", no_wrap=True, overflow="ellipsis", ratio=1)
    for job in story.jobs.values():
        note = job.why if job.state == "pending" else (
            f"borrowing {job.borrowed}" if job.borrowed and job.state == "running" else "")
        if job.resumed_from and job.state in ("running", "finished"):
            note = f"resumed from {job.resumed_from}"
        table.add_row(job.name, job.team, job.queue, str(job.gpus), job.state,
                      str(job.attempts or ""), note)
    events = Text("\n".join(story.log[-12:]) or "…", no_wrap=True, overflow="ellipsis")
    return Group(Panel(table, title=f"rota demo — {elapsed:5.1f} s"),
                 Panel(events, title="what happened"))


async def _play(settings: Settings, nats_url: str, story: Story, live: Live | None) -> None:
    import nats

    from rota.bus.options import connect_options
    from rota.contracts import envelope
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.ids import new_id

    nc = await nats.connect(nats_url, **connect_options(settings))
    start = time.monotonic()
    run = new_id()[-8:]

    async def on_event(msg: Msg) -> None:
        doc = json.loads(msg.data)
        story.event(time.monotonic() - start, doc["type"], doc["data"], doc.get("job_id"))

    await nc.subscribe("rota.evt.>", cb=on_event)
    todo = list(SCRIPT)
    operations = list(MAINTENANCE)
    try:
        while not story.finished and time.monotonic() - start < TIME_LIMIT_S:
            elapsed = time.monotonic() - start
            for op in list(operations):
                if story.ready(op.after):
                    operations.remove(op)
                    await _maintain(nc, story, op)
            for item in list(todo):
                due = story.ready(item.after) if item.after else elapsed >= item.at_s
                if due:
                    todo.remove(item)
                    spec = m.SubmitJob.model_validate(item.spec(run))
                    raw = await nc.request(s.api_submit(item.team),
                                           envelope(spec, source="demo").to_bytes(), timeout=10)
                    reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
                    if not reply.ok:
                        raise CommandFailed(f"the demo's {item.name} was refused: {reply.error}")
                    story.submitted(item.name, reply.result["job_id"])
            if live is not None:
                live.update(_view(story, elapsed))
            await asyncio.sleep(0.25)
    finally:
        await nc.close()


async def _maintain(nc: Any, story: Story, op: Maintenance) -> None:
    """The admin's `rota cluster drain` / `undrain`, through the API as the CLI sends it."""
    from rota.contracts import envelope
    from rota.contracts import messages as m
    from rota.contracts import subjects as s

    node = story.drained_node if op.action == "undrain" else next(iter(story.jobs[op.job].nodes))
    assert node is not None
    command: m.DrainNode | m.UndrainNode = (
        m.UndrainNode(node=node) if op.action == "undrain"
        else m.DrainNode(node=node, deadline_s=op.deadline_s, reason=op.reason))
    subject = s.API_NODE_UNDRAIN if op.action == "undrain" else s.API_NODE_DRAIN
    raw = await nc.request(subject, envelope(command, source="demo").to_bytes(), timeout=10)
    reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
    if not reply.ok:
        raise CommandFailed(f"the demo's {op.action} of {node} was refused: {reply.error}")
    if op.action == "drain":
        story.drained(node)
    else:
        story.log.append(f"{'':>7}  node {node} undrained: maintenance over")


@handled
def demo(
    json_out: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """The preemption story on a small simulated cluster, live, in under 2 minutes.

    Two teams share fairly, idle GPUs are borrowed, then a production job reclaims them:
    its victims get a notice, checkpoint, acknowledge, stop, and later resume from their
    checkpoints; then a node is drained for maintenance, and its job moves the same way.
    Exits 0 when every step happened as promised.
    """
    from rota.settings import get_settings

    base = get_settings()
    home = base.home / "demo"
    shutil.rmtree(home, ignore_errors=True)
    settings = base.model_copy(update={"home": home})
    stack = Stack(settings, CONFIG, Executor.sim,
                  extra_env={"ROTA_SIM_SPEED": str(SIM_SPEED), "ROTA_SCHEDULER_TICK_S": "0.5",
                             "ROTA_LOG_LEVEL": "WARNING"},
                  say=lambda text: err_console.print(f"rota demo: {text}"))
    story = Story()
    with stopping_on_signals():
        try:
            summary = stack.start()
            assert stack.endpoints is not None
            if json_out:
                asyncio.run(_play(settings, stack.endpoints.nats_url, story, None))
            else:
                err_console.print(f"rota demo: NATS {summary['nats_url']}, six services up")
                if (web := summary.get("console")) is not None:
                    err_console.print(f"rota demo: watch it live at {web['url']} (log in: "
                                      f"{web['login']})", highlight=False, soft_wrap=True)
                with Live(_view(story, 0.0), console=console, refresh_per_second=4) as live:
                    asyncio.run(_play(settings, stack.endpoints.nats_url, story, live))
        finally:
            ignore_signals()
            stack.stop()
    _verdict(story, json_out)


def _verdict(story: Story, json_out: bool) -> None:
    checks = story.checks()
    ok = all(passed for _, passed in checks)
    if json_out:
        result: dict[str, Any] = {
            "ok": ok, "checks": [{"check": c, "passed": p} for c, p in checks],
            "jobs": {j.name: {"state": j.state, "attempts": j.attempts,
                              "resumed_from": j.resumed_from} for j in story.jobs.values()},
            "events": story.log,
        }
        emit_json(result)
    else:
        console.print("\n[bold]What the demo showed[/bold]")
        for check, passed in checks:
            console.print(f"  {'[green]✓[/green]' if passed else '[red]✗[/red]'} {check}")
        console.print("\nRun it on your own cluster: `uv run rota up`, then `rota submit`,"
                      " `rota why`, `rota trace`.")
    if not ok:
        raise typer.Exit(1)
