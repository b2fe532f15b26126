"""The `kubernetes` backend: one Indexed batch/v1 Job per run, through kubernetes-asyncio.

- start: the Job (deterministic name, so a retry meets a 409 rather than creating a twin),
  then its Secret (the run token, the run's NATS credentials), its headless Service and its
  PodDisruptionBudget (no pod of the run may be evicted: a drain goes through Rota's notice
  and checkpoint instead), all owned by the Job. Each call is retried on 429 (after
  Retry-After), 5xx and broken connections (`kube_calls`); objects still not created are
  tried again by each pass until the start timeout, when the run is lost (requeued), never
  failed for the API server's trouble. Pods are created gated; each is pinned to its worker's granted node and
  only then released to the scheduler (see `rota.k8s.manifests`). A pin the API server
  refuses (422) fails the run: the gang could never start.
- watch: pods, nodes and the Job controller's `FailedCreate` Events are listed once, then
  watched from that resourceVersion; a 410 Gone re-lists. A pass over the runs every `poll_s`
  lifts gates, sees a gang start, fail or finish, fails a run whose pod admission refused
  (the Event's words are the reason), and gives up on a gang that has not started within
  `start_timeout_s`.
- stop and every other end: the Job deleted with foreground propagation. The garbage
  collector deletes the pods with no grace period of its own, so the executor's grace is each
  pod's `terminationGracePeriodSeconds`, set in the template. The end is reported only once no
  pod of the run is left, so the ledger never frees GPUs that a terminating pod still holds.
- restart: runs are adopted by their `rota.dev/run-id` label; a recorded run whose Job was
  never created is created now, and a Secret or Service never created is created now. A Job
  found being deleted is a teardown in progress: its end is reported once its pods are gone.

Tested against the in-repo fake API server (`tests/fake_kube_apiserver.py`) and against a real
control plane with KWOK nodes (`tests/real_kube/`): see docs/kubernetes.md for what that leaves
untested.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from rota.clock import Clock
from rota.config.model import Node
from rota.contracts.job import JobSpec
from rota.k8s import manifests as k
from rota.k8s.inventory import Labels

from rota_executor.backend import Exit, Reporter, RunRecord
from rota_executor.credentials import RunMinter
from rota_executor.kube_calls import KubeCalls, describe, is_transient
from rota_executor.kube_evictions import EvictionRequests, with_responder
from rota_executor.kube_nodes import NodeTracking
from rota_executor.kube_pods import (
    FAILED_CREATE,
    Pod,
    end_of_deleted_job,
    failed_create,
    gang_state,
    judge,
    node_problem,
    pin_patch,
)

log = logging.getLogger("rota.executor.kubernetes")


@dataclass
class Tracked:
    run: RunRecord
    launched_at: float  # clock seconds, for the start timeout
    started: bool = False
    teardown: Exit | None = None  # set once the run's objects are being deleted
    deleting: bool = False
    pinned: set[str] = field(default_factory=set)  # pods whose gate was lifted (patch accepted)
    job_uid: str | None = None  # of the run's Job, once created or adopted
    to_create: k.RunObjects | None = None  # objects not all created yet: each pass tries again
    last_error: str = ""  # why they are not, for the start timeout's reason
    creating: bool = False  # a create is in flight (a start, or a pass's retry)


class KubeBackend(NodeTracking, EvictionRequests):
    name = "kubernetes"
    needs: str | None = "kubernetes"
    time_scale = 1.0

    def __init__(
        self, reporter: Reporter, clock: Clock, api: client.ApiClient, *, namespace: str,
        nats_url: str, gpu_resource: str = "nvidia.com/gpu", start_timeout_s: float = 300.0,
        grace_s: float = 30.0, checkpoint_dir: str = "/checkpoints", poll_s: float = 0.5,
        minter: RunMinter | None = None, config_nodes: list[Node] | None = None,
        labels: Labels | None = None, drain_deadline_s: float = 3600.0,
        node_lost_grace_s: float = 300.0,
    ) -> None:
        self.reporter = reporter
        self.config_nodes = config_nodes
        self.labels = labels or Labels(gpu_resource=gpu_resource)
        self.clock = clock
        self.api = api
        self.calls = KubeCalls(api, clock, namespace)
        self.namespace = namespace
        self.nats_url = nats_url
        self.gpu_resource = gpu_resource
        self.start_timeout_s = start_timeout_s
        self.grace_s = grace_s
        self.checkpoint_dir = checkpoint_dir
        self.poll_s = poll_s
        self.minter = minter
        self.runs: dict[str, Tracked] = {}
        self.pods: dict[str, Pod] = {}  # by name, as last listed or watched
        self.nodes: dict[str, dict[str, Any]] = {}  # by name, as last listed or watched
        self.refusals: dict[str, dict[str, Any]] = {}  # FailedCreate Events of Jobs, by name
        self.lost_nodes: set[str] = set()  # nodes gone, or NotReady past the grace
        self.node_problems: dict[str, str | None] = {}  # as last reported, by node
        self.drain_deadline_s = drain_deadline_s
        self.node_lost_grace_s = node_lost_grace_s
        self.not_ready_since: dict[str, float] = {}
        self.cordons: dict[str, bool] = {}
        self.eviction_requests: dict[str, dict[str, Any]] = {}
        self.evictions_served = False  # asked at the start of `run`
        self.evictions_reported: dict[str, tuple[str, str, str]] = {}
        self.evictions: dict[str, dict[str, Any]] = {}
        self.heartbeats: dict[str, float] = {}
        self.completed_evictions: set[str] = set()
        self._pods_synced, self._nodes_synced = asyncio.Event(), asyncio.Event()
        self.synced = asyncio.Event()  # both listed once: only then can a pass judge a run
        self._tasks: set[asyncio.Task[None]] = set()

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def unsupported(self, spec: JobSpec) -> str | None:
        if spec.kubernetes is None:
            return "the job has no `kubernetes` section (an image) for the kubernetes executor"
        return None

    # ------------------------------------------------------------------ start

    def _objects(self, run: RunRecord, run_token: str, with_creds: bool = True) -> k.RunObjects:
        creds = self.minter.mint(run.run_id).read_text() if self.minter and with_creds else None
        objects = k.run_objects(
            run_id=run.run_id, job_id=run.job_id, attempt=run.attempt, spec=run.spec,
            placement=run.placement, namespace=self.namespace, nats_url=self.nats_url,
            resume_from=run.resume_from, checkpoint_dir=self.checkpoint_dir,
            gpu_resource=self.gpu_resource, run_token=run_token, nats_creds=creds,
            termination_grace_s=math.ceil(self.grace_s))
        if self.evictions_served:
            with_responder(objects.job)
        return objects

    async def start(self, run: RunRecord, run_token: str) -> None:
        objects = self._objects(run, run_token)
        tracked = self.runs[run.run_id] = Tracked(run, self._now(), to_create=objects)
        self.warn_of_taints(run.run_id, {w.node for w in run.placement},
                            objects.job["spec"]["template"]["spec"]["tolerations"])
        try:
            await self._create_objects(tracked)
        except Exception:
            self.runs.pop(run.run_id, None)  # the executor ends the run: nothing here is ours
            raise

    async def _create_objects(self, tracked: Tracked) -> None:
        """The Job, then its Secret and Service, owned by it. An API server that keeps failing
        leaves them to the next pass (until the start timeout); a refusal ends the run."""
        objects = tracked.to_create
        if objects is None or tracked.creating:
            return
        run, tracked.creating = tracked.run, True
        try:
            job = await self.calls.create_job(objects.job)
            name, uid = job["metadata"]["name"], job["metadata"]["uid"]
            tracked.job_uid = uid
            await self.calls.create_owned(k.owned_by(objects.secret, name, uid))
            await self.calls.create_owned(k.owned_by(objects.service, name, uid))
            await self.calls.create_owned(k.owned_by(objects.disruption_budget, name, uid))
        except Exception as exc:
            if is_transient(exc):
                tracked.last_error = describe(exc)
                log.warning("run %s: its objects are not all created (%s); the next pass tries"
                            " again", run.run_id, tracked.last_error[:300])
                return
            if not isinstance(exc, ApiException):
                raise  # e.g. a namesake Job of another run: nothing of this run to delete
            log.error("run %s: Kubernetes refused its objects: %s", run.run_id, describe(exc))
            tracked.to_create = None
            tracked.teardown = Exit(None, f"cannot start: {describe(exc)}")
            return
        finally:
            tracked.creating = False
        tracked.to_create = None
        log.info("kubernetes run %s: Job %s/%s created, %d pods pinned to %s", run.run_id,
                 self.namespace, name, len(run.placement), sorted({w.node for w in run.placement}))
        await self.reporter.launched(run.run_id, [])

    # ------------------------------------------------------------------ adopt, stop, notice

    async def adopt(self, run: RunRecord) -> None:
        jobs = await self.calls.jobs_of_run(run.run_id)
        if not jobs:
            if run.state == "stopping":
                await self.reporter.ended(run.run_id, Exit(None, "stopped before it started"))
                return
            log.info("kubernetes run %s has no Job: creating it now", run.run_id)
            await self.start(run, await self.reporter.new_token(run.run_id))
            return
        # The start timeout counts from now: the executor does not know how long it was away.
        job = jobs[0]
        tracked = Tracked(run, self._now(), job_uid=job["metadata"]["uid"])
        self.runs[run.run_id] = tracked
        log.info("kubernetes run %s adopted: Job %s", run.run_id, job["metadata"]["name"])
        if job["metadata"].get("deletionTimestamp"):
            # A teardown in progress: its end is reported once the last pod is gone.
            tracked.deleting = True
            tracked.teardown = end_of_deleted_job(job, stopping=run.state == "stopping")
            log.warning("kubernetes run %s: its Job is being deleted: %s", run.run_id,
                        tracked.teardown.detail)
        elif run.state == "stopping":
            tracked.teardown = Exit(None, "stopped")
        else:
            await self._complete_objects(tracked, job)

    async def _complete_objects(self, tracked: Tracked, job: dict[str, Any]) -> None:
        """A crash between the creates can leave a Job without its Secret (its pods then
        never start) or its Service: whichever is missing is created now. A new Secret needs
        a new token; the old one was never seen by a pod."""
        run, name, uid = tracked.run, job["metadata"]["name"], job["metadata"]["uid"]
        if not await self.calls.secret_exists(
                k.owned_by(self._objects(run, "", with_creds=False).secret, name, uid)):
            objects = self._objects(run, await self.reporter.new_token(run.run_id))
            await self.calls.create_owned(k.owned_by(objects.secret, name, uid))
            log.warning("kubernetes run %s: its Secret was missing: created now", run.run_id)
        if not await self.calls.exists("Service", k.object_name(run.run_id)):
            service = self._objects(run, "", with_creds=False).service
            await self.calls.create_owned(k.owned_by(service, name, uid))
            log.warning("kubernetes run %s: its Service was missing: created now", run.run_id)
        # Its PodDisruptionBudget: a create that meets 409 is the one already there (the Role
        # may create and delete budgets, not read them).
        budget = self._objects(run, "", with_creds=False).disruption_budget
        await self.calls.create_owned(k.owned_by(budget, name, uid))

    async def stop(self, run: RunRecord) -> None:
        tracked = self.runs.get(run.run_id)
        if tracked is None:
            await self.reporter.ended(run.run_id, Exit(None, "no Job to stop"))
            return
        tracked.run = run
        if tracked.teardown is None:
            tracked.teardown = Exit(None, "stopped")
        try:
            await self._teardown(tracked)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("run %s: its Job could not be deleted yet (%s); the next pass tries again",
                        run.run_id, describe(exc)[:300])

    def noticed(self, run: RunRecord) -> None:
        """For jobs without the SDK: the notice as an annotation on every pod of the run, which
        the pods read from the downward-API file `ROTA_NOTICE_FILE`."""
        tracked = self.runs.get(run.run_id)
        if tracked is not None:
            tracked.run = run
        value = "" if run.notice_id is None or run.notice_acked_at is not None else json.dumps(
            {"notice_id": run.notice_id, "action": "checkpoint_and_stop",
             "at": run.notice_at.isoformat() if run.notice_at else None})
        for pod in self._pods_of(run.run_id):
            self._spawn(self._annotate(pod["metadata"]["name"], value))

    async def _annotate(self, name: str, notice: str) -> None:
        try:
            await self.calls.patch_pod(name, {"metadata": {"annotations": {k.ANNOTATION_NOTICE: notice}}})
        except Exception as exc:
            log.warning("pod %s: the notice annotation was not written: %s", name, describe(exc)[:300])

    async def _teardown(self, tracked: Tracked) -> None:
        if tracked.deleting:
            return
        tracked.deleting = True
        name = k.object_name(tracked.run.run_id)
        try:
            await self.calls.delete_job(name)
        except Exception:
            tracked.deleting = False  # tried again on the next pass
            raise
        log.info("kubernetes run %s: Job %s deleted (foreground; each pod's grace %.0f s)",
                 tracked.run.run_id, name, math.ceil(self.grace_s))

    # ------------------------------------------------------------------ the loop

    def _pods_of(self, run_id: str) -> list[Pod]:
        return [p for p in self.pods.values()
                if (p["metadata"].get("labels") or {}).get(k.LABEL_RUN) == run_id]

    async def check(self) -> None:
        """One pass over every run: pin gated pods, then see whether the gang started, ended
        or waited too long; report an end once the run's last pod is gone. A run whose calls
        fail is left for the next pass; the other runs go on."""
        self._refresh_lost_nodes()  # the runs, and so the nodes that matter, change
        self._refresh_evictions()  # a request may have come before its pod was seen
        await self.respond_to_evictions()
        for run_id, tracked in list(self.runs.items()):
            try:
                await self._check_run(run_id, tracked)
            except Exception as exc:
                if not is_transient(exc):
                    log.exception("kubernetes run %s: its pass failed; the next one tries again",
                                  run_id)
                    continue
                log.warning("kubernetes run %s: the API server failed (%s); the next pass tries"
                            " again", run_id, describe(exc)[:300])

    async def _check_run(self, run_id: str, tracked: Tracked) -> None:
        pods = self._pods_of(run_id)
        if tracked.teardown is not None:
            await self._teardown(tracked)
            for pod in pods:
                # No kubelet answers for a lost node: its pods would stay Terminating
                # forever. They hold no GPU anyone can use, so they are force-deleted.
                if pod["metadata"].get("deletionTimestamp") and \
                        pod["spec"].get("nodeName") in self.lost_nodes:
                    await self.calls.force_delete_pod(pod["metadata"]["name"])
                    log.warning("pod %s on a lost node: force-deleted", pod["metadata"]["name"])
            if not pods and not await self.calls.exists("Job", k.object_name(run_id)):
                await self._end(run_id, tracked.teardown)
            return
        waited = self._now() - tracked.launched_at
        if tracked.to_create is not None:
            if waited >= self.start_timeout_s:
                tracked.teardown = Exit(None, f"the run's objects could not be created within "
                                        f"{self.start_timeout_s:.0f} s: {tracked.last_error}", lost=True)
            else:
                await self._create_objects(tracked)
            return
        for pod in pods:
            name = pod["metadata"]["name"]
            patch = pin_patch(pod, tracked.run.placement)
            if patch is not None and name not in tracked.pinned:
                try:
                    await self.calls.patch_pod(name, patch)
                except ApiException as exc:
                    if exc.status != 422:
                        raise
                    # Refused for good (e.g. a server that cannot change a gated pod's
                    # affinity): the gang can never start, and waiting would requeue it forever.
                    tracked.teardown = Exit(None, f"worker pod {name} cannot be pinned to its"
                                            f" node: {describe(exc)}")
                    break
                tracked.pinned.add(name)  # only once accepted: a failed pin is sent again
        if tracked.teardown is not None:
            log.warning("kubernetes run %s: ending: %s", run_id, tracked.teardown.detail)
            await self._teardown(tracked)
            return
        state = gang_state(pods, len(tracked.run.placement), self.lost_nodes)
        refusal = None if tracked.started else failed_create(
            list(self.refusals.values()), k.object_name(run_id), tracked.job_uid)
        lost = {n: node_problem(self.nodes.get(n), cordon_is_a_problem=False) or "" for n in sorted(
            {w.node for w in tracked.run.placement} & self.lost_nodes)}
        started, tracked.teardown = judge(state, refusal, lost, started=tracked.started,
                                          waited_s=waited, start_timeout_s=self.start_timeout_s)
        if started and not tracked.started:
            tracked.started = True
            log.info("kubernetes run %s: all %d pods Running", run_id, len(tracked.run.placement))
        if tracked.teardown is not None:
            log.warning("kubernetes run %s: ending: %s", run_id, tracked.teardown.detail)
            await self._teardown(tracked)

    async def _end(self, run_id: str, exit: Exit) -> None:
        if self.minter is not None:
            self.minter.forget(run_id)
        await self.reporter.ended(run_id, exit)
        self.runs.pop(run_id, None)

    async def watch_pods(self) -> None:
        await self.calls.list_watch(self.pods, self._pods_synced.set, self._refresh_lost_nodes,
                                    self.calls.core.list_namespaced_pod, self.namespace,
                                    label_selector=f"{k.LABEL_MANAGED}={k.MANAGED_BY}")

    async def watch_refusals(self) -> None:
        """The Job controller's FailedCreate Events: a pod that admission refused never
        exists, and this is the only place the cluster says why."""
        await self.calls.list_watch(self.refusals, lambda: None, lambda: None,
                                    self.calls.core.list_namespaced_event, self.namespace,
                                    field_selector=f"involvedObject.kind=Job,reason={FAILED_CREATE}")

    def job_of(self, run_id: str) -> str | None:
        tracked = self.runs.get(run_id)
        return None if tracked is None or tracked.teardown is not None else tracked.run.job_id

    def granted_nodes(self) -> set[str]:
        return {w.node for t in self.runs.values() for w in t.run.placement}

    async def run(self) -> None:
        watchers = [asyncio.create_task(self._forever(self.watch_pods, "the pod watch")),
                    asyncio.create_task(self._forever(self.watch_nodes, "the node watch")),
                    asyncio.create_task(self._forever(self.watch_refusals, "the event watch"))]
        try:
            await self._pods_synced.wait()
            await self._nodes_synced.wait()
            if await self.detect_eviction_requests():
                watchers.append(asyncio.create_task(self._forever(
                    self.watch_eviction_requests, "the eviction request watch")))
                watchers.append(asyncio.create_task(self._forever(
                    self.watch_evictions, "the eviction watch")))
            self.synced.set()
            self.compare_inventory()
            while True:
                try:
                    await self.check()
                except Exception:
                    log.exception("kubernetes backend: a pass over the runs failed")
                await asyncio.sleep(self.poll_s)
        finally:
            for watcher in watchers:
                watcher.cancel()

    async def _forever(self, loop: Any, what: str) -> None:
        while True:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("kubernetes backend: %s failed; starting it again", what)
                await asyncio.sleep(1.0)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("kubernetes backend: a report failed", exc_info=task.exception())

    async def close(self) -> None:
        # Jobs keep running: a restarted executor adopts them by label.
        for task in list(self._tasks):
            task.cancel()
        await self.api.close()
