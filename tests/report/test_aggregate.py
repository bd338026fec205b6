"""Aggregation of run documents: runs.csv (per process), windows.csv, summary.csv, speedups,
the overlap check.

The run documents are built here in the format nnperf.engine.runner writes (kind `timed_run`, one
per configuration, with its `processes` and `windows`); their numbers are chosen so every
expected table value can be worked out by hand from the builder's arguments.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nnperf.core.contract import TablesRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_json
from nnperf.core.vocab import (
    CONFIG_KEYS,
    DISCARD_CAUSES,
    PHASES,
    STOP_NUMBERS,
    UNSTABLE_NUMBERS,
    WINDOW_CSV_COLUMNS,
)
from nnperf.report import aggregate
from nnperf.report.noise import NOISE_COLUMNS

T0 = 1_700_000_000.0
HOST = "node1"
TIMED_STEPS = 4
WARMUP_S = 2.0  # each process: warm-up before its first window
GAP_S = 0.5  # between one process's end and the next one's start
OOM_ERROR = "CUDA out of memory. Tried to allocate 2.00 GiB"
# What the engine records with an over-budget stop (run JSON `stop_numbers`).
OVER_BUDGET_NUMBERS = {"step_s": 13.2, "steps_left": 11, "needed_s": 145.2, "budget_s": 60.0}


def environment(device: str, hostname: str, gpu_uuid: str | None) -> dict:
    return {
        "device": device,
        "device_name": "NVIDIA H100 80GB HBM3" if device == "cuda" else "AMD EPYC 7B13",
        "hostname": hostname,
        "torch": "2.14.1",
        "cuda": "13.0",
        "cudnn": 91300,
        "driver": "580.95" if device == "cuda" else None,
        "cpu_threads": 2,
        "git_commit": "abc123",
        "gpu": {"uuid": gpu_uuid} if gpu_uuid else None,
        "slurm": {"job_id": "4242"},
    }


def run_document(
    precision: str = "fp32",
    batch_size: int = 8,
    variant: str = "baseline",
    *,
    status: str = "ok",
    windows: tuple[tuple[float, ...], ...] = ((100.0, 104.0), (96.0, 100.0)),
    start: float = T0,
    device: str = "cpu",
    model: str = "tiny",
    hostname: str = HOST,
    gpu_uuid: str | None = None,
    ci_rel: float = 0.02,
    target_ci: float = 0.03,
    unstable_reasons: tuple[str, ...] = (),
    flagged: dict[tuple[int, int], str] | None = None,
    step_s: float = 13.2,
) -> dict:
    """One run document. `windows[p]` are process p's window throughputs (img/s); each window
    is TIMED_STEPS steps of `batch_size` images. The engine's estimate is the mean of the
    process throughputs; its CI is set to +- `ci_rel` (the engine computes it, not this
    module). `flagged` maps (process, window) to that window's flag reasons."""
    flagged = flagged or {}
    images = batch_size * TIMED_STEPS
    processes, rows = [], []
    clock = start + 1.0  # the job's fixed cost before process 0 starts
    measured = status == "ok"
    for p, rates in enumerate(windows if measured else ()):
        p_start = clock
        clock += WARMUP_S
        seconds = []
        for w, rate in enumerate(rates):
            window_s = images / rate
            reasons = flagged.get((p, w), "")
            rows.append(
                {
                    "process": p,
                    "window": w,
                    "steps": TIMED_STEPS,
                    "images": images,
                    "window_s": window_s,
                    "throughput_img_s": rate,
                    "started_at_unix": clock,
                    "ended_at_unix": clock + window_s,
                    "loss_end": 2.0 - 0.1 * w,
                    "peak_memory_device_bytes": timed_peak(p, w) if device == "cuda" else None,
                    "sm_clock_mhz": 1980 if device == "cuda" else None,
                    "memory_clock_mhz": None,
                    "throttle_reasons": "" if device == "cuda" else None,
                    "power_capped": False if device == "cuda" else None,
                    "load_1m": 1.5,
                    "other_cores": 1.3 if reasons else 0.0,
                    "steal_share": 0.0,
                    "runnable_threads": 2,
                    "own_threads": 2,
                    "cores": 2,
                    "flagged": bool(reasons),
                    "flag_reasons": reasons,
                }
            )
            seconds.append(window_s)
            clock += window_s
        processes.append(
            {
                "process": p,
                "seed": 42 + p,
                "pid": 1000 + p,
                "status": "ok",
                "started_at_unix": p_start,
                "ended_at_unix": clock,
                "fixed_cost_s": 0.8,
                "warmup_step_time_s": [0.5 if p == 0 else 0.2, 0.1, 0.1],
                "first_step_time_s": 0.5 if p == 0 else 0.2,
                "warmup_time_s": 0.7 if p == 0 else 0.4,
                "compile_time_s": None,
                "n_windows": len(rates),
                "throughput_img_s": images * len(rates) / sum(seconds),
                "peak_memory_device_bytes": (
                    max(timed_peak(p, w) for w in range(len(rates))) if device == "cuda" else None
                ),
                "peak_memory_device_warmup_bytes": WARMUP_PEAK + p if device == "cuda" else None,
                "peak_memory_host_bytes": 1_000_000 + p,
            }
        )
        clock += GAP_S
    if status == "over_budget":
        # Process 0 got through one warm-up step, then the budget check stopped it.
        processes.append(
            {
                "process": 0,
                "seed": 42,
                "pid": 1000,
                "status": "over_budget",
                "started_at_unix": clock,
                "ended_at_unix": clock + step_s,
                "fixed_cost_s": 0.8,
                "warmup_step_time_s": [step_s],
                "first_step_time_s": step_s,
                "warmup_time_s": step_s,
                "compile_time_s": None,
                "n_windows": 0,
                "throughput_img_s": None,
                "peak_memory_device_bytes": None,
                "peak_memory_host_bytes": 2_000_000,
            }
        )
        clock += step_s
    rates = [row["throughput_img_s"] for row in rows]
    mean = float(np.mean([p["throughput_img_s"] for p in processes])) if measured else None
    q1, median, q3 = np.percentile(rates, [25, 50, 75]) if rates else (None,) * 3
    document = {
        "schema_version": 1,
        "kind": "timed_run",
        "status": status,
        "error": OOM_ERROR if status == "oom" else None,
        "stop_reason": "ci_target" if measured else (status if status == "over_budget" else None),
        "stop_numbers": OVER_BUDGET_NUMBERS if status == "over_budget" else {},
        "model": model,
        "device": device,
        "precision": precision,
        "batch_size": batch_size,
        "variant": variant,
        "dataset": "synthetic",
        "variant_settings": {"channels_last": variant != "baseline", "compile": False},
        "warmup_steps": 3,
        "timed_steps": TIMED_STEPS,
        "timing": {
            "target_ci": target_ci,
            "min_seconds": 1.0,
            "max_seconds": 60.0,
            "min_processes": 2,
            "max_processes": 10,
            "min_windows": 2,
            "max_windows": 10,
        },
        "throughput_img_s": mean,
        "throughput_img_s_ci95_low": mean * (1 - ci_rel) if measured else None,
        "throughput_img_s_ci95_high": mean * (1 + ci_rel) if measured else None,
        "ci_half_width_rel": ci_rel if measured else None,
        "ci_method": ("processes" if len(processes) > 1 else "windows") if measured else None,
        "ci_target_met": measured and ci_rel <= target_ci,
        "throughput_img_s_median": None if median is None else float(median),
        "throughput_img_s_q1": None if q1 is None else float(q1),
        "throughput_img_s_q3": None if q3 is None else float(q3),
        "throughput_img_s_cv": float(np.std(rates, ddof=1) / np.mean(rates)) if measured else None,
        "variance": {
            "between_processes": 4.0 if measured else None,
            "within_process": 8.0 if measured else None,
            "dominant_level": "window" if measured else None,
            "optimal_windows_per_process": 3 if measured else None,
        },
        "n_processes": len(processes) if measured else 0,
        "n_windows": len(rows),
        "images_timed": images * len(rows),
        "timed_window_s": float(sum(row["window_s"] for row in rows)),
        "step_time_s": {"median": 0.08, "mean": 0.081} if measured else None,
        "phase_time_s": (
            {"data_wait": 0.01, "h2d": 0.0, "forward": 0.03, "backward": 0.03, "optimizer": 0.01}
            if measured
            else None
        ),
        "single_step_time_s": 0.08 if measured else step_s if status == "over_budget" else None,
        "single_step_time_is_lower_bound": False,
        "compile_time_s": None,
        "compile_time_s_later": None,
        "first_step_time_s": 0.5 if measured else None,
        "warmup_time_s": 0.7 if measured else None,
        "fixed_cost_s": 1.0,
        "process_fixed_cost_s": 0.8 if processes else None,
        "elapsed_s": clock - start - 1.0,
        "duty_cycle": 0.5 if measured else 0.0,
        "unstable": bool(unstable_reasons),
        "unstable_reasons": list(unstable_reasons),
        "unstable_numbers": (
            {"windows": 3, "host_overloaded_windows": 1, "other_cores": 1.3, "cores": 2}
            if unstable_reasons
            else {}
        ),
        "loss_start": 2.3 if measured else None,
        "loss_end": 1.9 if measured else None,
        "peak_memory_device_bytes": _largest(p["peak_memory_device_bytes"] for p in processes),
        "peak_memory_device_warmup_bytes": _largest(
            p.get("peak_memory_device_warmup_bytes") for p in processes
        ),
        "peak_memory_host_bytes": 1_000_001 if measured else None,
        "processes": processes,
        "windows": rows,
        "environment": environment(device, hostname, gpu_uuid),
        "process_started_at_unix": start - 0.5,
        "started_at_unix": start,
        "ended_at_unix": clock,
    }
    return document


def timed_peak(process: int, window: int) -> int:
    """A CUDA window's peak device memory: a little more in each later window."""
    return 2_000_000_000 + 1000 * process + window


# A CUDA process's warm-up peak: cuDNN's autotuning workspaces, above any timed step's.
WARMUP_PEAK = 3_000_000_000


def _largest(values) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def study(start: float = T0) -> list[dict]:
    """Six configurations of one model on one CPU host, measured one after another."""
    specs = [
        dict(precision="fp32", batch_size=8, windows=((100.0, 104.0), (96.0, 100.0))),
        dict(precision="fp32", batch_size=8, variant="tuned", windows=((150.0, 152.0), (148.0,))),
        # Skewed windows: their median (125) is far from the mean of the processes (~152), so
        # the speedups tell which one they were computed from.
        dict(
            precision="bf16", batch_size=8, windows=((120.0, 125.0, 300.0), (125.0, 120.0, 290.0))
        ),
        dict(
            precision="fp32",
            batch_size=16,
            windows=((180.0, 200.0, 190.0),),  # one process: within-process CI only
            unstable_reasons=("host_overloaded", "sm_clock_drop"),
            flagged={(0, 1): "host_overloaded"},
        ),
        dict(precision="bf16", batch_size=16, status="over_budget"),
        dict(precision="fp32", batch_size=64, status="oom"),
    ]
    documents = []
    for spec in specs:
        document = run_document(start=start, **spec)
        documents.append(document)
        start = document["ended_at_unix"] + 1.0
    return documents


def _pairs(documents):
    return [(f"doc{i}.json", document) for i, document in enumerate(documents)]


def _row(frame, **keys):
    chosen = frame
    for key, value in keys.items():
        chosen = chosen[chosen[key] == value]
    assert len(chosen) == 1, keys
    return chosen.iloc[0]


@pytest.fixture(scope="module")
def documents():
    return study()


@pytest.fixture(scope="module")
def runs(documents):
    return aggregate.runs_table(_pairs(documents))


@pytest.fixture(scope="module")
def summary(documents, runs):
    return aggregate.summary_table(_pairs(documents), runs, cv_threshold=0.05)


RUNS_COLUMNS = [
    *CONFIG_KEYS,
    "process",
    "round",
    "shared_with",
    "dataset",
    "status",
    "error",
    "group",
    "process_status",
    "seed",
    "pid",
    "throughput_img_s",
    "n_windows",
    "loader_rate_img_s",
    "n_loader_windows",
    "compile_time_s",
    "first_step_time_s",
    "warmup_time_s",
    "fixed_cost_s",
    "peak_memory_device_bytes",
    "peak_memory_device_warmup_bytes",
    "peak_memory_host_bytes",
    "started_at_unix",
    "ended_at_unix",
    "variant_channels_last",
    "variant_compile",
    "device_name",
    "hostname",
    "torch",
    "cuda",
    "cudnn",
    "driver",
    "cpu_threads",
    "git_commit",
    "gpu_uuid",
    "slurm_job_id",
    "source",
    "overlapping_processes",
    "overlap",
]


def test_runs_table_has_one_row_per_worker_process(runs, documents):
    assert list(runs.columns) == RUNS_COLUMNS
    # 2 + 2 + 2 + 1 processes measured, 1 stopped over budget, 1 row for the oom config.
    assert len(runs) == 9
    assert not runs["overlap"].any()  # the study ran one configuration after another
    bf16 = runs[(runs.precision == "bf16") & (runs.batch_size == 8)]
    source = next(d for d in documents if (d["precision"], d["batch_size"]) == ("bf16", 8))
    assert bf16["process"].tolist() == [0, 1]
    assert bf16["throughput_img_s"].tolist() == [p["throughput_img_s"] for p in source["processes"]]
    assert bf16["seed"].tolist() == [42, 43]
    assert bf16["n_windows"].tolist() == [3, 3]
    # Per process: the first warm-up step and the sum of the warm-up steps.
    assert bf16["first_step_time_s"].tolist() == [0.5, 0.2]
    assert bf16["warmup_time_s"].tolist() == pytest.approx([0.7, 0.4])
    assert bf16["started_at_unix"].tolist() == [p["started_at_unix"] for p in source["processes"]]
    assert set(bf16["source"]) == {"doc2.json"}
    assert set(runs["slurm_job_id"]) == {"4242"}
    assert list(runs["variant_channels_last"]) == [v != "baseline" for v in runs["variant"]]


def test_configurations_without_a_window_still_get_a_row(runs, documents):
    oom = _row(runs, batch_size=64)
    assert (oom["status"], oom["process"], oom["error"]) == ("oom", 0, OOM_ERROR)
    assert math.isnan(oom["throughput_img_s"])
    # The job's own interval stands in for the process's, so it still counts for overlaps.
    source = documents[-1]
    assert (oom["started_at_unix"], oom["ended_at_unix"]) == (
        source["started_at_unix"],
        source["ended_at_unix"],
    )
    over = _row(runs, precision="bf16", batch_size=16)
    assert (over["status"], over["process_status"], over["n_windows"]) == (
        "over_budget",
        "over_budget",
        0,
    )
    assert over["first_step_time_s"] == 13.2 and math.isnan(over["throughput_img_s"])


def test_windows_table_has_every_window(documents):
    windows = aggregate.windows_table(_pairs(documents))
    assert list(windows.columns) == [*CONFIG_KEYS, *WINDOW_CSV_COLUMNS, "dataset"]
    assert len(windows) == sum(len(d["windows"]) for d in documents) == 4 + 3 + 6 + 3
    assert set(windows["dataset"]) == {"synthetic"}
    bf16 = windows[(windows.precision == "bf16") & (windows.batch_size == 8)]
    assert list(zip(bf16["process"], bf16["window"])) == [(p, w) for p in (0, 1) for w in range(3)]
    assert bf16["throughput_img_s"].tolist() == [120.0, 125.0, 300.0, 125.0, 120.0, 290.0]
    assert (bf16["images"] * 1.0 / bf16["window_s"]).tolist() == pytest.approx(
        bf16["throughput_img_s"].tolist()
    )
    flagged = windows[windows["flagged"]]
    assert len(flagged) == 1
    assert (flagged.iloc[0]["batch_size"], flagged.iloc[0]["window"]) == (16, 1)
    assert flagged.iloc[0]["flag_reasons"] == "host_overloaded"
    assert flagged.iloc[0]["other_cores"] == 1.3
    # No window of the oom or over-budget configurations.
    assert not (
        (windows.batch_size == 64) | (windows.precision == "bf16") & (windows.batch_size == 16)
    ).any()


SUMMARY_COLUMNS = [
    *CONFIG_KEYS,
    "dataset",
    "status",
    "stop_reason",
    *(f"stop_{name}" for name in STOP_NUMBERS),
    "comparisons_out_of_reach",
    "over_budget_phase",
    "error",
    "n_processes",
    "n_windows",
    "discarded_windows",
    *(f"discarded_{cause}" for cause in DISCARD_CAUSES),
    "throughput_img_s_mean",
    "throughput_img_s_ci95_low",
    "throughput_img_s_ci95_high",
    "ci_half_width_rel",
    "ci_target",
    "ci_target_met",
    "ci_method",
    "throughput_img_s_median",
    "throughput_img_s_q1",
    "throughput_img_s_q3",
    "throughput_img_s_iqr",
    "throughput_img_s_cv",
    "high_variance",
    "throughput_img_s_min",
    "throughput_img_s_max",
    "outliers",
    "outlier_windows",
    "variance_between_processes",
    "variance_within_process",
    "dominant_level",
    "optimal_windows_per_process",
    "step_time_s_median",
    *(f"{phase}_s_median" for phase in PHASES),
    "single_step_time_s",
    "single_step_time_is_lower_bound",
    "compile_time_s",
    "compile_time_s_later",
    "first_step_time_s",
    "warmup_time_s",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "images_timed",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
    "loader_rate_img_s",
    "loader_rate_img_s_ci95_low",
    "loader_rate_img_s_ci95_high",
    "loader_rate_img_s_min",
    "loader_rate_img_s_max",
    "loader_ci_method",
    "loader_n_processes",
    "loader_n_windows",
    "loader_time_s",
    "data_wait_share",
    "loader_headroom",
    "input_bound",
    "unstable",
    "unstable_reasons",
    *(f"unstable_{name}" for name in UNSTABLE_NUMBERS),
    *NOISE_COLUMNS,
    "sm_clock_hz_median",
    "peak_memory_device_bytes_max",
    "peak_memory_device_warmup_bytes_max",
    "peak_memory_host_bytes_max",
    "process_started_at_unix",
    "started_at_unix",
    "ended_at_unix",
    "overlap",
]


def test_summary_has_one_row_per_configuration_with_the_documents_estimate(summary, documents):
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert len(summary) == len(documents) == 6
    bf16 = _row(summary, precision="bf16", batch_size=8)
    # Mean of the process throughputs (process = its images / its seconds), hand-computed:
    # p0: 3 windows of 32 images at 120, 125, 300 img/s; p1: at 125, 120, 290 img/s.
    p0 = 96 / (32 / 120 + 32 / 125 + 32 / 300)
    p1 = 96 / (32 / 125 + 32 / 120 + 32 / 290)
    assert bf16["throughput_img_s_mean"] == pytest.approx((p0 + p1) / 2)
    assert bf16["throughput_img_s_median"] == 125.0  # over windows, not the headline
    # Windows sorted 120 120 125 125 290 300; type-7 quartiles at positions 1.25 and 3.75.
    assert (bf16["throughput_img_s_q1"], bf16["throughput_img_s_q3"]) == (121.25, 248.75)
    assert bf16["throughput_img_s_iqr"] == pytest.approx(127.5)
    assert bf16["throughput_img_s_ci95_low"] == pytest.approx(0.98 * bf16["throughput_img_s_mean"])
    assert bf16["throughput_img_s_ci95_high"] == pytest.approx(1.02 * bf16["throughput_img_s_mean"])
    assert (bf16["ci_half_width_rel"], bf16["ci_target"], bool(bf16["ci_target_met"])) == (
        0.02,
        0.03,
        True,
    )
    assert (bf16["ci_method"], bf16["stop_reason"]) == ("processes", "ci_target")
    assert (bf16["n_processes"], bf16["n_windows"]) == (2, 6)
    assert (bf16["variance_between_processes"], bf16["variance_within_process"]) == (4.0, 8.0)
    assert (bf16["dominant_level"], bf16["optimal_windows_per_process"]) == ("window", 3)
    assert bf16["step_time_s_median"] == 0.08 and bf16["forward_s_median"] == 0.03
    assert bf16["peak_memory_host_bytes_max"] == 1_000_001
    assert bf16["timed_window_s"] == pytest.approx(
        sum(w["window_s"] for w in documents[2]["windows"])
    )
    single = _row(summary, precision="fp32", batch_size=16)
    assert (single["ci_method"], single["n_processes"]) == ("windows", 1)


def test_unstable_flags_and_reasons_pass_through(summary):
    flagged = _row(summary, precision="fp32", batch_size=16)
    assert bool(flagged["unstable"]) is True
    assert flagged["unstable_reasons"] == "host_overloaded|sm_clock_drop"
    assert (flagged["unstable_host_overloaded_windows"], flagged["unstable_other_cores"]) == (
        1,
        1.3,
    )
    clean = _row(summary, precision="fp32", batch_size=8, variant="baseline")
    assert bool(clean["unstable"]) is False and clean["unstable_reasons"] == ""


def test_over_budget_and_oom_rows_carry_no_number(summary):
    over = _row(summary, precision="bf16", batch_size=16)
    assert (over["status"], over["stop_reason"]) == ("over_budget", "over_budget")
    # The stop's numbers as stop_<name> columns, no sentence.
    assert pd.isna(over["error"]) and over["stop_step_s"] == 13.2 and over["stop_needed_s"] == 145.2
    assert over["single_step_time_s"] == 13.2 and over["n_windows"] == 0
    oom = _row(summary, batch_size=64)
    assert (oom["status"], oom["error"]) == ("oom", OOM_ERROR) and pd.isna(oom["stop_reason"])
    for row in (over, oom):
        for column in (
            "throughput_img_s_mean",
            "throughput_img_s_ci95_low",
            "throughput_img_s_median",
            "throughput_img_s_iqr",
        ):
            assert pd.isna(row[column]), column
        assert bool(row["high_variance"]) is False


def test_high_variance_flag_follows_the_threshold(documents, runs):
    loose = aggregate.summary_table(_pairs(documents), runs, cv_threshold=1e6)
    strict = aggregate.summary_table(_pairs(documents), runs, cv_threshold=1e-12)
    assert not loose["high_variance"].any()
    assert strict["high_variance"].tolist() == (strict["status"] == "ok").tolist()
    # Window CVs: fp32/bs8/baseline is ~3.3%, bf16/bs8 ~47%.
    middle = aggregate.summary_table(_pairs(documents), runs, cv_threshold=0.05)
    assert bool(_row(middle, precision="bf16", batch_size=8)["high_variance"])
    assert not bool(
        _row(middle, precision="fp32", batch_size=8, variant="baseline")["high_variance"]
    )


def _overlapping(documents, shift_s=0.0, **changes):
    """Rebuild the tuned configuration so it starts while fp32/bs8/baseline's process 1 runs."""
    moved = list(documents)
    baseline = moved[0]
    index = next(i for i, d in enumerate(moved) if d["variant"] == "tuned")
    start = baseline["processes"][1]["started_at_unix"] - 1.0 + shift_s
    moved[index] = run_document(
        "fp32", 8, "tuned", windows=((150.0, 152.0), (148.0,)), start=start, **changes
    )
    return moved


def test_overlap_across_configurations_is_found_and_flagged(documents):
    runs = aggregate.runs_table(_pairs(_overlapping(documents)))
    flagged = runs[runs["overlap"]]
    assert set(zip(flagged["variant"], flagged["process"])) >= {("baseline", 1), ("tuned", 0)}
    assert (flagged["overlapping_processes"] >= 1).all()
    assert not runs.loc[runs.precision == "bf16", "overlap"].any()
    with pytest.raises(
        NnperfError,
        match=r"^processes cpu/tiny/fp32/8/baseline process 1 and "
        r"cpu/tiny/fp32/8/tuned process 0 overlapped in time on the same machine "
        r"\(\d+ overlapping pair\(s\)\); allowed: none",
    ):
        aggregate.check_no_overlap(runs)
    summary = aggregate.summary_table(_pairs(_overlapping(documents)), runs)
    assert summary.loc[summary["overlap"], "variant"].tolist() == ["baseline", "tuned"]


def test_processes_on_other_hosts_or_gpus_do_not_overlap(documents):
    runs = aggregate.runs_table(_pairs(_overlapping(documents, hostname="other-node")))
    assert not runs["overlap"].any()
    aggregate.check_no_overlap(runs)


def test_touching_intervals_do_not_overlap():
    frame = pd.DataFrame(
        {
            "device": ["cpu"] * 3,
            "model": ["m"] * 3,
            "precision": ["fp32"] * 3,
            "batch_size": [8] * 3,
            "variant": ["baseline"] * 3,
            "process": [0, 1, 2],
            "hostname": ["h"] * 3,
            "gpu_uuid": [None] * 3,
            "started_at_unix": [0.0, 10.0, 15.0],
            "ended_at_unix": [10.0, 20.0, 16.0],
        }
    )
    # process 0 ends as process 1 starts (no overlap); process 2 lies inside process 1.
    assert aggregate.find_overlaps(frame) == [(1, 2)]
    cuda = frame.assign(device="cuda", gpu_uuid=["GPU-a", "GPU-b", "GPU-c"])
    assert aggregate.find_overlaps(cuda) == []  # different GPUs of one node run side by side
    # Members of one shared process (nnperf.engine.sharing) have its pid: not an overlap.
    assert aggregate.find_overlaps(frame.assign(pid=[7, 9, 9])) == []
    assert aggregate.find_overlaps(frame.assign(pid=[7, 9, 8])) == [(1, 2)]


def test_duplicate_configuration_is_refused_naming_both_files(documents):
    with pytest.raises(
        NnperfError,
        match=r"^run files a\.json and b\.json hold the same configuration "
        r"cpu/tiny/fp32/8/baseline; allowed: one file per",
    ):
        aggregate.runs_table([("a.json", documents[0]), ("b.json", documents[0])])
    with pytest.raises(NnperfError, match="no run JSON files given"):
        aggregate.runs_table([])


def _write_study(folder: Path, documents) -> list[Path]:
    """Run JSONs under names that say nothing: the keys must come from the documents."""
    paths = []
    for i, document in enumerate(documents):
        path = folder / f"run{i:02d}.json"
        write_json(path, {k: v for k, v in document.items() if k != "schema_version"})
        paths.append(path)
    return paths


def test_write_tables(documents, tmp_path, capsys):
    paths = _write_study(tmp_path / "runs", documents)
    out = {name: tmp_path / "tables" / f"{name}.csv" for name in ("runs", "windows", "summary")}
    aggregate.write_tables(
        TablesRequest(cv_threshold=0.1), paths, out["runs"], out["windows"], out["summary"]
    )
    assert (
        "6 configurations, 9 processes, 16 windows, 1 out of memory, 1 over budget, "
        "0 overlapping processes" in capsys.readouterr().out
    )
    runs, windows, summary = (pd.read_csv(out[name]) for name in ("runs", "windows", "summary"))
    assert list(runs.columns) == RUNS_COLUMNS and len(runs) == 9
    assert list(summary.columns) == SUMMARY_COLUMNS and len(summary) == 6
    assert len(windows) == 16
    assert sorted(set(runs["source"])) == sorted(map(str, paths))
    assert set(summary["status"]) == {"ok", "oom", "over_budget"}
    # Every measured row has its fp32 reference except bf16/bs16's partner, which has no number.
    tuned = _row(summary, variant="tuned")
    assert (tuned["precision"], tuned["batch_size"]) == ("fp32", 8)
    expected = aggregate.summary_table(
        _pairs(documents), aggregate.runs_table(_pairs(documents)), cv_threshold=0.1
    )
    assert summary["high_variance"].tolist() == expected["high_variance"].tolist()
    assert summary["throughput_img_s_mean"].tolist() == pytest.approx(
        expected["throughput_img_s_mean"].tolist(), nan_ok=True
    )


def test_write_tables_warns_on_overlap(documents, tmp_path, capsys):
    paths = _write_study(tmp_path / "runs", _overlapping(documents, shift_s=0.01))
    tables = [tmp_path / f"{name}.csv" for name in ("r", "w", "s")]
    runs, _, _ = aggregate.write_tables(TablesRequest(), paths, *tables)
    assert capsys.readouterr().err.startswith(
        "warning: processes cpu/tiny/fp32/8/baseline process 1"
    )
    assert pd.read_csv(tables[0])["overlap"].sum() == runs["overlap"].sum() >= 2


def test_write_tables_refuses_other_documents_statuses_and_thresholds(documents, tmp_path):
    tables = [tmp_path / f"{name}.csv" for name in ("r", "w", "s")]
    path = tmp_path / "sidecar.json"
    write_json(path, {"kind": "profile_step"})
    with pytest.raises(NnperfError, match=r"sidecar\.json: kind 'profile_step' is not a timed run"):
        aggregate.write_tables(TablesRequest(), [path], *tables)
    odd = tmp_path / "odd.json"
    write_json(odd, {**documents[0], "status": "mixed"})
    with pytest.raises(
        NnperfError,
        match=r"odd\.json: status 'mixed' is not allowed; allowed: ok, oom, over_budget, host_busy",
    ):
        aggregate.write_tables(TablesRequest(), [odd], *tables)
    # The request itself refuses a threshold outside (0, 1] (nnperf.core.settings).
    with pytest.raises(NnperfError, match=r"^report\.cv_threshold = 0\.0 is not allowed"):
        aggregate.write_tables(TablesRequest(cv_threshold=0.0), [path], *tables)
    assert not any(table.exists() for table in tables)


def test_peak_device_memory_of_the_timed_steps_is_apart_from_the_warm_ups():
    """Per window, per process and per configuration: the timed steps' peak (the largest
    window's), and the warm-up's beside it; none on the CPU."""
    gpu = run_document(device="cuda", gpu_uuid="GPU-a")
    cpu = run_document(precision="bf16", start=gpu["ended_at_unix"] + 1.0)
    pairs = _pairs([gpu, cpu])
    runs = aggregate.runs_table(pairs)
    summary = aggregate.summary_table(pairs, runs)
    windows = aggregate.windows_table(pairs)
    cuda_windows = windows[windows["device"] == "cuda"]
    assert list(cuda_windows["peak_memory_device_bytes"]) == [
        2_000_000_000,
        2_000_000_001,
        2_000_001_000,
        2_000_001_001,
    ]
    cuda_runs = runs[runs["device"] == "cuda"].sort_values("process")
    assert list(cuda_runs["peak_memory_device_bytes"]) == [2_000_000_001, 2_000_001_001]
    assert list(cuda_runs["peak_memory_device_warmup_bytes"]) == [WARMUP_PEAK, WARMUP_PEAK + 1]
    row = _row(summary, device="cuda")
    assert row["peak_memory_device_bytes_max"] == 2_000_001_001
    assert row["peak_memory_device_warmup_bytes_max"] == WARMUP_PEAK + 1
    cpu_row = _row(summary, device="cpu")
    assert pd.isna(cpu_row["peak_memory_device_bytes_max"])
    assert pd.isna(cpu_row["peak_memory_device_warmup_bytes_max"])
    assert windows[windows["device"] == "cpu"]["peak_memory_device_bytes"].isna().all()


def test_summary_has_the_sm_clock_the_timed_windows_ran_at():
    """NVML's SM clock of each window (1980 MHz here): what a profile at ncu's locked clock is
    scaled to. A CPU run, or a GPU run without NVML, has none."""
    gpu = run_document(device="cuda", gpu_uuid="GPU-a")
    gpu["windows"][1]["sm_clock_mhz"] = 1965  # one window a little lower: the median is kept
    gpu["windows"][2]["sm_clock_mhz"] = None  # a window NVML did not answer for
    cpu = run_document(precision="bf16", start=gpu["ended_at_unix"] + 1.0)
    pairs = _pairs([gpu, cpu])
    table = aggregate.summary_table(pairs, aggregate.runs_table(pairs))
    assert _row(table, device="cuda")["sm_clock_hz_median"] == 1980e6
    assert pd.isna(_row(table, device="cpu")["sm_clock_hz_median"])
