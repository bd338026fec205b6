"""Each detail finding's record in words: one test per kind (`nnperf.report.findings.DETAIL_KINDS`),
a record built by hand in, its sentence out. The sections are tested on the records they make
(test_key_findings, test_operator_findings, test_input_verdict, roofline/test_roof_flags)."""

from __future__ import annotations

import pytest

from nnperf.report.findings import DETAIL_KINDS, Finding
from nnperf.report.wording.words import sentence

CFG = {
    "machine": "laptop",
    "device": "cpu",
    "model": "resnet18",
    "precision": "fp32",
    "batch_size": 64,
    "variant": "baseline",
}
ROW = {
    **CFG,
    "throughput_img_s_mean": 40.0,
    "throughput_img_s_ci95_low": 39.6,
    "throughput_img_s_ci95_high": 40.4,
    "loader_rate_img_s": 46.0,
    "loader_rate_img_s_ci95_low": 43.7,
    "loader_rate_img_s_ci95_high": 48.3,
    "data_wait_share": 0.62,
}
RECORDS = {
    "above_roof": Finding(
        "above_roof",
        {
            **CFG,
            "roof": "measured",
            "against": "compute",
            "level": "main memory",
            "clock_source": None,
        },
        {
            "performance_flop_s": 181e9,
            "above_fraction": 1.1,
            "above_value": 165e9,
            "gemm_size": 1024,
            "clock_hz": None,
        },
    ),
    "gpu_busy": Finding(
        "gpu_busy",
        {**CFG, "device": "cuda", "verdict": "partly"},
        {
            "kernel_time_s": 0.008,
            "profiled_sm_clock_hz": 1.6e9,
            "run_sm_clock_hz": 1.98e9,
            "kernel_time_at_run_clock_s": 0.0065,
            "step_time_s": 0.01,
            "busy_share": 0.65,
            "busy_share_at_profiled_clock": 0.8,
        },
    ),
    "null_peak": Finding(
        "null_peak",
        {
            "where": "laptop",
            "origin": "derived",
            "precision": "bf16",
            "reason": "no native bf16 arithmetic",
        },
    ),
    "above_peak": Finding(
        "above_peak",
        {"machine": "laptop", "roof": "fp32 GEMM", "unit": "FLOP/s", "origin": "derived"},
        {"measured": 198e9, "peak": 166e9, "ratio": 198 / 166},
    ),
    "kernel_kind": Finding(
        "kernel_kind", {**CFG, "device": "cuda", "kind": "gemm"}, {"share": 0.55}
    ),
    "profile_missing": Finding(
        "profile_missing", {**CFG, "status": "oom", "error": "CUDA out of memory"}
    ),
    "profile_bound": Finding(
        "profile_bound",
        {
            **CFG,
            "verdict": "overhead-bound",
            "busy_kind": "host operators",
            "remedy": "overhead-bound",
            "step_source": "profiled",
            "slowed": False,
        },
        {"share": 0.59, "busy_time_s": 0.059, "step_time_s_mean": 0.1, "input_share": 0.0},
    ),
    "profile_memory": Finding(
        "profile_memory",
        {**CFG, "phase": None},
        {
            "parameters": 40e6,
            "gradients": 40e6,
            "optimizer_state": 0.0,
            "activations": 100e6,
            "buffers": 0.0,
            "other": 20e6,
            "peak_allocated_bytes": 200e6,
            "max_batch_size": None,
            "device_total_bytes": None,
            "per_image_bytes": None,
            "estimate_bytes": None,
        },
    ),
    "profile_input": Finding(
        "profile_input",
        {**CFG, "input_bound": False},
        {
            "input_time_s": 0.002,
            "input_share": 0.02,
            "data_wait_s": 0.0015,
            "h2d_s": 0.0005,
            "workers": 2,
        },
    ),
    "profile_note": Finding(
        "profile_note", {**CFG, "note": "layers_fused"}, {"code": "layers_fused"}
    ),
    "input_verdicts": Finding(
        "input_verdicts",
        {"named": [ROW], "why": "no_rate"},
        {
            "total": 2,
            "bound": 1,
            "free": 0,
            "unknown": 1,
            "machines": 1,
            "headroom": None,
            "wait": None,
        },
    ),
    "largest_phase": Finding(
        "largest_phase", {**CFG, "phase": "backward"}, {"count": 3, "total": 4, "share": 0.45}
    ),
    "waits_on_input": Finding(
        "waits_on_input", CFG, {"input_share": 0.3, "data_wait_share": 0.25, "h2d_share": 0.05}
    ),
    "more_waiting": Finding("more_waiting", {"machine": "laptop"}, {"count": 2}),
    "faster_but_later": Finding(
        "faster_but_later",
        {
            "run": {**CFG, "precision": "bf16"},
            "first": CFG,
            "interval": "one_run",
            "ci": None,
            "recipe": "short",
            "device": "cpu",
        },
        {
            "rate": 60.0,
            "first_rate": 40.0,
            "target": 0.9,
            "time_s": None,
            "epochs": None,
            "first_time_s": 100.0,
            "first_epochs": 3,
            "epochs_run": 5,
            "best": 0.85,
        },
    ),
}

WORDED = {
    "above_roof": "resnet18 fp32 at batch 64 (baseline) on laptop reached 181 GFLOP/s, 110% of the 165 GFLOP/s measured fp32 GEMM roof: the roof is under-measured (a 1024³ GEMM does not reach this CPU's peak).",
    "gpu_busy": "resnet18 fp32 at batch 64 (baseline) on laptop: the GPU is busy 65% of the timed step (6.50 ms of kernels at the runs' 1.98 GHz, 8.00 ms at the profiled 1.60 GHz, in a 10.0 ms step) and at most 80%: partly host-bound — some of the step is spent waiting on the host, some on the kernels.",
    "null_peak": "laptop: no derived bf16 peak, no native bf16 arithmetic.",
    "above_peak": "laptop: the measured fp32 GEMM (198 GFLOP/s) is 119% of the derived peak (166 GFLOP/s): that peak is too low — its clock is below the clock the cores ran at (boost), or the FLOP/cycle table under-counts this core.",
    "kernel_kind": "resnet18 fp32 at batch 64 (baseline) on laptop: gemm kernels take 55% of the profiled step.",
    "profile_missing": "No operator profile for resnet18 fp32 at batch 64 (baseline) on laptop: it ran out of memory (CUDA out of memory).",
    "profile_bound": "On laptop, resnet18 fp32 at batch 64 (baseline) spends 59% of its step inside operators (59.0 ms of 100 ms per profiled step, on average); the rest is Python and framework work between them, or waiting for data: the step is overhead-bound; a larger batch or fewer, fused operators (torch.compile) help more than faster kernels.",
    "profile_memory": "resnet18 fp32 at batch 64 (baseline) on laptop peaks at 200 MB allocated: parameters 40 MB (20%), gradients 40 MB (20%), optimizer state 0 B (0.0%), activations 100 MB (50%), other 20 MB (10%).",
    "profile_input": "The input pipeline of resnet18 fp32 at batch 64 (baseline) on laptop (a DataLoader with 2 workers) costs 2.00 ms per step (2.0% of the step): 1.50 ms fetching batches and 0.5 ms copying and preparing them.",
    "profile_note": "Operator profile of resnet18 fp32 at batch 64 (baseline) on laptop: compiled model: operators are not grouped by layer (layers are fused).",
    "input_verdicts": "Data loading limits 1 of 2 measured configurations: resnet18 fp32 at batch 64 (baseline) (loader alone 46.0 img/s (95% CI 43.7–48.3) against 40.0 img/s (95% CI 39.6–40.4) training; data wait 62% of the step); for 1 it is undetermined (no loader rate was measured).",
    "largest_phase": "On laptop, backward is the largest phase in 3 of 4 configurations (e.g. 45% of the step for resnet18 fp32 at batch 64 (baseline)).",
    "waits_on_input": "resnet18 fp32 at batch 64 (baseline) on laptop waits on input for 30% of each step (data wait 25%, host-to-device 5.0%).",
    "more_waiting": "… and 2 more input-bound configurations on laptop (see the table).",
    "faster_but_later": "resnet18 bf16 at batch 64 (baseline) trains 1.50x as many images per second as resnet18 fp32 at batch 64 (baseline) (60.0 img/s vs 40.0 img/s; one training run each: no interval) but does not reach 90% test top-1 in 5 epochs (best 85%), while resnet18 fp32 at batch 64 (baseline) reaches it in 100 s of training, recipe short on cpu.",
}


def test_every_detail_kind_has_a_record_here():
    assert set(RECORDS) == set(WORDED) == set(DETAIL_KINDS)


@pytest.mark.parametrize("kind", DETAIL_KINDS)
def test_a_record_in_words(kind):
    assert sentence(RECORDS[kind]) == WORDED[kind]


def test_a_null_peak_from_before_the_codes_keeps_its_sentence():
    from nnperf.roofline.peaks import null_peak_reason

    assert null_peak_reason("bf16 runs emulated", {}) == "bf16 runs emulated"
    sheet = {"bf16_flags": ["amx_bf16", "avx512_bf16"]}
    assert null_peak_reason("no_native_bf16", sheet).startswith(
        "no native bf16 arithmetic (flags lack amx_bf16, avx512_bf16)"
    )
