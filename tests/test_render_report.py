"""`nnperf render-report` and `nnperf compare-machines` on results folders as the pipeline
writes them: what the summary says, that the HTML needs nothing beside itself, the merge of
two machines, and the library entry points the report rules call (torch-free)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from nnperf import report, results
from nnperf.cli import main
from nnperf.codehash import closure
from nnperf.contract import ReportRequest
from nnperf.errors import NnperfError
from report_tables import gpu_folder, inside, laptop_folder, write_figure

H100 = "NVIDIA H100 80GB HBM3 (gpu01)"
I7 = "Intel(R) Core(TM) i7-1185G7 (laptop)"


class Resources(HTMLParser):
    """Every URL-bearing attribute of a page and the tags that could load something."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data", "poster", "action") and value:
                self.urls.append((tag, name, value))


@pytest.fixture
def two_machines(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    laptop_folder(Path("laptop"))
    gpu_folder(Path("gpu"))
    return tmp_path


def render(*extra: str) -> int:
    return main(
        [
            "render-report",
            "--results",
            "laptop",
            "--extra-results",
            "gpu",
            "--out-html",
            "reports/summary.html",
            "--out-md",
            "reports/summary.md",
            "--title",
            "Two machines",
            *extra,
        ]
    )


def test_summary_html_is_self_contained(two_machines):
    assert render() == 0
    html = Path("reports/summary.html").read_text(encoding="utf-8")
    page = Resources()
    page.feed(html)
    external = [u for u in page.urls if not (u[2].startswith("#") or u[2].startswith("data:"))]
    assert external == []
    assert not {"script", "link", "iframe", "object", "embed"} & set(page.tags)
    assert "url(" not in html and "@import" not in html
    images = [u for u in page.urls if u[0] == "img"]
    # Three figures in the two folders, each embedded as a PNG data URI.
    assert len(images) == 3
    assert all(u[2].startswith("data:image/png;base64,iVBORw0KGgo") for u in images)


def test_summary_states_the_findings_with_their_numbers(two_machines):
    assert render("--note", "Nsight Compute skipped: ncu not found.") == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    key = md.split("## Key findings", 1)[1].split("\n## ", 1)[0]
    assert (
        f"Fastest configuration on {H100}: resnet18_cifar bf16 at batch 64 (baseline), "
        "1,800 img/s (95% CI 1,750–1,850)."
    ) in key
    assert (
        f"bf16 is 1.80x faster than fp32 for resnet18_cifar at batch 64 (baseline) on {H100}: "
        "1,800 img/s (95% CI 1,750–1,850) vs 1,000 img/s (95% CI 980–1,020)."
    ) in key
    assert "the input pipeline — data wait and host-to-device copies take 40% of each step" in key
    # 1000 / 200 img/s: the GPU box against the laptop on the shared fp32 batch-64 config.
    assert (
        f"Across machines, resnet18_cifar fp32 at batch 64 (baseline) runs fastest on {H100} "
        f"at 1,000 img/s (95% CI 980–1,020), 5.00x the slowest machine, {I7}, at 200 img/s "
        "(95% CI 190–210)."
    ) in key
    assert (
        "1 configuration ran out of memory; 1 configuration flagged for high variance "
        "— see Notes."
    ) in key
    notes = md.split("## Notes: skipped and flagged", 1)[1]
    assert "- Nsight Compute skipped: ncu not found." in notes
    assert "Out of memory: resnet18_cifar fp32 at batch 128 (baseline)" in notes
    assert "High variance: resnet18_cifar fp32 at batch 64 (tuned)" in notes
    roofline = md.split("## Roofline", 1)[1].split("\n## ", 1)[0]
    assert "memory-bound at L1" in roofline and "67% of the roof above it" in roofline
    assert (
        "Sources: `laptop/tables/roofline_points.csv`, `gpu/tables/roofline_points.csv`" in roofline
    )


def test_every_section_names_its_sources_and_the_environment_has_a_column_per_machine(two_machines):
    assert render() == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    sections = re.split(r"\n## ", md)[2:]  # after the title and the key findings
    titles = [s.splitlines()[0] for s in sections]
    assert titles == [
        "Environment",
        "Study matrix",
        "Throughput",
        "Speedups",
        "Time breakdown",
        "Roofline",
        "Ceilings",
        "Top kernels",
        "Model complexity",
        "Machines compared",
        "Notes: skipped and flagged",
    ]
    for section in sections:
        assert "Sources: `" in section, section.splitlines()[0]
    environment = sections[0]
    header = next(line for line in environment.splitlines() if line.startswith("| Field"))
    assert I7 in header and H100 in header
    assert "| Driver " in environment and "580.95" in environment


def test_markdown_links_the_figures_relative_to_itself(two_machines):
    assert render() == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert "../laptop/figures/throughput/cpu/resnet18_cifar/fp32.png" in links
    assert len(links) == 3
    assert all((Path("reports") / link).resolve().is_file() for link in links)


def test_notes_file_and_explicit_tables(two_machines):
    Path("notes.json").write_text(json.dumps(["No GPU: devices auto resolved to cpu."]))
    code = main(
        [
            "render-report",
            "--summary",
            "laptop/tables/summary.csv",
            "--environment",
            "laptop/tables/environment.csv",
            "--complexity",
            "laptop/complexity/resnet18_cifar.json",
            "--figures",
            "--notes-file",
            "notes.json",
            "--out-html",
            "a.html",
            "--out-md",
            "a.md",
        ]
    )
    assert code == 0
    md = Path("a.md").read_text(encoding="utf-8")
    assert "- No GPU: devices auto resolved to cpu." in md
    # Only the files named: no figures, no roofline (its table was not given), one machine.
    assert "![" not in md and "## Roofline" not in md
    assert "| Machine" not in md.split("## Throughput", 1)[1].split("\n## ", 1)[0]
    notes_sources = md.split("## Notes: skipped and flagged", 1)[1].split("Sources:", 1)[1]
    assert notes_sources.splitlines()[0].endswith("`laptop/tables/summary.csv`, `notes.json`")


def test_bad_input_is_one_line_naming_it(two_machines, capsys):
    assert render("--extra-results", "nowhere") == 2
    assert capsys.readouterr().err.strip() == (
        "nnperf render-report: error: report.extra_results entry 'nowhere' is not a folder; "
        "give the results/ folder another machine's run wrote"
    )
    Path("notes.json").write_text("[1, 2]")
    assert render("--notes-file", "notes.json") == 2
    assert (
        "--notes-file 'notes.json': the JSON list must hold strings only" in capsys.readouterr().err
    )
    assert render("--cv-threshold", "0") == 2
    assert "cv_threshold 0.0: must be > 0 (config report.cv_threshold)" in capsys.readouterr().err


def test_compare_machines_writes_the_merged_table_and_figure(two_machines):
    code = main(
        [
            "compare-machines",
            "--results",
            "laptop",
            "--extra-results",
            "gpu",
            "--out-csv",
            "machines.csv",
            "--out-figure",
            "machines.png",
        ]
    )
    assert code == 0
    merged = pd.read_csv("machines.csv")
    assert merged.groupby("machine")["results_dir"].first().to_dict() == {I7: "laptop", H100: "gpu"}
    assert len(merged) == 8
    assert Path("machines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_large_family_of_figures_is_folded(two_machines):
    for batch in range(1, 8):
        write_figure(Path(f"laptop/figures/roofline/cpu/m/fp32/bs{batch}/baseline.png"), "x")
    assert render() == 0
    html = Path("reports/summary.html").read_text(encoding="utf-8")
    roofline = html.split('<section id="roofline">', 1)[1].split("</section>", 1)[0]
    assert "<details><summary>8 roofline figures (click to show)</summary>" in roofline
    assert roofline.count("<img ") == 8
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    section = md.split("\n## Roofline\n", 1)[1].split("\n## ", 1)[0]
    assert "8 roofline figures:" in section
    assert (
        "- [roofline / cpu / m / fp32 / bs1 / baseline](../laptop/figures/roofline/cpu/m/fp32/bs1/baseline.png)"
        in section
    )
    assert "![" not in section


def test_the_rule_entry_point_reads_only_the_files_named(two_machines):
    """As rule render_report calls it: named tables, no folder discovery, request defaults."""
    laptop = Path("laptop")
    local = results.local_files(
        tables={
            "summary": inside(laptop, "table", name="summary"),
            "runs": inside(laptop, "table", name="runs"),
            "environment": inside(laptop, "table", name="environment"),
            "kernels": None,
        },
        complexity=[inside(laptop, "complexity", model="resnet18_cifar")],
        ceilings=[inside(laptop, "ceilings", device="cpu")],
    )
    request = ReportRequest(notes=("Note from the workflow.",), extra_results=("gpu",))
    document = report.render_files(request, local, [], "out/summary.html", "out/summary.md")
    assert document.title == ReportRequest.title
    assert document.machines == [I7, H100]
    md = Path("out/summary.md").read_text(encoding="utf-8")
    assert "- Note from the workflow." in md
    # The laptop's roofline points were not named: only the GPU box's are read.
    roofline = md.split("\n## Roofline\n", 1)[1].split("\n## ", 1)[0]
    assert "`gpu/tables/roofline_points.csv`" in roofline
    assert "laptop/tables/roofline_points.csv" not in md
    with pytest.raises(NnperfError, match="summary table 'nowhere.csv': file not found"):
        results.local_files(tables={"summary": "nowhere.csv"})


def _script_modules(script: Path) -> set[str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


REPORT_SCRIPTS = (
    "roofline_points",
    "plot_roofline",
    "environment_table",
    "compare_machines",
    "render_report",
)


@pytest.mark.parametrize("name", REPORT_SCRIPTS)
def test_report_rules_run_without_torch(name):
    """These rules use envs/nnperf-report.yaml, which has no torch: importing every nnperf
    module their script reaches must not import it."""
    modules = closure(*sorted(_script_modules(REPO / "workflow/scripts" / f"{name}.py")))
    assert {"nnperf.jobs", "nnperf.errors"} <= set(modules)  # the closure was found
    code = (
        "import importlib, sys\n"
        f"for module in {list(modules)!r}:\n"
        "    importlib.import_module(module)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
