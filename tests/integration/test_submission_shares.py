"""GPU shares at the front door, on a real submission service and PostgreSQL: a share on a
flavor that allows them is accepted and read back as its fraction; on one that does not, it
is refused naming the rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import rota.config as config_package
import yaml
from nats.aio.client import Client
from rota.config.loader import EXAMPLE_NAME
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints

from tests.builders import submit_job
from tests.integration.harness import ServiceProcess, api


@pytest.fixture(scope="module")
async def shares_submission(
    endpoints: Endpoints, nc: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServiceProcess]:
    """A submission service whose h100s are shareable (the example config otherwise)."""
    doc = yaml.safe_load((Path(config_package.__file__).parent / EXAMPLE_NAME).read_text())
    for flavor in doc["cluster"]["flavors"]:
        flavor["shareable"] = flavor["name"] == "h100"
    home = tmp_path_factory.mktemp("shares-submission")
    (home / "rota.yaml").write_text(yaml.safe_dump(doc))
    service = ServiceProcess("submission", endpoints, home / "logs",
                             {"ROTA_CONFIG": str(home / "rota.yaml")})
    async with service.serving(nc):
        yield service


async def test_a_share_is_accepted_where_allowed_and_read_as_a_fraction(
    nc: Client, shares_submission: ServiceProcess
) -> None:
    reply = await api(nc, s.api_submit("nlp"), submit_job(name="half", gpus_per_worker=1, gpu_share=0.5))
    assert reply.ok, reply.error
    job_id = reply.result["job_id"]
    got = await api(nc, s.API_JOB_GET, m.GetJob(job_id=job_id))
    assert got.ok and got.result["gpu_share"] == 0.5 and got.result["gpus"] == 1
    why = await api(nc, s.API_JOB_WHY, m.GetJob(job_id=job_id))
    assert why.ok and why.result["gpu_share"] == 0.5
    whole = await api(nc, s.api_submit("nlp"), submit_job(name="whole", gpus_per_worker=1))
    listed = await api(nc, s.API_JOBS_LIST, m.ListJobs(team="nlp", limit=10))
    shares = {row["job_id"]: row["gpu_share"] for row in listed.result}
    assert shares[job_id] == 0.5 and shares[whole.result["job_id"]] is None

    refused = await api(nc, s.api_submit("nlp"), submit_job(name="a-half", flavor="a100",
                                                            gpus_per_worker=1, gpu_share=0.5))
    assert refused.error is not None
    assert (refused.error.code, refused.error.field) == ("FLAVOR_NOT_SHAREABLE", "gpu_share")
    assert "shareable: true on a100" in refused.error.message


async def test_the_queue_summary_counts_a_share_as_its_fraction(
    nc: Client, shares_submission: ServiceProcess
) -> None:
    for name in ("quarter-a", "quarter-b"):
        reply = await api(nc, s.api_submit("nlp"), submit_job(
            name=name, queue="experiment", gpus_per_worker=1, gpu_share=0.25))
        assert reply.ok, reply.error
    listed = await api(nc, s.API_JOBS_LIST, m.ListJobs(team="nlp", limit=100))
    pending = [row for row in listed.result if row["state"] == "pending"
               and (row["queue"], row["flavor"]) == ("experiment", "h100")]
    expected = sum(row["gpu_share"] or row["gpus"] for row in pending)
    summary = await api(nc, s.API_QUEUES_SUMMARY, m.SummarizeQueues(team="nlp"))
    row = next(r for r in summary.result if (r["queue"], r["flavor"]) == ("experiment", "h100"))
    assert row["pending_gpus"] == expected
    assert any(r["gpu_share"] == 0.25 for r in pending)
