"""The `kubernetes` backend against the real control plane (KWOK nodes, see `cluster.py`):
gangs placed on their granted nodes, the kill grace on every pod, admission refusals, taints,
node loss, and an executor restarted mid-run. Each test has a namespace of its own."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import replace

import pytest
from rota.k8s import manifests as k

from tests.real_kube.backend import (
    eventually,
    exit_pods,
    pods_of,
    run_record,
    start_backend,
)
from tests.real_kube.cluster import GPU_TAINT, NODES, KubeCluster

pytestmark = pytest.mark.real_kube

_names = itertools.count(1)


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = kube_cluster.namespace(f"rota-be-{next(_names)}")
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def running_on(cluster: KubeCluster, namespace: str, run_id: str, workers: int) -> dict[int, str] | None:
    """Worker index -> node, once every pod of the run is Running; else None."""
    pods = pods_of(cluster, namespace, run_id)
    running = {int(p["metadata"]["annotations"][k.INDEX_ANNOTATION]): p["spec"]["nodeName"]
               for p in pods if (p.get("status") or {}).get("phase") == "Running"}
    return running if len(running) == workers else None


async def test_a_4x8_gang_runs_on_its_granted_nodes_and_finishes(
        kube_cluster: KubeCluster, namespace: str) -> None:
    # h100-3's hostname label is an FQDN unlike its name: pinning must go by the node's name.
    granted = ["h100-2", "h100-0", "h100-3", "h100-1"]
    started = await start_backend(kube_cluster.kubeconfig, namespace)
    try:
        run = run_record([(node, list(range(8))) for node in granted])
        await started.backend.start(run, "token")
        placed = await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 4), 60,
                                  "all 4 pods Running")
        assert placed == dict(enumerate(granted))
        await eventually(lambda: started.backend.runs[run.run_id].started, 10, "the gang seen started")
        exit_pods(kube_cluster, namespace, run.run_id, 0)
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        assert started.reporter.ended_runs[run.run_id].code == 0
        assert started.reporter.pods_left_at_end[run.run_id] == 0
    finally:
        await started.close()


async def test_the_kill_grace_reaches_every_pod_and_the_end_waits_for_the_last(
        kube_cluster: KubeCluster, namespace: str) -> None:
    """The garbage collector deletes a Job's pods with no grace of its own: each pod keeps its
    terminationGracePeriodSeconds, which must be the executor's grace, not the default 30 s."""
    started = await start_backend(kube_cluster.kubeconfig, namespace, grace_s=4)
    try:
        run = run_record([("h100-0", [0, 1]), ("h100-1", [0, 1])])
        await started.backend.start(run, "token")
        await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 2), 60, "pods Running")
        await eventually(lambda: started.backend.runs[run.run_id].started, 10, "the gang seen started")
        await started.backend.stop(run)
        terminating = await eventually(lambda: [
            p for p in pods_of(kube_cluster, namespace, run.run_id)
            if p["metadata"].get("deletionTimestamp")], 30, "pods Terminating")
        assert {p["metadata"]["deletionGracePeriodSeconds"] for p in terminating} == {4}
        assert {p["spec"]["terminationGracePeriodSeconds"] for p in terminating} == {4}
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        assert started.reporter.pods_left_at_end[run.run_id] == 0
        assert kube_cluster.kubectl("get", "job", k.object_name(run.run_id), "-n", namespace,
                                    check=False).returncode != 0  # the Job is gone too
    finally:
        await started.close()


async def test_a_pod_refused_by_admission_fails_the_run_with_the_clusters_reason(
        kube_cluster: KubeCluster) -> None:
    """The Job controller's pods are refused by a ResourceQuota: no pod ever exists, and the
    reason is a FailedCreate event. The run fails with it rather than waiting to be lost and
    requeued, attempt after attempt."""
    namespace = kube_cluster.namespace(f"rota-quota-{next(_names)}")
    kube_cluster.apply([{"apiVersion": "v1", "kind": "ResourceQuota",
                         "metadata": {"name": "no-gpus", "namespace": namespace},
                         "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}])
    started = await start_backend(kube_cluster.kubeconfig, namespace, start_timeout_s=120)
    try:
        run = run_record([("h100-0", [0])])
        await started.backend.start(run, "token")
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 90, "the run ended")
        exit = started.reporter.ended_runs[run.run_id]
        assert not exit.lost, exit
        assert "exceeded quota" in exit.detail, exit.detail
    finally:
        await started.close()
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def test_a_namespace_at_pod_security_restricted_refuses_a_host_network_template(
        kube_cluster: KubeCluster) -> None:
    """Rota hardens what it can override, but not `hostNetwork` (submission refuses it): a
    template that got past submission is refused by admission, and the run fails with its
    reason."""
    namespace = kube_cluster.namespace(f"rota-psa-{next(_names)}", labels={
        "pod-security.kubernetes.io/enforce": "restricted"})
    started = await start_backend(kube_cluster.kubeconfig, namespace, start_timeout_s=120)
    try:
        run = run_record([("h100-1", [0])], kubernetes={"pod_template": {"spec": {"hostNetwork": True}}})
        await started.backend.start(run, "token")
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 90, "the run ended")
        exit = started.reporter.ended_runs[run.run_id]
        assert not exit.lost, exit
        assert "PodSecurity" in exit.detail and "restricted" in exit.detail, exit.detail
        assert "hostNetwork=true" in exit.detail, exit.detail
    finally:
        await started.close()
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def test_a_gpu_pool_behind_the_gpu_taint_takes_a_run_with_no_toleration_of_its_own(
        kube_cluster: KubeCluster, namespace: str) -> None:
    """GPU pools often carry the GPU resource's NoSchedule taint; the cluster adds the matching
    toleration only through an admission plugin that is off by default, so Rota's pods carry it."""
    started = await start_backend(kube_cluster.kubeconfig, namespace)
    try:
        run = run_record([("a100-0", [0, 1, 2, 3])])
        await started.backend.start(run, "token")
        assert await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 1), 60,
                                "the pod Running") == {0: "a100-0"}
        exit_pods(kube_cluster, namespace, run.run_id, 0)
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        assert started.reporter.ended_runs[run.run_id].code == 0
    finally:
        await started.close()


@pytest.mark.parametrize("how", ["NotReady", "deleted"])
async def test_a_lost_node_ends_its_run_as_lost(
        kube_cluster: KubeCluster, namespace: str, how: str) -> None:
    """Deleted: lost at once. NotReady: lost once NotReady for the grace (here 2 s)."""
    victim = next(n for n in NODES if n.name == "a100-2")
    toleration = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    started = await start_backend(kube_cluster.kubeconfig, namespace, node_lost_grace_s=2.0)
    try:
        run = run_record([(victim.name, [0]), ("a100-1", [0])], kubernetes={"tolerations": [toleration]})
        await started.backend.start(run, "token")
        await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 2), 60, "pods Running")
        await eventually(lambda: started.backend.runs[run.run_id].started, 10, "the gang seen started")
        if how == "NotReady":
            kube_cluster.kubectl("annotate", "node", victim.name, "rota.dev/kwok-ready=false")
        else:
            kube_cluster.kubectl("delete", "node", victim.name, "--wait=false")
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 90, "the run ended")
        exit = started.reporter.ended_runs[run.run_id]
        assert exit.lost and f"{victim.name} ({how})" in exit.detail, exit
        assert started.reporter.pods_left_at_end[run.run_id] == 0
        assert (victim.name, how) in started.reporter.node_reports
    finally:
        await started.close()
        kube_cluster.kubectl("delete", "node", victim.name, "--wait=true", check=False)
        kube_cluster.apply([victim.manifest()])


async def test_a_short_not_ready_blip_withdraws_the_node_and_leaves_its_run(
        kube_cluster: KubeCluster, namespace: str) -> None:
    victim = next(n for n in NODES if n.name == "a100-2")
    toleration = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    started = await start_backend(kube_cluster.kubeconfig, namespace, node_lost_grace_s=60.0)
    try:
        run = run_record([(victim.name, [0]), ("a100-1", [0])], kubernetes={"tolerations": [toleration]})
        await started.backend.start(run, "token")
        await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 2), 60, "pods Running")
        await eventually(lambda: started.backend.runs[run.run_id].started, 10, "the gang seen started")
        kube_cluster.kubectl("annotate", "node", victim.name, "rota.dev/kwok-ready=false")
        await eventually(lambda: (victim.name, "NotReady") in started.reporter.node_reports, 60,
                         "the node withdrawn from placement")
        kube_cluster.kubectl("annotate", "node", victim.name, "rota.dev/kwok-ready-", "--overwrite")
        await eventually(lambda: started.reporter.node_reports[-1] == (victim.name, None), 60,
                         "the node offered again")
        await asyncio.sleep(3)
        assert run.run_id not in started.reporter.ended_runs  # the blip changed nothing for it
        assert running_on(kube_cluster, namespace, run.run_id, 2)
        exit_pods(kube_cluster, namespace, run.run_id, 0)
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        assert started.reporter.ended_runs[run.run_id].code == 0
    finally:
        await started.close()
        kube_cluster.kubectl("annotate", "node", victim.name, "rota.dev/kwok-ready-", check=False)


async def test_a_cordon_drains_the_node_and_leaves_the_run_to_rotas_drain(
        kube_cluster: KubeCluster, namespace: str) -> None:
    victim = next(n for n in NODES if n.name == "a100-2")
    toleration = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    started = await start_backend(kube_cluster.kubeconfig, namespace, drain_deadline_s=120.0)
    try:
        run = run_record([(victim.name, [0]), ("a100-1", [0])], kubernetes={"tolerations": [toleration]})
        await started.backend.start(run, "token")
        await eventually(lambda: running_on(kube_cluster, namespace, run.run_id, 2), 60, "pods Running")
        kube_cluster.kubectl("cordon", victim.name)
        await eventually(lambda: (victim.name, 120.0, "cordoned") in started.reporter.drain_reports,
                         30, "the cordon reported as a drain")
        await asyncio.sleep(2)
        assert run.run_id not in started.reporter.ended_runs  # not lost: Rota's drain moves it
        # Its PodDisruptionBudget refuses an eviction of any of its pods.
        pod = pods_of(kube_cluster, namespace, run.run_id)[0]["metadata"]["name"]
        refused = kube_cluster.kubectl("drain", victim.name, "--pod-selector",
                                       f"{k.LABEL_RUN}={run.run_id}", "--timeout=3s",
                                       "--ignore-daemonsets", check=False)
        assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stderr
        assert any(p["metadata"]["name"] == pod for p in pods_of(kube_cluster, namespace, run.run_id))
        kube_cluster.kubectl("uncordon", victim.name)
        await eventually(lambda: started.reporter.drain_reports[-1] == (victim.name, None, "uncordoned"),
                         30, "the uncordon reported")
    finally:
        await started.close()
        kube_cluster.kubectl("uncordon", victim.name, check=False)


async def test_a_restarted_executor_adopts_its_runs_and_one_being_deleted(
        kube_cluster: KubeCluster, namespace: str) -> None:
    first = await start_backend(kube_cluster.kubeconfig, namespace, grace_s=6)
    live = run_record([("h100-0", [4])])
    stopping = run_record([("h100-1", [4])])
    deleted_meanwhile = run_record([("h100-2", [4])])
    try:
        for run in (live, stopping, deleted_meanwhile):
            await first.backend.start(run, "token")
        for run in (live, stopping, deleted_meanwhile):
            await eventually(lambda r=run: running_on(kube_cluster, namespace, r.run_id, 1), 60, "Running")
        await first.backend.stop(stopping)  # its pods linger for their 6 s grace
    finally:
        await first.close()
    # While no executor runs, someone deletes a Job by hand; its pods linger too.
    kube_cluster.kubectl("delete", "job", k.object_name(deleted_meanwhile.run_id), "-n", namespace,
                         "--cascade=foreground", "--wait=false")
    second = await start_backend(kube_cluster.kubeconfig, namespace, grace_s=6)
    try:
        await second.backend.adopt(live)
        await second.backend.adopt(replace(stopping, state="stopping"))
        await second.backend.adopt(deleted_meanwhile)
        await eventually(lambda: {stopping.run_id, deleted_meanwhile.run_id} <= second.reporter.ended_runs.keys(),
                         60, "both ends reported")
        assert second.reporter.pods_left_at_end[stopping.run_id] == 0
        assert second.reporter.pods_left_at_end[deleted_meanwhile.run_id] == 0
        assert live.run_id not in second.reporter.ended_runs
        exit_pods(kube_cluster, namespace, live.run_id, 0)
        await eventually(lambda: live.run_id in second.reporter.ended_runs, 60, "the live run ended")
        assert second.reporter.ended_runs[live.run_id].code == 0
        assert kube_cluster.get("jobs", "-n", namespace)["items"] == []  # every end deleted its Job
    finally:
        await second.close()
