"""Scale-out (issue 17, section 2): partitions, `--replicas`, the ledger's lease keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from rota.bench.e2e import CONFIG, config_with_backlog_nodes, per_service
from rota.bus.partition import Partition, by_job, by_run
from rota.cli.stack import parse_replicas, replica_names
from rota.config import load_config
from rota.settings import Settings
from rota_ledger.owners import (
    EVENTS,
    Handlers,
    consumers_by_key,
    flavor_durable,
    flavor_key,
    preferred,
)


@dataclass
class FakeMsg:
    data: bytes
    subject: str = "rota.evt.x"
    headers: dict[str, str] = field(default_factory=dict)


def body(**fields: Any) -> bytes:
    data = fields.pop("data", {})
    return json.dumps({"id": "e1", "type": "T", **fields, "data": data}).encode()


@given(st.integers(min_value=1, max_value=8), st.lists(st.text(min_size=1), max_size=50))
def test_every_key_has_exactly_one_owner(count: int, keys: list[str]) -> None:
    replicas = [Partition(i, count) for i in range(count)]
    for key in keys:
        assert sum(p.owns(key) for p in replicas) == 1
        assert replicas[0].owner(key) == replicas[-1].owner(key)  # every process agrees


def test_the_hash_is_stable_across_processes_and_spreads_jobs() -> None:
    two = Partition(0, 2)
    # crc32, not Python's salted hash(): the same job goes to the same replica every run.
    assert [two.owner(f"job-{i}") for i in range(6)] == [1, 1, 1, 1, 0, 0]
    owners = [Partition(0, 4).owner(f"01J{i:08d}") for i in range(4000)]
    assert all(900 < owners.count(i) < 1100 for i in range(4))


def test_one_replica_is_unchanged_and_no_key_goes_to_replica_0() -> None:
    single = Partition()
    assert single.single and single.owns("anything") and single.owns(None)
    assert single.durable("submission-projection") == "submission-projection"
    assert Partition(0, 2).owns(None) and not Partition(1, 2).owns(None)
    assert Partition(1, 3).durable("notifier-events") == "notifier-events-p1of3"
    assert Partition(1, 3).label == "2/3"


@pytest.mark.parametrize(("index", "count"), [(2, 2), (-1, 2), (0, 0)])
def test_a_replica_outside_its_count_is_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="replica"):
        Partition(index, count)


def test_settings_refuse_a_replica_index_at_or_above_the_count() -> None:
    with pytest.raises(ValidationError, match="ROTA_REPLICA=2 must be below ROTA_REPLICAS=2"):
        Settings(replica=2, replicas=2)
    assert Partition.from_settings(Settings(replica=1, replicas=2)) == Partition(1, 2)


def test_partition_keys_read_the_envelope_or_the_control_subject() -> None:
    assert by_job(FakeMsg(body(job_id="j1"))) == "j1"  # type: ignore[arg-type]
    assert by_job(FakeMsg(body(data={"job_id": "j2"}))) == "j2"  # type: ignore[arg-type]
    assert by_job(FakeMsg(body())) is None  # type: ignore[arg-type]
    assert by_run(FakeMsg(body(run_id="r1"))) == "r1"  # type: ignore[arg-type]
    assert by_run(FakeMsg(b"{}", subject="rota.ctl.run.r9")) == "r9"  # type: ignore[arg-type]
    assert by_run(FakeMsg(b"not json")) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "wanted"), [
    (None, {}),
    ("", {}),
    ("submission=2", {"submission": 2}),
    (" submission=2, executor=3 ,notifier=1,ledger=2", {"submission": 2, "executor": 3,
                                                         "notifier": 1, "ledger": 2}),
])
def test_replicas_parse(text: str | None, wanted: dict[str, int]) -> None:
    assert parse_replicas(text) == wanted


@pytest.mark.parametrize(("text", "error"), [
    ("scheduler=2", "scheduler runs as one instance (a singleton)"),
    ("preemption=2", "preemption runs as one instance (a singleton)"),
    ("console=2", "'console' is not a service"),
    ("subm=2", "'subm' is not a service"),
    ("submission", "expected <service>=<count>"),
    ("submission=two", "the count must be a whole number"),
    ("submission=0", "the count must be 1 to 8"),
    ("executor=9", "the count must be 1 to 8"),
    ("executor=2,executor=3", "executor is given twice"),
])
def test_replicas_refused_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_replicas(text)


def test_replica_processes_are_named_by_index_and_their_cpu_summed_per_service() -> None:
    assert replica_names("ledger", 1) == ["ledger"]
    assert replica_names("executor", 2) == ["executor-0", "executor-1"]
    assert per_service({"submission-0": 0.5, "submission-1": 0.25, "scheduler": 1.0}) == {
        "submission": 0.75, "scheduler": 1.0}


async def _noop(*_: Any) -> None:
    return None


HANDLERS = Handlers(_noop, _noop, _noop)


def test_each_flavor_has_a_lease_and_a_durable_that_keeps_only_its_proposals() -> None:
    keys = consumers_by_key(["a100", "h100.80g"], HANDLERS)
    assert set(keys) == {EVENTS, flavor_key("a100"), flavor_key("h100.80g")}
    (a100,) = keys[flavor_key("a100")]()
    assert a100.durable == "ledger-proposals-f-a100" and a100.family == "ledger-proposals"
    assert flavor_durable("h100.80g") == "ledger-proposals-f-h100_80g"
    assert a100.keep is not None
    assert a100.keep(FakeMsg(body(data={"flavor": "a100"})))  # type: ignore[arg-type]
    assert not a100.keep(FakeMsg(body(data={"flavor": "h100.80g"})))  # type: ignore[arg-type]
    events = {c.durable: c for c in keys[EVENTS]()}
    # One ledger's durables for releases and holds, so switching to replicas resumes them.
    assert set(events) == {"ledger-runs", "ledger-preemptions", "ledger-proposals-f-_other"}
    other = events["ledger-proposals-f-_other"].keep
    assert other is not None
    assert other(FakeMsg(body(data={"flavor": "v100"})))  # type: ignore[arg-type]
    assert other(FakeMsg(b"garbage"))  # type: ignore[arg-type]  # rejected, not left unanswered
    assert not other(FakeMsg(body(data={"flavor": "a100"})))  # type: ignore[arg-type]


def test_flavors_whose_durables_would_collide_are_refused() -> None:
    with pytest.raises(ValueError, match="differ only by"):
        consumers_by_key(["a.b", "a_b"], HANDLERS)


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_lease_is_some_replicas_first_choice(count: int) -> None:
    keys = [EVENTS, *(flavor_key(f) for f in ("a", "b", "c", "d"))]
    choices = [preferred(keys, i, count) for i in range(count)]
    assert sorted(k for c in choices for k in c) == sorted(keys)


def test_the_bench_backlog_can_wait_on_a_large_cluster(tmp_path: Path) -> None:
    assert config_with_backlog_nodes(16, tmp_path / "same.yaml") == CONFIG
    large = load_config(config_with_backlog_nodes(1250, tmp_path / "large.yaml"))
    assert large.capacity()["deep"] == 1250 * 8
    assert large.teams["backlog"].quota["deep"] == 1250 * 8
    assert large.capacity()["gpu"] == load_config(CONFIG).capacity()["gpu"]
