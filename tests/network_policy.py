"""Which pods NetworkPolicies let reach which, by the rules of `networking.k8s.io/v1` for
ingress: a pod some policy selects (policyTypes Ingress) takes traffic only that some rule of
such a policy admits; a rule's peers are ORed, podSelector and namespaceSelector in one peer
are ANDed, a podSelector alone means the policy's namespace, an empty `from` or `ports` means
every source or port. ipBlock peers name no pod and admit none here. The test of the chart uses
this to ask its questions of the rendered policies; the real API server only stores them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PodAt:
    """A pod's labels, where it runs, and that namespace's labels (the API server always adds
    `kubernetes.io/metadata.name`)."""

    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def all_namespace_labels(self) -> dict[str, str]:
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels; an empty selector selects everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            raise ValueError(f"unknown selector operator {operator!r}")
    return True


def _peer_admits(peer: Mapping[str, Any], policy_namespace: str, source: PodAt) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], source.all_namespace_labels())
    else:
        in_namespace = source.namespace == policy_namespace
    return in_namespace and selects(peer.get("podSelector"), source.labels)


def _rule_admits(rule: Mapping[str, Any], policy_namespace: str, source: PodAt, port: int) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(p.get("port") in (None, port) for p in ports):
        return False
    peers = rule.get("from") or []
    return not peers or any(_peer_admits(peer, policy_namespace, source) for peer in peers)


def admits(policies: Iterable[Mapping[str, Any]], target: PodAt, source: PodAt, port: int) -> bool:
    """Whether `source` may open a connection to `target` on `port`."""
    isolating = [p for p in policies
                 if p["kind"] == "NetworkPolicy" and p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
                 and selects(p["spec"].get("podSelector"), target.labels)]
    if not isolating:
        return True
    return any(_rule_admits(rule, p["metadata"]["namespace"], source, port)
               for p in isolating for rule in p["spec"].get("ingress") or [])
