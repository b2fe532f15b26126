"""The preemption service. Its handlers arrive with their issue; today it migrates, connects and
answers `rota.sys.ping.preemption`."""

from __future__ import annotations

from pathlib import Path

from rota.service import RotaService, empty_service


def build() -> RotaService:
    return empty_service("preemption", Path(__file__).parent)
