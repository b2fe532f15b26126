"""The `kubernetes` backend's pure rules that the fake API server cannot easily corner: which
FailedCreate Event counts, which refusal is for good, and which errors are worth a retry."""

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy
from rota_executor.kube_calls import is_transient, retry_after_s
from rota_executor.kube_pods import end_of_deleted_job, failed_create


def event(message: str, *, name: str = "rota-r1", uid: str = "uid-1", rv: int = 1,
          at: str = "2026-01-01T00:00:00Z", reason: str = "FailedCreate") -> dict[str, Any]:
    return {"metadata": {"name": f"{name}.{rv}", "resourceVersion": str(rv)}, "reason": reason,
            "message": message, "lastTimestamp": at,
            "involvedObject": {"kind": "Job", "name": name, "uid": uid}}


def test_the_latest_refusal_of_this_very_job_counts() -> None:
    events = [
        event("Error creating: old", at="2026-01-01T00:00:00Z", rv=1),
        event("Error creating: newest", at="2026-01-01T00:00:05Z", rv=2),
        event("Error creating: a namesake's", uid="uid-0", at="2026-01-01T00:00:09Z", rv=3),
        event("Error creating: another job's", name="rota-r2", at="2026-01-01T00:00:09Z", rv=4),
        event("Scaled", reason="SuccessfulCreate", at="2026-01-01T00:00:09Z", rv=5),
    ]
    refusal = failed_create(events, "rota-r1", "uid-1")
    assert refusal is not None and refusal.message == "Error creating: newest"
    assert failed_create(events, "rota-r3", None) is None


def test_a_denial_is_for_good_and_a_webhook_that_cannot_be_called_is_not() -> None:
    for_good = [
        'Error creating: pods "j-0-abcde" is forbidden: violates PodSecurity "restricted:latest": ...',
        'Error creating: pods "j-0-abcde" is forbidden: exceeded quota: gpus, requested: ...',
        'Error creating: admission webhook "deny.example.com" denied the request: no GPUs on Fridays',
    ]
    passing = [
        'Error creating: Internal error occurred: failed calling webhook "p.example.com": '
        "context deadline exceeded",
        "Error creating: Timeout: request did not complete within requested timeout",
    ]
    for message in for_good + passing:
        refusal = failed_create([event(message)], "rota-r1", "uid-1")
        assert refusal is not None and refusal.for_good is (message in for_good), message


def api_error(status: int, retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason="")
    exc.headers = CIMultiDictProxy(CIMultiDict({"retry-after": retry_after} if retry_after else {}))
    return exc


def test_overload_server_errors_and_broken_connections_are_retried_and_nothing_else() -> None:
    for status in (429, 500, 502, 503, 504):
        assert is_transient(api_error(status)), status
    for status in (400, 401, 403, 404, 409, 410, 422):
        assert not is_transient(api_error(status)), status
    assert is_transient(aiohttp.ClientConnectionError("connection refused"))
    assert is_transient(aiohttp.ServerDisconnectedError())
    assert is_transient(TimeoutError())
    assert not is_transient(RuntimeError("Job rota-x exists and belongs to run 'y'"))


def test_retry_after_is_read_in_seconds_whatever_the_case_of_the_header() -> None:
    assert retry_after_s(api_error(429, "3")) == 3.0
    assert retry_after_s(api_error(503)) is None
    assert retry_after_s(api_error(429, "Wed, 21 Oct 2015 07:28:00 GMT")) is None
    assert retry_after_s(RuntimeError()) is None


def test_a_job_found_being_deleted_ends_as_its_conditions_or_a_recorded_stop_say() -> None:
    def job(*conditions: tuple[str, str]) -> dict[str, Any]:
        return {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"conditions": [
            {"type": kind, "status": "True", "reason": reason, "message": "m"} for kind, reason in conditions]}}

    assert end_of_deleted_job(job(("Complete", "")), stopping=True).detail == "stopped"
    assert end_of_deleted_job(job(("Complete", "")), stopping=False).code == 0
    failed = end_of_deleted_job(job(("Failed", "BackoffLimitExceeded")), stopping=False)
    assert (failed.code, failed.lost) == (None, False) and "BackoffLimitExceeded" in failed.detail
    unknown = end_of_deleted_job(job(), stopping=False)
    assert unknown.lost and "being deleted" in unknown.detail
