"""The executor service. Its handlers arrive with their issue; today it migrates, connects and
answers `rota.sys.ping.executor`."""

from __future__ import annotations

from pathlib import Path

from rota.service import RotaService, empty_service


def build() -> RotaService:
    return empty_service("executor", Path(__file__).parent)
