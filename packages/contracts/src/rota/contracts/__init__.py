"""Rota's message contracts: one envelope, strict commands, additive events.

The generated AsyncAPI and JSON Schema documents in `contracts/` come from these models.
"""

from rota.contracts.common import TIER_ORDER, Tier
from rota.contracts.envelope import (
    COMMAND_TYPES,
    CONTROL_TYPES,
    EVENT_TYPES,
    MESSAGE_TYPES,
    QUERY_TYPES,
    ContractError,
    Envelope,
    envelope,
    parse,
    parse_any,
)
from rota.contracts.job import JobSpec, RackAffinity, TopologyRequest, WorkerPlacement

__all__ = [
    "COMMAND_TYPES",
    "CONTROL_TYPES",
    "EVENT_TYPES",
    "MESSAGE_TYPES",
    "QUERY_TYPES",
    "TIER_ORDER",
    "ContractError",
    "Envelope",
    "JobSpec",
    "RackAffinity",
    "Tier",
    "TopologyRequest",
    "WorkerPlacement",
    "envelope",
    "parse",
    "parse_any",
]
