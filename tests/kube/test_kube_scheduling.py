"""What decides where and whether a pod is scheduled, beyond its node: taints on GPU pools,
and the rule that a gated pod's node selection may only be narrowed (KEP-3838), which is how
the backend pins each worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.kube.harness import make_backend, record, until


async def test_a_template_with_an_empty_required_term_is_still_pinned_and_starts(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    # An empty term matches no node, and the API lets nothing be added to it on a gated pod.
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2, pod_template={"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}})
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    assert run.run_id not in reporter.ended_runs


async def test_a_pin_the_api_server_refuses_fails_the_run_at_once_with_its_words(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    fake.fail_next("patch", "pods", 422)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert not exit.lost, "a pin that can never be made must not requeue the run forever"
    assert "pod updates may not change fields" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0
