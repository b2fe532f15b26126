"""Properties of the ledger's rules over random proposal and release sequences.

An in-memory book plays the ledger's store: it builds each `Snapshot` from its own rows, the
way `book.read` does from the tables, and applies whatever `decide` grants. The proposals
are random, as from a scheduler whose view is arbitrarily stale, so most of them collide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from rota_ledger.domain import Gpu, Grant, Snapshot, decide
from rota_ledger.usage import Usage, run_usage

from tests.unit.ledger.builders import HALF_LIFE_S, cluster, request

CLUSTER = cluster()
H100_GPUS: list[Gpu] = [(node, g) for node, info in sorted(CLUSTER.nodes.items())
                        if info.flavor == "h100" for g in range(info.gpus)]
TEAMS = ("nlp", "vision", "research", "ghost")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Book:
    active: dict[Gpu, int] = field(default_factory=dict)
    """GPU → the run holding it."""
    runs: dict[int, tuple[str, list[Gpu], float]] = field(default_factory=dict)
    """Active run → (team, GPUs, granted at)."""
    entries: list[int] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)
    next_run: int = 0

    def in_use(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for team, gpus, _ in self.runs.values():
            out[team] = out.get(team, 0) + len(gpus)
        return out

    def propose(self, team: str, gpus: list[Gpu], at: float) -> bool:
        wanted = request([(node, [g]) for node, g in gpus], team=team)
        snapshot = Snapshot(taken={g: str(self.active[g]) for g in wanted.wanted if g in self.active},
                            in_use=self.in_use())
        decision = decide(wanted, snapshot, CLUSTER)
        if not isinstance(decision, Grant):
            return False
        run = self.next_run
        self.next_run += 1
        for seat in decision.seats:
            gpu = (seat.node, seat.gpu)
            assert gpu not in self.active, f"{gpu} granted twice"
            self.active[gpu] = run
        self.runs[run] = (team, [(s.node, s.gpu) for s in decision.seats], at)
        self.entries.append(len(decision.seats))
        return True

    def release(self, pick: int, at: float) -> None:
        if not self.runs:
            return
        run = sorted(self.runs)[pick % len(self.runs)]
        team, gpus, granted_at = self.runs.pop(run)
        for gpu in gpus:
            del self.active[gpu]
        self.entries.append(-len(gpus))
        used = run_usage(len(gpus), at - granted_at, HALF_LIFE_S)
        self.usage[team] = self.usage.get(team, Usage(0.0, T0)).plus(
            used, T0 + timedelta(seconds=at), HALF_LIFE_S)


Step = tuple[str, object, list[Gpu]]
propose: st.SearchStrategy[Step] = st.tuples(st.just("propose"), st.sampled_from(TEAMS),
                    st.lists(st.sampled_from(H100_GPUS), min_size=1, max_size=6, unique=True))
release: st.SearchStrategy[Step] = st.tuples(st.just("release"), st.integers(0, 1000), st.just([]))
steps = st.lists(st.tuples(st.one_of(propose, release), st.integers(0, 7200)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_no_gpu_twice_limits_hold_usage_never_negative_and_the_books_balance(
    ops: list[tuple[tuple[str, object, list[Gpu]], int]],
) -> None:
    book = Book()
    clock = 0.0
    for (kind, arg, gpus), gap in ops:
        clock += gap
        if kind == "propose":
            book.propose(str(arg), gpus, clock)
        else:
            book.release(int(str(arg)), clock)
        in_use = book.in_use()
        assert in_use.get("nlp", 0) <= 8 + 4  # quota + borrowing limit
        assert sum(in_use.values()) == len(book.active) <= len(H100_GPUS)
        assert all(u.gpu_seconds >= 0 for u in book.usage.values())
    while book.runs:
        clock += 60
        book.release(0, clock)
    assert book.active == {}
    assert sum(book.entries) == 0
    assert all(u.gpu_seconds >= 0 for u in book.usage.values())
