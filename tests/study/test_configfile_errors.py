"""A study file that is missing or not YAML is one line naming it, with YAML's line and
column, from the Snakefile's own `configfile:` and from nnperf's commands.

Files given to plain `snakemake --configfile` are read by Snakemake's command line before any
workflow code runs (`snakemake.settings.types.ConfigSettings`), so the workflow cannot word
those errors; `nnperf plan --configfile FILE` checks the same file first (docs/configuration.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from nnperf.core.errors import NnperfError
from nnperf.study.loading import default_config_problem, load_study

from conftest import REPO, run_snakemake, snakemake_env

UNBALANCED = "models: [resnet18_cifar\nbatch_sizes: [8]\n"


def test_default_config_problem_names_the_file_line_and_column(tmp_path):
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "config.yaml"
    config.write_text(UNBALANCED, encoding="utf-8")
    assert default_config_problem(workdir=tmp_path) == (
        f"config file '{config}' is not valid YAML at line 2, column 12: expected ',' or ']', "
        "but got ':'"
    )
    config.write_text("models: [resnet18_cifar]\n", encoding="utf-8")
    assert default_config_problem(workdir=tmp_path) is None


def test_a_missing_default_config_is_fine_only_with_a_study_file(tmp_path):
    problem = default_config_problem(workdir=tmp_path)
    assert problem == (
        f"config file 'config/config.yaml' does not exist in {tmp_path.resolve()}; run Snakemake "
        "from the nnperf checkout (or its --directory), or give a study with --configfile"
    )
    assert default_config_problem(["study.yaml"], workdir=tmp_path) is None


def test_load_study_names_a_missing_or_malformed_study_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(NnperfError, match=rf"^config file '{missing}' does not exist$"):
        load_study([missing])
    bad = tmp_path / "bad.yaml"
    bad.write_text(UNBALANCED, encoding="utf-8")
    with pytest.raises(NnperfError) as info:
        load_study([bad])
    assert str(info.value) == (
        f"config file '{bad}' is not valid YAML at line 2, column 12: expected ',' or ']', but "
        "got ':'"
    )


def _nnperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nnperf", *args],
        capture_output=True, text=True, env=snakemake_env(), cwd=REPO, timeout=300,
    )


def test_nnperf_plan_names_a_missing_or_malformed_study_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    result = _nnperf("plan", "--configfile", str(missing))
    assert result.returncode != 0
    assert result.stderr.strip() == f"nnperf plan: error: config file '{missing}' does not exist"
    bad = tmp_path / "bad.yaml"
    bad.write_text(UNBALANCED, encoding="utf-8")
    result = _nnperf("plan", "--configfile", str(bad))
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"nnperf plan: error: config file '{bad}' is not valid YAML at line 2, column 12: "
        "expected ',' or ']', but got ':'"
    )


@pytest.mark.workflow
def test_snakemake_with_a_malformed_default_config_says_where_in_one_line(workdir):
    (workdir / "config" / "config.yaml").write_text(UNBALANCED, encoding="utf-8")
    result = run_snakemake(workdir, "-n")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith(("nnperf:", "WorkflowError"))]
    assert errors == [
        "nnperf: config file 'config/config.yaml' is not valid YAML at line 2, column 12: "
        "expected ',' or ']', but got ':'"
    ], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.workflow
def test_snakemake_without_a_config_says_so_in_one_line(tmp_path):
    result = run_snakemake(tmp_path, "-n")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith(("nnperf:", "WorkflowError"))]
    assert errors == [
        f"nnperf: config file 'config/config.yaml' does not exist in {tmp_path.resolve()}; run "
        "Snakemake from the nnperf checkout (or its --directory), or give a study with --configfile"
    ], result.stderr


@pytest.mark.workflow
def test_snakemake_reads_the_configfile_before_the_workflow(workdir):
    """What plain `snakemake --configfile` says about a missing or malformed file is
    Snakemake's: its command line reads the file before the Snakefile runs. This records it
    (a change in Snakemake shows here), and that neither case starts a job."""
    # Snakemake 9 prints these on stdout: a FileNotFoundError traceback (its
    # common.configfile opens the file outside the `try` that words a missing one), and a
    # line naming neither the file nor where.
    result = run_snakemake(workdir, "-n", "--configfile", str(workdir / "missing.yaml"))
    assert result.returncode != 0
    assert f"No such file or directory: '{workdir / 'missing.yaml'}'" in result.stdout + result.stderr
    bad = workdir / "bad.yaml"
    bad.write_text(UNBALANCED, encoding="utf-8")
    result = run_snakemake(workdir, "-n", "--configfile", str(bad))
    assert result.returncode != 0
    assert "Config file is not valid JSON or YAML" in result.stdout + result.stderr
    assert not (workdir / "results").exists()
