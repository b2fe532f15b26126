"""The benchmark harness of Rota beside the real Kueue, on a tiny workload, so that it cannot
rot: both schedulers run the same four jobs on a fresh KWOK cluster each, every job is
admitted, runs all its pods and completes, and the figures come from what each side did. And
Kueue's own webhooks are in the path: a Job created unsuspended in a LocalQueue is suspended by
Kueue, and one whose queue name is no valid object name is refused by it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.real_kube import bench
from tests.real_kube.cluster import KubeCluster, KubectlError, wait_until
from tests.real_kube.kueue import Kueue, job_webhook_answers, start_kueue

pytestmark = [pytest.mark.real_kube, pytest.mark.kueue, pytest.mark.timeout(1200)]

TRACE = """job_id,submit_s,duration_s,workers,gpus_per_worker,flavors,tier,team,resumable
a1,0,600,1,8,h100,training,team-a,true
b1,0,600,2,8,h100,experiment,team-b,true
b2,60,300,1,4,h100,training,team-b,false
a2,120,300,1,1,h100,production,team-a,true
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("kube-bench")
    trace = tmp / "tiny.csv"
    trace.write_text(TRACE)
    jobs = bench.load_trace(trace, scale=60)
    nodes = bench.bench_nodes(2)
    config = bench.bench_config(nodes, ["team-a", "team-b"], scale=60)
    return {s: bench.run_one(s, jobs, nodes, config, workdir=tmp / "runs", scale=60, timeout_s=300, say=print)
            for s in ("kueue", "rota")}


@pytest.mark.parametrize("scheduler", ["kueue", "rota"])
def test_every_job_is_admitted_runs_and_completes(results: dict[str, dict[str, Any]], scheduler: str) -> None:
    r = results[scheduler]
    assert (r["jobs"], r["admitted"], r["completed"]) == (4, 4, 4), r
    for job_id, d in r["jobs_detail"].items():
        # In order: submitted, admitted (a first pod), all pods Running, done.
        assert d["submitted"] <= d["admitted"] <= d["all_running"] <= d["completed"], (job_id, d)
        # Each ran at least its scaled runtime (b2: 300 s / 60).
        runtime = {"a1": 10, "b1": 10, "b2": 5, "a2": 5}[job_id]
        assert d["completed"] - d["all_running"] >= runtime - 1.5, (job_id, d)
    assert 0 < r["utilization"] <= 1
    assert r["time_to_admit_all_s"] is not None and r["makespan_s"] >= r["time_to_admit_all_s"]
    assert set(r["queue_wait_by_tier_s"]) == {"production", "training", "experiment"}


def test_each_side_is_counted_by_its_own_user_agent(results: dict[str, dict[str, Any]]) -> None:
    kueue, rota = results["kueue"]["api_requests_per_job"], results["rota"]["api_requests_per_job"]
    assert kueue.get("kueue", 0) > 0 and "kueue" not in rota
    assert rota.get("OpenAPI-Generator", 0) > 0  # Rota's executor (kubernetes-asyncio)
    assert results["kueue"]["cpu_s_per_job"].get("kueue", 0) > 0
    assert results["rota"]["cpu_s_per_job"].get("python", 0) > 0


@pytest.fixture(scope="module")
def kueue(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    from rota.config.loader import parse_config
    from rota.k8s.kueue import kueue_objects

    from tests.real_kube.kueue import uninstall

    running = start_kueue(kube_cluster, tmp_path_factory.mktemp("kueue"))
    kube_cluster.namespace("kueue-hooks")
    config = parse_config({"cluster": {"flavors": [{"name": "h100"}],
                                       "nodes": [{"name": "h100-0", "flavor": "h100", "gpus": 8}]},
                           "teams": {"nlp": {"quota": {"h100": 8}}}})
    kube_cluster.apply(kueue_objects(config, "kueue-hooks"))
    # Kueue's webhook reads the namespace and its queues from its own cache, which sees a new
    # namespace a moment after the API server: until then a Job there is stored as sent.
    wait_until(lambda: job_webhook_answers(kube_cluster, "kueue-hooks"), 60,
               "Kueue's Job webhook answers for kueue-hooks", every=0.5)
    try:
        yield running
    finally:
        uninstall(kube_cluster)
        running.stop()


def test_kueue_webhooks_suspend_and_validate_jobs(kube_cluster: KubeCluster, kueue: Kueue, tmp_path: Path) -> None:
    from rota.contracts.common import Tier
    from rota.k8s.kueue import kueue_job

    job = kueue_job(name="hooked", namespace="kueue-hooks", team="nlp", tier=Tier.training, workers=1,
                    gpus_per_worker=1)
    assert "suspend" not in job["spec"]
    kube_cluster.apply([job])
    created = kube_cluster.get("job", "hooked", "-n", "kueue-hooks")
    assert created["spec"]["suspend"] is True  # the mutating webhook, before it was stored
    # Then Kueue admits it (it fits nlp's quota) and lets it run.
    wait_until(lambda: kube_cluster.get("job", "hooked", "-n", "kueue-hooks")["spec"]["suspend"] is False,
               60, "Kueue admits the Job")
    workloads = kube_cluster.get("workloads.v1beta2.kueue.x-k8s.io", "-n", "kueue-hooks")["items"]
    assert [(w["spec"]["priorityClassRef"]["name"], w["spec"]["priority"]) for w in workloads] == [
        ("rota-training", 500)]
    # A queue name that is a valid label value but no valid object name: Kueue's validating
    # webhook refuses the Job, naming the label.
    bad = kueue_job(name="bad-queue", namespace="kueue-hooks", team="nlp", tier=Tier.training, workers=1,
                    gpus_per_worker=1)
    bad["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "Not_A_Queue"
    with pytest.raises(KubectlError, match="queue-name"):
        kube_cluster.apply([bad])
