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


def test_the_policy_model_imports_no_phase_and_the_reference_walk_no_shortcut() -> None:
    """`rota_policy.model` (what the policy reads and writes) is the bottom of the policy; the
    reference walk and its state know the shortcuts (`cycle.fast`) only through their seam."""
    graph = _policy_imports()
    model = {name: deps for name, deps in graph.items() if name.startswith("rota_policy.model")}
    assert model, "no rota_policy.model package"
    assert {(name, dep) for name, deps in model.items() for dep in deps
            if not dep.startswith("rota_policy.model")} == set()
    walk = {name: graph[name] for name in ("rota_policy.cycle.walk", "rota_policy.cycle.walkstate")}
    assert {(name, dep) for name, deps in walk.items() for dep in deps
            if dep.startswith("rota_policy.cycle.fast")} == set()


def test_no_function_of_the_policy_is_longer_than_sixty_lines() -> None:
    import ast
    from pathlib import Path

    import rota_policy

    long: list[str] = []
    for path in Path(rota_policy.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if node.end_lineno - node.lineno + 1 > 60:
                    long.append(f"{path.name}:{node.name}")
    assert long == []


def _immutable(value: object) -> bool:
    import dataclasses
    import typing
    from types import FunctionType, MappingProxyType

    if value is None or isinstance(value, int | float | str | bytes | type | typing.TypeVar | FunctionType):
        return True
    if typing.get_origin(value) is not None:  # a type alias such as tuple[int, str]
        return True
    if getattr(type(value), "__slots__", None) == () and not hasattr(value, "__dict__"):
        return True  # an object with no state at all
    if isinstance(value, tuple | frozenset):
        return all(_immutable(v) for v in value)
    if isinstance(value, MappingProxyType):
        return all(_immutable(k) and _immutable(v) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            _immutable(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def test_the_policy_keeps_no_module_level_mutable_state() -> None:
    """What a module binds at its top level is a constant: state lives in the objects a cycle or
    a simulator owns, so two replays in one process cannot see each other (`__all__` aside)."""
    import ast
    import importlib
    from pathlib import Path

    import rota_policy

    root = Path(rota_policy.__file__).parent
    mutable: list[str] = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        tree = ast.parse(path.read_text())
        mutable += [f"{path.name}: global" for node in ast.walk(tree) if isinstance(node, ast.Global)]
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) and node.value is not None else []
            names = [t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"]
            mutable += [f"{path.name}:{node.lineno} {name}" for name in names
                        if not _immutable(getattr(module, name))]
    assert mutable == []
