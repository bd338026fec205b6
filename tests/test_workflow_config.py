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


def test_dry_run_lists_every_stage(workdir):
    result = run_snakemake(workdir, "-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr
    for rule in ("prepare_dataset", "complexity", "ceilings", "timed_run", "aggregate_runs",
                 "roofline_points", "plot_roofline_steps", "render_report"):
        assert rule in result.stdout, rule


def test_target_rules_are_listed(workdir):
    result = run_snakemake(workdir, "--list-target-rules")
    assert result.returncode == 0, result.stderr
    listed = set(result.stdout.split())
    # Rules without wildcards; the keyed ones are asked for by path.
    assert {"all", "aggregate_runs", "roofline_points", "environment_table", "render_report"} <= listed


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


def test_asking_for_an_impossible_run_by_path_is_a_clear_error(workdir):
    result = run_snakemake(workdir, "-n", "results/runs/cpu/resnet18_cifar/tf32/bs16/baseline/rep0.json")
    assert result.returncode != 0
    assert "precision 'tf32' cannot run on device 'cpu'; allowed there: fp32, bf16" in result.stdout + result.stderr
    assert not (workdir / "results").exists()


def test_a_path_naming_an_unknown_variant_is_a_clear_error(workdir):
    result = run_snakemake(workdir, "-n", "results/runs/cpu/resnet18_cifar/fp32/bs16/fast/rep0.json")
    assert result.returncode != 0
    assert "variant 'fast' is not in config variants; allowed: baseline, tuned" in result.stdout + result.stderr


def test_gpu_study_dry_run_shows_every_keyed_job_on_a_cpu_machine(workdir):
    """The DAG of the GPU matrix is built without a GPU or ncu (a cluster login node)."""
    result = run_snakemake(
        workdir, "-n", "--configfile", "config/gpu.yaml", "--config", "ncu={enabled: true}"
    )
    assert result.returncode == 0, result.stderr
    counts = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # 3 models x 4 precisions x 4 batch sizes x 3 variants, 5 reps each; ncu at batch 256.
    assert counts["timed_run"] == 3 * 4 * 4 * 3 * 5
    assert counts["ncu_profile"] == counts["ncu_export"] == 3 * 4 * 1 * 3
    assert counts["plot_roofline"] == 3 * 4 * 3
    assert counts["ceilings"] == 1 and counts["render_report"] == 1
    assert "results/runs/cuda/resnet18_cifar/bf16/bs256/tuned/rep4.json" in result.stdout
    assert "results/profiles/cuda/mobilenet_v2_cifar/fp16/bs256/compiled.ncu-rep" in result.stdout
