"""A FAKE Kubernetes API server for tests: the fast tier, in process, with no cluster at all.

It is not Kubernetes. It speaks the subset of the REST API that Rota's backend uses, on the
real paths and with the real JSON shapes, so the real kubernetes-asyncio client talks to it
through an ordinary kubeconfig. Each behaviour below follows the real control plane's (the
same scenarios are meant to pass against a real kube-apiserver too).

The API:

- nodes (list, watch), batch/v1 jobs, pods, services, secrets, policy/v1
  poddisruptionbudgets (stored and garbage-collected with their Job; no eviction) (create, get, list, watch,
  patch with JSON merge patch, delete with `propagationPolicy` and `gracePeriodSeconds`),
  core/v1 events (list, watch); label selectors of `a=b` terms, field selectors on the
  fields the real server allows (another is 400 `field label not supported`);
- a body it cannot decode (not JSON, a value of the wrong type) is 400 BadRequest; a field
  the schema does not know is dropped with a `Warning` header (`fieldValidation` Warn, the
  default), dropped silently (Ignore) or 400 (Strict); a decoded object the schema
  (kubernetes-validate) refuses is 422 Invalid, as is a pod (or Job template) whose
  `matchFields` is not one `metadata.name` with In or NotIn; a name taken is 409
  AlreadyExists; an unknown one 404;
- a pod's spec is immutable but for what the real server allows: scheduling gates removed,
  tolerations added, and while the pod is gated (KEP-3838) nodeSelector entries added and
  requirements appended to each required node-affinity term (no term added or removed, an
  empty term left empty); anything else is 422;
- pod admission refuses (403) a pod whose ServiceAccount does not exist, one that breaks the
  namespace's enforced Pod Security level (`restricted`: the container checks), and any that
  a test's admission step refuses (`admission`: a webhook, a ResourceQuota, a LimitRange);
- watches stream JSON lines with resourceVersions, and a watch from a compacted
  resourceVersion gets the 410 Gone ERROR event a real server sends;
- a test can have the next requests of a verb on a kind answered 429 (with Retry-After and
  `details.retryAfterSeconds`), 500, 502, 503, 504, or 422 (`fail_next`), before or after
  the request takes effect (a create whose answer was lost).

The cluster behind it, stepped every 20 ms:

- the Job controller creates a Job's pods after the Job exists, one per completion index,
  labelled, owned and given the `batch.kubernetes.io/job-tracking` finalizer like the real
  one; a pod that admission refuses is a `FailedCreate` Event on the Job (the same one
  counted, not repeated), retried with backoff; the finalizer comes off once the pod has
  finished or is being deleted, or its Job is; the Job's counts and Complete or Failed
  condition follow its pods;
- the scheduler leaves gated pods alone, and binds a pod only to a Ready, schedulable node
  that matches its nodeSelector and required node affinity (labels by `matchExpressions`,
  the name by `matchFields`; a node's `kubernetes.io/hostname` label need not be its name),
  whose NoSchedule and NoExecute taints it tolerates, and that has the GPUs; otherwise the
  pod is Unschedulable with the scheduler's own summary (`0/5 nodes are available: ...`);
- the kubelet runs a bound pod (Pending, Running, exit codes, ErrImagePull by plan); a
  container whose Secret is missing waits in CreateContainerConfigError until it exists; a
  pod being deleted is stopped within its grace; a node that is not Ready does nothing;
- the garbage collector deletes dependents (foreground and background propagation) with no
  grace period of its own, so each pod gets its `terminationGracePeriodSeconds` (defaulted
  to 30 s), whatever grace the Job's DELETE carried; a pod is gone once its grace is over (0
  for an unscheduled or finished pod) and no finalizer holds it.

What it does NOT model: RBAC and authentication beyond one bearer token; real webhooks,
quotas or LimitRanges (only their refusals); the ExtendedResourceToleration admission
plugin (off by default in kube-apiserver); NoExecute eviction of running pods, and eviction
timing in general; a replacement pod for a Job's failed or deleted one (Rota's Jobs have
`backoffLimit: 0`); events other than FailedCreate; resourceVersion conflicts (no update by
PUT, no optimistic concurrency); real containers (`LocalContainers` runs a pod's command as a
local process, for the end-to-end tests).

The parts live side by side: this module is the REST API; `fake_kube_cluster` the test
controls, admission and the Job controller; `fake_kube_nodes` the scheduler and the
kubelet; `fake_kube_store` the objects, their history and the API server's deletion rules;
`fake_kube_rules` the rules with no I/O; `fake_kube_containers` the local-process mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fake_kube_cluster import FakeCluster, PodPlan
from tests.fake_kube_containers import LocalContainers
from tests.fake_kube_rules import (
    KINDS,
    Obj,
    Refusal,
    decode,
    field_selector_refused,
    invalid,
    matches_fields,
    matches_labels,
    merge_patch,
    pod_update_refused,
)

__all__ = ["FakeKubeApiServer", "LocalContainers", "PodPlan"]


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code}, status=code)


def _refused(refusal: Refusal) -> web.Response:
    return _status(refusal.code, refusal.reason, refusal.message)


_UNDECODABLE = object()  # a body that is not JSON at all


async def _json_body(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except ValueError:
        return _UNDECODABLE


def _warning_headers(warnings: list[str]) -> dict[str, str]:
    """Warnings as the real server sends them (`Warning: 299 - "..."`), joined: one header."""
    return {"Warning": ", ".join(f"299 - {json.dumps(w)}" for w in warnings)} if warnings else {}


# What the real API server says with each error a test can inject.
_INJECTABLE = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
    502: ("BadGateway", "the load balancer in front of the API server lost its backend"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded"),
    # An API server older than 1.27, where a gated pod's node affinity is immutable too.
    422: ("Invalid", "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                     "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations`"
                     " (only additions to existing tolerations),`spec.terminationGracePeriodSeconds`"),
}


@dataclass
class InjectedFailure:
    """One request answered with an error, as an overloaded or failing API server does."""

    status: int
    retry_after_s: int | None = None  # the Retry-After header (and details.retryAfterSeconds)
    after_applying: bool = False  # the request took effect; only its answer was lost


def _verb(request: web.Request) -> str:
    """The Kubernetes verb of a request, as RBAC names it."""
    if request.method != "GET":
        return {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}.get(
            request.method, request.method.lower())
    if "name" in request.match_info:
        return "get"
    return "watch" if request.query.get("watch") in ("true", "True", "1") else "list"


def _failure_response(failure: InjectedFailure) -> web.Response:
    reason, message = _INJECTABLE[failure.status]
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": failure.status}
    headers = {}
    if failure.retry_after_s is not None:
        body["details"] = {"retryAfterSeconds": failure.retry_after_s}
        headers["Retry-After"] = str(failure.retry_after_s)
    return web.json_response(body, status=failure.status, headers=headers)


@dataclass
class FakeKubeApiServer(FakeCluster):
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    received: list[tuple[str, str, Obj]] = field(default_factory=list)  # verb, plural, body
    url: str = ""
    _runner: web.AppRunner | None = None
    _loop_task: asyncio.Task[None] | None = None
    _closing: bool = False
    lists: dict[str, int] = field(default_factory=dict)  # plain list requests, per plural
    failures: dict[tuple[str, str], list[InjectedFailure]] = field(default_factory=dict)

    def fail_next(self, verb: str, plural: str, status: int, *, times: int = 1,
                  retry_after_s: int | None = None, after_applying: bool = False) -> None:
        """The next `times` requests of `verb` (create, get, list, watch, patch, delete) on
        `plural` are answered `status` (429, 500, 502, 503 or 504; or 422, the refusal of an old
        server that cannot change a gated pod's affinity). A 429 carries Retry-After
        (1 s unless told), as the real server's priority and fairness does."""
        if status == 429 and retry_after_s is None:
            retry_after_s = 1
        self.failures.setdefault((verb, plural), []).extend(
            [InjectedFailure(status, retry_after_s, after_applying)] * times)

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
        for prefix in ("/api/v1", "/apis/batch/v1", "/apis/policy/v1"):
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
        queue = self.failures.get((_verb(request), request.match_info.get("plural", "")))
        failure = queue.pop(0) if queue else None
        if failure is not None and not failure.after_applying:
            return _failure_response(failure)
        response: web.StreamResponse = await handler(request)
        return response if failure is None else _failure_response(failure)

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        plural, ns = request.match_info["plural"], request.match_info.get("ns", "")
        if plural not in KINDS:
            return _status(404, "NotFound", f"the server could not find the resource {plural}")
        if request.method == "POST":
            sent = await _json_body(request)
            self.received.append(("create", plural, sent if isinstance(sent, dict) else {}))
            decoded = decode(plural, sent, request.query.get("fieldValidation"))
            if isinstance(decoded, Refusal):
                return _refused(decoded)
            body, warnings = decoded
            if (problem := invalid(plural, body)) is not None:
                return _refused(problem)
            if self.get(plural, body["metadata"]["name"], ns) is not None:
                return _status(409, "AlreadyExists",
                               f'{plural} "{body["metadata"]["name"]}" already exists')
            if plural == "pods" and (refusal := self.admit_pod({
                    **body, "metadata": {**body["metadata"], "namespace": ns}})) is not None:
                return _status(403, "Forbidden", refusal)
            if request.query.get("dryRun") == "All":  # checked as a create would be, not stored
                return web.json_response({**body, "metadata": {**body["metadata"], "namespace": ns}},
                                         status=201, headers=_warning_headers(warnings))
            return web.json_response(self.create(plural, body, ns), status=201,
                                     headers=_warning_headers(warnings))
        selector, fields = request.query.get("labelSelector"), request.query.get("fieldSelector")
        if (refusal := field_selector_refused(plural, fields)) is not None:
            return _refused(refusal)
        if request.query.get("watch") in ("true", "True", "1"):
            return await self._watch(request, plural, ns, selector, fields)
        apiversion, kind = KINDS[plural]
        self.lists[plural] = self.lists.get(plural, 0) + 1
        return web.json_response({"apiVersion": apiversion, "kind": kind + "List",
                                  "metadata": {"resourceVersion": str(self.revision)},
                                  "items": [o for o in self.list(plural, ns, selector)
                                            if matches_fields(plural, o, fields)]})

    async def _item(self, request: web.Request) -> web.StreamResponse:
        plural, ns, name = (request.match_info["plural"], request.match_info.get("ns", ""),
                            request.match_info["name"])
        obj = self.get(plural, name, ns)
        if obj is None:
            return _status(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "GET":
            return web.json_response(obj)
        if request.method == "PATCH":
            patch = await _json_body(request)
            self.received.append(("patch", plural, patch if isinstance(patch, dict) else {}))
            if not isinstance(patch, dict):
                return _status(400, "BadRequest", "the patch is not a JSON object")
            decoded = decode(plural, merge_patch(obj, patch), request.query.get("fieldValidation"))
            if isinstance(decoded, Refusal):
                return _refused(decoded)
            patched, warnings = decoded
            patched["metadata"]["uid"] = obj["metadata"]["uid"]
            if (problem := invalid(plural, patched)) is not None:
                return _refused(problem)
            if plural == "pods" and (refusal := pod_update_refused(obj, patched)):
                return _status(422, "Invalid", f'Pod "{name}" is invalid: {refusal}')
            return web.json_response(self._put(plural, patched, "MODIFIED"),
                                     headers=_warning_headers(warnings))
        if request.method == "DELETE":
            options = await request.json() if request.can_read_body else {}
            self.received.append(("delete", plural, options))
            policy = options.get("propagationPolicy") or request.query.get("propagationPolicy")
            grace = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
            self._delete(plural, obj, policy or "Background", None if grace is None else float(grace))
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success",
                                      "details": {"name": name, "kind": plural}})
        return _status(405, "MethodNotAllowed", request.method)

    async def _watch(self, request: web.Request, plural: str, ns: str, selector: str | None,
                     fields: str | None) -> web.StreamResponse:
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
                        and matches_labels(obj, selector) and matches_fields(plural, obj, fields):
                    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(0.5, timeout))
        return response
