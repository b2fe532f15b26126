"""The packages depend one way: services and the CLI on the policy, the policy on the contracts.

Each check imports in a fresh interpreter, so that what other tests imported does not count.
"""

from __future__ import annotations

import subprocess
import sys

_LOADED = """
import importlib, pkgutil, sys
import {package} as root
for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
    importlib.import_module(info.name)
print(" ".join(sorted(name for name in sys.modules if name.startswith({forbidden!r}))))
"""


def _loaded(package: str, forbidden: tuple[str, ...]) -> list[str]:
    code = _LOADED.format(package=package, forbidden=forbidden)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


SERVICES = ("rota_submission", "rota_ledger", "rota_scheduler", "rota_preemption", "rota_notifier",
            "rota_executor")


def test_the_policy_imports_no_service_and_not_the_cli() -> None:
    assert _loaded("rota_policy", (*SERVICES, "rota.cli", "rota.bus", "rota.db")) == []


def test_the_cli_imports_no_service() -> None:
    assert _loaded("rota.cli", SERVICES) == []
