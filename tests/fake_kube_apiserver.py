"""A FAKE Kubernetes API server for tests, because no real one can run on these machines.

It is not Kubernetes. It speaks the subset of the REST API that Rota's backend uses, on the
real paths and with the real JSON shapes, so the real kubernetes-asyncio client talks to it
through an ordinary kubeconfig:

- nodes (list, watch), batch/v1 jobs, pods, services, secrets (create, get, list, watch,
  patch with JSON merge patch, delete with `propagationPolicy` and `gracePeriodSeconds`);
- every object it receives is checked with kubernetes-validate (strict), and refused with
  422 as a real server would; a name taken is 409 AlreadyExists; an unknown one 404;
- watches stream JSON lines with resourceVersions, and a watch from a compacted
  resourceVersion gets the 410 Gone ERROR event a real server sends.

A small control loop plays the other parts of the cluster: the Job controller (one pod per
completion index, labelled and owned like the real one), the scheduler (gated pods wait;
a pod is bound only to a Ready, schedulable node that matches its required node affinity
and has the GPUs), the kubelet (Pending, Running, exit codes, termination within the grace
period) and the garbage collector (foreground and background propagation; it deletes a
Job's pods with no grace period of its own, so each gets its `terminationGracePeriodSeconds`,
30 s when unset, whatever grace the Job's DELETE carried). What it does NOT
model: admission webhooks, RBAC, quotas, real containers, events, eviction timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
from aiohttp import web
from rota.k8s.manifests import INDEX_ANNOTATION

Obj = dict[str, Any]
KINDS = {"nodes": ("v1", "Node"), "pods": ("v1", "Pod"), "services": ("v1", "Service"),
         "secrets": ("v1", "Secret"), "jobs": ("batch/v1", "Job")}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code}, status=code)


def _matches(obj: Obj, selector: str | None) -> bool:
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


@dataclass
class PodPlan:
    """What the fake kubelet does with a pod once it is bound to a node."""

    start_after_s: float = 0.05
    exit_code: int | None = None  # None: runs until told, or deleted
    reason: str = ""  # e.g. OOMKilled, ErrImagePull (which keeps it Pending)
    stops_on_term_after_s: float = 0.2  # how long the process takes to exit after SIGTERM


@dataclass
class LocalContainers:
    """A FAKE kubelet mode: a Running pod's container runs as a local process (its command,
    with the pod's env resolved from values, annotations and Secrets), under `root`. Paths a
    pod mounts (Secret volumes, the checkpoint dir) are mapped to folders of `root`, and env
    values naming them are rewritten. No image, no isolation: only the job protocol is real."""

    root: Path
    cwd: Path
    python: str = sys.executable
    mapped: dict[str, Path] = field(default_factory=dict)  # pod path -> local path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def local(self, value: str) -> str:
        for pod_path, here in sorted(self.mapped.items(), key=lambda kv: -len(kv[0])):
            if value == pod_path or value.startswith(pod_path + "/"):
                return str(here) + value[len(pod_path):]
        return value


@dataclass
class FakeKubeApiServer:
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (plural, ns, name)
    log: list[tuple[int, str, str, Obj]] = field(default_factory=list)  # rv, plural, type, obj
    compacted_below: int = 0
    revision: int = 0
    plans: dict[str, PodPlan] = field(default_factory=dict)  # pod name prefix (job name) -> plan
    received: list[tuple[str, str, Obj]] = field(default_factory=list)  # verb, plural, body
    url: str = ""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    _loop_task: asyncio.Task[None] | None = None
    _term_at: dict[str, float] = field(default_factory=dict)
    _bound_at: dict[str, float] = field(default_factory=dict)
    _closing: bool = False
    containers: LocalContainers | None = None
    _term_sent: set[str] = field(default_factory=set)
    _generation: int = 0  # bumped by `compact`, which ends the watches open then
    lists: dict[str, int] = field(default_factory=dict)  # plain list requests, per plural

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
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        return self._put(plural, obj, "ADDED")

    def list(self, plural: str, namespace: str = "", selector: str | None = None) -> list[Obj]:
        return [o for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (not namespace or ns == namespace) and _matches(o, selector)]

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        return self.objects.get((plural, namespace, name))

    def pods_of(self, job_name: str) -> list[Obj]:
        return [p for p in self.list("pods") if p["metadata"]["labels"].get("job-name") == job_name]

    # ------------------------------------------------------------------ test controls

    def add_node(self, name: str, gpus: int, *, labels: dict[str, str] | None = None,
                 gpu_resource: str = "nvidia.com/gpu") -> None:
        self.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {}, "status": {"allocatable": {gpu_resource: str(gpus), "cpu": "64"},
                                   "capacity": {gpu_resource: str(gpus), "cpu": "64"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}})

    def set_node(self, name: str, *, ready: bool | None = None, cordoned: bool | None = None,
                 gpus: int | None = None, gpu_resource: str = "nvidia.com/gpu") -> None:
        node = copy.deepcopy(self.objects[("nodes", "", name)])
        if gpus is not None:
            node["status"]["allocatable"][gpu_resource] = str(gpus)
        if ready is not None:
            node["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]
        if cordoned is not None:
            node["spec"]["unschedulable"] = cordoned
        self._put("nodes", node, "MODIFIED")

    def remove_node(self, name: str) -> None:
        self._put("nodes", copy.deepcopy(self.objects[("nodes", "", name)]), "DELETED")

    def exit_pods(self, job_name: str, code: int, reason: str = "", index: int | None = None) -> None:
        """The containers of a job's running pods exit with `code`."""
        for pod in self.pods_of(job_name):
            chosen = index is None or pod["metadata"]["annotations"][INDEX_ANNOTATION] == str(index)
            if chosen and pod["status"].get("phase") == "Running":
                self._terminate(pod, code, reason)

    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion get 410 Gone."""
        self.compacted_below = self.revision + 1
        self._generation += 1
        self._changed.set()

    def kubeconfig(self, path: Path, namespace: str = "rota") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester",
                                                      "namespace": namespace}}]}))
        return path

    # ------------------------------------------------------------------ HTTP

    async def start(self) -> str:
        app = web.Application(middlewares=[self._auth])
        for prefix in ("/api/v1", "/apis/batch/v1"):
            app.router.add_route("*", prefix + "/{plural}", self._collection)
            app.router.add_route("*", prefix + "/{plural}/{name}", self._item)
            app.router.add_route("*", prefix + "/namespaces/{ns}/{plural}", self._collection)
            app.router.add_route("*", prefix + "/namespaces/{ns}/{plural}/{name}", self._item)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._loop_task = asyncio.create_task(self._control_loop())
        return self.url

    async def close(self) -> None:
        self.stop_containers()
        self._closing = True  # ends open watches, which would otherwise hold up the shutdown
        self._changed.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        plural, ns = request.match_info["plural"], request.match_info.get("ns", "")
        if plural not in KINDS:
            return _status(404, "NotFound", f"the server could not find the resource {plural}")
        if request.method == "POST":
            body = await request.json()
            self.received.append(("create", plural, body))
            if (problem := self._invalid(plural, body)) is not None:
                return problem
            if self.get(plural, body["metadata"]["name"], ns) is not None:
                return _status(409, "AlreadyExists",
                               f'{plural} "{body["metadata"]["name"]}" already exists')
            created = self.create(plural, body, ns)
            if plural == "jobs":
                self._create_job_pods(created)
            return web.json_response(created, status=201)
        selector = request.query.get("labelSelector")
        if request.query.get("watch") in ("true", "True", "1"):
            return await self._watch(request, plural, ns, selector)
        apiversion, kind = KINDS[plural]
        self.lists[plural] = self.lists.get(plural, 0) + 1
        return web.json_response({"apiVersion": apiversion, "kind": kind + "List",
                                  "metadata": {"resourceVersion": str(self.revision)},
                                  "items": self.list(plural, ns, selector)})

    async def _item(self, request: web.Request) -> web.StreamResponse:
        plural, ns, name = (request.match_info["plural"], request.match_info.get("ns", ""),
                            request.match_info["name"])
        obj = self.get(plural, name, ns)
        if obj is None:
            return _status(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "GET":
            return web.json_response(obj)
        if request.method == "PATCH":
            patch = await request.json()
            self.received.append(("patch", plural, patch))
            patched = merge_patch(obj, patch)
            patched["metadata"]["uid"] = obj["metadata"]["uid"]
            if (problem := self._invalid(plural, patched)) is not None:
                return problem
            if plural == "pods" and (refusal := self._pod_update_refused(obj, patched)):
                return _status(422, "Invalid", refusal)
            return web.json_response(self._put(plural, patched, "MODIFIED"))
        if request.method == "DELETE":
            options = await request.json() if request.can_read_body else {}
            self.received.append(("delete", plural, options))
            policy = options.get("propagationPolicy") or request.query.get("propagationPolicy")
            grace = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
            self._delete(plural, obj, policy or "Background", None if grace is None else float(grace))
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success",
                                      "details": {"name": name, "kind": plural}})
        return _status(405, "MethodNotAllowed", request.method)

    def _invalid(self, plural: str, body: Obj) -> web.Response | None:
        try:
            kubernetes_validate.validate(body, "1.30", strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.absolute_path)
            return _status(422, "Invalid", f"{KINDS[plural][1]} is invalid: {path}: {exc.message}")
        return None

    @staticmethod
    def _pod_update_refused(old: Obj, new: Obj) -> str | None:
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

    async def _watch(self, request: web.Request, plural: str, ns: str,
                     selector: str | None) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.revision)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if since and since < self.compacted_below:
            gone = {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                "reason": "Expired", "message": f"too old resource version: {since}"}}
            await response.write(json.dumps(gone).encode() + b"\n")
            return response
        deadline = time.monotonic() + timeout
        seen, generation = since, self._generation
        while time.monotonic() < deadline and not self._closing and generation == self._generation:
            for rv, p, kind, obj in [e for e in self.log if e[0] > seen]:
                seen = rv
                if p == plural and (not ns or obj["metadata"].get("namespace") == ns) \
                        and _matches(obj, selector):
                    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(0.5, timeout))
        return response

    # ------------------------------------------------------------------ the cluster's parts

    def _create_job_pods(self, job: Obj) -> None:
        template, name = job["spec"]["template"], job["metadata"]["name"]
        for index in range(job["spec"]["completions"]):
            meta = copy.deepcopy(template.get("metadata") or {})
            meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
            meta["labels"] = {**meta.get("labels", {}), "job-name": name,
                              "batch.kubernetes.io/job-name": name,
                              "controller-uid": job["metadata"]["uid"],
                              "batch.kubernetes.io/job-completion-index": str(index)}
            meta["annotations"] = {**meta.get("annotations", {}), INDEX_ANNOTATION: str(index)}
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                        "uid": job["metadata"]["uid"], "controller": True,
                                        "blockOwnerDeletion": True}]
            spec = copy.deepcopy(template["spec"])
            spec["hostname"] = f"{name}-{index}"
            self.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                 "spec": spec, "status": {"phase": "Pending"}},
                        job["metadata"]["namespace"])

    def _delete(self, plural: str, obj: Obj, policy: str, grace: float | None) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            if plural == "pods" and grace == 0:  # a force delete: gone without its kubelet
                self._put(plural, copy.deepcopy(obj), "DELETED")
            return
        if plural == "pods":
            # A DELETE without a grace period (the garbage collector's, for a Job's pods) gives
            # the pod its own terminationGracePeriodSeconds, 30 s when the spec has none.
            if grace is None:
                grace = float(obj["spec"].get("terminationGracePeriodSeconds", 30))
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = _now()
            obj["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            self._term_at[obj["metadata"]["name"]] = time.monotonic()
            if obj["status"].get("phase") != "Running" or grace == 0:
                self._put(plural, obj, "DELETED")
            else:
                self._put(plural, obj, "MODIFIED")
            return
        dependents = self._dependents(obj)
        if policy == "Foreground" and dependents:
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = _now()
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._put(plural, obj, "MODIFIED")
        else:
            self._put(plural, copy.deepcopy(obj), "DELETED")
        if policy != "Orphan":
            # The garbage collector deletes dependents with no grace period of its own: the
            # grace given with the owner's DELETE applies to the owner alone.
            for dep_plural, dep in dependents:
                self._delete(dep_plural, dep, "Background", None)

    def _dependents(self, owner: Obj) -> list[tuple[str, Obj]]:
        uid = owner["metadata"]["uid"]
        return [(p, o) for (p, _, _), o in list(self.objects.items())
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _terminate(self, pod: Obj, code: int, reason: str) -> None:
        pod = copy.deepcopy(pod)
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [{
            "name": pod["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
            "image": pod["spec"]["containers"][0]["image"], "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": reason or (
                "Completed" if code == 0 else "Error")}}}]
        self._put("pods", pod, "MODIFIED")
        self._job_status(pod)

    def _job_status(self, pod: Obj) -> None:
        job = self.get("jobs", pod["metadata"]["labels"]["job-name"], pod["metadata"]["namespace"])
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods_of(job["metadata"]["name"])
        job = copy.deepcopy(job)
        status = job.setdefault("status", {})
        status["succeeded"] = sum(p["status"].get("phase") == "Succeeded" for p in pods)
        status["failed"] = sum(p["status"].get("phase") == "Failed" for p in pods)
        status["active"] = len(pods) - status["succeeded"] - status["failed"]
        if status["failed"]:
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded"}]
        elif status["succeeded"] == job["spec"]["completions"]:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        self._put("jobs", job, "MODIFIED")

    def _node_fits(self, node: Obj, pod: Obj) -> bool:
        if node["spec"].get("unschedulable") or \
                node["status"]["conditions"][0]["status"] != "True":
            return False
        terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        labels = node["metadata"]["labels"]
        if terms and not any(all(labels.get(e["key"]) in e["values"]
                                 for e in t["matchExpressions"]) for t in terms):
            return False
        want = {k: int(v) for k, v in pod["spec"]["containers"][0]["resources"].get(
            "limits", {}).items() if "gpu" in k}
        for resource, count in want.items():
            used = sum(int(p["spec"]["containers"][0]["resources"]["limits"].get(resource, 0))
                       for p in self.list("pods") if p["spec"].get("nodeName") ==
                       node["metadata"]["name"] and p["status"].get("phase") in ("Pending", "Running"))
            if used + count > int(node["status"]["allocatable"].get(resource, 0)):
                return False
        return True

    def _run_container(self, pod: Obj) -> None:
        assert self.containers is not None
        box, name = self.containers, pod["metadata"]["name"]
        spec, ns = pod["spec"], pod["metadata"]["namespace"]
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            here = box.root / name / mount["name"]
            here.mkdir(parents=True, exist_ok=True)
            secret = (volumes.get(mount["name"]) or {}).get("secret")
            if secret is not None:
                data = (self.get("secrets", secret["secretName"], ns) or {}).get("stringData", {})
                for item in secret.get("items") or []:
                    if item["key"] in data:
                        (here / item["path"]).write_text(data[item["key"]])
            box.mapped[mount["mountPath"]] = here
        env: dict[str, str] = {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
                               "HOME": str(box.root)}
        for entry in container.get("env") or []:
            source = entry.get("valueFrom") or {}
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            elif "fieldRef" in source:
                key = source["fieldRef"]["fieldPath"].split("['")[1].rstrip("']")
                env[entry["name"]] = pod["metadata"]["annotations"].get(key, "")
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                data = (self.get("secrets", ref["name"], ns) or {}).get("stringData", {})
                env[entry["name"]] = data.get(ref["key"], "")
        checkpoints = env.get("ROTA_CHECKPOINT_DIR", "/checkpoints")
        (box.root / "checkpoints").mkdir(parents=True, exist_ok=True)
        box.mapped.setdefault(checkpoints, box.root / "checkpoints")  # one volume for every run
        env = {key: box.local(value) for key, value in env.items()}
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        argv = [box.python if a == "python" else a for a in argv]
        with (box.root / f"{name}.log").open("ab") as log:
            box.procs[name] = subprocess.Popen(argv, env=env, cwd=box.cwd, stdout=log,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)

    def stop_containers(self) -> None:
        for proc in (self.containers.procs.values() if self.containers else []):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)

    def _kubelet_up(self, pod: Obj) -> bool:
        node = self.get("nodes", pod["spec"].get("nodeName") or "")
        return node is not None and node["status"]["conditions"][0]["status"] == "True"

    def _plan(self, pod: Obj) -> PodPlan:
        return self.plans.get(pod["metadata"]["labels"].get("job-name", ""), PodPlan())

    def _step(self) -> None:
        now = time.monotonic()
        for pod in self.list("pods"):
            name, status = pod["metadata"]["name"], pod["status"]
            plan = self._plan(pod)
            if pod["metadata"].get("deletionTimestamp"):
                if not self._kubelet_up(pod):
                    continue  # nobody to stop the process: Terminating until force-deleted
                grace = pod["metadata"]["deletionGracePeriodSeconds"]
                proc = self.containers.procs.get(name) if self.containers else None
                if proc is not None:
                    if proc.poll() is None and now - self._term_at[name] >= grace:
                        os.killpg(proc.pid, signal.SIGKILL)
                    elif proc.poll() is None and name not in self._term_sent:
                        self._term_sent.add(name)
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGTERM)
                    else:
                        self._put("pods", copy.deepcopy(pod), "DELETED")
                elif now - self._term_at[name] >= min(grace, plan.stops_on_term_after_s):
                    self._put("pods", copy.deepcopy(pod), "DELETED")
                continue
            proc = self.containers.procs.get(name) if self.containers else None
            if proc is not None and status.get("phase") == "Running" and proc.poll() is not None:
                code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
                self._terminate(pod, code, "")
                continue
            if status.get("phase") != "Pending" or pod["spec"].get("schedulingGates"):
                continue
            if not pod["spec"].get("nodeName"):
                node = next((n for n in self.list("nodes") if self._node_fits(n, pod)), None)
                pod = copy.deepcopy(pod)
                if node is None:
                    if not status.get("conditions"):
                        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable"}]
                        self._put("pods", pod, "MODIFIED")
                    continue
                pod["spec"]["nodeName"] = node["metadata"]["name"]
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                self._bound_at[name] = now
                self._put("pods", pod, "MODIFIED")
            elif plan.reason == "ErrImagePull":
                if not status.get("containerStatuses"):
                    pod = copy.deepcopy(pod)
                    pod["status"]["containerStatuses"] = [{
                        "name": "worker", "ready": False, "restartCount": 0, "image": "", "imageID": "",
                        "state": {"waiting": {"reason": "ErrImagePull"}}}]
                    self._put("pods", pod, "MODIFIED")
            elif now - self._bound_at.get(name, now) >= plan.start_after_s:
                pod = copy.deepcopy(pod)
                pod["status"].update(phase="Running", podIP="10.0.0.1", startTime=_now())
                pod["status"]["containerStatuses"] = [{
                    "name": "worker", "ready": True, "restartCount": 0, "image": "", "imageID": "",
                    "state": {"running": {"startedAt": _now()}}}]
                self._put("pods", pod, "MODIFIED")
                if self.containers is not None:
                    self._run_container(pod)
                if plan.exit_code is not None:
                    self._terminate(self.objects[("pods", pod["metadata"]["namespace"], name)],
                                    plan.exit_code, plan.reason)
        for job in self.list("jobs"):
            if job["metadata"].get("deletionTimestamp") and not self._dependents(job):
                self._put("jobs", copy.deepcopy(job), "DELETED")

    async def _control_loop(self) -> None:
        while True:
            self._step()
            await asyncio.sleep(0.02)
