"""The scheduler's view hands the policy each job's topology and each node's levels."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from rota.config import load_config
from rota.config.loader import parse_config
from rota.contracts import messages as m
from rota.contracts.job import RackAffinity
from rota_policy import TopologyNeed
from rota_scheduler.snapshot import policy_snapshot
from rota_scheduler.view import ClusterView

from tests.builders import message, spec_doc, submit_job

AT = 1_800_000_000.0


def _config(gangs: dict[str, str] | None) -> dict[str, Any]:
    topology: dict[str, Any] = {"levels": ["block", "rack"]}
    if gangs is not None:
        topology["gangs"] = gangs
    return {
        "cluster": {
            "flavors": [{"name": "h100"}],
            "node_pools": [{"name": "n", "flavor": "h100", "count": 8, "gpus_per_node": 8, "racks": 4,
                            "racks_per": {"block": 2}}],
            "topology": topology,
        },
        "teams": {"nlp": {"quota": {"h100": 64}}},
    }


def _pending(view: ClusterView) -> dict[str, TopologyNeed | None]:
    return {j.job_id: j.topology for q in policy_snapshot(view, AT).pending for j in q.jobs}


def _submit(view: ClusterView, index: int, **spec: Any) -> str:
    job_id = f"00000000-0000-7000-8000-{index:012d}"
    view.apply(message(m.JobSubmitted, job_id=job_id, spec=spec_doc(**spec),
                       submitted_at="2027-01-01T00:00:00Z"), AT)
    return job_id


def test_the_job_topology_and_the_node_levels_reach_the_policy() -> None:
    view = ClusterView(parse_config(_config(None)))
    asked = _submit(view, 1, workers=2, topology={"required": "block", "preferred": "rack"})
    plain = _submit(view, 2, workers=2)
    assert _pending(view) == {asked: TopologyNeed("block", "rack"), plain: None}
    levels = {n.name: n.levels for n in policy_snapshot(view, AT).nodes}
    assert levels["n-0"] == (("block", "n-block-0"), ("rack", "n-rack-0"))
    assert levels["n-7"] == (("block", "n-block-1"), ("rack", "n-rack-3"))


def test_the_cluster_default_applies_to_gangs_that_ask_for_nothing() -> None:
    view = ClusterView(parse_config(_config({"required": "rack"})))
    gang = _submit(view, 1, workers=2)
    single = _submit(view, 2, workers=1)
    racked = _submit(view, 3, workers=2, rack="required")
    own = _submit(view, 4, workers=2, topology={"preferred": "block"})
    assert _pending(view) == {gang: TopologyNeed("rack", None), single: None, racked: None,
                              own: TopologyNeed(None, "block")}


def test_a_cluster_without_levels_hands_over_none() -> None:
    view = ClusterView(load_config())
    job = _submit(view, 1, workers=2, rack="required")
    (pending,) = [j for q in policy_snapshot(view, AT).pending for j in q.jobs]
    assert (pending.job_id, pending.topology, pending.rack) == (job, None, RackAffinity.required)
    assert all(n.levels == () for n in policy_snapshot(view, AT).nodes)


def test_a_spec_gives_topology_or_rack_not_both() -> None:
    with pytest.raises(ValidationError, match="topology: replaces rack"):
        submit_job(rack="required", topology={"required": "rack"})
    with pytest.raises(ValidationError, match="give required, preferred or both"):
        submit_job(topology={})
