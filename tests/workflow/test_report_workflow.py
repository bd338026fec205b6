"""The report rules on the tiny config: a real Snakemake run, then `snakemake --report`.

The session's `tiny_study` (tests/conftest.py) runs the whole workflow on
tests/configs/tiny.yaml; the summary must report it: the complexity of every model, the
throughput of every configuration that ran, the notes on what was skipped, and a
self-contained HTML file. `snakemake --report` must then work offline.
"""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from conftest import TINY_CONFIG, run_snakemake
from nnperf.core import files
from nnperf.report.format import fmt, fmt_si
from report_tables import gpu_folder

pytestmark = pytest.mark.workflow


def section(markdown: str, title: str) -> str:
    return markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_summary_reports_the_complexity_of_every_model(tiny_study):
    md = (tiny_study / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    complexity = section(md, "Model complexity")
    for path in sorted((tiny_study / "results/complexity/synthetic").glob("*.json")):
        document = files.read_json(path)
        row = next(
            line for line in complexity.splitlines() if line.startswith(f"| {document['model']} ")
        )
        assert fmt_si(document["params"], "") in row
        assert fmt_si(document["train_step_flops_per_image"], "FLOP") in row
        assert f"`results/complexity/synthetic/{path.name}`" in complexity


def test_summary_reports_every_configuration_that_ran(tiny_study):
    summary_csv = tiny_study / "results/tables/synthetic/summary.csv"
    md = (tiny_study / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    headline, measurement = section(md, "At a glance"), section(md, "Measurement cost and quality")
    summary = pd.read_csv(summary_csv)
    for row in summary.itertuples():
        config = f"| {row.model} {row.precision} bs{row.batch_size} {row.variant} "
        line = next(line for line in headline.splitlines() if line.startswith(config))
        if row.status == "ok":
            # The headline (the mean over worker processes) and how much was measured.
            assert f"| {fmt(row.throughput_img_s_mean)} (" in line
            assert re.search(
                rf"\|\s*{row.precision}\s*\|\s*{row.batch_size}\s*\|\s*{row.variant}\s*\|"
                rf"\s*ok\s*\|\s*{int(row.n_processes)}\s*\|\s*{int(row.n_windows)}\s*\|",
                measurement,
            )
    environment = pd.read_csv(tiny_study / "results/tables/synthetic/environment.csv", dtype=str)
    # One run document per configuration, each with its environment record.
    assert len(environment) == len(summary)
    machine = environment["machine"].iloc[0]
    # The tie rule: "fastest" only with the ratio separating it from the runner-up.
    first = md.split("## Key findings", 1)[1].lstrip().splitlines()[0]
    assert re.match(
        rf"- (Fastest configuration|No single fastest configuration|Only configuration "
        rf"measured) on {re.escape(machine)}:",
        first,
    ), first
    if first.startswith("- Fastest"):
        assert "than the runner-up" in first and "95% CI" in first


def test_summary_notes_what_was_skipped(tiny_study):
    md = (tiny_study / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    notes = section(md, "Notes: skipped and flagged")
    assert (
        "- Device 'cpu': Nsight Compute profiles CUDA devices only; roofline is analytic" in notes
    )


def test_summary_html_is_self_contained(tiny_study):
    html = (tiny_study / "reports/synthetic/summary.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html and "<link" not in html
    assert html.count("<table") >= 1


def test_snakemake_report_works_after_the_run(tiny_study):
    # As users run it: no --cores (nothing executes).
    done = run_snakemake(
        tiny_study, "--configfile", str(TINY_CONFIG), "--report", "reports/report.html", cores=None
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = (tiny_study / "reports/report.html").read_text(encoding="utf-8")
    # Everything is inlined: no script or stylesheet is fetched when it opens.
    assert not re.search(r"""<(script|link)[^>]+(src|href)\s*=\s*["']https?://""", report)
    assert "summary.html" in report and "summary.md" in report
    assert "resnet18_cifar_layers.csv" in report
    for category in (
        "Throughput",
        "Time breakdown",
        "Roofline",
        "Complexity",
        "Ceilings",
        "Environment",
        "Report",
    ):
        assert category in report, category


def test_extra_results_of_another_machine_join_the_summary(tiny_study, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(tiny_study, workdir, symlinks=True)
    gpu_folder(tmp_path / "gpu" / "results")
    done = run_snakemake(
        workdir,
        "--configfile",
        str(TINY_CONFIG),
        "--forcerun",
        "render_report",
        "reports/synthetic/summary.md",
        "--config",
        f"report={{extra_results: [{tmp_path / 'gpu' / 'results'}]}}",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    md = (workdir / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    assert "NVIDIA H100 80GB HBM3 (gpu01)" in md.split("## Key findings", 1)[0]
    assert (
        "bf16 is 1.80x faster (95% CI 1.75-1.85) than fp32 for resnet18_cifar at batch 64 "
        "(baseline) on NVIDIA H100 80GB HBM3 (gpu01)"
    ) in md
    assert f"`{tmp_path / 'gpu' / 'results' / 'tables' / 'synthetic' / 'summary.csv'}`" in md
    # The comparison figure is drawn from both machines' summaries and embedded.
    merged = pd.read_csv(workdir / "results/tables/synthetic/machines_summary.csv")
    assert "NVIDIA H100 80GB HBM3 (gpu01)" in set(merged["machine"])
    assert (workdir / "results/figures/machines/synthetic/throughput.png").is_file()
    assert "../../results/figures/machines/synthetic/throughput.png" in md
