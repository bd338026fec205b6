"""The workflow refuses bad input at DAG-build time, with one line and no job run."""

from __future__ import annotations

import pytest

from conftest import run_snakemake


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (["models=resnet19"], "nnperf: config models[0] = 'resnet19' is not allowed; allowed:"),
        (["devices=tpu"], "nnperf: config devices[0] = 'tpu' is not allowed"),
        (["precisions=fp8"], "nnperf: config precisions[0] = 'fp8' is not allowed"),
        (["batch_sizes=0"], "nnperf: config batch_sizes[0] = 0 is too small; it must be >= 1"),
        (["batchsize=32"], "nnperf: config key 'batchsize' is not allowed at top level"),
    ],
)
def test_bad_config_stops_before_any_job(workdir, override, expected):
    result = run_snakemake(workdir, "--config", *override)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("nnperf:")]
    assert lines and lines[0].startswith(expected), result.stderr
    assert not (workdir / "results").exists()
    assert not (workdir / "resources").exists()


def test_impossible_pair_is_left_out_with_a_note(workdir):
    result = run_snakemake(workdir, "-n", "--config", "precisions=fp32,tf32")
    assert result.returncode == 0, result.stderr
    assert "nnperf note: precision tf32 is left out on cpu" in result.stderr


def test_dry_run_lists_the_first_stages(workdir):
    result = run_snakemake(workdir, "-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr
    assert "prepare_dataset" in result.stdout and "complexity" in result.stdout


def test_default_profile_is_found_from_the_repository_root(repo):
    """`profiles` links to workflow/profiles so a plain `snakemake` applies bench_slot=1."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules"],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "workflow specific profile profiles/default" in result.stdout + result.stderr
