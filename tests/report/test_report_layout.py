"""The report layer's shape: small modules and short functions, read with `ast` (nothing is
imported), and one module per section of the summary."""

from __future__ import annotations

import ast
from pathlib import Path

REPORT_DIR = Path(__file__).resolve().parents[2] / "src" / "nnperf" / "report"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def report_modules() -> list[Path]:
    return sorted(REPORT_DIR.rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `source` longer than `limit` lines,
    decorators included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - start + 1
            if length > limit:
                found.append((node.name, length))
    return found


def test_every_report_module_is_at_most_600_lines():
    assert report_modules()
    long = {
        str(path.relative_to(REPORT_DIR)): n
        for path in report_modules()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_every_report_function_is_at_most_80_lines():
    long = {
        f"{path.relative_to(REPORT_DIR)}:{name}": n
        for path in report_modules()
        for name, n in long_functions(path.read_text(encoding="utf-8"))
    }
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines (split into named steps): {long}"


def test_the_check_finds_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}") == [("f", MAX_FUNCTION_LINES + 1)]
    assert long_functions("class C:\n    def m(self):\n        pass\n") == []


def test_every_section_module_builds_one_section():
    """Each module of `nnperf.report.sections` but the key findings defines `build(page)`,
    and `nnperf.report.render` lists every one of them."""
    sections = sorted(
        path.stem
        for path in (REPORT_DIR / "sections").glob("*.py")
        if path.stem not in ("__init__", "key_findings")
    )
    assert sections
    for name in sections:
        tree = ast.parse((REPORT_DIR / "sections" / f"{name}.py").read_text(encoding="utf-8"))
        builders = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert "build" in builders, name
    document = (REPORT_DIR / "render.py").read_text(encoding="utf-8")
    listed = {
        node.value.id
        for node in ast.walk(ast.parse(document))
        if isinstance(node, ast.Attribute) and node.attr == "build"
    }
    assert listed == set(sections)
