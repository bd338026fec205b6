"""The ncu switch decides at DAG-build time whether profiling rules exist (dry runs only)."""

from __future__ import annotations

import shutil

import pytest

from conftest import run_snakemake
from nnperf.core import config as study_config

CUDA = ["devices=cuda", "precisions=bf16", "batch_sizes=256", "models=resnet18_cifar"]
NCU_RULES = ("profile_request", "ncu_profile", "ncu_export", "ncu_kernels")


def _jobs(stdout: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run."""
    lines = stdout.split("Job stats:")[1].splitlines()
    jobs = {}
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        jobs[parts[0]] = int(parts[1])
    return jobs


def test_ncu_true_on_a_machine_without_gpu_or_ncu_shows_the_profiling_rules(workdir):
    assert shutil.which("ncu") is None  # this is the situation the switch exists for
    result = run_snakemake(workdir, "-n", "--config", *CUDA, "ncu=true")
    assert result.returncode == 0, result.stderr
    jobs = _jobs(result.stdout)
    # baseline + tuned variants: one profile, export and figure each
    assert jobs["profile_request"] == 2 and jobs["ncu_profile"] == 2 and jobs["ncu_export"] == 2
    assert jobs["plot_roofline"] == 2
    assert jobs["ncu_kernels"] == 1 and jobs["roofline_points"] == 1
    assert jobs["plot_roofline_steps"] == 1
    profile_job = result.stdout.split("rule ncu_profile:")[1].split("rule ")[0]
    assert "bench_slot=1" in profile_job
    # The process under ncu reads the request rule profile_request writes; its meta, the keys.
    profile = "results/profiles/synthetic/cuda/resnet18_cifar/bf16/bs256/baseline"
    assert (
        f"ncu-command profile --report {profile}.ncu-rep --meta {profile}.ncu.json"
        f" --clock-control base --request {profile}.request.json" in result.stdout
    )


@pytest.mark.parametrize(
    "setting, note",
    [
        ("ncu=false", "ncu.enabled is false"),
        ("ncu=auto", "ncu.enabled is auto and ncu is not on PATH here"),
    ],
)
def test_ncu_rules_left_out_with_a_note(workdir, setting, note):
    result = run_snakemake(workdir, "-n", "--config", *CUDA, setting)
    assert result.returncode == 0, result.stderr
    assert not set(NCU_RULES) & set(_jobs(result.stdout))
    assert f"nnperf note: {note}" in result.stderr


def test_ncu_setting_from_the_command_line_is_normalised():
    assert study_config.normalise({"ncu": "true"})["ncu"] == {"enabled": True}
    assert study_config.normalise({"ncu": "False"})["ncu"] == {"enabled": False}
    assert study_config.normalise({"ncu": "auto"})["ncu"] == {"enabled": "auto"}
    assert study_config.normalise({"ncu": {"enabled": "true", "clock_control": "none"}})["ncu"] == {
        "enabled": True,
        "clock_control": "none",
    }
