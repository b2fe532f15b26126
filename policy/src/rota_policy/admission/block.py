"""Why a job cannot start now: the answer of the admission ladder (`ladder`), kept per job."""

from __future__ import annotations

from dataclasses import dataclass

from rota.contracts.messages import WaitReasonCode as Code

__all__ = ["NO_ETA", "Block"]


@dataclass(frozen=True, slots=True)
class Block:
    """What stopped a job in the admission walk; `detail` is a message or the blocking job."""

    code: Code
    detail: str = ""


NO_ETA = frozenset({Code.NO_MATCHING_FLAVOR, Code.EXCEEDS_CLUSTER, Code.QUOTA_EXCEEDED})
"""Blocks under which a job gets no ETA: it can never start, or its start depends on other
teams' usage (quota)."""
