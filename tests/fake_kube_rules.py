"""The API server's and the scheduler's rules that the FAKE API server applies, with no I/O:
selectors, JSON merge patch, what an object must be to be stored, what an update of a pod may
change, and which node a pod may be bound to. Each follows the real one's behaviour for the
subset Rota uses; `tests/fake_kube_apiserver.py` says what the fake as a whole leaves out."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import kubernetes_validate

Obj = dict[str, Any]
KINDS = {"nodes": ("v1", "Node"), "pods": ("v1", "Pod"), "services": ("v1", "Service"),
         "secrets": ("v1", "Secret"), "jobs": ("batch/v1", "Job")}


@dataclass(frozen=True)
class Refusal:
    """An error the API server answers with: its HTTP code, Status reason and message."""

    code: int
    reason: str
    message: str


def matches_labels(obj: Obj, selector: str | None) -> bool:
    """An equality-based label selector (`a=b,c=d`)."""
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def invalid(plural: str, body: Obj) -> Refusal | None:
    """What the schema (kubernetes-validate, strict) refuses in an object."""
    try:
        kubernetes_validate.validate(body, "1.30", strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        return Refusal(422, "Invalid", f"{KINDS[plural][1]} is invalid: {path}: {exc.message}")
    return None


def pod_update_refused(old: Obj, new: Obj) -> str | None:
    """A pod's spec is immutable, except that a gated pod's scheduling gates may be removed
    and its required node affinity narrowed (the rule the executor relies on)."""
    before, after = copy.deepcopy(old["spec"]), copy.deepcopy(new["spec"])
    if not before.get("schedulingGates"):
        if before != after:
            return "spec: Forbidden: pod updates may not change fields other than ..."
        return None
    for spec in (before, after):
        spec.pop("schedulingGates", None)
        spec.pop("affinity", None)
    return None if before == after else "spec: Forbidden: only gates and affinity may change"


def affinity_allows(node: Obj, pod: Obj) -> bool:
    """The pod's required node affinity: any one of its terms matches the node."""
    terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    labels = node["metadata"]["labels"]
    return not terms or any(all(labels.get(e["key"]) in e["values"]
                                for e in t["matchExpressions"]) for t in terms)
