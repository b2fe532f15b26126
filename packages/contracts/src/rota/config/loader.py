"""Loads and checks `rota.yaml`. Every error names its key path and the rule it breaks."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rota.config.kubernetes import policy_issues
from rota.config.model import RotaConfig

EXAMPLE_NAME = "example.rota.yaml"


@dataclass(frozen=True)
class ConfigIssue:
    path: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}" if self.path else self.rule


class ConfigError(ValueError):
    def __init__(self, source: str, issues: list[ConfigIssue]) -> None:
        self.source = source
        self.issues = issues
        lines = "\n".join(f"  {issue}" for issue in issues)
        super().__init__(f"{source}: {len(issues)} problem(s)\n{lines}")


def _num(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


_RULES = {
    "greater_than_equal": lambda c: f"must be >= {_num(c['ge'])}",
    "greater_than": lambda c: f"must be > {_num(c['gt'])}",
    "less_than_equal": lambda c: f"must be <= {_num(c['le'])}",
    "less_than": lambda c: f"must be < {_num(c['lt'])}",
    "string_pattern_mismatch": lambda c: f"must match {c['pattern']}",
    "string_too_long": lambda c: f"must be at most {c['max_length']} characters",
    "string_too_short": lambda c: f"must be at least {c['min_length']} characters",
    "too_short": lambda c: f"must have at least {c['min_length']} item(s)",
}


def _issue_from(err: Any) -> ConfigIssue:
    path = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "missing":
        return ConfigIssue(path, "is required")
    if kind == "extra_forbidden":
        return ConfigIssue(path, "unknown key")
    if kind in ("enum", "literal_error"):
        return ConfigIssue(path, f"must be one of {err['ctx']['expected']}")
    if kind in _RULES:
        return ConfigIssue(path, _RULES[kind](err.get("ctx", {})))
    return ConfigIssue(path, str(err["msg"]).removeprefix("Value error, "))


def semantic_issues(config: RotaConfig) -> list[ConfigIssue]:
    """Cross-references pydantic cannot see: names that must exist, capacities that must add up."""
    issues: list[ConfigIssue] = []
    flavors = {f.name for f in config.cluster.flavors}
    seen_flavors: set[str] = set()
    for i, declared in enumerate(config.cluster.flavors):
        if declared.name in seen_flavors:
            issues.append(ConfigIssue(f"cluster.flavors.{i}.name", "duplicate flavor"))
        seen_flavors.add(declared.name)
    for i, pool in enumerate(config.cluster.node_pools):
        if pool.flavor not in flavors:
            issues.append(ConfigIssue(f"cluster.node_pools.{i}.flavor", "unknown flavor"))
    for i, node in enumerate(config.cluster.nodes):
        if node.flavor not in flavors:
            issues.append(ConfigIssue(f"cluster.nodes.{i}.flavor", "unknown flavor"))
    if not config.cluster.node_pools and not config.cluster.nodes:
        issues.append(ConfigIssue("cluster", "needs at least one node or node pool"))
    names = [n.name for n in config.expanded_nodes()]
    if len(names) != len(set(names)):
        issues.append(ConfigIssue("cluster.nodes", "node names must be unique"))
    issues.extend(_topology_issues(config))
    issues.extend(ConfigIssue(path, rule) for path, rule in
                  policy_issues(config.kubernetes, config.teams))
    capacity = config.capacity()
    for team_name, team in config.teams.items():
        for field in ("quota", "borrowing_limit", "lending_limit", "budgets"):
            for flavor in getattr(team, field):
                if flavor not in flavors:
                    issues.append(ConfigIssue(f"teams.{team_name}.{field}.{flavor}", "unknown flavor"))
        for flavor, limit in team.lending_limit.items():
            if limit is not None and limit > team.quota.get(flavor, 0):
                issues.append(
                    ConfigIssue(
                        f"teams.{team_name}.lending_limit.{flavor}",
                        f"must be <= the team's quota ({team.quota.get(flavor, 0)})",
                    )
                )
    for tier, queue in config.queues.items():
        by = queue.preemptible_by
        if by is None:
            continue
        where = f"queues.{tier.value}.preemptible_by"
        if len(set(by)) != len(by):
            issues.append(ConfigIssue(where, "lists a tier twice"))
        if by and not queue.preemptible:
            issues.append(ConfigIssue(where, "must be empty or absent when preemptible is false"))
    for flavor in flavors:
        promised = sum(team.quota.get(flavor, 0) for team in config.teams.values())
        if promised > capacity.get(flavor, 0):
            issues.append(
                ConfigIssue(
                    f"teams.*.quota.{flavor}",
                    f"quotas add up to {promised} GPUs, more than the {capacity.get(flavor, 0)}"
                    " the cluster has",
                )
            )
    return issues


def parse_config(doc: Any, source: str = "<config>") -> RotaConfig:
    if not isinstance(doc, dict):
        raise ConfigError(source, [ConfigIssue("", "the file must hold a YAML mapping")])
    try:
        config = RotaConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(source, [_issue_from(e) for e in exc.errors(include_url=False)]) from None
    issues = semantic_issues(config)
    if issues:
        raise ConfigError(source, issues)
    return config


def example_text() -> str:
    return resources.files("rota.config").joinpath(EXAMPLE_NAME).read_text()


def load_config(path: Path | None = None) -> RotaConfig:
    """Load `path`, or the shipped example when `path` is None."""
    if path is None:
        return parse_config(yaml.safe_load(example_text()), source=EXAMPLE_NAME)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [ConfigIssue("", f"cannot read: {exc.strerror}")]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(str(path), [ConfigIssue("", f"{where}invalid YAML")]) from None
    return parse_config(doc, source=str(path))


def _topology_issues(config: RotaConfig) -> list[ConfigIssue]:
    """Every node carries a domain for each declared level, and the levels nest: each domain of
    an inner level lies within one domain of each outer level."""
    cluster = config.cluster
    topology = cluster.topology
    pools, nodes = cluster.node_pools, cluster.nodes
    if topology is None:
        issues = [ConfigIssue(f"cluster.node_pools.{i}.racks_per", "needs cluster.topology.levels")
                  for i, p in enumerate(pools) if p.racks_per]
        issues += [ConfigIssue(f"cluster.nodes.{i}.topology", "needs cluster.topology.levels")
                   for i, n in enumerate(nodes) if n.topology]
        return issues
    levels = topology.levels
    issues = []
    if len(set(levels)) != len(levels):
        issues.append(ConfigIssue("cluster.topology.levels", "lists a level twice"))
    if "node" in levels:
        issues.append(ConfigIssue("cluster.topology.levels", "`node` is implicit, the innermost level"))
    others = [level for level in levels if level != "rack"]
    for i, pool in enumerate(pools):
        for level in pool.racks_per:
            if level not in others:
                issues.append(ConfigIssue(f"cluster.node_pools.{i}.racks_per.{level}",
                                          "not a level of cluster.topology.levels (other than rack)"))
            elif "rack" in levels and levels.index(level) > levels.index("rack"):
                issues.append(ConfigIssue(f"cluster.node_pools.{i}.racks_per.{level}",
                                          "groups racks, so it must be listed before rack"))
        for level in others:
            if level not in pool.racks_per:
                issues.append(ConfigIssue(f"cluster.node_pools.{i}.racks_per", f"needs {level}"))
    for i, node in enumerate(nodes):
        for level in others:
            if level not in node.topology:
                issues.append(ConfigIssue(f"cluster.nodes.{i}.topology", f"needs {level}"))
        for level in node.topology:
            if level not in others:
                issues.append(ConfigIssue(f"cluster.nodes.{i}.topology.{level}",
                                          "not a level of cluster.topology.levels (other than rack)"))
    if issues:
        return issues
    for outer, inner in pairwise(levels):
        parent: dict[str, str] = {}
        for node in config.expanded_nodes():
            path = dict(config.node_levels(node))
            if parent.setdefault(path[inner], path[outer]) != path[outer]:
                issues.append(ConfigIssue("cluster.topology.levels", f"{inner} {path[inner]} lies in"
                                          f" two {outer} domains ({parent[path[inner]]}, {path[outer]})"))
                break
    gangs = topology.gangs
    if gangs is not None:
        if gangs.required is None and gangs.preferred is None:
            issues.append(ConfigIssue("cluster.topology.gangs", "needs required or preferred"))
        for key in ("required", "preferred"):
            level = getattr(gangs, key)
            if level is not None and level not in (*levels, "node"):
                issues.append(ConfigIssue(f"cluster.topology.gangs.{key}",
                                          "not a level of cluster.topology.levels"))
    return issues
