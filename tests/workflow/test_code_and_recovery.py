"""What a second `snakemake` call rebuilds, in real runs on a copy of this checkout: an edit
to the library re-runs exactly the jobs whose code it changes (every rule's `code=` parameter,
nnperf.core.codehash), a table cut short is refused with one line, and a run file or group
folder deleted by hand is rebuilt, and a group that finished after Snakemake took `kill -INT`
is kept (docs/recovery.md).

One configuration (fp32, batch 4, baseline) of the tiny study, the whole study (`rule all`)
run once per module in a copy of the checkout, so the tests can edit its library.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_CONFIG, snakemake_env

from nnperf.core import layout

pytestmark = pytest.mark.workflow

CONFIG = (
    "--configfile",
    str(TINY_CONFIG),
    "--config",
    "precisions=[fp32]",
    "batch_sizes=[4]",
    "variants={baseline: {}}",
    "timing={max_seconds: 10}",
    # Only what these tests look at: no operator profile or training to accuracy (each
    # re-run of a group would run them again).
    "convergence={enabled: false}",
    "operator_profile={enabled: false}",
)
KEYS = {
    "dataset": "synthetic",
    "device": "cpu",
    "model": "resnet18_cifar",
    "precision": "fp32",
    "batch_size": 4,
    "variant": "baseline",
}
RUN = layout.path("run", **KEYS)
WINDOWS = layout.path("run_windows", **KEYS)
GROUP = layout.path(
    "run_group",
    **{k: v for k, v in KEYS.items() if k in ("dataset", "device", "model")},
    batch_sizes="4",
)
SUMMARY = layout.path("table", dataset="synthetic", name="summary")
MEASURING = {
    "timed_group",
    "ceilings",
    "complexity",
    "prepare_dataset",
    "operator_profile",
    "train_to_accuracy",
}


def snakemake(home: Path, study: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake on the copy's Snakefile, its library first on the path."""
    env = {**snakemake_env(), "PYTHONPATH": str(home / "src")}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(home / "Snakefile")]
    command += ["--directory", str(study), "--cores", "2", *CONFIG, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=study)


def planned(home: Path, study: Path) -> dict[str, int]:
    """The jobs a dry run lists, by rule."""
    result = snakemake(home, study, "--dry-run", "--quiet", "rules")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.findall(r"^(\w+)\s+(\d+)$", result.stdout + result.stderr, re.MULTILINE)
    return {rule: int(count) for rule, count in rows if rule != "total"}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of this checkout, a study measured with it)."""
    root = tmp_path_factory.mktemp("code_and_recovery")
    home, study = root / "nnperf", root / "study"
    home.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", ".snakemake", "results", "logs", "*.egg-info")
    for name in ("Snakefile", "workflow", "src", "config", "profiles", "envs"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, home / name, ignore=ignore)
        else:
            shutil.copy2(source, home / name)
    shutil.copytree(REPO / "config", study / "config")
    result = snakemake(home, study)
    assert result.returncode == 0, result.stderr[-4000:]
    assert planned(home, study) == {}
    return home, study


def nothing_planned(home: Path, study: Path) -> None:
    assert planned(home, study) == {}


def edited(home: Path, module: str, check) -> None:
    """Run `check()` while `module` (a path under src/nnperf) carries one more comment."""
    path = home / "src" / "nnperf" / module
    original = path.read_text()
    path.write_text(original + "\n# an edit that changes no behaviour\n")
    try:
        check()
    finally:
        path.write_text(original)


def test_an_edit_reruns_exactly_the_jobs_that_run_the_edited_code(checkout):
    home, study = checkout

    def aggregate_edited():
        jobs = set(planned(home, study))
        # The tables, and what reads them or runs the same code, are rebuilt...
        assert {"aggregate_runs", "plot_throughput", "comparisons_table", "render_report"} <= jobs
        # ...and nothing is measured again.
        assert not jobs & MEASURING

    def roofline_edited():
        # The step roofline reads no table that code writes: it alone is drawn again (and
        # the summary that shows it).
        jobs = set(planned(home, study))
        assert "plot_roofline_steps" in jobs
        assert jobs <= {"plot_roofline_steps", "render_report", "all"}

    def engine_edited():
        jobs = set(planned(home, study))
        assert {"timed_group", "timed_run", "aggregate_runs"} <= jobs

    edited(home, "report/aggregate.py", aggregate_edited)
    edited(home, "report/plots/roofline.py", roofline_edited)
    edited(home, "engine/stopping.py", engine_edited)
    # Code no job runs (a command people type) re-runs nothing.
    edited(home, "commands/doctor.py", lambda: nothing_planned(home, study))
    assert planned(home, study) == {}


def render(home: Path, study: Path) -> subprocess.CompletedProcess:
    env = {**snakemake_env(), "PYTHONPATH": str(home / "src")}
    command = [sys.executable, "-m", "nnperf", "render-report", "--results", "results"]
    command += ["--out-html", "out.html", "--out-md", "out.md"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=study)


@pytest.mark.parametrize(
    ("table", "cut"),
    [
        (SUMMARY, lambda text: text[: len(text) - 5]),
        (WINDOWS, lambda text: text[: len(text) - 5]),
    ],
    ids=["summary-mid-row", "windows-mid-row"],
)
def test_a_table_cut_short_is_one_line_and_no_report(checkout, table, cut):
    home, study = checkout
    path = study / table
    original = path.read_bytes()
    try:
        path.write_text(cut(original.decode()))
        result = render(home, study)
        assert result.returncode != 0
        lines = [line for line in result.stderr.splitlines() if table in line]
        assert len(lines) == 1 and "meta expects" in lines[0], result.stderr[-2000:]
        assert "Traceback" not in result.stderr
    finally:
        path.write_bytes(original)
    assert render(home, study).returncode == 0


def test_a_table_cut_at_a_row_boundary_is_refused(checkout):
    """As `head -n 3` on a larger study: a table that still parses, with fewer rows than its
    writer wrote (here the one configuration's row goes)."""
    home, study = checkout
    path = study / SUMMARY
    original = path.read_bytes()
    try:
        header, *rows = original.decode().splitlines(keepends=True)
        path.write_text(header + "".join(rows[:-1]) if rows[:-1] else header)
        result = render(home, study)
        assert result.returncode != 0
        assert f"{SUMMARY}: not the table its writer wrote" in result.stderr
        assert f"expects {len(rows)} rows" in result.stderr
    finally:
        path.write_bytes(original)


def test_a_deleted_run_file_is_copied_again(checkout):
    home, study = checkout
    summary_before = (study / SUMMARY).stat().st_mtime_ns
    (study / RUN).unlink()
    result = snakemake(home, study)
    assert result.returncode == 0, result.stderr[-3000:]
    member = layout.group_member(str(study / GROUP), "run", "fp32", 4, "baseline")
    assert filecmp.cmp(study / RUN, member, shallow=False)
    assert (study / SUMMARY).stat().st_mtime_ns > summary_before
    assert planned(home, study) == {}
    # A deleted group folder is measured again: the next test (kill -INT) does that.


def test_a_group_finished_after_snakemake_took_sigint_is_kept_by_cleanup_metadata(checkout):
    """`kill -INT` to Snakemake alone (not its process group): the running group finishes its
    measurement after Snakemake has marked it incomplete; `--cleanup-metadata` on the group's
    folder keeps it (docs/recovery.md), where `--rerun-incomplete` would measure it again."""
    home, study = checkout
    measured = (study / RUN).read_bytes()
    shutil.rmtree(study / GROUP)  # a deleted group folder is measured again
    group_log = study / "logs" / Path(GROUP).relative_to("results").with_suffix(".log")
    group_log.unlink(missing_ok=True)  # an earlier test's measurement left one
    env = {**snakemake_env(), "PYTHONPATH": str(home / "src")}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(home / "Snakefile")]
    command += ["--directory", str(study), "--cores", "2", *CONFIG]
    process = subprocess.Popen(
        command, cwd=study, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300

    def measuring() -> bool:  # the job holds the machine's lock: its measurement has begun
        return group_log.exists() and "measuring alone" in group_log.read_text()

    while not measuring() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert measuring(), "the timed group never started"
    time.sleep(1)
    os.kill(process.pid, signal.SIGINT)  # Snakemake alone: the job is not signalled
    assert process.wait(timeout=120) != 0
    while not (study / GROUP / "comparisons.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (study / GROUP / "comparisons.json").exists(), "the job did not finish its group"
    time.sleep(2)  # the job's last writes after comparisons.json (its log's last lines)
    finished = (study / GROUP / "comparisons.json").read_bytes()

    stalled = snakemake(home, study, "--dry-run", "--quiet", "rules")
    assert stalled.returncode != 0 or "timed_group" in stalled.stdout + stalled.stderr
    cleaned = snakemake(home, study, "--cleanup-metadata", str(GROUP))
    assert cleaned.returncode == 0, cleaned.stderr[-3000:]
    assert "timed_group" not in planned(home, study)
    result = snakemake(home, study)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rule timed_group" not in result.stdout + result.stderr
    assert (study / GROUP / "comparisons.json").read_bytes() == finished
    # A new measurement (its times and windows are another run's), copied out again.
    member = layout.group_member(str(study / GROUP), "run", "fp32", 4, "baseline")
    assert (study / RUN).read_bytes() != measured
    assert filecmp.cmp(study / RUN, member, shallow=False)
    assert planned(home, study) == {}
