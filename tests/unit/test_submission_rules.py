"""The front door's rules as a scenario table: authorisation, config checks, state moves."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from rota.config import load_config
from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts.requests import JobStateName
from rota_submission.domain import (
    SPEC_HEADROOM_BYTES,
    apply_event,
    check_size,
    check_submission,
    spec_hash,
)

from tests.builders import JOB_ID, VICTIM, event, submit_job

PREEMPTOR = "0190b5c2-0000-7000-8000-0000000000f0"
V1 = "0190b5c2-0000-7000-8000-0000000000f1"
V2 = "0190b5c2-0000-7000-8000-0000000000f2"
OTHER_RUN = "0190b5c2-0000-7000-8000-0000000000f3"

CONFIG = load_config()

# name, spec overrides, the subject's team, expected (code, field) or None
SCENARIOS: list[tuple[str, dict[str, Any], str | None, tuple[str, str] | None]] = [
    ("a plain job fits", {}, "nlp", None),
    ("the api subject without team trusts the spec", {}, None, None),
    ("another team's subject", {}, "vision", ("UNAUTHORISED", "team")),
    ("unknown team", {"team": "ghosts"}, "ghosts", ("UNKNOWN_TEAM", "team")),
    ("user outside the team", {"user": "carol"}, "nlp", ("UNKNOWN_USER", "user")),
    ("unknown flavor", {"flavor": "tpu"}, "nlp", ("UNKNOWN_FLAVOR", "flavor")),
    ("unknown flavor among the accepted ones", {"flavors": ["h100", "tpu"]}, "nlp", ("UNKNOWN_FLAVOR", "flavors")),
    ("known flavors, then any", {"flavors": ["h100", "a100", "any"]}, "nlp", None),
    ("worker larger than any node", {"gpus_per_worker": 16}, "nlp",
     ("EXCEEDS_CLUSTER", "gpus_per_worker")),
    ("gang larger than the flavor", {"workers": 5}, "nlp", ("EXCEEDS_CLUSTER", "workers")),
    ("an elastic gang whose max exceeds the flavor but whose min fits", {"workers": {"min": 2, "max": 8}},
     "nlp", None),
    ("an elastic gang whose min exceeds the flavor", {"workers": {"min": 5, "max": 8}}, "nlp",
     ("EXCEEDS_CLUSTER", "workers")),
    ("whole flavor as one gang fits", {"workers": 4, "team": "vision", "user": "carol"},
     "vision", None),
    ("rack required but racks too small", {"workers": 3, "rack": "required"}, "nlp",
     ("EXCEEDS_CLUSTER", "rack")),
    ("rack required and a rack fits", {"workers": 2, "rack": "required"}, "nlp", None),
    ("topology: a level the cluster does not declare", {"workers": 2, "topology": {"required": "block"}},
     "nlp", ("UNKNOWN_TOPOLOGY_LEVEL", "topology.required")),
    ("topology: an unknown preferred level", {"workers": 2, "topology": {"preferred": "nvlink"}},
     "nlp", ("UNKNOWN_TOPOLOGY_LEVEL", "topology.preferred")),
    ("topology: required rack but racks too small", {"workers": 3, "topology": {"required": "rack"}},
     "nlp", ("EXCEEDS_CLUSTER", "topology.required")),
    ("topology: required rack and a rack fits", {"workers": 2, "topology": {"required": "rack"}}, "nlp", None),
    ("topology: required node for a gang of two whole nodes", {"workers": 2, "topology": {"required": "node"}},
     "nlp", ("EXCEEDS_CLUSTER", "topology.required")),
    ("beyond quota plus borrowing limit", {"workers": 4, "flavor": "h100"}, "nlp", None),
    ("borrowing limit caps research on a100",
     {"team": "research", "user": "dave", "flavor": "a100", "workers": 2}, "research",
     ("EXCEEDS_QUOTA_LIMIT", "workers")),
    ("research may borrow up to its limit",
     {"team": "research", "user": "dave", "flavor": "a100", "workers": 1}, "research", None),
    ("a kubernetes template the API accepts",
     {"kubernetes": {"image": "train:1", "resources": {"requests": {"memory": "64Gi"}},
                     "tolerations": [{"key": "gpu", "operator": "Exists"}]}}, "nlp", None),
    ("a quantity Kubernetes cannot parse as one",
     {"kubernetes": {"image": "train:1", "resources": {"limits": {"cpu": ["2"]}}}}, "nlp",
     ("INVALID_TEMPLATE",
      "kubernetes.resources (spec.template.spec.containers.0.resources.limits.cpu)")),
    ("a misspelt pod field",
     {"kubernetes": {"image": "train:1", "pod_template": {"spec": {"nodeSelectr": {}}}}}, "nlp",
     ("INVALID_TEMPLATE", "kubernetes.pod_template (spec.template.spec)")),
    ("a toleration with a bad operator type",
     {"kubernetes": {"image": "train:1", "tolerations": [{"key": "gpu", "operator": 3}]}}, "nlp",
     # The Job's path: Rota's own GPU toleration comes first.
     ("INVALID_TEMPLATE", "kubernetes.tolerations (spec.template.spec.tolerations.1.operator)")),
    ("a template that mounts the node's root",
     {"kubernetes": {"image": "train:1", "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                     "volume_mounts": [{"name": "root", "mountPath": "/host"}]}}, "nlp",
     ("FORBIDDEN_TEMPLATE", "kubernetes.volumes.0.hostPath")),
    ("a template on the node's network",
     {"kubernetes": {"image": "train:1", "pod_template": {"spec": {"hostNetwork": True}}}}, "nlp",
     ("FORBIDDEN_TEMPLATE", "kubernetes.pod_template.spec.hostNetwork")),
    ("a template that reads Rota's auth Secret",
     {"kubernetes": {"image": "train:1", "volumes": [{"name": "a", "secret": {"secretName": "rota-auth"}}]}},
     "nlp", ("FORBIDDEN_TEMPLATE", "kubernetes.volumes.0.secret.secretName")),
    ("a template that mounts its team's own claim",
     {"kubernetes": {"image": "train:1", "volumes": [
         {"name": "c", "persistentVolumeClaim": {"claimName": "nlp-checkpoints"}}]}}, "nlp", None),
]


@pytest.mark.parametrize(("name", "overrides", "subject_team", "expected"), SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_submission_rules(
    name: str, overrides: dict[str, Any], subject_team: str | None,
    expected: tuple[str, str] | None,
) -> None:
    rejection = check_submission(submit_job(**overrides), subject_team, CONFIG)
    if expected is None:
        assert rejection is None, rejection
    else:
        assert rejection is not None
        assert (rejection.code, rejection.field) == expected
        assert rejection.message


def test_spec_hash_is_stable_and_sensitive() -> None:
    a = submit_job(submission_id="same")
    assert spec_hash(a) == spec_hash(submit_job(submission_id="same"))
    assert spec_hash(a) != spec_hash(submit_job(submission_id="same", workers=2))


# state before, event, expected state after
TRANSITIONS: list[tuple[JobStateName, BaseModel, JobStateName]] = [
    ("pending", event(m.AllocationGranted), "admitted"),
    ("admitted", event(m.RunStarted), "running"),
    ("running", event(m.PreemptionNoticed), "preempting"),
    ("preempting", event(m.RunStopped, reason="preempted", checkpoint_uri="s3://c"), "pending"),
    ("running", event(m.RunStopped, reason="lost", checkpoint_uri="s3://c"), "pending"),
    ("running", event(m.RunStopped, reason="resized", checkpoint_uri="s3://c"), "pending"),
    ("running", event(m.RunStopped, reason="drained", checkpoint_uri="s3://c"), "pending"),
    ("running", event(m.RunStopped, reason="cancelled"), "cancelled"),
    ("running", event(m.RunStopped, reason="deadline"), "cancelled"),
    ("running", event(m.RunFinished), "finished"),
    ("running", event(m.RunFailed), "failed"),
    ("pending", event(m.JobCancelled), "cancelled"),
    ("running", event(m.JobCancelled), "cancelled"),
    ("admitted", event(m.AllocationRejected, message="stale"), "pending"),
    ("pending", event(m.JobPending), "pending"),
    ("pending", event(m.AllocationProposed), "pending"),
    ("finished", event(m.RunStarted, run_id=OTHER_RUN), "finished"),
    ("cancelled", event(m.AllocationGranted), "cancelled"),
    ("failed", event(m.RunFinished), "failed"),
]


@pytest.mark.parametrize(("before", "message", "after"), TRANSITIONS)
def test_state_moves(before: JobStateName, message: BaseModel, after: JobStateName) -> None:
    assert apply_event(before, message)[0] == after


def test_a_preempted_job_carries_its_checkpoint_back_to_the_queue() -> None:
    _, changes = apply_event("preempting", event(m.RunStopped, reason="preempted",
                                                 checkpoint_uri="s3://ckpt/7"))
    assert changes["resume_from"] == "s3://ckpt/7"


def test_a_failed_runs_error_is_the_jobs_detail_which_rota_why_shows() -> None:
    from rota_submission.explain import why

    error = "the executor restarted with the sim backend; this local run cannot continue"
    state, changes = apply_event("running", event(m.RunFailed, error=error))
    assert (state, changes) == ("failed", {"ended": True, "detail": error})
    job = {"job_id": "j", "name": "n", "state": state, "queue": "training", "team": "nlp",
           "ended_at": "2026-12-07T13:20:09+00:00", **changes}
    assert why(job)["summary"] == f"failed at 2026-12-07 13:20:09 UTC: {error}"


def test_preemption_events_belong_to_the_victims_too() -> None:
    from rota_submission.domain import related_jobs

    victims = [{**VICTIM, "job_id": v} for v in (V1, V2)]
    plan = event(m.PreemptionRequested, preemptor_job_id=PREEMPTOR, victims=victims)
    assert related_jobs(plan, PREEMPTOR) == [PREEMPTOR, V1, V2]
    assert related_jobs(event(m.RunStarted), PREEMPTOR) == [PREEMPTOR]
    assert related_jobs(event(m.UsageRecorded), None) == []


def test_an_aborted_preemption_puts_its_victims_back_to_running() -> None:
    victims = [{"job_id": V1, "run_id": OTHER_RUN, "outcome": "aborted"}]
    aborted = event(m.PreemptionCompleted, preemptor_job_id=PREEMPTOR, aborted=True,
                    victims=victims)
    assert apply_event("preempting", aborted, V1)[0] == "running"
    assert apply_event("pending", aborted, PREEMPTOR)[0] == "pending"
    assert apply_event("preempting", aborted, PREEMPTOR)[0] == "preempting"  # not a victim
    done = event(m.PreemptionCompleted, preemptor_job_id=PREEMPTOR, victims=victims)
    assert apply_event("preempting", done, V1)[0] == "preempting"


def test_why_and_trace_words() -> None:
    from rota_submission.explain import describe, why

    job = {"job_id": "j", "name": "n", "state": "pending", "queue": "training", "team": "nlp",
           "wait": {"reasons": [{"code": "QUOTA_EXCEEDED", "message": "16 of 16 used"}],
                    "eta": "2026-01-01T00:00:00Z", "position": 3, "factors": {"total": 1.0}}}
    answer = why(job)
    assert answer["reasons"][0]["code"] == "QUOTA_EXCEEDED" and answer["position"] == 3
    assert why({**job, "wait": None})["reasons"][0]["code"] == "NOT_YET_SCHEDULED"
    assert "running since" in why({**job, "state": "running", "started_at": "t", "attempts": 2})["summary"]
    line = describe("RunStopped", {"reason": "preempted", "forced": True, "checkpoint_uri": "s3://c",
                                   "lost_gpu_seconds": 7200}, "j")
    assert line == "run stopped (preempted, forced), checkpoint s3://c, lost 2.00 GPU-h"
    victim = describe("PreemptionRequested", {"preemptor_job_id": "p" * 36, "preemptor_queue":
                                              "production", "reason": "reclaim", "victims": []}, "j")
    assert victim.startswith("chosen as a victim for production job")
    half = {"job_id": "j", "job_name": "nb", "queue": "experiment", "gpus": 0, "gpu_share": 0.5}
    plan = {"preemptor_job_id": "p" * 36, "preemptor_queue": "production", "reason": "rota:lower_tier",
            "message": "m", "victims": [half], "expected_lost_gpu_seconds": 0.0}
    assert describe("PreemptionRequested", plan, "j").startswith(
        "chosen as a victim for production job pppppppppppp (stops its 0.5 of one GPU)")
    assert "victims nb (experiment, 0.5 of one GPU)" in describe("PreemptionRequested", plan, "p" * 36)


def test_events_outside_state_events_never_change_a_job() -> None:
    from rota_submission.domain import STATE_EVENTS

    for kind in (m.JobSubmitted, m.AllocationProposed, m.RunCheckpointed, m.PreemptionRequested,
                 m.UsageRecorded, m.JobRejected):
        assert kind not in STATE_EVENTS
        for state in ("pending", "admitted", "running", "preempting"):
            assert apply_event(state, event(kind), JOB_ID) == (state, {})


ID = "0190b5c2-0000-7000-8000-000000000000"


def _spec_of_size(total: int) -> m.SubmitJob:
    """A SubmitJob whose envelope is exactly `total` bytes, padded with command arguments."""
    def sized(pad: int) -> bytes:
        args = ["a" * 4000 for _ in range(pad // 4000)] + ["b" * (pad % 4000)]
        return envelope(submit_job(local={"command": args}), source="cli", id=ID).to_bytes()

    pad = total - len(sized(0))
    raw = sized(pad)
    pad -= len(raw) - total  # the quotes and commas of the padding count too
    raw = sized(pad)
    assert len(raw) == total
    return parse(raw, m.SubmitJob, max_bytes=total).data


def test_a_command_at_the_size_limit_is_refused_for_what_it_would_produce() -> None:
    limit = 64 * 1024
    spec = _spec_of_size(limit)  # fits as a command: parse accepted it
    rejection = check_size(spec, CONFIG, limit)
    assert rejection is not None and rejection.code == "PAYLOAD_TOO_LARGE"
    assert "JobSubmitted" in rejection.message and "StartRun" in rejection.message


def test_a_command_within_the_headroom_is_accepted() -> None:
    assert check_size(submit_job(), CONFIG, 64 * 1024) is None
    spec = _spec_of_size(64 * 1024 - SPEC_HEADROOM_BYTES - 1024)
    assert check_size(spec, CONFIG, 64 * 1024) is None


def test_the_derived_event_fits_whenever_the_size_check_passes() -> None:
    spec = _spec_of_size(64 * 1024 - SPEC_HEADROOM_BYTES - 1024)
    event = m.JobSubmitted(job_id=ID, spec=spec, submitted_at="2026-01-01T00:00:00Z")
    assert len(envelope(event, source="submission", job_id=ID).to_bytes()) < 64 * 1024


def test_a_grant_records_the_flavor_the_job_runs_on() -> None:
    state, changes = apply_event("pending", event(m.AllocationGranted, flavor="a100"))
    assert (state, changes["flavor"]) == ("admitted", "a100")


def _shareable(*flavors: str) -> Any:
    """The example configuration with `shareable: true` on `flavors`."""
    cluster = CONFIG.cluster.model_copy(update={"flavors": [
        f.model_copy(update={"shareable": f.name in flavors}) for f in CONFIG.cluster.flavors]})
    return CONFIG.model_copy(update={"cluster": cluster})


# name, spec overrides, shareable flavors, expected (code, field) or None
SHARE_SCENARIOS: list[tuple[str, dict[str, Any], tuple[str, ...], tuple[str, str] | None]] = [
    ("half a GPU on a shareable flavor", {"gpu_share": 0.5}, ("h100",), None),
    ("a share on a flavor that does not allow shares", {"gpu_share": 0.25}, ("a100",),
     ("FLAVOR_NOT_SHAREABLE", "gpu_share")),
    ("a share whose fallback flavor does not allow shares",
     {"gpu_share": 0.75, "flavors": ["h100", "a100"]}, ("h100",), ("FLAVOR_NOT_SHAREABLE", "gpu_share")),
    ("a share on shareable flavors, then any", {"gpu_share": 0.5, "flavors": ["h100", "any"]},
     ("h100",), None),
    ("whole GPUs on a flavor that allows shares", {}, ("h100",), None),
]


@pytest.mark.parametrize(("name", "overrides", "shareable", "expected"), SHARE_SCENARIOS,
                         ids=[s[0] for s in SHARE_SCENARIOS])
def test_share_rules(name: str, overrides: dict[str, Any], shareable: tuple[str, ...],
                     expected: tuple[str, str] | None) -> None:
    spec = submit_job(**{"gpus_per_worker": 1, **overrides})
    rejection = check_submission(spec, "nlp", _shareable(*shareable))
    if expected is None:
        assert rejection is None, rejection
    else:
        assert rejection is not None
        assert (rejection.code, rejection.field) == expected
        assert "shareable: true" in rejection.message


@pytest.mark.parametrize(("overrides", "words"), [
    ({"gpu_share": 0.5, "workers": 2, "gpus_per_worker": 1}, "gpu_share: needs workers 1 and gpus_per_worker 1"),
    ({"gpu_share": 0.5, "gpus_per_worker": 2}, "gpu_share: needs workers 1 and gpus_per_worker 1"),
    ({"gpu_share": 0.3, "gpus_per_worker": 1}, "gpu_share"),
    ({"gpu_share": 1.0, "gpus_per_worker": 1}, "gpu_share"),
])
def test_a_share_of_more_than_one_gpu_is_refused_naming_the_field(
    overrides: dict[str, Any], words: str
) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=words):
        submit_job(**overrides)


def test_a_spec_without_a_share_encodes_and_hashes_as_before() -> None:
    spec = submit_job(submission_id="same", gpus_per_worker=1)
    assert "gpu_share" not in spec.model_dump_json()
    shared = submit_job(submission_id="same", gpus_per_worker=1, gpu_share=0.5)
    assert '"gpu_share":0.5' in shared.model_dump_json() and shared.share == 2
    assert spec_hash(spec) != spec_hash(shared)
