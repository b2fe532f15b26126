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


def _policy_imports() -> dict[str, set[str]]:
    """Module -> the rota_policy modules it imports (at any level, TYPE_CHECKING included)."""
    import ast
    from pathlib import Path

    import rota_policy

    root = Path(rota_policy.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rota_policy"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("rota_policy"))
        graph[name] = found
    return graph


def test_the_policy_has_no_import_cycle() -> None:
    graph = _policy_imports()
    # A package's __init__ re-exports its modules: the edges that matter are between modules.
    packages = {name for name in graph if any(other.startswith(name + ".") for other in graph)}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(" -> ".join([*path[path.index(name):], name]))
        if name in done or name not in graph:
            return
        for dep in sorted(graph[name] - packages):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph.keys() - packages):
        visit(name, [])
