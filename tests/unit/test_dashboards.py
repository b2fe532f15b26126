"""The Grafana dashboards ask only for metrics the code exports, and show what the issue asks.

Metric names are pulled out of each PromQL expression (strings, label matchers, grouping
clauses, ranges and Grafana variables removed; what remains that is not a function, keyword
or number is a metric name) and compared with what `rota.metrics.REGISTRY` exposes once every
service's families are registered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.core import Metric
from rota import metrics
from rota.cli.stack import SERVICES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "datasources.yml"

PROMETHEUS_MADE = {"up"}
"""Series Prometheus itself writes for every target; no code exports them."""

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
             "unless", "bool", "offset", "inf", "nan"}
_STRIP = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),                           # strings
    re.compile(r"\$\{[^}]*\}|\$\w+"),                           # Grafana variables
    re.compile(r"\{[^}]*\}"),                                   # label matchers
    re.compile(r"\[[^\]]*\]"),                                  # ranges and subqueries
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    for pattern in _STRIP:
        expr = pattern.sub(" ", expr)
    names = set()
    for match in _IDENT.finditer(expr):
        rest = expr[match.end():].lstrip()
        word = match.group()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or aggregation, or a keyword
        if re.fullmatch(r"\d+[smhdwy]?", word) or (match.start() and expr[match.start() - 1].isdigit()):
            continue
        names.add(word)
    return names


def exported() -> set[str]:
    """Every series name `/metrics` can show, across the six services."""
    for service in SERVICES:
        metrics.register(service)
    names = set()
    family: Metric
    for family in metrics.REGISTRY.collect():
        names.add(family.name)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                    "summary": ("_count", "_sum")}.get(family.type, ())
        names |= {family.name + s for s in suffixes}
        names |= {sample.name for sample in family.samples}
    return names


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def expressions(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target, and of query variables."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield panel["title"], target["expr"]
    for variable in board.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", str(text or ""))
        if match:
            yield f"variable {variable['name']}", match.group(1)


def families_used(board: dict[str, Any]) -> set[str]:
    """The families (as in `metrics.NAMES`) whose series the board reads."""
    used = set()
    for _, expr in expressions(board):
        for name in metric_names(expr):
            for family in metrics.NAMES:
                stem = family.removesuffix("_total")
                if name in (family, stem + "_bucket", stem + "_count", stem + "_sum"):
                    used.add(family)
    return used


def test_the_extractor_finds_metrics_and_nothing_else() -> None:
    expr = ('histogram_quantile(0.95, sum by (le, queue) (rate(rota_queue_wait_seconds_bucket'
            '{team="$team", queue=~"a|b"}[$__rate_interval]))) / ignoring(x) group_left '
            'sum without (job) (rota_gpus_capacity offset 5m) * 3600 + 1e3 and on() up')
    assert metric_names(expr) == {"rota_queue_wait_seconds_bucket", "rota_gpus_capacity", "up"}


def test_there_are_the_three_dashboards_with_distinct_uids() -> None:
    boards = dashboards()
    assert set(boards) == {"overview", "team", "scheduler"}
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    for board in boards.values():
        assert list(expressions(board)), board["uid"]


@pytest.mark.parametrize("name", ["overview", "team", "scheduler"])
def test_every_expression_reads_only_metrics_the_code_exports(name: str) -> None:
    known = exported() | PROMETHEUS_MADE
    unknown = {(title, metric) for title, expr in expressions(dashboards()[name])
               for metric in metric_names(expr) if metric not in known}
    assert not unknown


def test_every_panel_uses_a_provisioned_datasource() -> None:
    uids = {d["uid"] for d in yaml.safe_load(DATASOURCES.read_text())["datasources"]}
    for board in dashboards().values():
        for panel in panels(board):
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] in uids, (board["uid"], panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] in uids


def test_the_dashboards_show_what_the_issue_asks() -> None:
    boards = dashboards()
    assert families_used(boards["overview"]) >= {
        "rota_queue_pending_jobs",        # queues by tier
        "rota_queue_wait_seconds",        # waits
        "rota_gpus_allocated", "rota_quota_used_ratio",  # GPU use against quota by team
        "rota_preemptions_total",         # acked against forced
        "rota_lost_gpu_seconds_total",    # lost GPU-hours
        "rota_jobs_finished_total",       # failures
    }
    assert families_used(boards["team"]) >= {"rota_gpus_allocated", "rota_team_usage_gpu_seconds"}
    assert families_used(boards["scheduler"]) >= {
        "rota_schedule_cycle_seconds", "rota_scheduler_decisions_total", "rota_outbox_lag_seconds"}
    every = set().union(*(families_used(b) for b in boards.values()))
    assert every == metrics.NAMES, metrics.NAMES - every


def test_the_team_dashboard_filters_by_its_team_variable() -> None:
    board = dashboards()["team"]
    assert [v["name"] for v in board["templating"]["list"]] == ["team"]
    per_team = [expr for _, expr in expressions(board) if '$team' in expr]
    assert len(per_team) >= 5
