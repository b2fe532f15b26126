"""How the `kubernetes` backend talks to the API server.

- Every call is retried when the answer says nothing about the request itself: 429 Too Many
  Requests (after its Retry-After), 500, 502, 503 and 504, or a connection that failed. The
  backoff is bounded and exponential, on the backend's clock; after the last attempt the
  error is raised, and the caller decides what a later pass does. Any other error is raised
  at once.
- A create that meets 409 AlreadyExists is a create whose answer was lost, or a start
  repeated: the Job is adopted when its run label is this run's, never created twice.
- Mirrors of a kind of object are listed, then watched from the list's resourceVersion, and
  listed again after a 410 Gone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch
from rota.clock import Clock
from rota.k8s import manifests as k

log = logging.getLogger("rota.executor.kubernetes")

MERGE_PATCH = "application/merge-patch+json"
WATCH_TIMEOUT_S = 60
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Backoff:
    attempts: int = 4  # per call; a later pass of the backend tries again
    first_s: float = 0.5
    max_s: float = 8.0  # also the longest Retry-After obeyed


def is_transient(exc: BaseException) -> bool:
    """An error that says nothing about the request: the same request may well succeed."""
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUSES
    return isinstance(exc, aiohttp.ClientError | TimeoutError)


def retry_after_s(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the API server never sends one


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"Kubernetes said {exc.status} {exc.reason}: {exc.body!s}"
    return f"{type(exc).__name__}: {exc}"


async def read_body(response: Any) -> Any:
    """The JSON of a raw (`_preload_content=False`) response; an error status is raised as
    ApiException with the response's headers, which carry Retry-After."""
    try:
        body = await response.read()
        if not 200 <= response.status < 300:
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = body.decode(errors="replace")
            exc.headers = response.headers
            raise exc
        return json.loads(body)
    finally:
        response.release()


class KubeCalls:
    """The API calls of the backend, in its namespace, each retried as the module says."""

    def __init__(self, api: client.ApiClient, clock: Clock, namespace: str,
                 backoff: Backoff | None = None) -> None:
        # Any: manifests go in as the plain dicts the schema checked, which the generated
        # signatures (models only, no `_content_type`) do not admit though the client does.
        self.core: Any = client.CoreV1Api(api)
        self.batch: Any = client.BatchV1Api(api)
        self.policy: Any = client.PolicyV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.clock = clock
        self.namespace = namespace
        self.backoff = backoff or Backoff()

    async def call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        wait = self.backoff.first_s
        for attempt in range(1, self.backoff.attempts + 1):
            try:
                return await read_body(await method(*args, _preload_content=False, **kwargs))
            except Exception as exc:
                if not is_transient(exc) or attempt == self.backoff.attempts:
                    raise
                pause = min(retry_after_s(exc) or wait, self.backoff.max_s)
                log.warning("%s: %s; trying again in %.1f s (attempt %d of %d)", what,
                            describe(exc)[:300], pause, attempt, self.backoff.attempts)
                await self.clock.sleep(pause)
                wait = min(wait * 2, self.backoff.max_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        try:
            return dict(await self.call(f"create Job {name}", self.batch.create_namespaced_job,
                                        self.namespace, manifest))
        except ApiException as exc:
            if exc.status != 409:
                raise
        # Ours already (a create whose answer was lost, a retried start, or a restart between
        # create and record): the same run label means the same run, so never a second Job.
        existing = dict(await self.call(f"read Job {name}", self.batch.read_namespaced_job,
                                        name, self.namespace))
        theirs = existing["metadata"].get("labels", {}).get(k.LABEL_RUN)
        if theirs != manifest["metadata"]["labels"][k.LABEL_RUN]:
            raise RuntimeError(f"Job {name} exists and belongs to run {theirs!r}")
        log.info("Job %s existed already: adopted, not created twice", name)
        return existing

    async def create_owned(self, manifest: dict[str, Any]) -> None:
        """A Secret, Service or PodDisruptionBudget of the run; one that exists already is the
        run's own."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        create = {"Secret": self.core.create_namespaced_secret,
                  "Service": self.core.create_namespaced_service,
                  "PodDisruptionBudget": self.policy.create_namespaced_pod_disruption_budget}[kind]
        try:
            await self.call(f"create {kind} {name}", create, self.namespace, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise

    async def secret_exists(self, manifest: dict[str, Any]) -> bool:
        """Whether the run's Secret exists, asked without reading it: a server-side dry-run
        create meets 409 when it does. The executor may create and delete Secrets in the runs
        namespace but never read one (the chart's Role), so `get` is not an option."""
        name = manifest["metadata"]["name"]
        try:
            await self.call(f"dry-run create Secret {name}", self.core.create_namespaced_secret,
                            self.namespace, manifest, dry_run="All")
        except ApiException as exc:
            if exc.status == 409:
                return True
            raise
        return False

    async def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves `plural` in `group/version` (discovery)."""
        try:
            found = await self.call(f"discover {group}/{version}", self.custom.get_api_resources,
                                    group, version)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in found.get("resources") or [])

    async def exists(self, kind: str, name: str) -> bool:
        read = {"Job": self.batch.read_namespaced_job, "Service": self.core.read_namespaced_service}[kind]
        try:
            await self.call(f"read {kind} {name}", read, name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def jobs_of_run(self, run_id: str) -> list[dict[str, Any]]:
        listed = await self.call(f"list the Jobs of run {run_id}", self.batch.list_namespaced_job,
                                 self.namespace, label_selector=f"{k.LABEL_RUN}={run_id}")
        return list(listed["items"])

    async def delete_job(self, name: str) -> None:
        """Foreground, and with no grace period: the garbage collector would not pass one on
        to the pods, which carry the executor's grace as their terminationGracePeriodSeconds."""
        try:
            await self.call(f"delete Job {name}", self.batch.delete_namespaced_job, name,
                            self.namespace, body=client.V1DeleteOptions(propagation_policy="Foreground"))
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def force_delete_pod(self, name: str) -> None:
        try:
            await self.call(f"force-delete pod {name}", self.core.delete_namespaced_pod, name,
                            self.namespace, body=client.V1DeleteOptions(grace_period_seconds=0))
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_pod(self, name: str, patch: dict[str, Any]) -> bool:
        """A JSON merge patch; False when the pod is gone, which needs nothing more."""
        try:
            await self.call(f"patch pod {name}", self.core.patch_namespaced_pod, name,
                            self.namespace, patch, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def list_watch(self, mirror: dict[str, dict[str, Any]], on_listed: Callable[[], None],
                         on_change: Callable[[], None], list_fn: Any, *args: Any,
                         **kwargs: Any) -> None:
        """List, then watch from the list's resourceVersion; re-list after a 410 Gone.
        `mirror` holds the objects by name, as last listed or watched; `on_listed` is called
        after each list, `on_change` after each list and each watched change."""
        while True:
            listed = await self.call("list", list_fn, *args, **kwargs)
            mirror.clear()
            mirror.update({o["metadata"]["name"]: o for o in listed["items"]})
            version = listed["metadata"]["resourceVersion"]
            on_listed()
            on_change()
            try:
                while True:
                    async with Watch() as watch:
                        stream = watch.stream(list_fn, *args, resource_version=version,
                                              timeout_seconds=WATCH_TIMEOUT_S, **kwargs)
                        async for event in stream:
                            obj = event["raw_object"]
                            version = obj["metadata"]["resourceVersion"]
                            if event["type"] == "DELETED":
                                mirror.pop(obj["metadata"]["name"], None)
                            else:
                                mirror[obj["metadata"]["name"]] = obj
                            on_change()
            except ApiException as exc:
                if exc.status != 410:
                    raise
                log.info("watch: resourceVersion %s expired (410 Gone); re-listing", version)
