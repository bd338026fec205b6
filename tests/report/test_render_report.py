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
from nnperf.cli import main
from nnperf.core import files
from nnperf.core.codehash import closure
from nnperf.core.contract import ReportRequest
from nnperf.core.cpuinfo import parse_cpuinfo
from nnperf.core.errors import NnperfError
from nnperf.report import results
from nnperf.report import render as report
from nnperf.roofline import peaks
from report_tables import (
    CPUINFO_NO_BF16,
    GPU_START_UNIX,
    LAPTOP,
    LAPTOP_START_UNIX,
    UNSTABLE_WORDS,
    ceilings_document,
    compare_with,
    gpu_folder,
    inside,
    laptop_configs,
    laptop_folder,
    over_budget_config,
    roofline_point,
    write_figure,
    write_machine,
)

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
    laptop_folder(Path("laptop"), extra=[over_budget_config()])
    # As the workflow writes it with report.extra_results: the machines compared inside.
    compare_with(Path("laptop"), gpu_folder(Path("gpu")))
    return tmp_path


def section(markdown: str, title: str) -> str:
    return markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


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
    # Processes at 990/1000/1010 and 1782/1800/1818 img/s: Fieller's interval of the ratio
    # at Welch's 3.1 degrees of freedom is 1.80 +/- 0.046.
    assert (
        f"Fastest configuration on {H100}: resnet18_cifar bf16 at batch 64 (baseline), "
        "1,800 img/s (95% CI 1,785–1,815); 1.80x faster (95% CI 1.75-1.85) than the "
        "runner-up, fp32."
    ) in key
    assert (
        "Best precision at batch 64 (baseline): bf16, 1.80x "
        "faster (95% CI 1.75-1.85) than fp32 (1,800 img/s (95% CI 1,785–1,815) vs 1,000 img/s "
        "(95% CI 995–1,005))."
    ) in key
    # The laptop's fastest configuration is flagged unstable next to its number.
    assert (
        f"Fastest configuration on {I7}: resnet18_cifar fp32 at batch 64 (tuned), "
        "260 img/s (95% CI 250–270; unstable); 1.30x faster (95% CI 1.04-1.56) than the "
        "runner-up, baseline."
    ) in key
    # The laptop's bf16 configuration missed its CI target, and the finding naming it says so.
    assert "Best precision at batch 64 (baseline): fp32, 1.33x faster" in key
    assert "than bf16 (200 img/s (95% CI 190–210) vs 150 img/s (95% CI 140–160)); " in key
    assert "; bf16 (±6.7% against ±6.0%) missed its CI target." in key
    assert "the input pipeline — data wait and host-to-device copies take 40% of each step" in key
    # 1000 / 200 img/s: the GPU box against the laptop on the shared fp32 batch-64 config
    # (comparisons.csv also holds bf16's 12x; the sentence quotes fp32, the reference).
    assert (
        f"Across machines, resnet18_cifar fp32 at batch 64 (baseline) runs fastest on {H100} "
        f"at 1,000 img/s, 5.00x faster (95% CI 4.84-5.17) than the slowest machine, {I7}, "
        "at 200 img/s."
    ) in key
    # Busy: laptop 275 s + GPU box 135 s = 410 s; timed 7 x 24 s = 168 s (41%); 6 of the 7
    # measured configurations reached their CI target (the laptop's bf16 one did not).
    assert (
        "- Measuring took 6.8 min of busy time, 41% of it in timed windows; 6 of 7 measured "
        "configurations reached their CI target — see Measurement cost and quality."
    ) in key
    assert (
        "1 configuration ran out of memory; 1 configuration took too long per step to measure "
        "within the time budget; 1 configuration flagged unstable; 1 configuration flagged for "
        "high variance — see Notes."
    ) in key
    notes = md.split("## Notes: skipped and flagged", 1)[1]
    assert "- Nsight Compute skipped: ncu not found." in notes
    assert "Out of memory: resnet18_cifar fp32 at batch 128 (baseline)" in notes
    assert "High variance: resnet18_cifar fp32 at batch 64 (tuned)" in notes
    assert (
        f"- Over budget: resnet18_cifar bf16 at batch 256 (baseline) on {I7} was not measured — "
        "one step takes at least 13.2 s, so the 19 steps still needed (warm-up and 2 windows "
        "of 8 steps) need at least 251 s, more than the 55 s left of timing.max_seconds 60 s; "
        "raise timing.max_seconds to measure it."
    ) in notes
    assert (
        f"- Unstable: resnet18_cifar fp32 at batch 64 (tuned) on {I7} — {UNSTABLE_WORDS};" in notes
    )
    roofline = md.split("## Roofline", 1)[1].split("\n## ", 1)[0]
    # The reading table's row: memory-bound at L1, 67% of the roof above it.
    assert re.search(r"\| profile +\| memory \(L1\) +\|.*\| 67% +\|", roofline)
    assert (
        "Sources: `laptop/tables/synthetic/roofline_points.csv`, `gpu/tables/synthetic/roofline_points.csv`"
        in roofline
    )


def test_every_section_names_its_sources_and_the_environment_has_a_column_per_machine(two_machines):
    assert render() == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    sections = re.split(r"\n## ", md)[1:]  # after the title
    titles = [s.splitlines()[0] for s in sections]
    # The answer first (the headline, the key findings, the sections with figures), how it
    # was measured after them, the environment last.
    assert titles == [
        "At a glance",
        "Key findings",
        "Throughput",
        "Speedups",
        "Time breakdown",
        "Roofline",
        "Ceilings",
        "Top kernels",
        "Model complexity",
        "Machines compared",
        "Measurement cost and quality",
        "Notes: skipped and flagged",
        "Environment",
    ]
    for section in sections[:1] + sections[2:]:
        assert "Sources: `" in section, section.splitlines()[0]
    environment = sections[-1]
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
            "laptop/tables/synthetic/summary.csv",
            "--environment",
            "laptop/tables/synthetic/environment.csv",
            "--complexity",
            "laptop/complexity/synthetic/resnet18_cifar.json",
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
    assert notes_sources.splitlines()[0].endswith(
        "`laptop/tables/synthetic/summary.csv`, `notes.json`"
    )


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
    assert "report.cv_threshold = 0.0 is not allowed; allowed: a fraction in (0, 1]" in (
        capsys.readouterr().err
    )


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
    assert len(merged) == 9
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
    assert "`gpu/tables/synthetic/roofline_points.csv`" in roofline
    assert "laptop/tables/synthetic/roofline_points.csv" not in md
    with pytest.raises(NnperfError, match="summary table 'nowhere.csv': file not found"):
        results.local_files(tables={"summary": "nowhere.csv"})


def table_row(markdown: str, *cells: str) -> str:
    """The one table line of `markdown` holding every cell in `cells`."""
    lines = [
        line
        for line in markdown.splitlines()
        if line.startswith("|") and all(f"| {c} " in line for c in cells)
    ]
    assert len(lines) == 1, (cells, lines)
    return lines[0]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_headline_shows_flags_and_what_was_not_measured(two_machines):
    assert render() == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    headline = section(md, "At a glance")
    cpu, gpu = headline.split(f"### cpu on {I7}\n", 1)[1].split(f"### cuda on {H100}\n")
    header = cells(next(line for line in cpu.splitlines() if line.startswith("| Config")))

    def row(table: str, config: str) -> dict:
        return dict(zip(header, cells(table_row(table, config))))

    tuned = row(cpu, "resnet18_cifar fp32 bs64 tuned")
    assert tuned["img/s (95% CI)"] == "260 (250–270)"
    assert tuned["Flags"] == "unstable high-cv"
    # (160 - 140) / 2 / 150 = 6.7% > the 6% target.
    assert row(cpu, "resnet18_cifar bf16 bs64 baseline")["Flags"] == "ci-missed"
    slow = row(cpu, "resnet18_cifar bf16 bs256 baseline")
    assert (slow["img/s (95% CI)"], slow["Flags"]) == ("—", "over_budget")
    assert row(cpu, "resnet18_cifar fp32 bs128 baseline")["Flags"] == "oom"
    # The analytic point: 2.5e10 FLOP/s of the measured 1e11 fp32 peak, memory-bound; the
    # laptop has no datasheet entry. Data wait 0.01 s of a 0.1 s step.
    base = row(cpu, "resnet18_cifar fp32 bs64 baseline")
    assert (base["MFU, datasheet"], base["MFU, measured"], base["Limit"]) == ("—", "25%", "memory")
    assert base["Data wait"] == "10%"
    # 1e14 FLOP/s of the datasheet's 9.895e14 and the measured 6e14 bf16 peaks; the ncu busy
    # share (6.5%) says host-bound, which outranks the roofline's memory bound.
    bf16 = row(gpu, "resnet18_cifar bf16 bs64 baseline")
    assert (bf16["MFU, datasheet"], bf16["MFU, measured"]) == ("10%", "17%")
    assert (bf16["Limit"], bf16["Data wait"]) == ("host", "40%")
    throughput = section(md, "Throughput")
    header = cells(next(line for line in throughput.splitlines() if line.startswith("| Machine")))
    spread = dict(zip(header, cells(table_row(throughput, "64", "tuned"))))
    assert (spread["Median (img/s)"], spread["CV"]) == ("260", "8.0%")


def test_measurement_section_states_cost_and_quality(two_machines):
    local = results.local_files("laptop")
    request = ReportRequest(extra_results=("gpu",))
    rendered_at = GPU_START_UNIX + 1000
    report.render_files(
        request, local, [], "out/summary.html", "out/summary.md", rendered_at_unix=rendered_at
    )
    md = Path("out/summary.md").read_text(encoding="utf-8")
    measurement = section(md, "Measurement cost and quality")
    # Span: the laptop's complexity job (60 s before its first run) to the report, 1000 s
    # after the GPU box's first run a day later: 86,400 + 1,060 s = 24.3 h. Jobs: 7 runs +
    # ceilings + complexity on the laptop, 2 + 1 + 1 on the GPU box. Busy: laptop 5 + 90 +
    # 4 x 40 + 10 + 10 = 275 s, GPU box 5 + 90 + 40 = 135 s: 410 s. Timed 7 x 24 = 168 s:
    # 0.19% of the span, 41% of the busy time.
    assert (
        "- The study spans 24.3 h, from its first recorded job start (2023-11-14 22:12 UTC) to "
        "this report (2023-11-15 22:30 UTC); its 13 recorded jobs were busy for 6.8 min (the "
        "union of their intervals)."
    ) in measurement
    assert (
        "- The timed windows took 2.8 min: 0.2% of the span and 41% of the busy time" in measurement
    )
    assert (
        "- 6 of 7 measured configurations reached their CI target (a 95% CI half-width of "
        "throughput within timing.target_ci of the estimate); 1 did not."
    ) in measurement
    assert (
        f"- resnet18_cifar bf16 at batch 64 (baseline) on {I7} (±6.7% against ±6.0%) missed its "
        "CI target after 3 processes and 12 windows; the time budget ran out first "
        "(timing.max_seconds)"
    ) in measurement
    per_config = measurement.split("### Measurement per configuration", 1)[1].split("###", 1)[0]
    header = cells(next(line for line in per_config.splitlines() if line.startswith("| Machine")))
    tuned = dict(zip(header, cells(table_row(per_config, "64", "tuned"))))
    assert tuned == {
        **tuned,
        "Processes": "3",
        "Windows": "12",
        "CI half-width": "3.8%",
        "Target": "6.0%",
        "Met": "yes",
        "Stopped on": "CI target reached",
        "Dominant level": "process",
        "Between-process RSD": "8.0%",
        "Within-process RSD": "4.0%",
        "Fixed cost (s)": "2.00",
        "Per-process fixed cost (s)": "1.50",
        "Compile, first / later processes (s)": "20.0 / 2.00",
        "Timed (s)": "24.0",
        "Duty cycle": "60%",
        "Flagged windows": "2/12",
        "Unstable": f"yes: {UNSTABLE_WORDS}",
    }
    gpu_bf16 = dict(zip(header, cells(table_row(per_config, H100, "bf16"))))
    # (1815 - 1785) / 2 / 1800 = 0.83% within the GPU default of 1%.
    assert (gpu_bf16["CI half-width"], gpu_bf16["Target"], gpu_bf16["Met"]) == (
        "0.8%",
        "1.0%",
        "yes",
    )
    slow = dict(zip(header, cells(table_row(per_config, "256"))))
    assert (slow["Status"], slow["Windows"], slow["Met"]) == ("over budget", "0", "n/a")
    folders = measurement.split("### Wall time per results folder", 1)[1]
    laptop = cells(table_row(folders, "laptop"))
    assert laptop[2:] == [
        "7 timed runs, 1 ceilings job, 1 complexity job",
        "2023-11-14 22:12 UTC",
        "2023-11-14 22:23 UTC",
        "4.6 min",
        "2.0 min",
        "44%",
    ]
    # 48 s of 135 s.
    assert cells(table_row(folders, "gpu"))[-3:] == ["2.2 min", "48.0 s", "36%"]
    assert "`laptop/runs/synthetic/cpu/resnet18_cifar/fp32/bs64/tuned.json`" in measurement
    assert "`laptop/tables/synthetic/windows.csv`" in measurement


def test_without_run_jsons_the_job_times_come_from_the_tables(two_machines):
    """As rule render_report reads the files: named tables, no run JSONs. summary.csv copies
    each job's start and end; without them runs.csv's worker intervals stand in (missing the
    seconds before the first worker); named run JSONs always win."""
    laptop = Path("laptop")
    tables = {
        name: inside(laptop, "table", name=name)
        for name in ("summary", "runs", "windows", "environment")
    }
    named = {
        "complexity": [inside(laptop, "complexity", model="resnet18_cifar")],
        "ceilings": [inside(laptop, "ceilings", device="cpu")],
    }

    def busy(markdown_path: str) -> list[str]:
        text = Path(markdown_path).read_text(encoding="utf-8")
        return cells(table_row(section(text, "Measurement cost and quality"), "results"))

    report.render_files(
        ReportRequest(), results.local_files(tables=tables, **named), [], "a.html", "a.md"
    )
    # The same 275 s as from the run JSONs (see test_measurement_section_states_...).
    assert busy("a.md")[2] == "7 timed runs, 1 ceilings job, 1 complexity job"
    assert busy("a.md")[5] == "4.6 min"
    times = ["process_started_at_unix", "started_at_unix", "ended_at_unix"]
    pd.read_csv(tables["summary"]).drop(columns=times).to_csv("summary.csv", index=False)
    without = {**tables, "summary": "summary.csv"}
    report.render_files(
        ReportRequest(), results.local_files(tables=without, **named), [], "b.html", "b.md"
    )
    # Complexity 5 s; ceilings [-50, 10] with run 0's workers [0.5, 35.5]: 85.5 s; runs 1-4
    # 4 x 35 s; the oom and over-budget jobs' one process each 9 s: 248.5 s.
    assert busy("b.md")[5] == "4.1 min"
    runs = sorted(str(p) for p in (laptop / "runs").rglob("*.json"))
    code = main(
        [
            "render-report",
            *("--summary", "summary.csv"),
            *("--runs", str(tables["runs"])),
            *("--complexity", str(named["complexity"][0])),
            *("--ceilings", str(named["ceilings"][0])),
            "--run-jsons",
            *runs,
            *("--out-html", "c.html", "--out-md", "c.md"),
        ]
    )
    assert code == 0
    assert busy("c.md")[5] == "4.6 min"


def test_results_written_before_windows_and_job_times_still_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = laptop_folder(Path("old"), windows_csv=False)
    for path in [*old.rglob("*.json")]:
        document = files.read_json(path)
        for key in ("started_at_unix", "ended_at_unix", "process_started_at_unix"):
            document.pop(key, None)
        files.write_json(path, document)
    runs = old / "tables/synthetic/runs.csv"
    # Written without those columns (by files.write_csv: tables carry their sidecars).
    files.write_csv(runs, pd.read_csv(runs).drop(columns=["started_at_unix", "ended_at_unix"]))
    summary = old / "tables/synthetic/summary.csv"
    times = ["process_started_at_unix", "started_at_unix", "ended_at_unix"]
    files.write_csv(summary, pd.read_csv(summary).drop(columns=times))
    assert (
        main(["render-report", "--results", "old", "--out-html", "o.html", "--out-md", "o.md"]) == 0
    )
    measurement = section(Path("o.md").read_text(encoding="utf-8"), "Measurement cost and quality")
    assert (
        "- No job recorded when it ran (results from before jobs kept their start and end "
        "times), so the study's wall time is unknown; its timed windows took 2.0 min."
    ) in measurement
    assert "### Wall time per results folder" not in measurement
    header = cells(next(line for line in measurement.splitlines() if line.startswith("| Device")))
    tuned = dict(zip(header, cells(table_row(measurement, "64", "tuned"))))
    assert tuned["Flagged windows"] == "—" and tuned["Between-process RSD"] == "8.0%"


def test_a_cpu_only_study_reports_the_torch_build_and_no_bf16_roof_it_lacks(tmp_path, monkeypatch):
    """The laptop's study alone, its ceilings with the derived peak of a CPU without bf16
    arithmetic: no CUDA version presented as the machine's, no bf16 datasheet roof (a dash
    and the reason), and the bf16 step read against the measured roofs only."""
    monkeypatch.chdir(tmp_path)
    configs = laptop_configs()
    bf16 = next(c for c in configs if c.precision == "bf16")
    sheet = peaks.derived_cpu_peak(parse_cpuinfo(CPUINFO_NO_BF16), 2, 2.45e9, "test")
    ceilings = ceilings_document(
        "cpu",
        LAPTOP[1],
        gemm={"fp32": 69e9, "bf16": 0.84e9},
        bandwidth=1e10,
        datasheet=sheet,
        start_unix=LAPTOP_START_UNIX,
    )
    # 2.5e9 FLOP in 10 s over 5e8 bytes: 2.5e8 FLOP/s at 5 FLOP/B, compute-bound under the
    # measured bf16 roof (0.84 GFLOP/s; memory 5e10 FLOP/s at 5 FLOP/B).
    point = roofline_point(
        bf16, source="analytic", level="algorithmic", flops=2.5e9, bytes_=5e8, time_s=10.0
    )
    write_machine(
        Path("cpu"),
        LAPTOP,
        configs,
        ceilings=ceilings,
        points=[point],
        start_unix=LAPTOP_START_UNIX,
    )
    out = ("--out-html", "cpu.html", "--out-md", "cpu.md")
    assert main(["render-report", "--results", "cpu", *out, "--title", "CPU study"]) == 0
    md = Path("cpu.md").read_text(encoding="utf-8")

    environment = {
        cells(line)[0]: cells(line)[1:]
        for line in section(md, "Environment").splitlines()
        if line.startswith("| ")
    }
    assert environment["CUDA"] == environment["cuDNN"] == ["not used (cpu runs)"]
    assert environment["torch build"] == ["CUDA 13.0, cuDNN 9.13.0"]
    assert "Driver" not in environment
    assert [f for f, v in environment.items() if "13.0" in " ".join(v)] == ["torch build"]

    ceilings_md = section(md, "Ceilings")
    assert (
        f"- {I7}: no derived bf16 peak, no native bf16 arithmetic (flags lack amx_bf16, "
        "avx512_bf16, avx_ne_convert): bf16 runs emulated, no derived peak."
    ) in ceilings_md
    bf16_row = cells(table_row(ceilings_md, "bf16 GEMM"))
    fp32_row = cells(table_row(ceilings_md, "fp32 GEMM"))
    assert bf16_row == ["cpu", "bf16 GEMM", "840 MFLOP/s", "n/a", "—", "—"]
    # The peak is derived (cores x clock x FLOP/cycle) and labelled so, never "datasheet".
    assert fp32_row[:5] == ["cpu", "fp32 GEMM", "69 GFLOP/s", "157 GFLOP/s", "derived"]

    roofline_md = section(md, "Roofline")
    reading = cells(table_row(roofline_md, "bf16"))
    assert "datasheet" not in " ".join(reading) and "measured" in " ".join(reading)
    assert "compute-bound" in roofline_md


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
    "plot_operators",
    "training_table",
    "plot_accuracy",
)


@pytest.mark.parametrize("name", REPORT_SCRIPTS)
def test_report_rules_run_without_torch(name):
    """These rules use envs/nnperf-report.yaml, which has no torch: importing every nnperf
    module their script reaches must not import it."""
    modules = closure(*sorted(_script_modules(REPO / "workflow/scripts" / f"{name}.py")))
    assert {"nnperf.core.jobs", "nnperf.core.errors"} <= set(modules)  # the closure was found
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


def test_profiled_configurations_show_the_busy_share_and_both_clocks(two_machines):
    """Every profiled configuration: its kernel time at the profiled clock, the profiled and
    the runs' clock, the timed step, the GPU's busy share and what it makes of the step, and
    the calibration GEMM's checks of the profile."""
    assert render() == 0
    md = Path("reports/summary.md").read_text(encoding="utf-8")
    roofline = section(md, "Roofline")
    assert "Profiled configurations: GPU busy share, clocks and checks" in roofline
    header = next(line for line in roofline.splitlines() if "Profiled SM clock (ncu)" in line)
    for column in (
        "Kernel time (ms) at profiled clock",
        "Runs' SM clock",
        "Timed step (ms)",
        "GPU busy",
        "Step is",
        "Calibration GEMM",
        "Compute roof",
    ):
        assert column in header
    names = [cell.strip() for cell in header.strip("|").split("|")]
    row = next(line for line in roofline.splitlines() if "host-bound" in line and "|" in line)
    cells = dict(zip(names, (cell.strip() for cell in row.strip("|").split("|"))))
    # 650 us of kernels at 1.98 GHz (both clocks) in a 10 ms step; the GEMM at 90% of its roof.
    assert cells["Kernel time (ms) at profiled clock"] == "0.65"
    assert cells["Profiled SM clock (ncu)"] == cells["Runs' SM clock"] == "1.98 GHz"
    assert cells["Timed step (ms)"] == "10.0" and cells["GPU busy"] == "6.5%"
    assert cells["Step is"] == "host-bound"
    assert cells["Calibration GEMM"] == "90% of roof: ok" and "2:4-sparse" in cells["Compute roof"]
    sentence = (
        f"resnet18_cifar bf16 at batch 64 (baseline) on {H100}: the GPU is busy 6.5% of the "
        "timed step (0.65 ms of kernels at the runs' 1.98 GHz, 0.65 ms at the profiled 1.98 GHz, "
        "in a 10.0 ms step): host-bound"
    )
    assert sentence in roofline
    assert sentence in section(md, "Key findings")
    assert "Sources:" in roofline and "gpu/tables/synthetic/profiles.csv" in roofline
