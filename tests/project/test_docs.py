"""The README fits on a page and the docs point at things that exist.

The README is the front door: what nnperf is, the two commands, where the results appear, the
GPU quick start, and links to docs/ for the rest. These tests hold it to that, and check that
every relative link and every repository path the README, docs/*.md, the config comments and
the Makefile's comments cite is really there, so a page cannot go on naming a file that moved.
Paths under src/ are left out here: the library's layout is checked with the library.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
README_MAX_LINES = 150

# Repository paths that a page may cite in backticks, and that must then exist.
CHECKED_PREFIXES = (
    "config/",
    "docs/",
    "workflow/",
    "envs/",
    "reports/examples/",
    "benchmarks/",
    "tests/",
    ".ci/",
)
# A path that stands for many (a pattern, a placeholder, an elision) is not one file.
PLACEHOLDER = re.compile(r"[{<*]|\.\.\.")
# Paths a page may name before they exist, with what writes them.
NOT_YET_WRITTEN = {
    "reports/examples/h100-gpu-study": "make gpu-study on a GPU machine",
    "reports/examples/h100-gpu-check": "make gpu-check on a GPU machine",
}
PATH_IN_CODE = re.compile(
    r"(?<![\w./-])((?:%s)[^\s`'\"(),;:\]]*)" % "|".join(re.escape(p) for p in CHECKED_PREFIXES)
)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def markdown_pages() -> list[Path]:
    return [README, *DOCS]


def cited_paths(code: str) -> list[str]:
    """Repository paths at the start of a word in a piece of code."""
    paths = []
    for match in PATH_IN_CODE.finditer(code):
        path = match.group(1)
        if not PLACEHOLDER.search(path):
            paths.append(path.rstrip("."))  # a sentence's full stop
    return paths


def markdown_code(text: str) -> list[str]:
    """Fenced blocks and inline code spans of a Markdown page."""
    blocks = FENCE.findall(text)
    return blocks + CODE_SPAN.findall(FENCE.sub("", text))


def comment_code(text: str) -> list[str]:
    """Code spans in the comments of a YAML file or a Makefile."""
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    return CODE_SPAN.findall(comments)


def missing(path: str) -> bool:
    clean = path.rstrip("/")
    if clean in NOT_YET_WRITTEN:
        return False
    return not (REPO / clean).exists()


# --- the README ------------------------------------------------------------------------------


def test_readme_fits_on_a_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize(
    "needed",
    [
        "make run",
        "make test",
        "reports/synthetic/summary.html",
        "reports/report.html",
        "reports/examples/cpu-default-study",
        "nnperf doctor",
        "nnperf plan",
        "ncu",
        "ERR_NVGPUCTRPERM",
        "NVreg_RestrictProfilingToAdminUsers=0",
        "snakemake --cores all --configfile config/gpu.yaml",
        "make gpu-study",
        "make gpu-check",
    ],
)
def test_readme_names_what_a_newcomer_needs(needed):
    assert needed in README.read_text(encoding="utf-8")


def test_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    linked = {target.split("#")[0] for target in LINK.findall(text)}
    assert DOCS, "docs/ has no pages"
    for page in DOCS:
        assert f"docs/{page.name}" in linked, f"README.md does not link docs/{page.name}"


def test_make_run_prints_where_the_report_is():
    """The `run` target ends by naming the summary and Snakemake's report."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1).splitlines()
    assert "snakemake --report reports/report.html" in recipe[-2]
    assert recipe[-1].lstrip().startswith("@echo")
    assert "reports/synthetic/summary.html" in recipe[-1] and "reports/report.html" in recipe[-1]


# --- links and cited paths -------------------------------------------------------------------


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_points_to_an_existing_file(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # http(s), mailto, an anchor on the same page
        path = target.split("#")[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to missing files: {broken}"


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_a_page_cites_exists(page):
    code = markdown_code(page.read_text(encoding="utf-8"))
    absent = sorted({path for piece in code for path in cited_paths(piece) if missing(path)})
    assert not absent, f"{page.name} cites paths that do not exist: {absent}"


@pytest.mark.parametrize(
    "source",
    [*sorted((REPO / "config").glob("*.yaml")), REPO / "Makefile"],
    ids=lambda p: p.relative_to(REPO).as_posix(),
)
def test_every_path_a_comment_cites_exists(source):
    code = comment_code(source.read_text(encoding="utf-8"))
    absent = sorted({path for piece in code for path in cited_paths(piece) if missing(path)})
    assert not absent, f"{source.name} comments cite paths that do not exist: {absent}"


def test_the_path_check_sees_paths_and_skips_placeholders():
    assert cited_paths("snakemake --configfile config/gpu.yaml") == ["config/gpu.yaml"]
    assert cited_paths("see docs/gpu.md.") == ["docs/gpu.md"]
    assert cited_paths("workflow/rules/*.smk reports/{dataset}/x tests/<name>.py envs/...") == []
    assert cited_paths("src/nnperf/config/x.py results/tables/") == []
    assert missing("docs/no-such-page.md") and not missing("docs/")
    assert not missing("reports/examples/h100-gpu-study/")


# --- the configuration reference -------------------------------------------------------------


def test_configuration_reference_is_the_schema():
    """docs/configuration.md's key reference is generated from the schema: rerun
    `python docs/config_reference.py` after changing it."""
    spec = importlib.util.spec_from_file_location(
        "config_reference", REPO / "docs" / "config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    schema = yaml.safe_load(module.SCHEMA.read_text(encoding="utf-8"))
    page = module.PAGE.read_text(encoding="utf-8")
    assert module.render(page, schema) == page, "run: python docs/config_reference.py"
    for section, node in schema["properties"].items():
        assert f"### `{section}`" in page
        for key in node.get("properties", {}):
            assert f"`{key}`" in page, f"{section}.{key}"


# --- paths the code cites ----------------------------------------------------------------------

# Repository paths a comment or docstring of the library, the workflow or the tests may cite.
CODE_CITED_PREFIXES = ("src/nnperf/", "workflow/", "config/", "docs/")
CODE_PATH = re.compile(
    r"(?<![\w./-])((?:%s)[^\s`'\"(),;:\]]*)" % "|".join(re.escape(p) for p in CODE_CITED_PREFIXES)
)
TRIPLE_QUOTED = re.compile(r'"""(.*?)"""', re.DOTALL)


def code_cited_paths(text: str) -> list[str]:
    """Repository paths under CODE_CITED_PREFIXES in a piece of prose, placeholders left out."""
    paths = []
    for match in CODE_PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if not PLACEHOLDER.search(path):
            paths.append(path)
    return paths


def python_prose(text: str) -> str:
    """The comments and docstrings of a Python source (module, class and function ones)."""
    import ast
    import io
    import tokenize

    comments = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    tree = ast.parse(text)
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = [
        ast.get_docstring(node) or "" for node in ast.walk(tree) if isinstance(node, kinds)
    ]
    return "\n".join(comments + docstrings)


def workflow_prose(text: str) -> str:
    """The comments and docstrings of a Snakemake file (or a YAML/RST one: its `#` comments
    and, for RST, the whole caption)."""
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    return "\n".join(comments + TRIPLE_QUOTED.findall(text))


def code_sources() -> list[Path]:
    sources = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "tests").glob("*.py"))
    workflow = [path for path in sorted((REPO / "workflow").rglob("*")) if path.is_file()]
    return sources + [path for path in workflow if "__pycache__" not in path.parts]


@pytest.mark.parametrize("source", code_sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_the_code_cites_exists(source):
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".py":
        prose = python_prose(text)
    elif source.suffix == ".rst":
        prose = text
    else:
        prose = workflow_prose(text)
    absent = sorted({path for path in code_cited_paths(prose) if missing(path)})
    assert not absent, f"{source.relative_to(REPO)} cites paths that do not exist: {absent}"


def test_the_code_path_check_sees_paths_and_skips_placeholders():
    assert code_cited_paths("see src/nnperf/core/layout.py.") == ["src/nnperf/core/layout.py"]
    assert code_cited_paths("`workflow/rules/common.smk` and ../report/x.rst") == [
        "workflow/rules/common.smk"
    ]
    assert code_cited_paths("workflow/rules/*.smk config/{name}.yaml docs/<page>.md src/...") == []
    assert python_prose('"""Cites docs/a.md."""\nx = "docs/b.md"  # and docs/c.md\n').split(
        "\n"
    ) == ["# and docs/c.md", "Cites docs/a.md."]
