"""The packages depend one way: distributions by layer (contracts at the bottom; the SDK and the
policy; the runtime, the Kubernetes side and the replay; the services; the `rota` CLI on top),
and no import cycle between modules.

The import checks that load modules do so in a fresh interpreter, so that what other tests
imported does not count; the rest read the source (every import statement, at any level).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

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
    assert _loaded("rota_policy", (*SERVICES, "rota.cli", "rota.bus", "rota.db", "rota_replay",
                                   "matplotlib")) == []


def test_the_job_sdk_loads_none_of_the_services_runtime() -> None:
    """What a training job imports: the SDK and the contracts, never the database, the service
    framework, the embedded servers or the policy (rota-sdk does not even require them)."""
    code = ("import sys\nfrom rota import sdk, data_order\n"
            "print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "nats" in loaded  # the check sees what the SDK does load
    assert loaded & {"sqlalchemy", "faststream", "pgserver", "rota_policy", "asyncpg", "alembic",
                     "opentelemetry", "kubernetes_asyncio", "matplotlib", "typer"} == set()


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
    import rota_replay  # the simulator, once rota_policy.sim: held to the same rules

    long: list[str] = []
    for path in (p for pkg in (rota_policy, rota_replay) for p in Path(pkg.__file__).parent.rglob("*.py")):
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
    import rota_replay

    roots = [Path(rota_policy.__file__).parent, Path(rota_replay.__file__).parent]
    mutable: list[str] = []
    for root, path in ((r, p) for r in roots for p in r.rglob("*.py")):
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


# --- Distributions by layer -------------------------------------------------------------------
#
# Every workspace member is a distribution with a rank: a distribution may depend only on ranks
# below its own, and its modules may import (statically, at any level) only its own modules and
# its declared dependencies'. The `rota` namespace package is shared by several distributions,
# so a module belongs to the distribution whose src/ holds its file.

ROOT = Path(__file__).resolve().parents[2]
RANKS = {
    "rota-contracts": 0,
    "rota-sdk": 1, "rota-policy": 1,
    "rota-runtime": 2, "rota-kube": 2, "rota-replay": 2,
    **{f"rota-{s}": 3 for s in ("submission", "ledger", "scheduler", "preemption", "notifier",
                                "executor", "console")},
    "rota": 4,
}
# Third-party modules a module imports beyond its distribution's requirements, and why.
UNDECLARED = {"rota.docsite.hooks": {"mkdocs"}}  # run by `mkdocs build` itself (the dev group)
# Module cycles another change removes (the scheduler's view and the console's routes are being
# restructured beside this test); the lead empties this set when both are merged.
@dataclass(frozen=True)
class Dist:
    name: str
    requires: tuple[str, ...]
    src: Path


def _distributions() -> dict[str, Dist]:
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    found: dict[str, Dist] = {}
    for pattern in workspace["members"]:
        for folder in sorted(ROOT.glob(pattern)):
            project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
            requires = tuple(Requirement(r).name for r in project.get("dependencies", []))
            found[project["name"]] = Dist(project["name"], requires, folder / "src")
    return found


def _module_name(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, tuple[str, Path]]:
    """Module name -> (its distribution, its file), for every first-party module."""
    owned: dict[str, tuple[str, Path]] = {}
    for dist in _distributions().values():
        for path in dist.src.rglob("*.py"):
            if "migrations" in path.parts and "versions" in path.parts:
                continue
            name = _module_name(dist.src, path)
            assert name not in owned, f"{name} is in both {owned[name][0]} and {dist.name}"
            owned[name] = (dist.name, path)
    return owned


def _imports(name: str, path: Path) -> set[str]:
    """Every module name an import statement of the file names, relative ones resolved, with
    `from a import b` giving both `a` and `a.b` (b may be a module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _first_party(imported: str, modules: Mapping[str, object]) -> str | None:
    """The longest first-party module `imported` names, or None for a third-party one."""
    while imported and imported not in modules:
        imported = imported.rpartition(".")[0]
    return imported or None


def test_distributions_depend_only_on_lower_layers() -> None:
    dists = _distributions()
    assert set(dists) == set(RANKS), "give each new distribution its layer in RANKS"
    upward = [f"{d.name} -> {r}" for d in dists.values() for r in d.requires
              if r in RANKS and RANKS[r] >= RANKS[d.name]]
    assert upward == []


def test_no_cycle_between_distributions() -> None:
    graph = {d.name: {r for r in d.requires if r in RANKS} for d in _distributions().values()}
    assert _cycles(graph) == []


def test_a_module_imports_only_its_distribution_and_those_it_declares() -> None:
    dists = _distributions()
    modules = _modules()
    wrong: list[str] = []
    for name, (dist, path) in sorted(modules.items()):
        allowed = {dist, *dists[dist].requires}
        for target in sorted(filter(None, {_first_party(i, modules) for i in _imports(name, path)})):
            if modules[target][0] not in allowed:
                wrong.append(f"{name} ({dist}) imports {target} ({modules[target][0]})")
    assert wrong == []


def test_no_distribution_imports_a_service() -> None:
    """The `rota` CLI requires the services so that `rota up` can start them as processes, but
    no module outside a service imports one."""
    modules = _modules()
    services = {f"rota-{s}" for s in ("submission", "ledger", "scheduler", "preemption",
                                      "notifier", "executor", "console")}
    wrong = [f"{name} imports {target}"
             for name, (dist, path) in sorted(modules.items())
             for target in {_first_party(i, modules) for i in _imports(name, path)} - {None}
             if target is not None and modules[target][0] in services and modules[target][0] != dist]
    assert wrong == []


@functools.cache
def _provided(dist: str, extras: frozenset[str] = frozenset()) -> frozenset[str]:
    """The top-level modules an installed distribution and its requirements (transitively,
    with the extras asked for) provide."""
    tops: set[str] = set()
    todo, seen = [(dist, extras)], set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        tops |= {f.parts[0].removesuffix(".py") for f in found.files or []
                 if f.suffix == ".py" or (len(f.parts) > 1 and not f.parts[0].endswith(".dist-info"))}
        tops |= set((found.read_text("top_level.txt") or "").split())
        for text in found.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in [*wanted, ""]):
                todo.append((req.name, frozenset(req.extras)))
    return frozenset(tops)


def test_a_distribution_imports_only_third_party_modules_it_requires() -> None:
    """rota-contracts must not reach nats or SQLAlchemy through an import nobody declared, say.
    A requirement's own requirements count (pydantic brings pydantic_core, rota-runtime nats)."""
    dists = _distributions()
    modules = _modules()
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    wrong: list[str] = []
    for dist in dists.values():
        provided: set[str] = set()
        for text in (tomllib.loads((dist.src.parent / "pyproject.toml").read_text())["project"]
                     .get("dependencies", [])):
            req = Requirement(text)
            provided |= _provided(req.name, frozenset(req.extras))
        for name, (owner, path) in sorted(modules.items()):
            if owner != dist.name:
                continue
            tops = {i.split(".")[0] for i in _imports(name, path) if _first_party(i, modules) is None}
            missing = tops - stdlib - provided - UNDECLARED.get(name, set()) - {
                m.split(".")[0] for m in modules}
            wrong += [f"{name} ({dist.name}) imports {t}" for t in sorted(missing)]
    assert wrong == []


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _module_graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports, at any level (TYPE_CHECKING and function
    bodies included). A package's __init__ re-exports its modules: the edges that matter are
    between modules, so packages with modules in them are left out."""
    modules = _modules()
    packages = {n for n in modules if any(o.startswith(n + ".") for o in modules)}
    graph: dict[str, set[str]] = {}
    for name, (_, path) in modules.items():
        if name in packages:
            continue
        targets = {_first_party(i, modules) for i in _imports(name, path)}
        graph[name] = {t for t in targets if t is not None and t not in packages and t != name}
    return graph


def test_no_module_cycle_in_any_package() -> None:
    """rota.*, rota_policy, rota_replay and each service: no two modules import each other,
    directly or around a loop."""
    assert _cycles(_module_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
