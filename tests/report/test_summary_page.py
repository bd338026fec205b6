"""The summary page as a reader meets it: the committed CPU example's tables rendered against
a golden Markdown file, the headline table on the first screen, every number the committed
page holds on its render, every number the page before the headline held (an earlier
example's, kept in tests/report/golden/before-headline with its images left out) still on
the page its tables give now, and no confidence interval printed below zero.

Regenerate the golden file after an intended change of the page:
`NNPERF_REGEN_GOLDEN=1 pytest tests/report/test_summary_page.py`, then read its diff.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from nnperf.core.contract import ReportRequest
from nnperf.report import render, results
from nnperf.report.format import fmt
from report_tables import LAPTOP, Config, ceilings_document, roofline_point, write_machine

EXAMPLE = Path("reports/examples/cpu-default-study")
GOLDEN = REPO / "tests" / "report" / "golden" / "cpu-default-study.md"
# The end of the example study's span: its last job ended at 1795855591.3 (summary.csv).
RENDERED_AT = 1_795_868_000.0
# The example as it was at 19b83be, whose page was written before the headline existed.
BEFORE_HEADLINE = Path("tests/report/golden/before-headline")
BEFORE_HEADLINE_RENDERED_AT = 1_795_790_000.0
# The sections of the committed page drawn only from the committed tables (summary.csv,
# runs.csv, training.csv, comparisons.csv); the others (the headline's MFU columns too) read
# files the example does not keep (roofline points, complexity, operator profiles).
FROM_COMMITTED_TABLES = (
    "throughput",
    "input",
    "speedups",
    "breakdown",
    "accuracy",
    "notes",
)
# A number as the report prints it: 1,234 / 49.4 / 2.5% / 1.81x / 0.000582.
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:%|x)?")
# A minus sign right before a digit, not inside a word or a number range (`1.04-1.07`).
NEGATIVE = re.compile(r"(?<![\w.])[-\u2212]\d")


def render_example(folder: Path, out: Path, rendered_at: float) -> tuple[str, str]:
    """(HTML, Markdown) of an example's tables, paths as the repository names them."""
    tables = {
        name: folder / f"{name}.csv" for name in ("summary", "runs", "training", "comparisons")
    }
    local = results.local_files(tables=tables, ceilings=[folder / "cpu.json"])
    request = ReportRequest(title="CPU smoke study")
    render.render_files(
        request, local, [], out / "summary.html", out / "summary.md", rendered_at_unix=rendered_at
    )
    return (out / "summary.html").read_text("utf-8"), (out / "summary.md").read_text("utf-8")


def _render_in_repo(tmp_path_factory, folder: Path, rendered_at: float) -> tuple[str, str]:
    here = Path.cwd()
    os.chdir(REPO)
    try:
        return render_example(folder, tmp_path_factory.mktemp("example"), rendered_at)
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> tuple[str, str]:
    return _render_in_repo(tmp_path_factory, EXAMPLE, RENDERED_AT)


@pytest.fixture(scope="module")
def before_headline(tmp_path_factory) -> tuple[str, str]:
    return _render_in_repo(tmp_path_factory, BEFORE_HEADLINE, BEFORE_HEADLINE_RENDERED_AT)


def visible_text(page: str) -> str:
    """The words of an HTML page: no style, no images' data, no tags."""
    page = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    page = re.sub(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", " ", page)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_summary_matches_its_golden_file(example):
    _, markdown = example
    if os.environ.get("NNPERF_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(markdown, encoding="utf-8")
    assert GOLDEN.is_file(), f"no golden file: run with NNPERF_REGEN_GOLDEN=1 to write {GOLDEN}"
    assert markdown == GOLDEN.read_text(
        encoding="utf-8"
    ), "the summary changed: if intended, regenerate with NNPERF_REGEN_GOLDEN=1 and read the diff"


def test_the_first_screen_is_the_headline_table(example):
    page, markdown = example
    lines = markdown.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("|"))
    assert first_table <= 15, lines[:first_table]
    assert "## At a glance" in lines[:first_table]
    assert lines[first_table - 2] == "### cpu on AMD EPYC (vm)"
    assert lines[first_table].split("|")[1].strip() == "Configuration"
    # In the HTML, too: the first table is the headline's, before any figure or section.
    first = page.index("<table")
    assert page.rindex('<section id="', 0, first) == page.index('<section id="headline">')
    assert page.index("<h2>Environment</h2>") > page.index("<h2>Key findings</h2>") > first


def _numbers_kept(old_page: str, new_page: str, sections) -> int:
    """Assert each number of `old_page`'s `sections` (sources lines left out) is on
    `new_page`; how many were checked."""
    new = visible_text(new_page)
    old_sections = dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', old_page, re.S))
    checked = 0
    for name in sections:
        body = re.sub(r'<p class="sources">.*?</p>', " ", old_sections[name], flags=re.S)
        for number in set(NUMBER.findall(visible_text(body))):
            assert re.search(rf"(?<![\w.,]){re.escape(number)}(?![\d])", new), (name, number)
            checked += 1
    return checked


def _headline(page: str) -> str:
    return visible_text(page).split("At a glance", 2)[2].split("Key findings", 1)[0]


def _mean_and_interval(row) -> str:
    interval = f"{fmt(row['throughput_img_s_ci95_low'])}–{fmt(row['throughput_img_s_ci95_high'])}"
    return f"{fmt(row['throughput_img_s_mean'])} ({interval})"


def test_every_number_of_the_committed_page_is_on_the_render(example):
    """The committed summary.html (what the study's own render_report wrote) against the page
    the committed tables give now: each number of its sections drawn from those tables, and
    each configuration's mean and CI in the headline table of both."""
    page, _ = example
    committed = (REPO / EXAMPLE / "summary.html").read_text(encoding="utf-8")
    assert _numbers_kept(committed, page, FROM_COMMITTED_TABLES) > 150
    for row in pd.read_csv(REPO / EXAMPLE / "summary.csv").to_dict("records"):
        assert _mean_and_interval(row) in _headline(page)
        assert _mean_and_interval(row) in _headline(committed)


def test_every_number_of_the_page_before_the_headline_is_on_its_render(before_headline):
    """The page written before the headline existed against the page its tables give now:
    nothing a user saw was lost when the summary put the answer first."""
    page, _ = before_headline
    old_page = (REPO / BEFORE_HEADLINE / "summary.html").read_text(encoding="utf-8")
    assert _numbers_kept(old_page, page, ("matrix", *FROM_COMMITTED_TABLES)) > 200
    old_throughput = dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', old_page, re.S))[
        "throughput"
    ]
    for row in pd.read_csv(REPO / BEFORE_HEADLINE / "summary.csv").to_dict("records"):
        assert _mean_and_interval(row) in _headline(page)
        assert fmt(row["throughput_img_s_mean"]) in visible_text(old_throughput)


def test_no_interval_below_zero_is_printed(tmp_path, monkeypatch):
    """A summary.csv written before the engine's intervals were log-scale: three scattered
    processes give a t-interval from -476 img/s, which the page must not print."""
    monkeypatch.chdir(tmp_path)
    m = "resnet18_cifar"
    configs = [
        Config("cpu", m, "fp32", 16, "baseline", 362.0, (-476.0, 1200.0), between_rsd=0.5),
        Config("cpu", m, "bf16", 16, "baseline", 500.0, (480.0, 520.0)),
    ]
    ceilings = ceilings_document("cpu", LAPTOP[1], gemm={"fp32": 1e11}, bandwidth=1e10)
    point = roofline_point(
        configs[0], source="analytic", level="algorithmic", flops=2.5e9, bytes_=5e8, time_s=0.1
    )
    write_machine(Path("laptop"), LAPTOP, configs, ceilings=ceilings, points=[point])
    summary = pd.read_csv("laptop/tables/synthetic/summary.csv")
    assert summary["throughput_img_s_ci95_low"].min() == -476.0
    request = ReportRequest(title="Scattered")
    render.render_files(request, results.local_files("laptop"), [], "s.html", "s.md")
    markdown, page = Path("s.md").read_text("utf-8"), visible_text(
        Path("s.html").read_text("utf-8")
    )
    assert "362 (too few clean processes)" in markdown
    for text in (markdown, page):
        assert "476" not in text
        near_ci = re.findall(r"CI[^|)\n]*", text)
        assert near_ci and not [s for s in near_ci if NEGATIVE.search(s)]
        assert not NEGATIVE.search(text)
