"""`rota cluster import` as a user runs it (a subprocess, a kubeconfig), against the FAKE API
server, and the inventory rules beneath it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from rota.config import load_config
from rota.config.loader import example_text
from rota.config.model import Node
from rota.k8s.inventory import InventoryError, Labels, differences, nodes_of

from tests.fake_kube_apiserver import FakeKubeApiServer

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology.kubernetes.io/zone": "Rack-A"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeKubeApiServer]:
    server = FakeKubeApiServer()
    await server.start()
    yield server
    await server.close()


async def rota(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rota.cli.main", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_import_writes_the_cluster_section_and_keeps_the_rest(
        fake: FakeKubeApiServer, tmp_path: Path) -> None:
    for i in range(4):
        fake.add_node(f"gpu-{i}", 8, labels={**H100, "rota.dev/flavor": "h100",
                                             "topology.kubernetes.io/zone": f"rack-{i // 2}"})
    for i in range(3):
        fake.add_node(f"old-{i}", 8, labels={"nvidia.com/gpu.product": "A100", "rota.dev/flavor": "a100"})
    fake.add_node("cpu-only", 0)
    config = tmp_path / "rota.yaml"
    config.write_text(example_text())
    kubeconfig = str(fake.kubeconfig(tmp_path / "kc"))
    # By NVIDIA's product label the flavor is `nvidia-h100-80gb-hbm3`, not the `h100` the
    # teams' quotas name: the file would be invalid, so nothing is written, and the field is named.
    code, out, _ = await rota("cluster", "import", "--kubeconfig", kubeconfig, "--config", str(config), "--json")
    assert code == 2
    assert "teams.*.quota.h100: quotas add up to 32 GPUs, more than the 0" in json.loads(out)["error"]["message"]
    assert config.read_text() == example_text()
    code, out, err = await rota("cluster", "import", "--kubeconfig", kubeconfig, "--config", str(config),
                                "--flavor-label", "rota.dev/flavor", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["cluster"]["nodes"][:2] == [
        {"name": "gpu-0", "flavor": "h100", "gpus": 8, "rack": "rack-0"},
        {"name": "gpu-1", "flavor": "h100", "gpus": 8, "rack": "rack-0"}]
    assert {n["name"] for n in report["cluster"]["nodes"]} == {*(f"gpu-{i}" for i in range(4)),
                                                                *(f"old-{i}" for i in range(3))}
    # What the example's virtual nodes were, and the real ones, said plainly.
    assert any("h100-0 is in rota.yaml but not a GPU node" in c for c in report["changes"])
    assert any("gpu-0 (8 x h100) is in the cluster" in c for c in report["changes"])
    written = yaml.safe_load(config.read_text())
    assert written["cluster"] == report["cluster"]
    assert written["teams"] == yaml.safe_load(example_text())["teams"]
    assert load_config(config).capacity() == {"a100": 24, "h100": 32}


async def test_a_gpu_node_without_the_flavor_label_is_refused_by_name(
        fake: FakeKubeApiServer, tmp_path: Path) -> None:
    fake.add_node("gpu-x", 8)
    code, out, _ = await rota("cluster", "import", "--kubeconfig", str(fake.kubeconfig(tmp_path / "kc")),
                              "--config", str(tmp_path / "rota.yaml"), "--json")
    assert code != 0
    message = json.loads(out)["error"]["message"]
    assert "gpu-x" in message and "nvidia.com/gpu.product" in message
    assert not (tmp_path / "rota.yaml").exists()


def node(name: str, gpus: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"example.com/gpu": gpus}}}


def test_a_configured_resource_and_labels() -> None:
    nodes = nodes_of([node("n1", "2", kind="L4", rack="r7")],
                     Labels(gpu_resource="example.com/gpu", flavor_label="kind", rack_label="rack"))
    assert nodes == [Node(name="n1", flavor="l4", gpus=2, rack="r7")]


def test_a_count_that_is_not_whole_is_refused() -> None:
    with pytest.raises(InventoryError, match=r"n1: status.allocatable\['example.com/gpu'\] is '1500m'"):
        nodes_of([node("n1", "1500m", kind="L4")], Labels(gpu_resource="example.com/gpu", flavor_label="kind"))


def test_differences_name_each_disagreement() -> None:
    configured = load_config().expanded_nodes()[:1]
    live = [configured[0].model_copy(update={"gpus": 4, "rack": "elsewhere"})]
    found = differences(configured, live)
    assert found == [f"node {live[0].name}: rota.yaml says 8 GPUs, the cluster allocates 4",
                     f"node {live[0].name}: rota.yaml says rack {configured[0].rack}, its label says elsewhere"]
