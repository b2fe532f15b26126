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
         "secrets": ("v1", "Secret"), "jobs": ("batch/v1", "Job"), "events": ("v1", "Event"),
         "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget")}
# The fields each kind can be selected by (`fieldSelector`), beyond metadata.name/namespace.
SELECTABLE_FIELDS = {
    "events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    "pods": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName"),
}


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


def _field_value(plural: str, obj: Obj, path: str) -> str:
    if plural == "events" and path == "source":
        return str((obj.get("source") or {}).get("component") or obj.get("reportingComponent") or "")
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector_refused(plural: str, selector: str | None) -> Refusal | None:
    """A field selector on a field the kind cannot be selected by: 400, as the real server."""
    for term in (selector or "").split(","):
        key = term.partition("!=")[0].partition("=")[0].strip()
        if key and key not in ("metadata.name", "metadata.namespace",
                               *SELECTABLE_FIELDS.get(plural, ())):
            return Refusal(400, "BadRequest",
                           f'field label not supported: {key}')
    return None


def matches_fields(plural: str, obj: Obj, selector: str | None) -> bool:
    """A field selector of `=`, `==` and `!=` terms, all of which must hold."""
    for term in (selector or "").split(","):
        if not term.strip():
            continue
        if "!=" in term:
            key, _, want = term.partition("!=")
            if _field_value(plural, obj, key.strip()) == want.strip():
                return False
            continue
        key, _, want = term.partition("=")
        if _field_value(plural, obj, key.strip()) != want.lstrip("=").strip():
            return False
    return True


def pod_security_restricted(pod: Obj) -> str | None:
    """What the `restricted` Pod Security Standard refuses in a pod (host namespaces,
    privileged containers, host paths, and the checks a plain container fails), in the
    admission plugin's words; None when it passes."""
    spec = pod["spec"]
    pod_context = spec.get("securityContext") or {}
    containers = [*(spec.get("initContainers") or []), *spec["containers"]]

    def lacking(test: Any) -> list[str]:
        return [c["name"] for c in containers if not test(c.get("securityContext") or {})]

    def named(names: list[str]) -> str:
        return ("container " if len(names) == 1 else "containers ") + ", ".join(f'"{n}"' for n in names)

    found: list[str] = []
    shared = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    if shared:
        found.append(f"host namespaces ({', '.join(shared)})")
    if bad := lacking(lambda sc: not sc.get("privileged")):
        found.append(f"privileged ({named(bad)} must not set securityContext.privileged=true)")
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        found.append("restricted volume types (" + ", ".join(
            f'volume "{n}" uses restricted volume type "hostPath"' for n in host_paths) + ")")
    if bad := lacking(lambda sc: sc.get("allowPrivilegeEscalation") is False):
        found.append(f"allowPrivilegeEscalation != false ({named(bad)} must set"
                     " securityContext.allowPrivilegeEscalation=false)")
    if bad := lacking(lambda sc: "ALL" in ((sc.get("capabilities") or {}).get("drop") or [])):
        found.append(f'unrestricted capabilities ({named(bad)} must set'
                     ' securityContext.capabilities.drop=["ALL"])')
    if not pod_context.get("runAsNonRoot") and (
            bad := lacking(lambda sc: sc.get("runAsNonRoot") is True)):
        found.append(f"runAsNonRoot != true (pod or {named(bad)} must set"
                     " securityContext.runAsNonRoot=true)")
    if (pod_context.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost") \
            and (bad := lacking(lambda sc: (sc.get("seccompProfile") or {}).get("type") in
                                ("RuntimeDefault", "Localhost"))):
        found.append(f'seccompProfile (pod or {named(bad)} must set securityContext.seccompProfile.type'
                     ' to "RuntimeDefault" or "Localhost")')
    return ", ".join(found) or None


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


def _drop(body: Obj, path: list[Any], keys: set[str]) -> None:
    at: Any = body
    for part in path:
        at = at[part]
    for key in keys:
        at.pop(key, None)


def decode(plural: str, body: Any, field_validation: str | None) -> tuple[Obj, list[str]] | Refusal:
    """The object as the server decodes it, and the warnings it sends back; or 400 for a body
    it cannot decode: not a JSON object, a value of the wrong type. A field the schema does
    not know is dropped with a warning (the default, `fieldValidation=Warn`), dropped
    silently (`Ignore`), or refused with 400 (`Strict`), as the real server does."""
    kind = KINDS[plural][1]
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        return Refusal(400, "BadRequest", "the object provided is unrecognized")
    body, warnings = copy.deepcopy(body), []
    for _ in range(100):  # each pass drops one object's unknown fields
        try:
            kubernetes_validate.validate(body, "1.30", strict=True)
            return body, warnings
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.absolute_path)
            if exc.validator == "type":
                return Refusal(400, "BadRequest", f'{kind} in version "{KINDS[plural][0]}" cannot be'
                               f" handled as a {kind}: json: cannot unmarshal {path}: {exc.message}")
            if exc.validator != "additionalProperties":
                return body, warnings  # an invalid object, not an undecodable one: see `invalid`
            unknown = set(exc.instance) - set((exc.schema or {}).get("properties") or {})
            names = [f"{path}.{key}" if path else key for key in sorted(unknown)]
            if field_validation == "Strict":
                return Refusal(400, "BadRequest", "strict decoding error: " + ", ".join(
                    f'unknown field "{name}"' for name in names))
            if field_validation != "Ignore":
                warnings += [f'unknown field "{name}"' for name in names]
            _drop(body, list(exc.absolute_path), unknown)
    return body, warnings


def invalid(plural: str, body: Obj) -> Refusal | None:
    """What validation refuses in a decoded object (422): the schema's rules other than types
    and fields, and the rules of pod validation the fake knows beyond the schema."""
    kind = KINDS[plural][1]
    try:
        kubernetes_validate.validate(body, "1.30", strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        return Refusal(422, "Invalid", f"{kind} is invalid: {path}: {exc.message}")
    pod_spec, path = ((body["spec"], "spec") if plural == "pods" else
                      (body["spec"]["template"]["spec"], "spec.template.spec") if plural == "jobs" else
                      (None, ""))
    if pod_spec is not None and (problem := node_affinity_invalid(pod_spec, path)) is not None:
        name = body["metadata"].get("name", "")
        return Refusal(422, "Invalid", f'{kind} "{name}" is invalid: {problem}')
    return None


def _only_added(old: list[Any], new: list[Any]) -> bool:
    return len(new) >= len(old) and new[:len(old)] == old


def _term_only_narrowed(old: Obj, new: Obj) -> bool:
    if not old.get("matchExpressions") and not old.get("matchFields"):
        return not new.get("matchExpressions") and not new.get("matchFields")
    return _only_added(old.get("matchExpressions") or [], new.get("matchExpressions") or []) \
        and _only_added(old.get("matchFields") or [], new.get("matchFields") or [])


def _gated_scheduling_refused(old: Obj, new: Obj) -> str | None:
    """KEP-3838: while a pod is gated, its nodeSelector may only gain entries, and each term
    of its required node affinity only gain requirements (none added, none removed, an empty
    one left empty); with no required affinity before, any may be set."""
    if any((new.get("nodeSelector") or {}).get(key) != value
           for key, value in (old.get("nodeSelector") or {}).items()):
        return ("spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed"
                " (no mutations or deletions)")
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    old_terms = _required_terms({"spec": old})
    new_terms = _required_terms({"spec": new}) or []
    if old_terms:
        if len(new_terms) != len(old_terms):
            return f"{path}: Invalid value: no additions/deletions to non-empty NodeSelectorTerms list are allowed"
        for i, (before, after) in enumerate(zip(old_terms, new_terms, strict=True)):
            if not _term_only_narrowed(before, after):
                return f"{path}[{i}]: Invalid value: only additions are allowed (no mutations or deletions)"
    return None


def pod_update_refused(old: Obj, new: Obj) -> str | None:
    """A pod's spec is immutable, except that scheduling gates may be removed (not added),
    tolerations added (not removed), and, while the pod is gated, its node selection
    narrowed (`_gated_scheduling_refused`)."""
    before, after = old["spec"], new["spec"]
    gates_before = {g["name"] for g in before.get("schedulingGates") or []}
    if added := {g["name"] for g in after.get("schedulingGates") or []} - gates_before:
        return (f"spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling"
                f" gate '{sorted(added)[0]}'")
    if not _only_added(before.get("tolerations") or [], after.get("tolerations") or []):
        return "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
    mutable = ["schedulingGates", "tolerations"]
    if gates_before:
        if (refusal := _gated_scheduling_refused(before, after)) is not None:
            return refusal
        mutable += ["nodeSelector"]
    fixed_before, fixed_after = copy.deepcopy(before), copy.deepcopy(after)
    for spec in (fixed_before, fixed_after):
        for key in mutable:
            spec.pop(key, None)
        if gates_before:  # node affinity checked above; the rest of affinity is immutable
            (spec.get("affinity") or {}).pop("nodeAffinity", None)
            if spec.get("affinity") == {}:
                spec.pop("affinity")
    if fixed_before != fixed_after:
        return "spec: Forbidden: pod updates may not change fields other than the updatable ones"
    return None


def _requirement_holds(values: dict[str, str], requirement: Obj) -> bool:
    key, operator, wanted = requirement["key"], requirement["operator"], requirement.get("values") or []
    have = values.get(key)
    if operator == "In":
        return have is not None and have in wanted
    if operator == "NotIn":
        return have is None or have not in wanted
    if operator == "Exists":
        return have is not None
    if operator == "DoesNotExist":
        return have is None
    if operator in ("Gt", "Lt") and have is not None and have.lstrip("-").isdigit():
        return int(have) > int(wanted[0]) if operator == "Gt" else int(have) < int(wanted[0])
    return False


def _required_terms(pod: Obj) -> list[Obj] | None:
    return (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")


def affinity_allows(node: Obj, pod: Obj) -> bool:
    """The pod's nodeSelector, and its required node affinity: any one of its terms matches
    the node, by its labels (`matchExpressions`) and by its name (`matchFields` on
    `metadata.name`, the only field the scheduler knows). An empty term matches nothing."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (pod["spec"].get("nodeSelector") or {}).items()):
        return False
    terms = _required_terms(pod)
    if terms is None:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    return any((t.get("matchExpressions") or t.get("matchFields"))
               and all(_requirement_holds(labels, e) for e in t.get("matchExpressions") or [])
               and all(_requirement_holds(fields, f) for f in t.get("matchFields") or [])
               for t in terms)


def node_affinity_invalid(pod_spec: Obj, path: str) -> str | None:
    """What validation refuses in required node affinity that the schema does not say: a
    `matchFields` requirement is on `metadata.name`, with In or NotIn and exactly one value."""
    terms = _required_terms({"spec": pod_spec}) or []
    for i, term in enumerate(terms):
        for j, requirement in enumerate(term.get("matchFields") or []):
            at = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution" \
                 f".nodeSelectorTerms[{i}].matchFields[{j}]"
            if requirement.get("operator") not in ("In", "NotIn"):
                return f'{at}.operator: Invalid value: "{requirement.get("operator")}": not a valid selector operator'
            if len(requirement.get("values") or []) != 1:
                return (f"{at}.values: Required value: must be only one value when `operator` is "
                        "'In' or 'NotIn' for node field selector")
            if requirement.get("key") != "metadata.name":
                return f'{at}.key: Invalid value: "{requirement.get("key")}": not a valid field selector key'
    return None


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """The real rule: an effect, if given, must match; an empty key with Exists matches every
    taint; Exists ignores the value, Equal (the default) compares it. Written apart from Rota's
    own `rota_executor.kube_pods._tolerates` on purpose: the fake models Kubernetes, and must not
    agree with Rota by sharing its code."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return bool(toleration.get("key")) and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(node: Obj, pod: Obj) -> Obj | None:
    """The node's first NoSchedule or NoExecute taint the pod does not tolerate: the scheduler
    will not bind it there (PreferNoSchedule only discourages)."""
    tolerations = pod["spec"].get("tolerations") or []
    return next((taint for taint in node["spec"].get("taints") or []
                 if taint.get("effect") in ("NoSchedule", "NoExecute")
                 and not any(tolerates(t, taint) for t in tolerations)), None)
