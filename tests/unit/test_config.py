"""rota.yaml: the example loads, and every error names its key path and rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.config import ConfigError, load_config, parse_config
from rota.config.loader import example_text
from rota.contracts.common import Tier
from rota_policy import policy_config_from


def example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(example_text())
    return doc


def issues_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return [str(issue) for issue in info.value.issues]


def test_the_shipped_example_is_valid() -> None:
    config = load_config()
    assert len(config.cluster.flavors) == 2
    assert [q.value for q in config.queues] == ["production", "training", "experiment"]
    assert len(config.teams) == 3
    assert config.capacity() == {"h100": 32, "a100": 32}
    racks = {n.rack for n in config.expanded_nodes() if n.flavor == "h100"}
    assert len(racks) == 2


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(example())
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("teams.nlp.quota.h100", -1, "teams.nlp.quota.h100: must be >= 0"),
        ("teams.nlp.quota.tpu", 8, "teams.nlp.quota.tpu: unknown flavor"),
        ("teams.nlp.weight", 0, "teams.nlp.weight: must be > 0"),
        ("teams.nlp.colour", "red", "teams.nlp.colour: unknown key"),
        ("teams.nlp.lending_limit.h100", 99, "teams.nlp.lending_limit.h100: must be <= the team's quota (16)"),
        ("queues.urgent", {}, "queues.urgent.[key]: must be one of 'production', 'training' or 'experiment'"),
        ("cluster.node_pools.0.flavor", "tpu", "cluster.node_pools.0.flavor: unknown flavor"),
        ("cluster.node_pools.0.gpus_per_node", 0, "cluster.node_pools.0.gpus_per_node: must be >= 1"),
        ("policy.fairshare_half_life_s", 0, "policy.fairshare_half_life_s: must be > 0"),
        ("preemption.max_preemptions_per_job", -2, "preemption.max_preemptions_per_job: must be >= 0"),
        ("teams.vision.quota.h100", 64, "teams.*.quota.h100: quotas add up to 88 GPUs, more than the 32 the cluster has"),
        ("queues.training.preemptible_by", ["production", "production"],
         "queues.training.preemptible_by: lists a tier twice"),
        ("queues.training.preemptible_by", ["urgent"],
         "queues.training.preemptible_by.0: must be one of 'production', 'training' or 'experiment'"),
        ("queues.production.preemptible_by", ["production"],
         "queues.production.preemptible_by: must be empty or absent when preemptible is false"),
        ("queues.experiment.min_runtime_s", -1, "queues.experiment.min_runtime_s: must be >= 0"),
        ("queues.training.max_preemptions_per_job", -1, "queues.training.max_preemptions_per_job: must be >= 0"),
        ("queues.training.preemption_delay_s", -5, "queues.training.preemption_delay_s: must be >= 0"),
        ("preemption.delay_s", 10**9, "preemption.delay_s: must be <= 604800"),
        ("teams.nlp.users.alice.email", "not-an-email", "teams.nlp.users.alice.email: must match ^[^@\\s]+@[^@\\s]+$"),
    ],
)
def test_errors_name_the_path_and_the_rule(path: str, value: Any, expected: str) -> None:
    assert expected in issues_of(mutate(path, value))


def test_missing_sections_are_reported_together() -> None:
    assert issues_of({"teams": {}}) == ["cluster: is required"]
    doc = example()
    del doc["cluster"]["node_pools"]
    assert "cluster: needs at least one node or node pool" in issues_of(doc)


def test_unreadable_and_invalid_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("teams: [unclosed\n")
    with pytest.raises(ConfigError, match="line 2, column 1: invalid YAML"):
        load_config(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="must hold a YAML mapping"):
        load_config(scalar)


def test_queue_protection_falls_back_to_the_global_values() -> None:
    doc = example()
    doc["preemption"] |= {"min_runtime_s": 300, "max_preemptions_per_job": 10, "delay_s": 120}
    doc["queues"]["training"] |= {"preemptible_by": ["production"], "min_runtime_s": 900,
                                  "preemption_delay_s": 0}
    doc["queues"]["experiment"] |= {"max_preemptions_per_job": 2}
    config = policy_config_from(parse_config(doc))
    training, experiment = config.protection(Tier.training), config.protection(Tier.experiment)
    assert (training.min_runtime_s, training.max_preemptions, training.delay_s) == (900, 10, 0)
    assert (experiment.min_runtime_s, experiment.max_preemptions, experiment.delay_s) == (300, 2, 120)
    assert not config.may_preempt(Tier.training, Tier.training)
    assert config.may_preempt(Tier.production, Tier.training)
    assert config.may_preempt(Tier.training, Tier.experiment)


def _with_topology(levels: list[str], **pool: Any) -> dict[str, Any]:
    doc = copy.deepcopy(example())
    doc["cluster"]["topology"] = {"levels": levels}
    for p in doc["cluster"]["node_pools"]:
        p.update(pool)
    return doc


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (_with_topology(["block", "rack"]), "cluster.node_pools.0.racks_per: needs block"),
        (_with_topology(["block", "block"], racks_per={"block": 1}), "cluster.topology.levels: lists a level twice"),
        (_with_topology(["rack", "node"]), "cluster.topology.levels: `node` is implicit, the innermost level"),
        (_with_topology(["rack"], racks_per={"block": 1}),
         "cluster.node_pools.0.racks_per.block: not a level of cluster.topology.levels (other than rack)"),
        (_with_topology(["rack", "block"], racks_per={"block": 1}),
         "cluster.node_pools.0.racks_per.block: groups racks, so it must be listed before rack"),
        (mutate("cluster.node_pools.0.racks_per", {"block": 1}),
         "cluster.node_pools.0.racks_per: needs cluster.topology.levels"),
        (mutate("cluster.topology", {"levels": []}), "cluster.topology.levels: must have at least 1 item(s)"),
        (mutate("cluster.topology", {"levels": ["rack"], "gangs": {"required": "block"}}),
         "cluster.topology.gangs.required: not a level of cluster.topology.levels"),
        (mutate("cluster.topology", {"levels": ["rack"], "gangs": {}}),
         "cluster.topology.gangs: needs required or preferred"),
    ],
)
def test_topology_errors_name_the_field(doc: dict[str, Any], expected: str) -> None:
    assert expected in issues_of(doc)


def test_racks_grouped_into_blocks_nest() -> None:
    config = parse_config(_with_topology(["block", "rack"], racks_per={"block": 1}))
    paths = {n.name: config.node_levels(n) for n in config.expanded_nodes()}
    # h100: 4 nodes in 2 racks of 2, one rack per block.
    assert paths["h100-1"] == (("block", "h100-block-0"), ("rack", "h100-rack-0"))
    assert paths["h100-2"] == (("block", "h100-block-1"), ("rack", "h100-rack-1"))
    assert paths["a100-3"] == (("block", "a100-block-0"), ("rack", "a100-rack-0"))


def test_domains_that_do_not_nest_are_refused() -> None:
    doc = copy.deepcopy(example())
    doc["cluster"]["node_pools"] = []
    doc["cluster"]["nodes"] = [
        {"name": "a", "flavor": "h100", "gpus": 8, "rack": "r0", "topology": {"block": "b0"}},
        {"name": "b", "flavor": "h100", "gpus": 8, "rack": "r0", "topology": {"block": "b1"}},
        {"name": "c", "flavor": "a100", "gpus": 8, "rack": "r1", "topology": {"block": "b1"}},
    ]
    doc["cluster"]["topology"] = {"levels": ["block", "rack"]}
    doc["teams"] = {"nlp": {"quota": {"h100": 8}}}
    assert "cluster.topology.levels: rack r0 lies in two block domains (b0, b1)" in issues_of(doc)


def test_a_cluster_without_levels_gives_the_policy_none() -> None:
    config = load_config()
    assert all(config.node_levels(n) == () for n in config.expanded_nodes())
    assert policy_config_from(config).gang_topology is None
