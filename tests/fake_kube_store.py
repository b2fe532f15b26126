"""The FAKE API server's object store: objects by kind, namespace and name, with the history
of their changes that watches replay, the API server's own rules for creating (defaulting),
deleting (graceful pod deletion, finalizers, propagation to dependents) and recording
Events. The parts of the cluster that act on the objects are in `fake_kube_nodes` (the
scheduler and the kubelet) and `fake_kube_cluster` (the controllers and the test controls)."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tests.fake_kube_rules import Obj, matches_labels


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_name_of(pod: Obj) -> str:
    return str((pod["metadata"].get("labels") or {}).get("job-name", ""))


@dataclass
class FakeStore:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (plural, ns, name)
    log: list[tuple[int, str, str, Obj]] = field(default_factory=list)  # rv, plural, type, obj
    compacted_below: int = 0
    revision: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _generation: int = 0  # bumped by `compact`, which ends the watches open then
    _term_at: dict[str, float] = field(default_factory=dict)  # pod name -> when its deletion began

    # ------------------------------------------------------------------ store

    def _put(self, plural: str, obj: Obj, kind: str) -> Obj:
        self.revision += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.revision)
        key = (plural, meta.get("namespace", ""), meta["name"])
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.log.append((self.revision, plural, kind, copy.deepcopy(obj)))
        self._changed.set()
        return obj

    def create(self, plural: str, obj: Obj, namespace: str = "") -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta["namespace"] = namespace
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_stamp())
        if plural == "pods":  # the API server's defaulting
            obj["spec"].setdefault("terminationGracePeriodSeconds", 30)
            obj["status"] = obj.get("status") or {"phase": "Pending"}
        return self._put(plural, obj, "ADDED")

    def list(self, plural: str, namespace: str = "", selector: str | None = None) -> list[Obj]:
        return [o for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (not namespace or ns == namespace) and matches_labels(o, selector)]

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        return self.objects.get((plural, namespace, name))

    def pods_of(self, job_name: str) -> list[Obj]:
        return [p for p in self.list("pods") if job_name_of(p) == job_name]

    def events_of(self, name: str, kind: str = "Job") -> list[Obj]:
        return [e for e in self.list("events") if e["involvedObject"]["name"] == name
                and e["involvedObject"]["kind"] == kind]

    def record_event(self, involved: Obj, kind: str, event_type: str, reason: str,
                     message: str, component: str) -> None:
        """A core/v1 Event about `involved`; a repeat of the same one is counted, not stored
        twice, as the real event recorder does."""
        meta = involved["metadata"]
        for event in self.events_of(meta["name"], kind):
            if event["involvedObject"]["uid"] == meta["uid"] and \
                    (event["reason"], event["message"]) == (reason, message):
                event = copy.deepcopy(event)
                event["count"] += 1
                event["lastTimestamp"] = now_stamp()
                self._put("events", event, "MODIFIED")
                return
        self.create("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {"kind": kind, "namespace": meta.get("namespace", ""),
                               "name": meta["name"], "uid": meta["uid"],
                               "apiVersion": involved["apiVersion"],
                               "resourceVersion": meta["resourceVersion"]},
            "reason": reason, "message": message, "type": event_type,
            "source": {"component": component}, "reportingComponent": component,
            "reportingInstance": "", "count": 1,
            "firstTimestamp": now_stamp(), "lastTimestamp": now_stamp()}, meta.get("namespace", ""))

    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion get 410 Gone."""
        self.compacted_below = self.revision + 1
        self._generation += 1
        self._changed.set()

    def _store_pod(self, pod: Obj) -> None:
        """An update of a pod: one being deleted whose grace is over (0) and that has no
        finalizer left is gone, as the API server removes it then."""
        meta = pod["metadata"]
        gone = meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0 \
            and not meta.get("finalizers")
        self._put("pods", pod, "DELETED" if gone else "MODIFIED")

    def _delete(self, plural: str, obj: Obj, policy: str, grace: float | None) -> None:
        if plural == "pods":
            self._delete_pod(obj, grace)
            return
        if obj["metadata"].get("deletionTimestamp"):
            return
        dependents = self._dependents(obj)
        if policy == "Foreground" and dependents:
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_stamp()
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._put(plural, obj, "MODIFIED")
        else:
            self._put(plural, copy.deepcopy(obj), "DELETED")
        if policy != "Orphan":
            # The garbage collector deletes dependents with no grace period of its own: the
            # grace given with the owner's DELETE applies to the owner alone.
            for dep_plural, dep in dependents:
                self._delete(dep_plural, dep, "Background", None)

    def _delete_pod(self, pod: Obj, grace: float | None) -> None:
        """A DELETE without a grace period (the garbage collector's) gives the pod its own
        terminationGracePeriodSeconds. An unscheduled or finished pod needs no kubelet: its
        grace is 0. With grace 0 it is gone at once, unless a finalizer still holds it."""
        pod = copy.deepcopy(pod)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if grace is not None and grace < meta["deletionGracePeriodSeconds"]:
                meta["deletionGracePeriodSeconds"] = int(grace)  # only ever shortened
                self._store_pod(pod)
            return
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            grace = 0
        meta["deletionTimestamp"] = now_stamp()
        meta["deletionGracePeriodSeconds"] = int(grace)
        self._term_at[meta["name"]] = time.monotonic()
        self._store_pod(pod)

    def _dependents(self, owner: Obj) -> list[tuple[str, Obj]]:
        uid = owner["metadata"]["uid"]
        return [(p, o) for (p, _, _), o in list(self.objects.items())
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])]
