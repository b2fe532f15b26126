"""A digest of what a replay decided, apart from how it explained the waits.

Explanations (reasons, ETAs, positions, diagnoses) decide nothing: a change to them must leave
every admission, plan, abandoned plan, grow and deferral of every cycle as it was. The digest
hashes those, cycle by cycle, so that a change can show it left them alone
(`python -m rota_replay.digest --trace ... --scenario ...`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from rota_policy import PolicyConfig, policy_config_from
from rota_policy.model.decisions import Decisions
from rota_policy.model.snapshot import Slot, Snapshot

from rota_replay.replay import POLICY_NAMES, load, nodes_from, team_quotas
from rota_replay.simulator import Simulator

__all__ = ["decision_digest", "decisions_text"]


def decisions_text(now: float, decisions: Decisions) -> str:
    """One cycle's decisions as a canonical line: everything but the explanations."""
    admissions = [
        (a.job_id, _slots(a.placement), a.borrowed_gpus, a.via_plan, a.flavor) for a in decisions.admissions
    ]
    plans = [
        (
            p.preemptor_job_id,
            [(v.run_id, v.shrink_to, v.share, v.why, v.expected_lost_gpu_s) for v in p.victims],
            _slots(p.target),
            p.expected_lost_gpu_s,
            p.reason,
        )
        for p in decisions.plans
    ]
    grows = [(g.run_id, g.workers, _slots(g.added)) for g in decisions.grows]
    deferred = [list(d) for d in decisions.deferred]
    line = [now, admissions, plans, list(decisions.abandoned_plans), deferred, grows]
    return json.dumps(line, separators=(",", ":"))


def _slots(slots: tuple[Slot, ...]) -> list[tuple[int, str, list[int]]]:
    return [(s.worker, s.node, list(s.gpus)) for s in slots]


def decision_digest(
    trace_path: str | Path, scenario: str | Path, policy: str, trace_format: str = "philly",
    policy_config: PolicyConfig | None = None,
) -> dict[str, object]:
    """Replay `policy` once and hash its decisions, cycle by cycle."""
    trace, config = load(trace_path, scenario, trace_format)
    pcfg = policy_config or policy_config_from(config)
    sim = Simulator(trace, nodes_from(config), pcfg, policy, quotas=team_quotas(config))
    digest = hashlib.sha256()
    decide = sim.policy
    cycles = 0

    def hashed(snapshot: Snapshot, now: float, cfg: PolicyConfig) -> Decisions:
        nonlocal cycles
        decisions = decide(snapshot, now, cfg)
        digest.update(decisions_text(now, decisions).encode())
        digest.update(b"\n")
        cycles += 1
        return decisions

    sim.policy = hashed
    sim.run()
    return {"scenario": str(scenario), "policy": policy, "cycles": cycles, "sha256": digest.hexdigest()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--scenario", action="append", required=True)
    parser.add_argument("--policy", action="append", choices=POLICY_NAMES)
    parser.add_argument("--format", default="philly")
    args = parser.parse_args(argv)
    for scenario in args.scenario:
        for policy in args.policy or ["rota"]:
            print(json.dumps(decision_digest(args.trace, scenario, policy, args.format)), flush=True)


if __name__ == "__main__":
    main()
