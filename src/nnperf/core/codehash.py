"""A hash of the code a job runs, so every job re-runs when the code it runs changes.

Snakemake re-runs a `script:` job when the script changes, but the scripts are thin: the code
that decides what a number means is in this library. Every rule takes
`code=script_code("<its script>")` as a parameter (workflow/rules/common.smk): the hash covers
the `nnperf` modules the adapter imports and every `nnperf` module they import, directly or
not, so editing `nnperf/engine/timing.py` re-runs the timed runs and what reads them, editing
`nnperf/report/aggregate.py` rebuilds the tables and what reads them, and editing
`nnperf/report/plots/roofline.py` redraws the roofline figures only.

The imports are read with `ast` (nothing is imported or executed: the DAG is built without
torch). Imports inside functions count too: the engine imports torch-heavy modules lazily.
The standard library's `modulefinder` would do the walk but follows every third-party
import (torch alone is thousands of modules), so this walks only the `nnperf` package.
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

PACKAGE = "nnperf"
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_file(name: str) -> Path | None:
    """The source file of `nnperf.x.y`, or None when it is not a module of this package."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(name: str) -> set[str]:
    """The `nnperf` modules the source of module `name` imports (not transitively)."""
    path = module_file(name)
    if path is None:
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return source_imports(path, package)


def source_imports(path: Path, package: str = "") -> set[str]:
    """The `nnperf` modules the Python file `path` imports (not transitively); `package` is
    the package relative imports start from (none for a script).

    Read once per version of the file: building the DAG asks for the closure of every rule's
    script, and those closures share most of the library (parsing each module every time
    they reach it was 3 of the 5 seconds `snakemake -n` took).
    """
    info = path.stat()
    return set(_parsed_imports(str(path), package, info.st_mtime_ns, info.st_size))


@lru_cache(maxsize=None)
def _parsed_imports(path: str, package: str, mtime_ns: int, size: int) -> frozenset[str]:
    """`source_imports` of one version of a file (its mtime and size are the cache key)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            # `from nnperf import timing` names a module, `from nnperf.x import f` a function.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    modules = {m for m in found if module_file(m) is not None}
    # Importing nnperf.a.b runs nnperf/__init__.py and nnperf/a/__init__.py first.
    for module in list(modules):
        parts = module.split(".")
        modules.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(modules)


@lru_cache(maxsize=None)
def closure(*names: str) -> tuple[str, ...]:
    """`names` and every nnperf module they import, transitively, sorted."""
    seen: set[str] = set()
    pending = [n for n in names if module_file(n) is not None]
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        pending.extend(imported_modules(module) - seen)
    return tuple(sorted(seen))


def code_hash(*names: str) -> str:
    """SHA-256 (first 16 hex digits) over the sources of `closure(*names)`."""
    digest = hashlib.sha256()
    for module in closure(*names):
        digest.update(module.encode())
        digest.update(module_file(module).read_bytes())
    return digest.hexdigest()[:16]


def script_code(script: str | Path) -> str:
    """`code_hash` over what the workflow script `script` (a path) imports from nnperf: the
    code its job runs, beyond the script itself (Snakemake's own `code` trigger covers that)."""
    return code_hash(*sorted(source_imports(Path(script))))
