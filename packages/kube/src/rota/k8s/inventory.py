"""The cluster section of `rota.yaml` from a Kubernetes cluster's nodes, and what differs
between the two, with no I/O: `rota cluster import` and the kubernetes executor's start call it.

Where each value comes from (all configurable):
- GPUs per node: `status.allocatable[<gpu resource>]`, default `nvidia.com/gpu`;
- the flavor: a node label, default `nvidia.com/gpu.product` (as NVIDIA's GPU feature
  discovery sets it), made a Rota name (lowercase, `[a-z0-9._-]`);
- the rack: a node label, default `topology.kubernetes.io/zone`. `rota.yaml` has one
  topology level below the cluster (the rack), so only one label is read.
Nodes without GPUs of that resource are left out: Rota places nothing on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the config's models load with the first node read (`rota` starts without)
    from rota.config.model import Node

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_FLAVOR_LABEL = "nvidia.com/gpu.product"
DEFAULT_RACK_LABEL = "topology.kubernetes.io/zone"
NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")


class InventoryError(ValueError):
    """A node Rota cannot describe; the message names it and the field."""


@dataclass(frozen=True)
class Labels:
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    flavor_label: str = DEFAULT_FLAVOR_LABEL
    rack_label: str = DEFAULT_RACK_LABEL


def rota_name(value: str) -> str:
    """`NVIDIA-H100-80GB-HBM3` → `nvidia-h100-80gb-hbm3`: what a Rota name may hold."""
    name = re.sub(r"[^a-z0-9._-]+", "-", value.lower()).strip("-._")[:63].rstrip("-._")
    return name


def _gpus(node: dict[str, Any], resource: str) -> int:
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
    if not raw.isdigit():
        raise InventoryError(f"node {node['metadata']['name']}: status.allocatable[{resource!r}]"
                             f" is {raw!r}, not a whole number of GPUs")
    return int(raw)


def nodes_of(items: list[dict[str, Any]], labels: Labels = Labels()) -> list[Node]:
    """The GPU nodes of a node list, as `rota.yaml` nodes, sorted by name."""
    from rota.config.model import Node

    out: list[Node] = []
    for item in items:
        name = item["metadata"]["name"]
        gpus = _gpus(item, labels.gpu_resource)
        if gpus == 0:
            continue
        if not NAME.match(name) or len(name) > 63:
            raise InventoryError(f"node {name}: metadata.name is not a Rota name (a DNS label of"
                                 " at most 63 characters)")
        node_labels = item["metadata"].get("labels") or {}
        flavor = node_labels.get(labels.flavor_label)
        if not flavor:
            raise InventoryError(f"node {name}: has {gpus} {labels.gpu_resource} but no label"
                                 f" {labels.flavor_label!r} to name its flavor (--flavor-label)")
        if gpus > 64:
            raise InventoryError(f"node {name}: {gpus} GPUs; rota.yaml allows at most 64 a node")
        rack = rota_name(node_labels.get(labels.rack_label, "")) or "rack-0"
        out.append(Node(name=name, flavor=rota_name(flavor), gpus=gpus, rack=rack))
    return sorted(out, key=lambda n: n.name)


def cluster_section(nodes: list[Node], descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The `cluster:` section: its flavors, and every node listed (no pools: the cluster's own
    names are kept, so that grants name real nodes). Flavors already configured stay, with
    their descriptions, even with no node left: quotas that name them stay valid."""
    flavors = sorted({n.flavor for n in nodes} | set(descriptions or {}))
    return {
        "flavors": [{"name": f, "description": (descriptions or {}).get(f, "")} for f in flavors],
        "nodes": [{"name": n.name, "flavor": n.flavor, "gpus": n.gpus, "rack": n.rack}
                  for n in nodes],
    }


def differences(configured: list[Node], live: list[Node]) -> list[str]:
    """What `rota.yaml` says and the cluster does not, one plain sentence per difference."""
    want = {n.name: n for n in configured}
    have = {n.name: n for n in live}
    out: list[str] = []
    for name in sorted(want.keys() - have.keys()):
        out.append(f"node {name} is in rota.yaml but not a GPU node of the cluster: nothing"
                   " placed there can start")
    for name in sorted(have.keys() - want.keys()):
        out.append(f"node {name} ({have[name].gpus} x {have[name].flavor}) is in the cluster"
                   " but not in rota.yaml: Rota never places work on it")
    for name in sorted(want.keys() & have.keys()):
        a, b = want[name], have[name]
        if a.gpus != b.gpus:
            out.append(f"node {name}: rota.yaml says {a.gpus} GPUs, the cluster allocates {b.gpus}")
        if a.flavor != b.flavor:
            out.append(f"node {name}: rota.yaml says flavor {a.flavor}, its label says {b.flavor}")
        if a.rack != b.rack:
            out.append(f"node {name}: rota.yaml says rack {a.rack}, its label says {b.rack}")
    return out
