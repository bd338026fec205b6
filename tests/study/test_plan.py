"""`nnperf plan`: a study's jobs per stage with their estimated cost and its sources."""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, snakemake_env
from nnperf import cli
from nnperf.core import layout
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError
from nnperf.engine import rehearsal
from nnperf.study import (
    ceilings_cost,
    cpu_recording,
    estimate_sources,
    job_requests,
    plan,
    plan_calls,
    plan_text,
    selection,
    stages,
)
from nnperf.study.loading import load_study

GPU_STUDY = str(REPO / "config" / "gpu.yaml")
TOTAL_LINE = re.compile(r"^total\s+(\d+)\s+(\d+\.\d) min$")
WALL_LINE = re.compile(r"^wall time on (\d+) cores: (\d+\.\d) min ")
STAGE_LINE = re.compile(r"^(?P<stage>.+?)\s+(?P<jobs>\d+)\s+(?P<min>\d+\.\d)\s+(?P<source>.+)$")
# The GPU study (config/gpu.yaml) ends on one H100 in under 30 minutes, ncu and report included.
GPU_STUDY_LIMIT_S = 30 * 60


def plan_output(capsys, *args: str) -> str:
    assert cli.main(["plan", *args]) == 0
    return capsys.readouterr().out


def stage_lines(text: str) -> dict[str, dict]:
    """The stage table of a plan: {stage: {jobs, min, source}}."""
    rows = {}
    for line in text.splitlines():
        for stage in plan.STAGES:
            if line.startswith(stage + " "):
                match = STAGE_LINE.match(line)
                assert match, line
                rows[stage] = {
                    "jobs": int(match["jobs"]),
                    "min": float(match["min"]),
                    "source": match["source"],
                }
    return rows


def load(configfiles, entries, device: str = "cuda"):
    """A study as the workflow reads it, `auto` resolved to `device`."""
    return load_study(list(configfiles), list(entries), detect=lambda: device)


def h100_plan(*entries: str, configfiles=(GPU_STUDY,)) -> plan.Plan:
    study = load(configfiles, entries)
    return plan.plan_study(study, estimate_sources.timings_from("h100", ["cuda"]), ncu_on_path=True)


# --- the printed plan -------------------------------------------------------------------


def test_one_line_per_stage_then_the_total(capsys):
    text = plan_output(capsys, "--timings", "cpu")
    rows = stage_lines(text)
    assert list(rows) == list(plan.STAGES)
    # The default study: 2 precisions x 2 batch sizes x 2 variants on the CPU, every one
    # under torch.profiler, the batch-32 baselines trained; no ncu on a CPU.
    # One timed_group job (every batch size of the model), and each configuration's copy.
    assert rows["timed runs"]["jobs"] == 1 + 8
    assert rows["operator profiles"]["jobs"] == 8
    assert rows["training to accuracy"]["jobs"] == 2
    assert rows["ncu profiles (+export)"] == {"jobs": 0, "min": 0.0, "source": "-"}
    assert rows[plan.CALLS]["jobs"] == 1
    *_, last, wall = text.rstrip("\n").splitlines()
    assert WALL_LINE.match(wall) and WALL_LINE.match(wall)[1] == "2", wall
    assert float(WALL_LINE.match(wall)[2]) < float(TOTAL_LINE.match(last)[2])
    total = TOTAL_LINE.match(last)
    assert total, last
    assert int(total[1]) == sum(row["jobs"] for row in rows.values())
    # Stage minutes are rounded to 0.1 each.
    assert float(total[2]) == pytest.approx(sum(row["min"] for row in rows.values()), abs=0.05 * 8)
    for stage in ("data", "complexity", "ceilings", "timed runs", "tables, figures, report"):
        assert rows[stage]["min"] > 0, stage
    assert "assumed" in rows["tables, figures, report"]["source"]


def test_every_job_is_listed_with_its_parts_and_their_sources(capsys):
    text = plan_output(capsys, "--timings", "cpu", "--per-job")
    job_lines = [line for line in text.splitlines() if line.startswith("    ")]
    total = TOTAL_LINE.match(text.rstrip("\n").splitlines()[-2])
    assert len(job_lines) == int(total[1])
    run = next(line for line in job_lines if "timed_group cpu/resnet18_cifar/bs16-32" in line)
    seconds = float(re.search(r"  (\d+\.\d) s  = ", run)[1])
    parts = [float(x) for x in re.findall(r" (\d+\.\d) \(", run)]
    assert seconds == pytest.approx(sum(parts), abs=0.05 * len(parts))
    assert "job start" in run and "(assumed)" in run
    # Per batch size 2 variant and 2 precision comparisons, and 4 of batch 32 against 16.
    assert "interleaved rehearsal" in run and "rounds, 12 comparisons" in run
    assert any(
        "train_to_accuracy cpu/resnet18_cifar/bf16/bs32/baseline/default" in line
        for line in job_lines
    )


def test_the_default_timings_follow_the_study_devices(capsys):
    assert "timings: h100" in plan_output(capsys, "--configfile", GPU_STUDY)
    assert "timings: cpu" in plan_output(capsys)


def test_an_invalid_study_is_one_line(capsys):
    assert cli.main(["plan", "--config", "batch_sizes=0"]) == 2
    assert "batch_sizes" in capsys.readouterr().err


def test_planning_imports_no_torch():
    code = (
        "import sys\nfrom nnperf.cli import main\n"
        f"main(['plan', '--configfile', {GPU_STUDY!r}])\n"
        "print(sorted(m for m in ('torch', 'torchvision', 'seaborn') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=snakemake_env(),
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# --- config/gpu.yaml --------------------------------------------------------------------


def test_the_gpu_study_fits_half_an_hour_on_an_h100_with_ncu_operators_and_training():
    estimate = h100_plan()
    totals = {row.stage: row for row in estimate.stage_totals()}
    # Every stage is in the sum: four ncu profiles (tuned at batch 256, one per precision)
    # with their requests and exports, eight operator profiles, two training runs.
    # One group (batch 256 and 1024) of 4 precisions x 3 variants each, and its 24 copies.
    assert totals[plan.TIMED_RUNS].jobs == 1 + 4 * 2 * 3
    assert totals[plan.NCU].jobs == 4 * 3
    assert totals[plan.OPERATORS].jobs == 8
    assert totals[plan.TRAINING].jobs == 2
    for row in totals.values():
        assert row.seconds > 0, row.stage
    assert estimate.seconds <= GPU_STUDY_LIMIT_S, plan_text.render(estimate, per_job=True)
    # The timed runs go through the rehearsal of recorded timings, not the budget bound.
    for job in estimate.jobs:
        if job.stage == plan.TIMED_RUNS:
            assert estimate_sources.BUDGET_BOUND not in job.sources, job


def test_gpu_yaml_states_no_hand_arithmetic():
    text = (REPO / "config" / "gpu.yaml").read_text()
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    assert "nnperf plan --configfile config/gpu.yaml" in comments
    arithmetic = [
        r"\d+(\.\d+)?\s*x\s*\d+",  # 24 x 35 s
        r"=\s*~?\d+(\.\d+)?\s*(min|s)\b",  # = 14 min
        r"~?\d+(\.\d+)?\s*min\b",  # ~7 min
        r"\d+(\.\d+)?\s*\+\s*\d+(\.\d+)?",  # 14 + 7 + ...
        r"\d+(\.\d+)?k img/s",  # results that drift
    ]
    for pattern in arithmetic:
        found = re.search(pattern, comments)
        assert found is None, f"gpu.yaml comment states arithmetic or a result: {found[0]!r}"
    assert "shared/" not in text  # no file outside the repository


def test_gpu_yaml_sweeps_the_launch_bound_and_the_saturated_batch_size():
    assert yaml.safe_load((REPO / "config" / "gpu.yaml").read_text())["batch_sizes"] == [256, 1024]


# --- an earlier study's measurements ----------------------------------------------------

# A timed run as nnperf writes it, trimmed to what describes its cost (shaped like the H100's
# runs: bf16 tuned at batch 256, two warm worker processes).
RUN_DOCUMENT = {
    "schema_version": 1,
    "kind": "timed_run",
    "status": "ok",
    "error": None,
    "stop_reason": "ci_target",
    "dataset": "cifar10",
    "device": "cuda",
    "model": "resnet18_cifar",
    "precision": "bf16",
    "batch_size": 256,
    "variant": "tuned",
    "warmup_steps": 5,
    "timed_steps": 10,
    "timing": {
        "target_ci": 0.01,
        "min_seconds": 2.0,
        "max_seconds": 35.0,
        "min_processes": 2,
        "max_processes": 6,
        "min_windows": 2,
        "max_windows": 10,
    },
    "n_processes": 2,
    "n_windows": 6,
    "throughput_img_s": 12800.0,
    "images_timed": 15360,
    "timed_window_s": 1.2,
    "step_time_s": {
        "median": 0.02,
        "mean": 0.0201,
        "std": 0.0009,
        "min": 0.0185,
        "max": 0.0231,
        "p10": 0.019,
        "p90": 0.0215,
    },
    "single_step_time_s": 0.02,
    "compile_time_s": None,
    "compile_time_s_later": None,
    "first_step_time_s": 1.86,
    "warmup_time_s": 2.07,
    "warmup_step_time_s": [1.86, 0.05, 0.03, 0.021, 0.02],
    "fixed_cost_s": 1.1,
    "process_fixed_cost_s": 0.9,
    "elapsed_s": 6.4,
    "duty_cycle": 0.18,
    "processes": [
        {
            "process": 0,
            "fixed_cost_s": 0.9,
            "first_step_time_s": 1.86,
            "compile_time_s": None,
            "warmup_step_time_s": [1.86, 0.05, 0.03, 0.021, 0.02],
            "throughput_img_s": 12790.0,
        },
        {
            "process": 1,
            "fixed_cost_s": 0.9,
            "first_step_time_s": 0.41,
            "compile_time_s": None,
            "warmup_step_time_s": [0.41, 0.04, 0.03, 0.021, 0.02],
            "throughput_img_s": 12810.0,
        },
    ],
    "process_started_at_unix": 1795416493.2,
    "started_at_unix": 1795416494.4,
    "ended_at_unix": 1795416500.8,
}


def write_json(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture
def earlier_study(tmp_path) -> Path:
    """The results folder of an earlier run of the GPU study: two timed runs, the ncu
    profile of one, and the ceilings."""
    results = tmp_path / "results"
    for precision, step_s in (("bf16", 0.02), ("fp32", 0.05)):
        document = copy.deepcopy(RUN_DOCUMENT)
        document["precision"] = precision
        document["step_time_s"] = {k: v * step_s / 0.02 for k, v in document["step_time_s"].items()}
        keys = {
            key: document[key] for key in ("dataset", "device", "model", "batch_size", "variant")
        }
        write_json(tmp_path / layout.path("run", precision=precision, **keys), document)
    keys = {
        key: RUN_DOCUMENT[key]
        for key in ("dataset", "device", "model", "precision", "batch_size", "variant")
    }
    write_json(
        tmp_path / layout.path("profile_meta", **keys), {"schema_version": 1, "wall_time_s": 71.5}
    )
    write_json(tmp_path / layout.path("ceilings", device="cuda"), {"duration_s": 40.0})
    return results


def jobs_by_name(estimate: plan.Plan) -> dict[str, plan.JobEstimate]:
    return {job.job: job for job in estimate.jobs}


def test_an_earlier_study_gives_its_measured_numbers(earlier_study):
    study = load([GPU_STUDY], [])
    matrix, _ = study_config.expand_matrix(study.config, lambda: "cuda")
    requests = dict(zip(matrix, study.run_requests()))
    timings = estimate_sources.timings_from(str(earlier_study), ["cuda"])
    measured = jobs_by_name(plan.plan_study(study, timings, ncu_on_path=True))
    recorded = jobs_by_name(h100_plan())
    source = f"measured in {earlier_study}"

    # A configuration the earlier study ran is replayed from its own run document under this
    # study's settings, in its group beside the others (the H100's model for those).
    model = rehearsal.h100_model()
    batches = job_requests.group_of(study.typed, 256)
    members = job_requests.group_members(study.typed, "cuda", "resnet18_cifar", batches)
    timings_of = []
    for key in members:
        path = earlier_study.parent / layout.path("run", dataset="cifar10", **key.as_dict())
        if path.exists():
            document = json.loads(path.read_text())
            timings_of.append(rehearsal.ConfigTiming.from_run_documents([document]))
        else:
            timings_of.append(model.timing_for(requests[key]))
    group = measured["timed_group cuda/resnet18_cifar/bs256-1024"]
    replayed = rehearsal.replay_group([requests[key] for key in members], timings_of, seed=0)
    [part] = [p for p in group.parts if p.what == "interleaved rehearsal"]
    assert part.seconds == pytest.approx(replayed.wall_s)
    assert part.seconds != pytest.approx(
        next(p for p in recorded[group.job].parts if p.what == "interleaved rehearsal").seconds
    )

    profile = measured["ncu_profile cuda/resnet18_cifar/bf16/bs256/tuned"]
    assert [(p.seconds, p.source) for p in profile.parts if p.what == "ncu"] == [(71.5, source)]
    assert measured["ceilings cuda"].sources[0] == source
    # The training and operator profile of that configuration use its measured steps.
    trained = measured["train_to_accuracy cuda/resnet18_cifar/bf16/bs256/tuned/default"]
    assert any(p.source == source and p.what == "epochs" for p in trained.parts)

    # What the earlier study lacks (the group's batch-1024 members among them, replayed above
    # from the H100's model) falls back to the H100's defaults, and the plan says so.
    notes = " ".join(plan.plan_study(study, timings, ncu_on_path=True).notes)
    assert f"{earlier_study} lacks 22 of the timed runs: h100 defaults for those" in notes
    assert "lacks 3 of the ncu profiles" in notes


def test_the_results_folder_may_be_given_as_its_working_directory(earlier_study):
    assert estimate_sources.MeasuredResults(earlier_study.parent).root == earlier_study
    with pytest.raises(NnperfError, match="no such results folder"):
        estimate_sources.MeasuredResults(earlier_study / "missing")


def test_training_and_operator_profiles_measured_earlier_are_taken_as_measured(earlier_study):
    study = load([GPU_STUDY], [])
    keys = {
        "dataset": "cifar10",
        "device": "cuda",
        "model": "resnet18_cifar",
        "precision": "bf16",
        "batch_size": 256,
        "variant": "compiled",
    }
    recipe = study.typed.recipes["default"]
    from nnperf.core import contract

    write_json(
        earlier_study.parent / layout.path("training_run", recipe="default", **keys),
        {
            "kind": "training_run",
            "convergence": contract.to_dict(recipe),
            "started_at_unix": 100.0,
            "ended_at_unix": 142.0,
        },
    )
    write_json(
        earlier_study.parent / layout.path("opprofile", **keys),
        {
            "started_at_unix": 10.0,
            "ended_at_unix": 19.0,
        },
    )
    timings = estimate_sources.timings_from(str(earlier_study), ["cuda"])
    jobs = jobs_by_name(plan.plan_study(study, timings, ncu_on_path=True))
    source = f"measured in {earlier_study}"
    trained = jobs["train_to_accuracy cuda/resnet18_cifar/bf16/bs256/compiled/default"]
    assert [(p.what, p.seconds) for p in trained.parts if p.source == source] == [
        ("training", 42.0)
    ]
    profiled = jobs["operator_profile cuda/resnet18_cifar/bf16/bs256/compiled"]
    assert [(p.what, p.seconds) for p in profiled.parts if p.source == source] == [("profile", 9.0)]

    # Trained under another recipe: not this one's measurement.
    other = contract.to_dict(recipe) | {"epochs": 3}
    write_json(
        earlier_study.parent / layout.path("training_run", recipe="default", **keys),
        {
            "kind": "training_run",
            "convergence": other,
            "started_at_unix": 100.0,
            "ended_at_unix": 142.0,
        },
    )
    jobs = jobs_by_name(plan.plan_study(study, timings, ncu_on_path=True))
    trained = jobs["train_to_accuracy cuda/resnet18_cifar/bf16/bs256/compiled/default"]
    assert all(p.what != "training" for p in trained.parts)


# --- stages that a study leaves out -----------------------------------------------------


def test_a_study_without_cuda_plans_no_ncu():
    study = load([GPU_STUDY], ["devices=cpu", "precisions=fp32,bf16"], device="cpu")
    estimate = plan.plan_study(
        study, estimate_sources.timings_from(None, ["cpu"]), ncu_on_path=True
    )
    assert estimate.timings == "cpu"
    assert not [
        job
        for job in estimate.jobs
        if job.job.startswith(("ncu_", "profile_request", "plot_roofline "))
    ]
    totals = {row.stage: row for row in estimate.stage_totals()}
    assert totals[plan.NCU].jobs == 0 and totals[plan.NCU].seconds == 0
    assert any("Nsight Compute profiles CUDA devices only" in note for note in estimate.notes)
    assert totals[plan.TIMED_RUNS].jobs == 1 + 2 * 2 * 3


def test_ncu_disabled_or_absent_leaves_the_stage_empty():
    assert not h100_plan("ncu={enabled: false}").stage_totals()[plan.STAGES.index(plan.NCU)].jobs
    study = load([GPU_STUDY], [])
    estimate = plan.plan_study(
        study, estimate_sources.timings_from("h100", ["cuda"]), ncu_on_path=False
    )
    assert not [job for job in estimate.jobs if job.stage == plan.NCU]
    assert any("ncu is not on PATH" in note for note in estimate.notes)


def test_an_empty_matrix_is_an_error():
    study = load([], ["devices=cpu", "precisions=tf32"], device="cpu")
    with pytest.raises(NnperfError, match="nothing to measure"):
        plan.plan_study(study, estimate_sources.timings_from("cpu", ["cpu"]), ncu_on_path=False)


# --- the pieces ---------------------------------------------------------------------------


def test_the_stage_selection_of_the_gpu_study():
    study = load([GPU_STUDY], [])
    matrix, _ = study_config.expand_matrix(study.config, lambda: "cuda")
    chosen = selection.select_stages(study.typed, matrix, ncu_on_path=True)
    assert sorted((k.precision, k.batch_size, k.variant) for k in chosen.ncu) == [
        (p, 256, "tuned") for p in ("bf16", "fp16", "fp32", "tf32")
    ]
    assert {(k.batch_size, k.variant) for k in chosen.operator_profile} == {
        (256, "tuned"),
        (256, "compiled"),
    }
    assert len(chosen.operator_profile) == 8
    assert [(k.precision, k.batch_size, k.variant, r) for k, r in chosen.training] == [
        ("bf16", 256, "compiled", "default"),
        ("bf16", 256, "tuned", "default"),
    ]
    assert not selection.select_stages(study.typed, matrix, ncu_on_path=False).ncu


def test_training_time_follows_the_convergence_budget_rule():
    # 10 steps of 1 s per epoch, a 5 s compile in the first: 15, 10, 10 s.
    assert plan.training_seconds(
        epochs=3, max_seconds=None, steps_per_epoch=10, step_s=1.0, compile_s=5.0
    ) == (35.0, 3)
    # Epoch 1 is projected at 10 s (fits 30); epoch 2 at epoch 1's 15 s: 15 + 15 = 30 fits;
    # epoch 3 at 10 s: 25 + 10 > 30 is not started.
    assert plan.training_seconds(
        epochs=3, max_seconds=30, steps_per_epoch=10, step_s=1.0, compile_s=5.0
    ) == (25.0, 2)
    # Not even one epoch fits: nothing trains.
    assert plan.training_seconds(
        epochs=3, max_seconds=5, steps_per_epoch=10, step_s=1.0, compile_s=0.0
    ) == (0.0, 0)


def test_dataset_sizes():
    study = load([GPU_STUDY], [])
    assert plan.dataset_images(study.typed.dataset) == (50_000, 10_000)
    study = load([], [])
    assert plan.dataset_images(study.typed.dataset) == (1024, 128)


def test_without_step_timings_a_timed_run_counts_at_its_budget_or_the_machines_typical_one():
    study = load([GPU_STUDY], [])
    estimate = plan.plan_study(
        study, estimate_sources.Timings(machine=estimate_sources.H100), ncu_on_path=True
    )
    groups = [job for job in estimate.jobs if job.rule == "timed_group"]
    assert len(groups) == 1
    for job in groups:
        members = [p for p in job.parts if p.what not in ("job start", "warm server start")]
        assert [(p.what, p.seconds, p.source) for p in members] == 24 * [
            ("timing.max_seconds", study.typed.timing.max_seconds, estimate_sources.BUDGET_BOUND)
        ]
    assert any("counted at their budget" in note for note in estimate.notes)

    # A CPU without its timing model: its typical timed run, at most the budget.
    for max_seconds, expected in ((60, estimate_sources.CPU.timed_run.seconds), (30, 30.0)):
        study = load([], [f"timing={{max_seconds: {max_seconds}}}"])
        estimate = plan.plan_study(
            study, estimate_sources.Timings(machine=estimate_sources.CPU), ncu_on_path=False
        )
        group = next(job for job in estimate.jobs if job.rule == "timed_group")
        assert group.parts[-1].seconds == expected


# --- what the workflow runs: groups, ceilings, calls; the CPU example as the reference ----

CPU_EXAMPLE = REPO / "reports" / "examples" / "cpu-default-study"


def example_wall_s() -> float:
    """The default study's measured Snakemake wall time, as the example's README states it
    ("Snakemake's 51 jobs took 10.4 minutes"): `make run` with --cores all on the 2-core VM."""
    text = (CPU_EXAMPLE / "README.md").read_text(encoding="utf-8")
    match = re.search(r"(\d+) jobs took (\d+(?:\.\d+)?) minutes", " ".join(text.split()))
    assert match, "the example's README no longer states its wall time"
    return float(match[2]) * 60


def test_the_default_cpu_study_plans_within_a_quarter_of_its_measured_wall_time():
    # The example ran on 2 cores: its measuring jobs (timed groups, profiles, training,
    # ceilings: every core each) one after another, the rest two at a time. The plan's wall
    # time says the same of its jobs; its job time (all serial) is the upper bound.
    measured = example_wall_s()
    estimate = plan.planned([], [], "cpu")
    wall = estimate.wall_seconds(cores=2)
    assert wall == pytest.approx(plan.total_seconds([], [], "cpu", cores=2))
    assert 0.75 * measured <= wall <= 1.25 * measured, plan_text.render(estimate, per_job=True)
    assert wall < estimate.seconds
    # The groups it replays take about what the example's groups took (first process start
    # to last process end, per group), within the same quarter.
    runs = list(csv.DictReader((CPU_EXAMPLE / "runs.csv").open(encoding="utf-8")))
    spans = {}
    for row in runs:
        low, high = spans.get(row["group"], (math.inf, -math.inf))
        spans[row["group"]] = (
            min(low, float(row["started_at_unix"])),
            max(high, float(row["ended_at_unix"])),
        )
    recorded = sum(high - low for low, high in spans.values())
    replayed = sum(
        p.seconds for job in estimate.jobs for p in job.parts if p.what == "interleaved rehearsal"
    )
    assert 0.75 * recorded <= replayed <= 1.25 * recorded


def test_the_gpu_study_run_by_stages_fits_half_an_hour_of_wall_time():
    # `make gpu-study` runs config/gpu.yaml one snakemake call per stage, each with its start
    # and its CUDA preflight.
    wall = plan.total_seconds([GPU_STUDY], [], "h100", stages=True)
    assert wall <= GPU_STUDY_LIMIT_S
    assert wall > plan.total_seconds([GPU_STUDY], [], "h100")


def test_a_group_is_one_job_replayed_through_the_interleaving_engine():
    study = load([GPU_STUDY], [])
    estimate = h100_plan()
    jobs = jobs_by_name(estimate)
    batches = job_requests.group_of(study.typed, 1024)
    members = job_requests.group_members(study.typed, "cuda", "resnet18_cifar", batches)
    requests = {key: request for key, request in zip(*_matrix_requests(study))}
    model = rehearsal.h100_model()
    replayed = rehearsal.replay_group(
        [requests[key] for key in members],
        [model.timing_for(requests[key]) for key in members],
        seed=0,
    )
    group = jobs[f"timed_group cuda/resnet18_cifar/bs{layout.batch_sizes_key(batches)}"]
    [part] = [p for p in group.parts if p.what == "interleaved rehearsal"]
    assert part.seconds == pytest.approx(replayed.wall_s)
    assert f"{replayed.rounds} rounds, {len(replayed.comparisons)} comparisons" in part.detail
    # Each configuration's files are copied out of it: a job start, nothing measured.
    copy = jobs["timed_run cuda/resnet18_cifar/bf16/bs1024/compiled"]
    assert [p.what for p in copy.parts] == ["job start"] and not copy.measures


def _matrix_requests(study):
    matrix, _ = study_config.expand_matrix(study.config, lambda: study.devices[0])
    return matrix, study.run_requests()


def test_ceilings_are_priced_from_their_settings():
    for machine in ("h100", "cpu"):
        recording = ceilings_cost.load_recording(machine)
        recorded = recording.recorded_settings()
        # The recorded settings cost the recorded duration (what the model leaves out of it
        # is a small setup share).
        total = recording.measurements_s(recorded) + recording.setup_s
        assert total == pytest.approx(recording.duration_s)
        assert recording.setup_s < 0.1 * recording.duration_s
        more_trials = dataclasses.replace(recorded, trials=2 * recorded.trials)
        # Calibration windows do not grow with the trials, and the GEMMs are capped per precision.
        assert recording.measurements_s(more_trials) > 1.4 * recording.measurements_s(recorded)
        shorter_sweep = dataclasses.replace(
            recorded, sweep_max_bytes=recorded.sweep_max_bytes // 16
        )
        assert recording.sweep_s(shorter_sweep) < 0.9 * recording.sweep_s(recorded)
        one_size = dataclasses.replace(recorded, gemm_sizes=(min(recorded.gemm_sizes),))
        assert recording.gemm_s(one_size) < recording.gemm_s(recorded)

    # The default CPU study plans its ceilings at what the example measured (cpu.json).
    measured = json.loads((CPU_EXAMPLE / "cpu.json").read_text())["duration_s"]
    ceilings = jobs_by_name(plan.planned([], [], "cpu"))["ceilings cpu"]
    assert sum(
        p.seconds for p in ceilings.parts if p.what != "job start" and p.what != "imports"
    ) == (pytest.approx(measured, rel=0.05))
    # config/gpu.yaml asks for the recorded H100 stage plus the 2048 size: about its 46 s.
    ceilings = jobs_by_name(h100_plan())["ceilings cuda"]
    asked = sum(
        p.seconds for p in ceilings.parts if p.what in ("GEMMs", "STREAM", "cache sweep", "setup")
    )
    assert 46 <= asked <= 1.15 * 46.2
    # Fewer trials and a shorter sweep cost less, in the plan too.
    cheaper = jobs_by_name(h100_plan("ceilings={trials: 3, sweep_max_bytes: 268435456}"))
    assert cheaper["ceilings cuda"].seconds < 0.6 * ceilings.seconds


def calls_of(estimate: plan.Plan) -> dict[str, plan.JobEstimate]:
    return {job.job: job for job in estimate.jobs if job.stage == plan.CALLS}


def test_each_snakemake_call_pays_its_start_and_with_cuda_jobs_the_preflight():
    [call] = calls_of(h100_plan()).values()
    whats = [p.what for p in call.parts]
    assert whats[0] == "snakemake start"
    assert "preflight: import torch" in whats and "preflight: CUDA init" in whats
    assert "preflight: ncu probe" in whats  # ncu_profile jobs are pending
    [call] = calls_of(h100_plan("ncu={enabled: false}")).values()
    assert "preflight: ncu probe" not in [p.what for p in call.parts]
    # A CPU study has no CUDA preflight.
    [call] = calls_of(plan.planned([], [], "cpu")).values()
    assert [p.what for p in call.parts] == ["snakemake start"]

    # nnperf gpu-study: the doctor's checks once (with the ncu probe, ncu jobs being in the
    # study), then one call per stage, each paying its start only; `snakemake --report` its
    # report.
    study = load([GPU_STUDY], [])
    staged = plan.plan_study(
        study, estimate_sources.timings_from("h100", ["cuda"]), ncu_on_path=True, stages=True
    )
    calls = list(calls_of(staged).values())
    assert len(calls) == len(stages.STAGES) + 1
    preflight, *per_stage = calls
    assert preflight.job == "nnperf gpu-study preflight (once)"
    assert [p.what for p in preflight.parts][-1] == "preflight: ncu probe"
    assert all(p.what == "snakemake start" for c in per_stage[:-1] for p in c.parts)
    assert [p.what for p in per_stage[-1].parts] == ["snakemake start", "report"]


def test_figures_of_cuda_results_need_no_cuda_preflight():
    """Only measuring jobs touch their device: a call that runs only tables and figures of a
    CUDA study pays its start, not torch's import and CUDA's start-up."""
    machine = estimate_sources.timings_from("h100", ["cuda"]).machine
    figure = plan.JobEstimate(plan.REPORT, "plot_speedup cuda/resnet18_cifar", (), device="cuda")
    assert plan_calls.preflight_parts([figure], machine) == []
    group = plan.JobEstimate(plan.TIMED_RUNS, "timed_group cuda/x/bs256", (), device="cuda")
    assert "preflight: CUDA init" in [p.what for p in plan_calls.preflight_parts([group], machine)]


def test_the_cpu_recording_is_the_committed_example():
    recorded = rehearsal.load_recorded("cpu")
    assert recorded == json.loads(json.dumps(cpu_recording.example_recording()))
    model = rehearsal.cpu_model()
    study = load([], [], device="cpu")
    for request in study.run_requests():
        timing = model.timing_for(request)
        assert timing is not None and timing.source.startswith("2-core CPU recorded: ")
        assert f"{request.precision}/bs{request.batch_size}/{request.variant} " in timing.source


def test_plan_cores_must_be_positive(capsys):
    assert cli.main(["plan", "--cores", "0"]) == 2
    assert "--cores" in capsys.readouterr().err


def test_an_imagefolder_study_is_planned_under_its_label_with_its_image_counts(tmp_path):
    """The plan names an ImageFolder study's jobs by its results name and prices its data
    stage and epochs from the images on disk, not CIFAR's."""
    from imagefolder_data import make_imagefolder

    folder = make_imagefolder(tmp_path / "pets", train_per_class=4, val_per_class=1)
    result = plan.planned(
        config=[
            f"dataset={{name: imagefolder, path: {folder}, image_size: 32}}",
            "batch_sizes=[4]",
        ],
        timings="cpu",
    )
    data_jobs = [job for job in result.jobs if job.stage == plan.DATA]
    assert [job.job for job in data_jobs] == ["prepare_dataset pets"]
    assert plan.dataset_images(result_study_dataset(folder)) == (12, 3)


def result_study_dataset(folder):
    from nnperf.core import contract

    return contract.from_dict(
        contract.DatasetSettings, {"name": "imagefolder", "path": str(folder), "image_size": 32}
    )
