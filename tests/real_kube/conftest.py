"""The session's real control plane (see `cluster.py`), started once for the whole tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real_kube.cluster import KubeCluster, start_cluster


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("kwok"))
    try:
        yield cluster
    finally:
        cluster.stop()
