"""`rota up --nats-cluster N`: N embedded servers, streams at min(3, N) replicas unless the
replicas were set, and no cluster of embedded servers beside a NATS of one's own."""

from __future__ import annotations

import pytest
from rota.cli.output import InvalidInput
from rota.cli.up import with_nats_cluster
from rota.settings import Settings


def test_a_cluster_of_three_gets_streams_of_three_replicas() -> None:
    settings = with_nats_cluster(Settings(), 3)
    assert (settings.nats_cluster, settings.stream_replicas) == (3, 3)
    assert with_nats_cluster(Settings(), 5).stream_replicas == 3
    assert with_nats_cluster(Settings(), 2).stream_replicas == 2


def test_replicas_set_by_hand_are_kept_and_one_server_changes_nothing() -> None:
    assert with_nats_cluster(Settings(stream_replicas=1), 3).stream_replicas == 1
    assert with_nats_cluster(Settings(), None).stream_replicas == 1
    assert with_nats_cluster(Settings(nats_cluster=3), None).stream_replicas == 3


def test_a_cluster_beside_a_nats_of_ones_own_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        with_nats_cluster(Settings(nats_url="nats://elsewhere:4222"), 3)
    assert info.value.field == "nats_cluster"
