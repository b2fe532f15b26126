"""The replay honours topology levels: the blocks scenarios, their gang rule, their metrics."""

from __future__ import annotations

from collections import Counter

import pytest
from rota.config import load_config
from rota_policy import TopologyNeed, policy_config_from
from rota_replay.metrics import METRIC_KEYS
from rota_replay.replay import find_scenario, nodes_from, replay_run
from rota_replay.workload import load_philly

from tests.unit.policy.test_replay import HEAD


def test_the_blocks_scenario_groups_three_racks_per_block() -> None:
    config = load_config(find_scenario("philly-768-blocks"))
    nodes = nodes_from(config)
    blocks = Counter(dict(n.levels)["block"] for n in nodes)
    racks_of = {dict(n.levels)["block"]: set() for n in nodes}
    for n in nodes:
        racks_of[dict(n.levels)["block"]].add(n.rack)
    assert blocks == {f"node-block-{i}": 24 for i in range(4)}
    assert all(len(r) == 3 for r in racks_of.values())
    assert policy_config_from(config).gang_topology == TopologyNeed("rack", None)
    assert policy_config_from(load_config(find_scenario("philly-768-blocks-prefer"))).gang_topology == (
        TopologyNeed(None, "block"))
    assert policy_config_from(load_config(find_scenario("philly-768-blocks-none"))).gang_topology is None


@pytest.mark.parametrize("scenario", ["philly-768-blocks", "philly-768-blocks-none"])
def test_a_replay_on_levels_reports_gangs_and_fragmentation(scenario: str) -> None:
    jobs = load_philly(HEAD)
    run = replay_run(jobs, load_config(find_scenario(scenario)), "rota")
    assert tuple(run.result)[: len(METRIC_KEYS)] == METRIC_KEYS
    figures = run.result["topology"]
    assert figures["gangs"] == sum(1 for j in jobs if j.workers > 1) > 0
    assert run.result["completed"] == len(jobs)
    assert figures["gang_fragmentation_waits"] <= figures["fragmentation_waits"]


def test_a_replay_without_levels_keeps_exactly_the_metric_keys() -> None:
    run = replay_run(load_philly(HEAD), load_config(find_scenario("philly-768")), "rota")
    assert tuple(run.result) == METRIC_KEYS
