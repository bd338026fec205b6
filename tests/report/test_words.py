"""What each kind of finding says: one record in, one sentence out, per kind
(`nnperf.report.wording`), and a list that names each configuration once."""

from __future__ import annotations

import pytest

from nnperf.core.ratios import RatioCI
from nnperf.report.findings import DETAIL_KINDS, KINDS, NOISE_CAUSES, Finding
from nnperf.report.wording.words import WORDING, sentence, sentences

M = "box"
BEST = {
    "machine": M,
    "device": "cpu",
    "model": "m",
    "precision": "bf16",
    "batch_size": 32,
    "variant": "tuned",
}
RUNNER_UP = {**BEST, "variant": "baseline"}
CI = RatioCI(1.06, 1.04, 1.07, "paired", 20)


def estimate(config, mean, low, high):
    return {
        **config,
        "throughput_img_s_mean": mean,
        "throughput_img_s_ci95_low": low,
        "throughput_img_s_ci95_high": high,
        "n_windows": 40,
        "n_processes": 20,
    }


TOP, SECOND = estimate(BEST, 105.0, 103.0, 108.0), estimate(RUNNER_UP, 99.8, 97.3, 102.0)


def comparison(a, b, ratio, low, high, verdict="faster", **extra):
    row = {f"a_{k}": v for k, v in a.items()} | {f"b_{k}": v for k, v in b.items()}
    return row | {
        "ratio": ratio,
        "ci95_low": low,
        "ci95_high": high,
        "method": "paired",
        "rounds": 20,
        "verdict": verdict,
        **extra,
    }


SMALL = {**BEST, "batch_size": 16}
GAIN = comparison(BEST, SMALL, 1.22, 1.18, 1.26, a_value=105.0, b_value=86.0)
ROW = {
    **BEST,
    "status": "ok",
    "n_processes": 3,
    "n_windows": 12,
    "ci_half_width_rel": 0.067,
    "ci_target": 0.06,
    "stop_reason": "budget",
    "throughput_img_s_cv": 0.08,
    "unstable_reasons": "",
}
# One record of each kind and what its sentence must say.
EXAMPLES = {
    "only_configuration": (
        Finding("only_configuration", {**BEST, "order": [TOP], "tied": [TOP], "ci": None}),
        "Only configuration measured on box: m bf16 at batch 32 (tuned), 105 img/s (95% CI 103–108).",
    ),
    "fastest": (
        Finding("fastest", {**BEST, "order": [TOP, SECOND], "tied": [TOP], "ci": CI}),
        "Fastest configuration on box: m bf16 at batch 32 (tuned), 105 img/s (95% CI 103–108); "
        "1.06x faster (95% CI 1.04-1.07) than the runner-up, baseline.",
    ),
    "fastest_tied": (
        Finding(
            "fastest_tied",
            {
                **BEST,
                "order": [TOP, SECOND],
                "tied": [TOP, SECOND],
                "ci": RatioCI(1.01, 0.98, 1.04, "paired", 20),
            },
        ),
        "No single fastest configuration on box: m bf16 at batch 32 (tuned) at 105 img/s",
    ),
    "best_setting": (
        Finding(
            "best_setting",
            {
                **BEST,
                "column": "variant",
                "point": BEST,
                "order": [TOP, SECOND],
                "tied": [TOP],
                "ci": CI,
            },
        ),
        "Best variant for m bf16 at batch 32 on box: tuned, 1.06x faster (95% CI 1.04-1.07) than "
        "baseline",
    ),
    "best_setting_tied": (
        Finding(
            "best_setting_tied",
            {
                **BEST,
                "column": "variant",
                "point": BEST,
                "order": [TOP, SECOND],
                "tied": [TOP, SECOND],
                "ci": RatioCI(1.01, 0.98, 1.04, "paired", 20),
            },
        ),
        "No single best variant for m bf16 at batch 32 on box: tuned at 105 img/s",
    ),
    "limit_input": (
        Finding(
            "limit_input",
            {**BEST, "phase": "data_wait"},
            {"input_share": 0.6, "step_s": 0.3, "phase_share": 0.6},
        ),
        "What limits m bf16 at batch 32 (tuned) on box: the input pipeline — data wait and "
        "host-to-device copies take 60% of each step (300 ms)",
    ),
    "limit_overheads": (
        Finding(
            "limit_overheads",
            {**BEST, "roof": "measured", "bound": "compute", "level": "main memory"},
            {"fraction_of_roof": 0.1, "performance_flop_s": 1e11, "attainable_flop_s": 1e12},
        ),
        "overheads, not the roofs — the step reaches only 10% of the measured compute roof",
    ),
    "limit_compute": (
        Finding(
            "limit_compute",
            {**BEST, "roof": "measured", "bound": "compute"},
            {"fraction_of_peak": 0.7},
        ),
        "compute — the step is right of the ridge point and reaches 70% of the measured bf16 peak",
    ),
    "limit_memory": (
        Finding(
            "limit_memory",
            {**BEST, "roof": "datasheet", "level": "DRAM"},
            {"fraction_of_roof": 0.8},
        ),
        "memory bandwidth at DRAM — the step is left of the ridge point and reaches 80%",
    ),
    "limit_unread": (
        Finding(
            "limit_unread", {**BEST, "phase": "backward"}, {"phase_share": 0.66, "step_s": 0.3}
        ),
        "no roofline point for it; the largest phase is backward (66% of 300 ms per step).",
    ),
    "measuring_cost": (
        Finding(
            "measuring_cost",
            {},
            {"busy_s": 318, "timed_share_of_busy": 0.56, "met": 8, "judged": 8},
        ),
        "Measuring took 5.3 min of busy time, 56% of it in timed windows; 8 of 8 measured "
        "configurations reached their CI target",
    ),
    "flagged_counts": (
        Finding("flagged_counts", {}, {"oom": 1, "high_variance": 4, "roof_too_low": 1}),
        "1 configuration ran out of memory; 4 configurations flagged for high variance; 1 roof "
        "lies below measured points — see Notes.",
    ),
    "study_span": (
        Finding(
            "study_span",
            {},
            {"jobs": 9, "first_start": 0, "rendered_at": 3600, "span_s": 3600, "busy_s": 318},
        ),
        "The study spans 60.0 min, from its first recorded job start (1970-01-01 00:00 UTC) to "
        "this report (1970-01-01 01:00 UTC); its 9 recorded jobs were busy for 5.3 min",
    ),
    "study_span_unknown": (
        Finding("study_span_unknown", {}, {"timed_s": 120}),
        "so the study's wall time is unknown; its timed windows took 2.0 min.",
    ),
    "duty_cycle": (
        Finding(
            "duty_cycle",
            {},
            {"timed_s": 180, "timed_share_of_span": 0.05, "timed_share_of_busy": 0.56},
        ),
        "The timed windows took 3.0 min: 5.0% of the span and 56% of the busy time (the duty cycle)",
    ),
    "machine_allows": (
        Finding(
            "machine_allows",
            {"machine": M},
            {
                "between_rsd": 0.101,
                "target": 0.03,
                "missed": 6,
                "judged": 8,
                "processes_needed": 42,
                "half_width": 0.05,
                "half_width_max": 0.071,
                "paired_half_width": 0.02,
                "paired": 8,
            },
        ),
        "On box, worker processes differ by ~10% (median relative standard deviation between "
        "processes), too much for a ±3.0% CI of absolute throughput in the time budget (it "
        "would take ~42 processes): 6 of 8 configurations missed that target for this reason. "
        "What this machine allows: absolute throughput to ±5.0% (their median 95% CI "
        "half-width; widest ±7.1%), the paired comparisons to ±2.0% (median of 8)",
    ),
    "ci_target_count": (
        Finding("ci_target_count", {}, {"met": 4, "judged": 5}),
        "4 of 5 measured configurations reached their CI target (a 95% CI half-width of "
        "throughput within timing.target_ci of the estimate); 1 did not.",
    ),
    "ci_missed": (
        Finding("ci_missed", {"row": ROW}, {}),
        "m bf16 at batch 32 (tuned) on box (±6.7% against ±6.0%) missed its CI target after 3 "
        "processes and 12 windows; the time budget ran out first (timing.max_seconds)",
    ),
    "dominant_level": (
        Finding(
            "dominant_level",
            {"machine": M},
            {"by_process": 8, "by_window": 0, "between_rsd": 0.045, "within_rsd": 0.026},
        ),
        "On box, the spread between processes dominates in all 8 configurations (median "
        "relative standard deviations: 4.5% between processes, 2.6% within one)",
    ),
    "fixed_cost": (
        Finding("fixed_cost", {"machine": M}, {"fixed_s": 0.182, "count": 8, "process_s": 0.15}),
        "is 0.182 s (median of 8), and a worker process needs 0.15 s from its start",
    ),
    "compile_cost": (
        Finding("compile_cost", {"machine": M}, {"first_s": 20.0, "count": 1, "later_s": 2.0}),
        "On box, compilation took 20.0 s in the first process (median of 1 compiled "
        "configuration) and 2.00 s in later processes",
    ),
    "speedup": (
        Finding(
            "speedup",
            {
                "row": comparison(
                    BEST,
                    {**BEST, "precision": "fp32"},
                    1.81,
                    1.73,
                    1.88,
                    a_value=105.0,
                    b_value=58.1,
                ),
                "column": "precision",
            },
        ),
        "bf16 is 1.81x faster (95% CI 1.73-1.88) than fp32 for m at batch 32 (tuned) on box: "
        "105 img/s vs 58.1 img/s.",
    ),
    "batch_scaling": (
        Finding(
            "batch_scaling",
            {**{k: BEST[k] for k in BEST if k != "batch_size"}, "gain": GAIN, "tops": [GAIN]},
        ),
        "For m bf16 (tuned) on box, batch 32 against batch 16 (105 img/s vs 86.0 img/s): 1.22x "
        "higher (95% CI 1.18-1.26); it is still rising at the largest batch size that ran",
    ),
    "machine_fastest": (
        Finding(
            "machine_fastest",
            {
                "rows": [
                    comparison(
                        {**BEST, "machine": "fast"},
                        BEST,
                        2.0,
                        1.9,
                        2.1,
                        a_value=210.0,
                        b_value=105.0,
                    )
                ]
            },
        ),
        "Across machines, m bf16 at batch 32 (tuned) runs fastest on fast at 210 img/s, 2.00x "
        "faster (95% CI 1.90-2.10) than the slowest machine, box, at 105 img/s",
    ),
    "machine_tied": (
        Finding(
            "machine_tied",
            {
                "rows": [
                    comparison(
                        {**BEST, "machine": "fast"},
                        BEST,
                        1.01,
                        0.98,
                        1.04,
                        "tie",
                        a_value=106.0,
                        b_value=105.0,
                    )
                ]
            },
        ),
        "Across machines, m bf16 at batch 32 (tuned) has no single fastest machine: fast at 106 "
        "img/s and box at 105 img/s are not separated",
    ),
    "shared_settings": (
        Finding("shared_settings", {"num_workers": "0", "pin_memory": "False"}),
        "Every variant and precision ran with num workers 0, pin memory False; the table shows "
        "what differs.",
    ),
    "oom": (
        Finding("oom", {**BEST, "error": "DefaultCPUAllocator: not enough memory"}),
        "Out of memory: m bf16 at batch 32 (tuned) on box: DefaultCPUAllocator: not enough memory.",
    ),
    "over_budget": (
        Finding("over_budget", {**BEST, "step_s": 13.2, "lower_bound": True}),
        "Over budget: m bf16 at batch 32 (tuned) on box was not measured — one training step "
        "takes at least 13.2 s; raise timing.max_seconds to measure it.",
    ),
    "host_busy": (
        Finding("host_busy", BEST, {"discarded_windows": 7, "n_windows": 1, "n_processes": 1}),
        "Host busy: m bf16 at batch 32 (tuned) on box was not measured: 7 windows ran beside "
        "other load and were left out, 1 clean window remained; it has no point on a figure, no "
        "roofline point and no speedup. Run it again on a quieter machine.",
    ),
    "unstable": (
        Finding("unstable", {**BEST, "unstable_reasons": ""}),
        "Unstable: m bf16 at batch 32 (tuned) on box — no reason recorded; its throughput is "
        "marked unstable wherever it is quoted",
    ),
    "high_variance": (
        Finding("high_variance", ROW, {"threshold": 0.05}),
        "High variance: m bf16 at batch 32 (tuned) on box — throughput CV 8.0% across 12 "
        "windows of 3 processes (threshold 5.0%); treat its numbers and speedups with care.",
    ),
    "roof_too_low": (
        Finding(
            "roof_too_low",
            {
                "machine": M,
                "device": "cpu",
                "roof": "measured",
                "precision": "fp32",
                "worst": {
                    **BEST,
                    "performance_flop_s": 2.5e11,
                    "attainable_flop_s": 1e11,
                    "fraction_of_roof": 2.5,
                },
            },
            {"points": 1},
        ),
        "Roof too low: 1 fp32 step point lies above the measured roofs on box (worst: m bf16 at "
        "batch 32 (tuned) at 250 GFLOP/s, 2.50x the 100 GFLOP/s roof)",
    ),
    "profile_unchecked": (
        Finding("profile_unchecked", BEST),
        "Profile unchecked: m bf16 at batch 32 (tuned) on box — its export holds no calibration GEMM",
    ),
    "flop_counters_off": (
        Finding("flop_counters_off", {**BEST, "calibration_ratio": 2.0}),
        "FLOP counters off: m bf16 at batch 32 (tuned) on box — the calibration GEMM counted 2.00x "
        "its known FLOPs",
    ),
    "profile_roof_flagged": (
        Finding(
            "profile_roof_flagged",
            {
                **BEST,
                "calibration_roof_fraction": 1.5,
                "calibration_roof_flop_s": 1e12,
                "calibration_clock_hz": 1.98e9,
                "roof_basis": "datasheet",
            },
        ),
        "Profile roof flagged: m bf16 at batch 32 (tuned) on box — its calibration GEMM reached "
        "150% of the profile's bf16 compute roof (1 TFLOP/s at 1.98 GHz",
    ),
    "no_timed_runs": (Finding("no_timed_runs"), "No timed runs: results/tables/summary.csv"),
    "no_kernels": (Finding("no_kernels"), "No per-kernel table (kernels.csv)"),
    "no_roofline_points": (Finding("no_roofline_points"), "No roofline points"),
    "no_ceilings": (Finding("no_ceilings"), "No ceilings JSON"),
}


def test_every_kind_has_its_wording_and_an_example():
    worded = set(KINDS) - set(NOISE_CAUSES)  # `wording.measurement` words a row's causes
    assert set(WORDING) == worded
    # The detail sections' kinds have their examples in test_detail_wording.py.
    assert set(EXAMPLES) == worded - set(DETAIL_KINDS)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_one_record_one_sentence(kind):
    record, said = EXAMPLES[kind]
    assert said in sentence(record)


def test_a_list_names_the_configuration_once():
    fastest, limit, scaling = (EXAMPLES[k][0] for k in ("fastest", "limit_unread", "batch_scaling"))
    worded = sentences([fastest, limit, "a note given to the report", scaling, EXAMPLES["oom"][0]])
    assert worded[0].startswith("Fastest configuration on box: m bf16 at batch 32 (tuned)")
    assert worded[1].startswith("What limits it: no roofline point")
    assert worded[2] == "a note given to the report"
    assert worded[3].startswith("Batch 32 against batch 16 (105 img/s vs 86.0 img/s)")
    # Not after a leader: named in full.
    assert worded[4].startswith("Out of memory: m bf16 at batch 32 (tuned) on box")
    # A configuration that differs from the one named is named by what differs.
    other = Finding("batch_scaling", {**EXAMPLES["batch_scaling"][0].about, "precision": "fp32"})
    assert sentences([fastest, other])[1].startswith("For fp32, batch 32 against batch 16")
