"""Faults around the tables, in real Snakemake runs: another machine's folder
(`report.extra_results`) that is not a results folder, another machine's table edited after
the comparison, and run JSONs that went bad before a re-aggregation.

One small study (fp32, batch 4 and 8, baseline, a few seconds of timing) builds its run
tables once per module; each test works on a copy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY_CONFIG, run_snakemake
from report_tables import gpu_folder

from nnperf.core import files, layout

pytestmark = pytest.mark.workflow

CONFIG = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4, 8]",
    "variants={baseline: {}}",
    "timing={max_seconds: 15}",
)
TABLES = [layout.path("table", dataset="synthetic", name=n) for n in ("runs", "summary")]
ENVIRONMENT = layout.path("table", dataset="synthetic", name="environment")
COMPARISON = layout.path("table", dataset="synthetic", name="machines_summary")
RUNS = [
    layout.path(
        "run",
        dataset="synthetic",
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=batch,
        variant="baseline",
    )
    for batch in (4, 8)
]


def with_extra(folder) -> tuple[str, ...]:
    return (*CONFIG, f"report={{extra_results: [{folder}]}}")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def nnperf_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("nnperf")]


@pytest.fixture(scope="module")
def tables_study(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("tables_study")
    shutil.copytree(Path(__file__).resolve().parents[2] / "config", workdir / "config")
    result = run_snakemake(workdir, *CONFIG, "--", *TABLES, ENVIRONMENT)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


@pytest.fixture
def study(tables_study, tmp_path) -> Path:
    target = tmp_path / "study"
    shutil.copytree(tables_study, target, symlinks=True)
    return target


@pytest.mark.parametrize("folder", ["laptop", "/etc"])
def test_a_folder_that_is_not_a_results_folder_is_one_line_while_the_dag_is_built(study, folder):
    (study / "laptop").mkdir()
    (study / "laptop" / "notes.txt").write_text("not results\n")
    result = run_snakemake(study, "--dry-run", *with_extra(folder), "--", COMPARISON)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    expected = (
        f"nnperf: report.extra_results entry {folder!r} is not a results folder: no tables/ or "
        "runs/ of any dataset in it; give the results/ folder another machine's run wrote"
    )
    assert expected in result.stderr.splitlines()
    assert not (study / COMPARISON).exists()


def test_a_machine_folder_given_without_its_results_folder_is_named(study):
    gpu_folder(study / "gpu" / "results")
    result = run_snakemake(study, "--dry-run", *with_extra("gpu"), "--", COMPARISON)
    assert result.returncode != 0
    assert "entry 'gpu' is not a results folder" in result.stderr
    assert "(did you mean 'gpu/results'?)" in result.stderr


def test_the_other_machines_tables_are_inputs_of_the_comparison(study):
    other = gpu_folder(study / "gpu" / "results")
    extra = with_extra(other)
    done = run_snakemake(study, *extra, "--", COMPARISON)
    assert done.returncode == 0, done.stderr[-4000:]
    before = pd.read_csv(study / COMPARISON)
    assert (
        "Nothing to be done" in run_snakemake(study, "--dry-run", *extra, "--", COMPARISON).stdout
    )

    # The other machine measured again: its summary.csv changed, so the comparison is stale.
    summary_csv = other / "tables" / "synthetic" / "summary.csv"
    summary = pd.read_csv(summary_csv)
    summary["throughput_img_s_mean"] = summary["throughput_img_s_mean"] * 2
    files.write_csv(summary_csv, summary)
    planned = run_snakemake(study, "--dry-run", *extra, "--", COMPARISON)
    assert planned.returncode == 0, planned.stderr[-4000:]
    assert "compare_machines" in planned.stdout
    assert f"Updated input files: {summary_csv}" in planned.stdout

    again = run_snakemake(study, *extra, "--", COMPARISON)
    assert again.returncode == 0, again.stderr[-4000:]
    after = pd.read_csv(study / COMPARISON)
    theirs = before["machine"].str.contains("H100")
    assert after.loc[theirs, "throughput_img_s_mean"].tolist() == pytest.approx(
        (before.loc[theirs, "throughput_img_s_mean"] * 2).tolist()
    )


def test_bad_run_jsons_are_all_named_and_the_previous_tables_kept(study):
    kept = {path: digest(study / path) for path in (*TABLES, ENVIRONMENT)}
    (study / RUNS[0]).write_text('{"cut short')
    document = json.loads((study / RUNS[1]).read_text())
    (study / RUNS[1]).write_text(json.dumps({**document, "status": "finished"}))

    failed = run_snakemake(study, *CONFIG, "--", *TABLES, ENVIRONMENT)
    assert failed.returncode != 0
    causes = [line for line in nnperf_lines(failed.stderr) if "aggregate_runs: error" in line]
    # Once from the job itself, once in the summary of failed jobs at the end.
    assert causes, failed.stderr[-4000:]
    cause = causes[0]
    assert "2 run JSON files are unusable: " in cause
    assert f"{RUNS[0]}: not valid JSON" in cause
    assert f"{RUNS[1]}: status 'finished' is not allowed" in cause
    # The way out is one that works (tests/workflow/test_code_and_recovery.py does both).
    assert "(delete it and run snakemake again to copy it again from its group's folder" in cause
    assert cause.endswith("delete that folder as well to measure its configurations again)")
    # Snakemake put the previous tables back (rule aggregate_runs flags them `update`).
    assert {path: digest(study / path) for path in kept} == kept

    report = run_snakemake(
        study, *CONFIG, "--report", "report.html", "--", *TABLES, ENVIRONMENT, cores=None
    )
    assert report.returncode == 0, report.stderr[-4000:]
    assert "summary.csv" in (study / "report.html").read_text(encoding="utf-8")
