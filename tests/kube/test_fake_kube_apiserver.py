"""The FAKE API server's own behaviour, where it models a rule of the real control plane
that the backend's tests rely on. Each is what a real kube-apiserver does (the scenarios are
meant to run against one too); raw HTTP, so nothing of Rota's is in between."""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
import pytest

from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.kube.harness import until

NS = "rota"


async def send(fake: FakeKubeApiServer, method: str, path: str, body: Any = None, *,
               raw: bytes | None = None, content_type: str = "application/json") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {fake.token}", "Content-Type": content_type}
    async with aiohttp.ClientSession() as session, session.request(
            method, fake.url + path, json=body if raw is None else None, data=raw,
            headers=headers) as response:
        return response.status, await response.json(content_type=None)


def gated_pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "worker", "image": "train:1"}],
                     "schedulingGates": [{"name": "rota.dev/placement"}], **spec}}


def name_term(*nodes: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(nodes)}]}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("requirement", "words"), [
    ({"key": "metadata.name", "operator": "In", "values": ["a", "b"]}, "must be only one value"),
    ({"key": "metadata.uid", "operator": "In", "values": ["a"]}, "not a valid field selector key"),
    ({"key": "metadata.name", "operator": "Exists"}, "not a valid selector operator"),
])
async def test_a_node_field_requirement_takes_one_node_name_with_in_or_not_in(
        fake: FakeKubeApiServer, requirement: dict[str, Any], words: str) -> None:
    pod = gated_pod(affinity=required({"matchFields": [requirement]}))
    status, body = await send(fake, "POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert (status, body["reason"]) == (422, "Invalid") and words in body["message"]


async def test_the_scheduler_matches_node_fields_on_the_name_not_the_hostname_label(
        fake: FakeKubeApiServer) -> None:
    fake.add_node("ip-10-0-1-7.ec2.internal", 8, hostname="ip-10-0-1-7")
    pod = gated_pod(affinity=required(name_term("ip-10-0-1-7.ec2.internal")))
    del pod["spec"]["schedulingGates"]
    status, _ = await send(fake, "POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert status == 201
    by_label = copy.deepcopy(pod)
    by_label["metadata"]["name"] = "by-label"
    by_label["spec"]["affinity"] = required({"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["ip-10-0-1-7.ec2.internal"]}]})
    status, _ = await send(fake, "POST", f"/api/v1/namespaces/{NS}/pods", by_label)
    assert status == 201

    def node_of(name: str) -> str | None:
        pod = fake.get("pods", name, NS)
        return None if pod is None else pod["spec"].get("nodeName")

    await until(lambda: node_of("p") is not None)
    assert node_of("p") == "ip-10-0-1-7.ec2.internal"
    assert node_of("by-label") is None  # no node has that hostname label


async def test_a_body_that_cannot_be_decoded_is_400_and_an_invalid_object_422(
        fake: FakeKubeApiServer) -> None:
    path = f"/api/v1/namespaces/{NS}/pods"
    status, body = await send(fake, "POST", path, raw=b'{"apiVersion": "v1", "kind": ')
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body = await send(fake, "POST", path, gated_pod(dnsPolicy=3))
    assert (status, body["reason"]) == (400, "BadRequest")
    nameless = gated_pod()
    del nameless["spec"]["containers"][0]["name"]
    status, body = await send(fake, "POST", path, nameless)
    assert (status, body["reason"]) == (422, "Invalid")


async def test_an_unknown_field_is_dropped_with_a_warning_unless_validation_is_strict(
        fake: FakeKubeApiServer) -> None:
    path = f"/api/v1/namespaces/{NS}/pods"
    headers = {"Authorization": f"Bearer {fake.token}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + path, json=gated_pod("warned", colour="blue"),
                                headers=headers) as response:
            assert response.status == 201
            assert 'unknown field \\"spec.colour\\"' in response.headers["Warning"]
        async with session.post(fake.url + path + "?fieldValidation=Strict",
                                json=gated_pod("strict", colour="blue"), headers=headers) as response:
            assert response.status == 400
    stored = fake.get("pods", "warned", NS)
    assert stored is not None and "colour" not in stored["spec"]


@pytest.mark.parametrize(("before", "patch", "allowed"), [
    # Narrowing a gated pod: a requirement appended to a term, a nodeSelector entry added.
    (required(name_term("a")), {"affinity": required({"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a"]},
        {"key": "metadata.name", "operator": "In", "values": ["b"]}]})}, True),
    (required(name_term("a")), {"nodeSelector": {"pool": "h100"}}, True),
    (None, {"affinity": required(name_term("a"))}, True),  # nothing required before: anything
    # Widening, or changing: refused.
    (required(name_term("a")), {"affinity": required(name_term("a"), name_term("b"))}, False),
    (required(name_term("a")), {"affinity": required(name_term("b"))}, False),
    (required({}), {"affinity": required(name_term("a"))}, False),  # an empty term stays empty
    (required(name_term("a")), {"affinity": None}, False),
])
async def test_a_gated_pods_node_selection_may_only_narrow(
        fake: FakeKubeApiServer, before: dict[str, Any] | None, patch: dict[str, Any],
        allowed: bool) -> None:
    pod = gated_pod(**({"affinity": before} if before else {}))
    status, _ = await send(fake, "POST", f"/api/v1/namespaces/{NS}/pods", pod)
    assert status == 201
    status, body = await send(fake, "PATCH", f"/api/v1/namespaces/{NS}/pods/p", {"spec": patch},
                              content_type="application/merge-patch+json")
    assert (status == 200) is allowed, body
    if not allowed:
        assert body["reason"] == "Invalid"


async def test_gates_may_only_be_removed_and_a_released_pods_affinity_not_changed(
        fake: FakeKubeApiServer) -> None:
    path = f"/api/v1/namespaces/{NS}/pods/p"
    assert (await send(fake, "POST", f"/api/v1/namespaces/{NS}/pods",
                       gated_pod(affinity=required(name_term("a")))))[0] == 201
    status, _ = await send(fake, "PATCH", path, {"spec": {"schedulingGates": [
        {"name": "rota.dev/placement"}, {"name": "another"}]}}, content_type="application/merge-patch+json")
    assert status == 422
    status, _ = await send(fake, "PATCH", path, {"spec": {"schedulingGates": []}},
                           content_type="application/merge-patch+json")
    assert status == 200
    status, _ = await send(fake, "PATCH", path, {"spec": {"affinity": required(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]},
                         {"key": "metadata.name", "operator": "In", "values": ["a"]}]})}},
        content_type="application/merge-patch+json")
    assert status == 422  # no longer gated: its node selection is fixed
