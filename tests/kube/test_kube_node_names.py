"""A node's name and its `kubernetes.io/hostname` label are two things: on many clouds the
node is named by its instance or its FQDN while the kubelet's hostname is short, or the other
way round. Rota's grant names nodes by name, so pods are pinned by name (`matchFields` on
`metadata.name`), never by the hostname label."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rota.contracts.job import WorkerPlacement
from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.kube.harness import make_backend, record, until


async def test_a_gang_on_nodes_whose_hostname_label_differs_from_their_name_starts_on_them(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    fake.add_node("ip-10-0-1-7.ec2.internal", 8, hostname="ip-10-0-1-7")
    fake.add_node("gpu-node-b", 8, hostname="gpu-node-b.gpu.example.internal")
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = replace(record(workers=2), placement=[
        WorkerPlacement(worker=0, node="ip-10-0-1-7.ec2.internal", gpus=list(range(8))),
        WorkerPlacement(worker=1, node="gpu-node-b", gpus=list(range(8)))])
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    by_index = {p["metadata"]["annotations"][k.INDEX_ANNOTATION]: p["spec"]["nodeName"]
                for p in fake.pods_of(k.object_name(run.run_id))}
    assert by_index == {"0": "ip-10-0-1-7.ec2.internal", "1": "gpu-node-b"}
    assert run.run_id not in reporter.ended_runs
