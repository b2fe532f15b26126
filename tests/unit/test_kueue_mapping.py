"""A rota.yaml as Kueue's objects: one ResourceFlavor per flavor, one cohort, a ClusterQueue and a
LocalQueue per team with its quota and limits, a priority class per tier, Rota's preemption."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from rota.config.loader import example_text, parse_config
from rota.contracts.common import Tier
from rota.k8s import kueue as kq
from rota.k8s.kueue import kueue_job, kueue_objects

CONFIG = parse_config({
    "cluster": {"flavors": [{"name": "h100"}, {"name": "a100"}],
                "nodes": [{"name": "n0", "flavor": "h100", "gpus": 8},
                          {"name": "n1", "flavor": "a100", "gpus": 8}]},
    "teams": {
        "nlp": {"quota": {"h100": 8, "a100": 4}, "borrowing_limit": {"h100": 4},
                "lending_limit": {"a100": 2}},
        "research": {"quota": {"h100": 0}},
    },
})


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_flavors_cohort_topology_and_priority_classes() -> None:
    objects = kueue_objects(CONFIG, "bench")
    assert {o["apiVersion"] for o in objects} == {"kueue.x-k8s.io/v1beta2"}
    flavors = by_kind(objects, "ResourceFlavor")
    assert set(flavors) == {"h100", "a100"}
    assert flavors["a100"]["spec"]["nodeLabels"] == {"rota.dev/flavor": "a100"}
    assert flavors["a100"]["spec"]["topologyName"] == kq.TOPOLOGY
    assert [lvl["nodeLabel"] for lvl in by_kind(objects, "Topology")[kq.TOPOLOGY]["spec"]["levels"]] == [
        "topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert set(by_kind(objects, "Cohort")) == {"rota"}
    values = {name: o["value"] for name, o in by_kind(objects, "WorkloadPriorityClass").items()}
    assert values["rota-production"] > values["rota-training"] > values["rota-experiment"]
    # What a Kueue object refers to is created before it.
    order = [o["kind"] for o in objects]
    assert order.index("ResourceFlavor") < order.index("ClusterQueue") < order.index("LocalQueue")
    assert order.index("Topology") < order.index("ResourceFlavor")


def test_a_team_is_a_cluster_queue_with_its_quota_and_limits() -> None:
    queues = by_kind(kueue_objects(CONFIG, "bench"), "ClusterQueue")
    nlp = queues["nlp"]["spec"]
    assert nlp["cohortName"] == "rota"
    [group] = nlp["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    quotas = {f["name"]: f["resources"][0] for f in group["flavors"]}
    assert quotas["h100"] == {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4}
    assert quotas["a100"] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 2}
    # A flavor the team has no quota for is still listed, at zero, so it can borrow it.
    research = {f["name"]: f["resources"][0] for f in queues["research"]["spec"]["resourceGroups"][0]["flavors"]}
    assert research == {"h100": {"name": "nvidia.com/gpu", "nominalQuota": 0},
                        "a100": {"name": "nvidia.com/gpu", "nominalQuota": 0}}


def test_preemption_mirrors_rota_and_borrowing_preemption_can_be_left_out() -> None:
    spec = kq.cluster_queue_spec(CONFIG, "nlp")
    assert spec["preemption"]["reclaimWithinCohort"] == "Any"
    assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
    threshold = spec["preemption"]["borrowWithinCohort"]["maxPriorityThreshold"]
    assert kq.PRIORITY[Tier.training] <= threshold < kq.PRIORITY[Tier.production]
    assert "borrowWithinCohort" not in kq.cluster_queue_spec(CONFIG, "nlp", borrow_within_cohort=False)["preemption"]


def test_local_queues_live_in_the_workload_namespace() -> None:
    local = by_kind(kueue_objects(CONFIG, "bench"), "LocalQueue")
    assert {n: (o["metadata"]["namespace"], o["spec"]["clusterQueue"]) for n, o in local.items()} == {
        "nlp": ("bench", "nlp"), "research": ("bench", "research")}


def test_without_topology_no_topology_object_and_flavors_name_none() -> None:
    objects = kueue_objects(CONFIG, "bench", topology=False)
    assert "Topology" not in {o["kind"] for o in objects}
    assert all("topologyName" not in f["spec"] for f in by_kind(objects, "ResourceFlavor").values())


@pytest.mark.parametrize("tier", list(Tier))
def test_a_job_is_an_indexed_gang_in_its_team_queue(tier: Tier) -> None:
    job = kueue_job(name="j1", namespace="bench", team="nlp", tier=tier, workers=3, gpus_per_worker=4,
                    pod_annotations={"rota.dev/kwok-runtime": "90s"})
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "nlp",
                                         "kueue.x-k8s.io/priority-class": f"rota-{tier.value}"}
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert "suspend" not in spec  # Kueue's webhook suspends it, not us
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["rota.dev/kwok-runtime"] == "90s"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}


def test_the_shipped_example_config_maps() -> None:
    config = parse_config(yaml.safe_load(example_text()))
    objects = kueue_objects(config, "ns")
    assert set(by_kind(objects, "ClusterQueue")) == set(config.teams)
    assert set(by_kind(objects, "ResourceFlavor")) == {f.name for f in config.cluster.flavors}
