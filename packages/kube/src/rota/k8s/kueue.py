"""A `rota.yaml` as Kueue's objects (kueue.x-k8s.io/v1beta2, Kueue v0.17), so that the same
cluster, teams and tiers can be run by the real Kueue beside Rota.

The mapping, one place:
- each GPU flavor -> a ResourceFlavor selecting the nodes labelled `<flavor_label>: <flavor>`,
  tolerating the GPU taint (as Rota's pods do), and naming the Topology for TAS;
- one Cohort (`rota`) holding every team;
- each team -> a ClusterQueue in the cohort with its nominal quota per flavor, and its
  borrowing and lending limits where rota.yaml sets them (absent there means none in Kueue too);
  BestEffortFIFO, as Kueue's default;
- each team -> a LocalQueue of the same name in the workload namespace;
- each tier -> a WorkloadPriorityClass `rota-<tier>`, production highest;
- preemption as Rota's: reclaim lent quota from any priority (`reclaimWithinCohort: Any`),
  preempt lower priority within the team (`withinClusterQueue: LowerPriority`), and, unless
  asked not to, borrow by preempting lower-priority borrowers of the cohort
  (`borrowWithinCohort: LowerPriority`), never production ones;
- one Topology (`rota-topology`): zone, then hostname.
"""

from __future__ import annotations

from typing import Any

from rota.config.model import RotaConfig
from rota.contracts.common import Tier

API = "kueue.x-k8s.io/v1beta2"
COHORT = "rota"
TOPOLOGY = "rota-topology"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
PRIORITY = {Tier.production: 1000, Tier.training: 500, Tier.experiment: 100}
"""The tiers' priority values: only their order matters to Kueue."""


def priority_class(tier: Tier) -> str:
    return f"rota-{tier.value}"


def kueue_objects(config: RotaConfig, namespace: str, *, gpu_resource: str = "nvidia.com/gpu",
                  flavor_label: str = "rota.dev/flavor", borrow_within_cohort: bool = True,
                  topology: bool = True) -> list[dict[str, Any]]:
    """Every object, in an order `kubectl apply` can create them in."""
    objects: list[dict[str, Any]] = []
    if topology:
        objects.append(_obj("Topology", TOPOLOGY, {"levels": [{"nodeLabel": ZONE_LABEL},
                                                              {"nodeLabel": HOSTNAME_LABEL}]}))
    for flavor in config.cluster.flavors:
        spec: dict[str, Any] = {
            "nodeLabels": {flavor_label: flavor.name},
            "tolerations": [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]}
        if topology:
            spec["topologyName"] = TOPOLOGY
        objects.append(_obj("ResourceFlavor", flavor.name, spec))
    objects.append(_obj("Cohort", COHORT, {}))
    for tier in Tier:
        objects.append({"apiVersion": API, "kind": "WorkloadPriorityClass",
                        "metadata": {"name": priority_class(tier)}, "value": PRIORITY[tier],
                        "description": f"Rota's {tier.value} tier"})
    for team_name in sorted(config.teams):
        objects.append(_obj("ClusterQueue", team_name,
                            cluster_queue_spec(config, team_name, gpu_resource=gpu_resource,
                                               borrow_within_cohort=borrow_within_cohort)))
    for team_name in sorted(config.teams):
        objects.append({"apiVersion": API, "kind": "LocalQueue",
                        "metadata": {"name": team_name, "namespace": namespace},
                        "spec": {"clusterQueue": team_name}})
    return objects


def cluster_queue_spec(config: RotaConfig, team_name: str, *, gpu_resource: str = "nvidia.com/gpu",
                       borrow_within_cohort: bool = True) -> dict[str, Any]:
    team = config.teams[team_name]
    flavors = []
    for flavor in config.cluster.flavors:
        quota: dict[str, Any] = {"name": gpu_resource, "nominalQuota": team.quota.get(flavor.name, 0)}
        # rota.yaml: absent (or null) = no limit; Kueue: an absent field = no limit.
        if team.borrowing_limit.get(flavor.name) is not None:
            quota["borrowingLimit"] = team.borrowing_limit[flavor.name]
        if team.lending_limit.get(flavor.name) is not None:
            quota["lendingLimit"] = team.lending_limit[flavor.name]
        flavors.append({"name": flavor.name, "resources": [quota]})
    preemption: dict[str, Any] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    if borrow_within_cohort:
        # Only workloads below this priority may be preempted by a borrower: production never.
        preemption["borrowWithinCohort"] = {"policy": "LowerPriority",
                                            "maxPriorityThreshold": PRIORITY[Tier.production] - 1}
    return {"cohortName": COHORT, "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [gpu_resource], "flavors": flavors}],
            "preemption": preemption}


def kueue_job(*, name: str, namespace: str, team: str, tier: Tier, workers: int,
              gpus_per_worker: int, pod_annotations: dict[str, str] | None = None,
              gpu_resource: str = "nvidia.com/gpu", image: str = "rota:bench",
              preferred_topology: str | None = ZONE_LABEL) -> dict[str, Any]:
    """A gang as Kueue runs it: an Indexed Job of `workers` pods, each asking for
    `gpus_per_worker` GPUs, in the team's LocalQueue at the tier's priority. It is created
    unsuspended; Kueue's webhook suspends it until admission."""
    template_meta: dict[str, Any] = {"annotations": dict(pod_annotations or {})}
    if preferred_topology is not None:
        template_meta["annotations"][PREFERRED_TOPOLOGY] = preferred_topology
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {QUEUE_LABEL: team, PRIORITY_LABEL: priority_class(tier)}},
        "spec": {
            "completionMode": "Indexed", "completions": workers, "parallelism": workers,
            "backoffLimit": 0,
            "template": {"metadata": template_meta, "spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "worker", "image": image,
                                "resources": {"requests": {gpu_resource: str(gpus_per_worker)},
                                              "limits": {gpu_resource: str(gpus_per_worker)}}}]}},
        },
    }


def _obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}
