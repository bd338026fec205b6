"""The shape of the library: sub-packages by stage, layered, and the engine's worker apart from
its manager.

Every module's imports are read with `ast`, those inside functions too (the engine imports
torch-heavy modules lazily, so a lazy import is where a wrong one would hide); nothing is
imported. An import names a module (`from nnperf.engine import worker`) or the module a name
comes from (`from nnperf.engine.build import build`).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "src" / "nnperf"

# Bottom to top. A module imports from its own package or from a lower rank, never from a
# package of its own rank (ncu, torchprof and training stand beside each other, as report
# and study do). `nnperf` itself holds `__version__` and imports nothing: anything may use it.
# `top` is the command: `cli`, `__main__` and `commands`.
RANKS = {
    "nnperf": -1,
    "core": 0,
    "workload": 1,
    "engine": 2,
    "ncu": 3,
    "torchprof": 3,
    "training": 3,
    "roofline": 4,
    "report": 5,
    "study": 5,
    "top": 6,
}
TOP = ("cli", "__main__", "commands")

# pyperf's split: the worker (a forked child) never imports the manager's side, and neither
# does what the fork servers preload or the shared warm server that forks workers.
WORKER_SIDE = ("nnperf.engine.worker", "nnperf.engine.warmserver")
MANAGER_SIDE = ("nnperf.engine.manager", "nnperf.engine.processes", "nnperf.engine.runner")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imports_of(name: str, source: str | None = None) -> set[str]:
    """The nnperf modules that module `name` imports, anywhere in its source."""
    path = MODULES[name]
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                # `from nnperf.engine import worker` names a module; `from nnperf.x import f`
                # a name of module nnperf.x.
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {module for module in found if module in MODULES and module != name}


def graph() -> dict[str, set[str]]:
    return {name: imports_of(name) for name in MODULES}


def package_of(name: str) -> str:
    """`core` for nnperf.core.vocab; `top` for the command's modules; `nnperf` for nnperf."""
    parts = name.split(".")
    if len(parts) == 1:
        return parts[0]
    return "top" if parts[1] in TOP else parts[1]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            own, other = package_of(source), package_of(target)
            if own != other and RANKS[other] >= RANKS[own]:
                found.append(f"{source} ({own}) imports {target} ({other})")
    return found


def closure(edges: dict[str, set[str]], roots) -> dict[str, str]:
    """Every module reachable from `roots`, each with the module that first imports it."""
    reached = {root: root for root in roots}
    pending = list(roots)
    while pending:
        module = pending.pop()
        for target in sorted(edges[module]):
            if target not in reached:
                reached[target] = module
                pending.append(target)
    return reached


def preloaded() -> list[str]:
    """The modules the fork servers import before forking a worker (`worker.PRELOAD`)."""
    tree = ast.parse(MODULES["nnperf.engine.worker"].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PRELOAD" for t in node.targets
        ):
            return [name for name in ast.literal_eval(node.value) if name in MODULES]
    raise AssertionError("nnperf.engine.worker has no PRELOAD")


def test_every_package_has_a_rank_and_every_subpackage_init_imports_nothing():
    assert {package_of(name) for name in MODULES} <= set(RANKS)
    for name, path in MODULES.items():
        if path.name == "__init__.py" and name != "nnperf.commands":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            assert not [
                node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            ], f"{name}: a package's __init__ imports nothing (importing one module stays cheap)"


def test_no_import_cycle_between_modules():
    found = cycles(graph())
    assert not found, "modules that import each other: " + "; ".join(", ".join(g) for g in found)


def test_no_import_runs_up_a_layer():
    found = upward_imports(graph())
    assert not found, "imports up or across a layer:\n" + "\n".join(found)


def test_the_worker_side_never_imports_the_manager_side():
    edges = graph()
    reached = closure(edges, [*WORKER_SIDE, *preloaded()])
    wrong = {module: reached[module] for module in MANAGER_SIDE if module in reached}
    assert wrong == {}, "imported by: " + ", ".join(f"{m} <- {by}" for m, by in wrong.items())


def test_the_checks_find_what_they_look_for():
    """Planted imports (never written to disk) trip each check."""
    edges = graph()
    lazy = "def f():\n    from nnperf.engine.runner import perform_run\n"
    source = MODULES["nnperf.engine.timing"].read_text(encoding="utf-8") + lazy
    planted = {**edges, "nnperf.engine.timing": imports_of("nnperf.engine.timing", source)}
    assert "nnperf.engine.runner" in planted["nnperf.engine.timing"]
    assert any("nnperf.engine.timing" in group for group in cycles(planted))
    assert "nnperf.engine.runner" in closure(planted, WORKER_SIDE)
    known = set(upward_imports(edges))
    up = {**edges, "nnperf.core.vocab": {"nnperf.report.render"}}
    assert set(upward_imports(up)) - known == {
        "nnperf.core.vocab (core) imports nnperf.report.render (report)"
    }
    beside = {**edges, "nnperf.ncu.kernels": edges["nnperf.ncu.kernels"] | {"nnperf.training"}}
    assert set(upward_imports(beside)) - known == {
        "nnperf.ncu.kernels (ncu) imports nnperf.training (training)"
    }
