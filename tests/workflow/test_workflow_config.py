"""The workflow refuses bad input at DAG-build time, with one line and no job run."""

from __future__ import annotations

import re

import pytest

from nnperf.core import layout, vocab

from conftest import run_snakemake


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            ["models=resnet19"],
            "nnperf: config models entry 'resnet19' is unknown (closest: resnet18",
        ),
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
    for rule in (
        "prepare_dataset",
        "complexity",
        "ceilings",
        "timed_run",
        "aggregate_runs",
        "roofline_points",
        "plot_roofline_steps",
        "render_report",
    ):
        assert rule in result.stdout, rule


def test_the_readme_s_stage_listing_shows_every_rule(workdir, repo):
    """The README lists the stages with `snakemake --list-rules`: it must show every rule of
    every rule file (`--list-target-rules` shows only rules without wildcards: `all`, since
    every study file is keyed by its dataset)."""
    defined = {
        match.group(1)
        for path in (repo / "workflow/rules").glob("*.smk")
        for match in re.finditer(r"^rule (\w+):", path.read_text(), re.MULTILINE)
    }
    assert len(defined) > 15
    result = run_snakemake(workdir, "--list-rules")
    assert result.returncode == 0, result.stderr
    assert defined | {"all"} == set(result.stdout.split())
    readme = (repo / "README.md").read_text(encoding="utf-8")
    assert "snakemake --list-rules" in readme and "snakemake --list-target-rules" not in readme


def test_default_profile_is_found_from_the_repository_root(repo):
    """`profiles` links to workflow/profiles so a plain `snakemake` applies bench_slot=1."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "workflow specific profile profiles/default" in result.stdout + result.stderr


def test_asking_for_an_impossible_run_by_path_is_a_clear_error(workdir):
    result = run_snakemake(
        workdir, "-n", "results/runs/synthetic/cpu/resnet18_cifar/tf32/bs16/baseline.json"
    )
    assert result.returncode != 0
    # One line, the last printed: no InputFunctionException traceback around it.
    assert result.stderr.strip().splitlines()[-1] == (
        "nnperf: precision 'tf32' cannot run on device 'cpu'; allowed there: fp32, bf16"
    )
    assert "Traceback" not in result.stderr and "InputFunctionException" not in result.stderr
    assert not (workdir / "results").exists()


def test_a_path_naming_an_unknown_variant_is_a_clear_error(workdir):
    result = run_snakemake(
        workdir, "-n", "results/runs/synthetic/cpu/resnet18_cifar/fp32/bs16/fast.json"
    )
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("nnperf: variant 'fast' is not in config variants; allowed: baseline, tuned")
    )


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
    # 1 model x 4 precisions x 2 batch sizes x 3 variants, one job each; ncu on the tuned
    # variant at batch 256, one profile per precision.
    assert counts["timed_run"] == 1 * 4 * 2 * 3
    assert counts["ncu_profile"] == counts["ncu_export"] == counts["plot_roofline"] == 4
    assert counts["ceilings"] == 1 and counts["render_report"] == 1
    # torch.profiler: tuned and compiled at batch 256 for each precision; training: bf16 only.
    assert counts["operator_profile"] == 4 * 2
    assert counts["train_to_accuracy"] == 2 and counts["plot_accuracy"] == 1
    assert "results/runs/cifar10/cuda/resnet18_cifar/bf16/bs1024/compiled.json" in result.stdout
    assert (
        "results/training/cifar10/cuda/resnet18_cifar/bf16/bs256/compiled/default.json"
        in result.stdout
    )
    assert "results/profiles/cifar10/cuda/resnet18_cifar/fp16/bs256/tuned.ncu-rep" in result.stdout
    assert (
        "results/profiles/cifar10/cuda/resnet18_cifar/fp16/bs256/baseline.ncu-rep"
        not in result.stdout
    )


@pytest.mark.parametrize(
    "study, recipe, run",
    [
        ("seed000", "seed000", "results/training/cifar10/cpu/resnet18/fp32/bs128/baseline"),
        (
            "seed004",
            "seed004",
            "results/training/cifar100/cuda/resnet50/fp32/bs128/all_optimizations",
        ),
    ],
)
def test_the_seed_studies_plan_their_training_runs(workdir, study, recipe, run):
    """config/seed000.yaml and seed004.yaml: their recipe replaces the default one, and every
    configuration of their matrix is trained under it."""
    result = run_snakemake(workdir, "-n", "--configfile", f"config/{study}.yaml")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    variants = 1 if study == "seed000" else 2
    assert counts["train_to_accuracy"] == counts["timed_run"] == variants
    assert f"{run}/{recipe}.json" in result.stdout
    assert "/default.json" not in result.stdout


def job_counts(stdout: str) -> dict[str, int]:
    counts = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def test_a_study_file_runs_exactly_the_variants_it_lists(workdir):
    """--configfile replaces the variants mapping of config/config.yaml instead of merging."""
    study = workdir / "one_thread.yaml"
    study.write_text("variants: {baseline: {}, one_thread: {cpu_threads: 1}}\n")
    result = run_snakemake(workdir, "-n", "--configfile", str(study))
    assert result.returncode == 0, result.stderr
    runs = [word for word in result.stdout.split() if word.startswith("results/runs/")]
    variants = {
        layout.parse("run", path.rstrip(",;"))["variant"] for path in runs if ".json" in path
    }
    assert variants == {"baseline", "one_thread"}, variants
    # 1 model x 2 precisions x 2 batch sizes x 2 variants (config/config.yaml's matrix)
    assert job_counts(result.stdout)["timed_run"] == 1 * 2 * 2 * 2


@pytest.mark.workflow
def test_config_mapping_keeps_its_types_and_a_changed_setting_reruns(workdir):
    """--config 'training={...}' reaches the jobs typed, and a setting changed later re-runs
    the job that uses it (the request is a tracked param)."""
    target = "results/complexity/synthetic/resnet18_cifar.json"
    result = run_snakemake(workdir, target, "--config", "training={timed_steps: 5, momentum: 0.0}")
    assert result.returncode == 0, result.stderr
    import json

    document = json.loads((workdir / target).read_text())
    assert document["training"]["momentum"] == 0.0
    assert document["training"]["optimizer"] == "sgd"
    # Same settings: nothing to do. Another momentum: the complexity job runs again.
    same = run_snakemake(
        workdir, "-n", target, "--config", "training={timed_steps: 5, momentum: 0.0}"
    )
    assert same.returncode == 0 and "Nothing to be done" in same.stdout + same.stderr
    changed = run_snakemake(workdir, "-n", target, "--config", "training={momentum: 0.5}")
    assert changed.returncode == 0, changed.stderr
    assert job_counts(changed.stdout).get("complexity") == 1


def test_measuring_jobs_and_their_inputs_run_before_figures(workdir):
    """Every measuring rule (and every rule a measurement waits for) outranks the tables and
    figures: on a CPU a measurement needs every core, so a figure started first delays it."""
    result = run_snakemake(workdir, "-n")
    assert result.returncode == 0, result.stderr
    priorities = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", result.stdout):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule:
            found = re.search(r"^\s+priority: (\d+)$", block, re.M)
            priorities[rule[1]] = int(found[1]) if found else 0
    first = {"prepare_dataset", "complexity", "timed_run"}
    measuring = vocab.MEASURING_RULES & set(priorities)
    assert measuring >= {"ceilings", "timed_group", "operator_profile", "train_to_accuracy"}
    others = set(priorities) - measuring - first - {"all"}
    assert others >= {"plot_throughput", "aggregate_runs", "plot_operators", "render_report"}
    lowest_first = min(priorities[rule] for rule in measuring | first)
    assert lowest_first > max(priorities[rule] for rule in others), priorities
