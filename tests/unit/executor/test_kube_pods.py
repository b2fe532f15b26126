"""The kubernetes backend's reading of a gang from its pods, as a scenario table."""

from __future__ import annotations

from typing import Any

import pytest
from rota.contracts.job import WorkerPlacement
from rota.k8s.manifests import INDEX_ANNOTATION, PLACEMENT_GATE
from rota_executor.kube_pods import gang_state, pin_patch


def pod(index: int, phase: str = "Running", node: str | None = "n0", gated: bool = False,
        terminated: dict[str, Any] | None = None, waiting: str | None = None,
        unschedulable: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if terminated is not None:
        status["containerStatuses"] = [{"state": {"terminated": terminated}}]
    if waiting is not None:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": waiting}}}]
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    if gated:
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    return {"metadata": {"name": f"p{index}", "annotations": {INDEX_ANNOTATION: str(index)}},
            "spec": spec, "status": status}


# name, pods, lost nodes, (all_running, exit code or None, lost?, text in detail/waiting)
CASES: list[tuple[str, list[dict[str, Any]], set[str], tuple[bool, int | None, bool, str]]] = [
    ("all running", [pod(0), pod(1)], set(), (True, None, False, "")),
    ("one still pending", [pod(0), pod(1, "Pending", node=None, unschedulable=True)], set(),
     (False, None, False, "worker 1: unschedulable")),
    ("one pod not created yet", [pod(0)], set(), (False, None, False, "worker 1: no pod yet")),
    ("an image pull error", [pod(0), pod(1, "Pending", waiting="ImagePullBackOff")], set(),
     (False, None, False, "worker 1: ImagePullBackOff")),
    ("all succeeded", [pod(0, "Succeeded"), pod(1, "Succeeded")], set(), (True, 0, False, "exited 0")),
    ("one OOMKilled", [pod(0), pod(1, "Failed", terminated={"exitCode": 137, "reason": "OOMKilled"})],
     set(), (False, 137, False, "OOMKilled (exit code 137)")),
    ("evicted has no exit code", [pod(0), {**pod(1, "Failed"), "status": {"phase": "Failed", "reason": "Evicted"}}],
     set(), (False, None, False, "worker 1 failed: Evicted")),
    ("a pod on a lost node", [pod(0), pod(1, node="n1")], {"n1"}, (False, None, False, "its node n1 is lost")),
]


@pytest.mark.parametrize(("name", "pods", "lost", "want"), CASES, ids=[c[0] for c in CASES])
def test_gang_state(name: str, pods: list[dict[str, Any]], lost: set[str],
                    want: tuple[bool, int | None, bool, str]) -> None:
    state = gang_state(pods, 2, lost)
    all_running, code, _, text = want
    assert state.all_running is all_running
    if state.exit is None:
        assert code is None
        assert text in "; ".join(state.waiting)
    else:
        assert state.exit.code == code
        assert text in state.exit.detail


def test_a_gated_pod_is_pinned_by_narrowing_its_affinity_and_released() -> None:
    gated = pod(1, "Pending", node=None, gated=True)
    gated["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                              for node in ("a", "b")]}}}
    placement = [WorkerPlacement(worker=0, node="a", gpus=[0]), WorkerPlacement(worker=1, node="b", gpus=[0])]
    patch = pin_patch(gated, placement)
    assert patch is not None
    terms = patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    # Each of the template's terms kept, only narrowed: by the node's name, not its hostname label.
    assert [t["matchFields"] for t in terms] == [
        [{"key": "metadata.name", "operator": "In", "values": [node]},
         {"key": "metadata.name", "operator": "In", "values": ["b"]}] for node in ("a", "b")]
    assert patch["spec"]["schedulingGates"] == []
    assert pin_patch(pod(1), placement) is None  # not gated: nothing to pin
