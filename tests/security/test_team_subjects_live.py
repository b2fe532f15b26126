"""The same attacks against real NATS JetStream and the real submission service, as a holder
of credentials issued for a dotted team name (`ml.nlp`) before such names were refused: its
JWT allowed `rota.api.*.ml.nlp` and `rota.cmd.submit.ml.nlp`."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.errors import NoStreamResponseError
from rota.contracts import messages as m
from rota.contracts import subjects as s

from tests.builders import submit_job
from tests.integration.harness import ServiceProcess, api


async def test_a_dotted_team_neither_cancels_nor_submits_as_the_team_its_last_token_names(
    nc: Client, submission: ServiceProcess
) -> None:
    submitted = await api(nc, s.api_submit("nlp"), submit_job(team="nlp", name="nlp-own"))
    assert submitted.ok, submitted.error
    job_id = submitted.result["job_id"]

    cancel = await api(nc, "rota.api.cancel.ml.nlp",
                       m.CancelJob(job_id=job_id, team="nlp", reason="not yours"))
    assert not cancel.ok and cancel.error is not None
    assert cancel.error.code == "UNKNOWN_SUBJECT" and cancel.error.field == "subject"
    assert "ml.nlp" in cancel.error.message
    job = await api(nc, s.team_query(s.API_JOB_GET, "nlp"), m.GetJob(job_id=job_id))
    assert job.ok and job.result["state"] != "cancelled"

    forged = await api(nc, "rota.api.submit.ml.nlp", submit_job(team="nlp", name="as-nlp"))
    assert not forged.ok and forged.error is not None and forged.error.field == "subject"


async def test_a_command_no_consumer_reads_is_refused_at_publish_instead_of_kept(
    nc: Client, submission: ServiceProcess
) -> None:
    body = submit_job(team="nlp").model_dump_json().encode()
    with pytest.raises((NoRespondersError, NoStreamResponseError)):
        await nc.jetstream().publish("rota.cmd.submit.ml.nlp", body, stream=s.STREAM_CMD,
                                     timeout=2)
