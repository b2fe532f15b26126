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
