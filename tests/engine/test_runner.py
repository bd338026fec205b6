"""Whole measurements on the CPU: the run document, the per-window and per-step tables, OOM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnperf.core.vocab import PHASES, STEP_CSV_COLUMNS, WINDOW_CSV_COLUMNS
from nnperf.engine.runner import perform_run, steps_frame, windows_frame
from tiny_training import STUDY_OOM_BATCH, run_out_of_memory, tiny_data, tiny_model, tiny_request

REPO = Path(__file__).resolve().parents[2]
CONTRACT_KEYS = (
    "status",
    "error",
    "model",
    "device",
    "precision",
    "batch_size",
    "variant",
    "dataset",
    "variant_settings",
    "warmup_steps",
    "timed_steps",
    "timing",
    "stop_reason",
    "throughput_img_s",
    "throughput_img_s_ci95_low",
    "throughput_img_s_ci95_high",
    "ci_half_width_rel",
    "ci_method",
    "ci_target_met",
    "variance",
    "n_processes",
    "n_windows",
    "single_step_time_s",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "duty_cycle",
    "unstable",
    "unstable_reasons",
    "unstable_numbers",
    "processes",
    "windows",
    "step_time_s",
    "phase_time_s",
    "compile_time_s",
    "first_step_time_s",
    "peak_memory_device_bytes",
    "peak_memory_device_warmup_bytes",
    "peak_memory_host_bytes",
    "loss_start",
    "loss_end",
    "started_at_unix",
    "ended_at_unix",
    "environment",
)
ENVIRONMENT_KEYS = (
    "device_name",
    "driver",
    "cuda",
    "cudnn",
    "torch",
    "torchvision",
    "cpu_model",
    "cpu_threads",
    "clocks",
    "cuda_matmul_allow_tf32",
    "cudnn_allow_tf32",
    "float32_matmul_precision",
    "cudnn_benchmark",
    "memory_format",
    "amp_dtype",
    "compile_mode",
    "optimizer_impl",
    "hostname",
    "slurm",
    "gpu",
    "git_commit",
    "python",
)


@pytest.fixture(scope="module")
def fp32_run():
    return perform_run(tiny_request("fp32"), tiny_model, tiny_data(), workflow_dir=REPO)


def test_fp32_run_document(fp32_run):
    document, windows, steps = fp32_run
    for key in CONTRACT_KEYS:
        assert key in document, key
    assert document["status"] == "ok" and document["error"] is None
    assert (document["model"], document["device"], document["precision"]) == ("tiny", "cpu", "fp32")
    assert document["batch_size"] == 8 and document["warmup_steps"] == 2
    # Two clean windows in each of two processes; a window disturbed by a neighbour (a busy
    # machine) stays in the table beside the one measured in its place.
    assert document["timed_steps"] == 3 and document["n_windows"] == 4
    assert len(windows) == 4 + document["discarded_windows"] and len(steps) == 3 * len(windows)
    assert document["timing"]["target_ci"] == 0.001 and document["timing"]["max_processes"] == 2
    assert document["images_timed"] == 4 * 24
    # The estimate and the step statistics are the clean windows'.
    clean = [w for w in windows if not w["discarded"]]
    used = {(w["process"], w["window"]) for w in clean}
    clean_steps = [row for row in steps if (row["process"], row["window"]) in used]
    assert document["timed_window_s"] == pytest.approx(sum(w["window_s"] for w in clean))
    times = sorted(row["step_time_s"] for row in clean_steps)
    assert document["step_time_s"]["median"] == pytest.approx((times[5] + times[6]) / 2)
    assert (
        document["step_time_s"]["min"] == times[0] and document["step_time_s"]["max"] == times[-1]
    )
    assert document["single_step_time_s"] == document["step_time_s"]["median"]
    for phase in PHASES:
        values = sorted(row[f"{phase}_s"] for row in clean_steps)
        assert document["phase_time_s"][phase] == pytest.approx((values[5] + values[6]) / 2)
    assert document["compile_time_s"] is None and document["compile_time_s_later"] is None
    assert document["first_step_time_s"] == document["processes"][0]["warmup_step_time_s"][0]
    # The CPU has no device memory: no peak, of the warm-up or of the timed steps, nor per
    # window nor per process (the host's resident peak stands for it).
    assert document["peak_memory_device_bytes"] is None
    assert document["peak_memory_device_warmup_bytes"] is None
    assert {w["peak_memory_device_bytes"] for w in document["windows"]} == {None}
    for process in document["processes"]:
        assert process["peak_memory_device_bytes"] is None
        assert process["peak_memory_device_warmup_bytes"] is None
    assert document["peak_memory_host_bytes"] > 50 * 2**20  # torch alone is bigger than that
    assert document["loss_end"] == windows[-1]["loss_end"] == steps[-1]["loss"]
    assert 1.0 < document["loss_start"] < 4.0  # ~ln(10) for 10 random classes at init
    first_window, last_window = windows[0], windows[-1]
    assert (
        document["started_at_unix"]
        <= first_window["started_at_unix"]
        < last_window["ended_at_unix"]
        <= document["ended_at_unix"]
    )
    assert document["seed"] == 0 and [p["seed"] for p in document["processes"]] == [0, 1]
    assert document["windows"] == windows
    json.dumps(document)  # serialisable as is


def test_environment_record_on_cpu(fp32_run):
    environment = fp32_run[0]["environment"]
    for key in ENVIRONMENT_KEYS:
        assert key in environment, key
    assert environment["cuda_matmul_allow_tf32"] is False
    assert environment["cudnn_allow_tf32"] is False
    assert environment["float32_matmul_precision"] == "highest"
    assert environment["amp_dtype"] is None and environment["memory_format"] == "contiguous"
    assert environment["optimizer_impl"] == "default"
    assert environment["optimizer_impl_resolved"] == "for-loop"
    assert environment["cpu_threads"] >= 1 and environment["device_name"]
    assert environment["gpu"] is None and environment["driver"] is None


def test_steps_and_windows_csv_columns(fp32_run):
    frame = steps_frame(fp32_run[2])
    assert tuple(frame.columns) == STEP_CSV_COLUMNS
    windows = fp32_run[1]
    assert frame["step"].tolist() == [0, 1, 2] * len(windows)
    assert frame["process"].tolist() == [w["process"] for w in windows for _ in range(3)]
    assert (frame["step_time_s"] > 0).all() and frame["loss"].notna().all()
    assert tuple(steps_frame([]).columns) == STEP_CSV_COLUMNS  # OOM runs still get a header
    windows = windows_frame(fp32_run[1])
    assert tuple(windows.columns) == WINDOW_CSV_COLUMNS
    for _, mine in windows.groupby("process"):
        assert mine["window"].tolist() == list(range(len(mine)))
    assert (~windows["discarded"].astype(bool)).sum() == 4
    assert tuple(windows_frame([]).columns) == WINDOW_CSV_COLUMNS


def test_bf16_run_records_autocast():
    document, _, steps = perform_run(tiny_request("bf16"), tiny_model, tiny_data())
    assert document["status"] == "ok"
    assert document["environment"]["amp_dtype"] == "bfloat16"
    assert document["environment"]["grad_scaler"] is False
    assert document["environment"]["cuda_matmul_allow_tf32"] is False
    assert all(0 < row["loss"] < 10 for row in steps)


def test_tuned_variant_run():
    settings = {
        "channels_last": True,
        "optimizer_impl": "foreach",
        "data_path": "device_resident",
        "cpu_threads": 1,
    }
    document, _, _ = perform_run(
        tiny_request("fp32", settings, variant="tuned"), tiny_model, tiny_data()
    )
    assert document["status"] == "ok" and document["variant"] == "tuned"
    assert document["variant_settings"]["data_path"] == "device_resident"
    environment = document["environment"]
    assert environment["memory_format"] == "channels_last"
    assert environment["optimizer_impl"] == environment["optimizer_impl_resolved"] == "foreach"
    assert environment["data_path"] == "device_resident"
    assert environment["cpu_threads"] == 1


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_out_of_memory_is_a_result():
    result = run_out_of_memory(STUDY_OOM_BATCH)
    document = result["document"]
    assert document["status"] == "oom"
    assert "can't allocate memory" in document["error"] or "out of memory" in document["error"]
    assert "\n" not in document["error"]
    assert document["throughput_img_s"] is None and document["step_time_s"] is None
    assert document["phase_time_s"] is None and document["loss_end"] is None
    assert document["n_windows"] == 0 and document["processes"][0]["status"] == "oom"
    assert document["environment"]["cpu_model"]
    assert result["n_steps"] == 0
