"""Findings computed from tables in the contract's shape, against hand-computed numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from h100_exports import EXPORTS
from nnperf.core.vocab import PHASES
from nnperf.core.wording import stop_sentence
from nnperf.report.bounds import (
    preferred_verdict,
    profile_roofs,
    roofline_readings,
    roofline_verdicts,
)
from nnperf.report.format import GROUP_KEYS, estimate_text, ok_configs
from nnperf.report.sections.breakdown import phase_shares
from nnperf.report.sections.ceilings import ceilings_table
from nnperf.report.sections.kernels import kernel_kind_shares, top_kernels
from nnperf.report.sections.breakdown import limit_record
from nnperf.report.findings import Finding
from nnperf.report.wording.words import sentence, sentences
from nnperf.report.sections.measurement import (
    ci_target_counts,
    cost_by_folder,
    cost_records,
    measurement_table,
    quality_records,
    study_cost,
)
from nnperf.report.sections.notes import (
    profile_check_notes,
    roof_violation_notes,
    status_notes,
    unstable_notes,
    variance_notes,
)
from nnperf.report.format import cells
from nnperf.torchprof.analysis import union_length as union_seconds
from nnperf.report.sections.roofline import READING_COLUMNS, above_roof, busy_record
from nnperf.report.comparisons import comparisons_table
from nnperf.report.sections.speedups import pairs, scaling, stated
from nnperf.roofline import points as roofline
from report_tables import (
    LAPTOP,
    LAPTOP_TARGET_CI,
    START_UNIX,
    UNSTABLE_REASON,
    Config,
    ceilings_document,
    gpu_configs,
    gpu_kernels,
    job_start,
    laptop_configs,
    over_budget_config,
    roofline_point,
    runs_rows,
    summary_rows,
    windows_rows,
)

H100 = "NVIDIA H100 80GB HBM3 (gpu01)"
I7 = "Intel(R) Core(TM) i7-1185G7 (laptop)"


def reading_cells(verdict) -> dict:
    """The Roofline section's reading row of one verdict, as the page shows it."""
    return cells(above_roof(pd.DataFrame([dict(verdict)])), READING_COLUMNS).iloc[0].to_dict()


def labelled(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    return frame.assign(machine=machine)


def gpu_summary() -> pd.DataFrame:
    return labelled(summary_rows(gpu_configs()), H100)


def laptop_summary() -> pd.DataFrame:
    return labelled(summary_rows(laptop_configs()), I7)


def gpu_runs() -> pd.DataFrame:
    return labelled(runs_rows(gpu_configs(), "gpu01", "NVIDIA H100 80GB HBM3"), H100)


def laptop_runs() -> pd.DataFrame:
    return labelled(runs_rows(laptop_configs(), "laptop", "Intel(R) Core(TM) i7-1185G7"), I7)


def box(configs: list[Config]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summary and the runs of `configs` on machine `box`."""
    return labelled(summary_rows(configs), "box"), labelled(runs_rows(configs, "box", "x"), "box")


def speedups(summary, column, reference, runs=None):
    """The `column` rows of comparisons.csv built from `summary` and `runs`."""
    return pairs(comparisons_table(summary, runs), column)


def said(table, kind):
    """The Measurement section's findings of `kind` from its `table`, in words."""
    return sentences(r for r in quality_records(table) if r.kind == kind)


def speedup_sentence(row, column):
    return sentence(Finding("speedup", {"row": row, "column": column}))


def batch_scaling(summary, runs=None):
    return scaling(comparisons_table(summary, runs))


def test_one_process_on_a_side_gives_no_separation():
    summary, runs = box(
        [
            Config("cpu", "m", "fp32", 8, "baseline", 94.03, (91.5, 96.6), processes=1),
            Config("cpu", "m", "fp32", 8, "tuned", 94.0, (92.8, 95.3), processes=1),
        ]
    )
    row = speedups(summary, "variant", "baseline", runs).iloc[0].to_dict()
    assert speedup_sentence(row, "variant").startswith(
        "The tuned variant vs baseline for m fp32 at batch 8 on box: 1.00x, not separated "
        "(no bounded 95% CI: too few processes); 94.0 img/s"
    )
    # Without runs.csv the ratio of the means is stated, and why it has no interval.
    row = speedups(summary, "variant", "baseline").iloc[0].to_dict()
    assert "1.00x, not separated (no per-process throughputs for a 95% CI)" in (
        speedup_sentence(row, "variant")
    )


def test_phase_shares_from_summary_medians():
    shares = phase_shares(gpu_summary())
    bf16 = shares[shares["precision"] == "bf16"].iloc[0]
    # 4 + 0 + 2 + 3 + 1 = 10 ms: data wait 40%, forward 20%, backward 30%, optimizer 10%.
    assert bf16["phase_total_s"] == pytest.approx(0.010)
    assert [round(bf16[f"{p}_share"], 6) for p in PHASES] == [0.4, 0.0, 0.2, 0.3, 0.1]
    assert bf16["input_share"] == pytest.approx(0.4)


def test_unmeasured_configurations_have_no_phase_shares():
    summary = labelled(summary_rows(laptop_configs() + [over_budget_config()]), I7)
    shares = phase_shares(summary)
    # Five measured configurations; the oom and over-budget ones have no step times.
    assert len(shares) == 5
    assert 128 not in set(shares["batch_size"]) and 256 not in set(shares["batch_size"])


def test_input_bound_configuration_is_named_as_such():
    summary = gpu_summary()
    phases = phase_shares(summary)
    best = summary[summary["precision"] == "bf16"].iloc[0].to_dict()
    record = limit_record(best, phases, pd.DataFrame())
    assert record.kind == "limit_input"
    assert record.numbers["input_share"] == pytest.approx(0.4)
    assert record.numbers["step_s"] == pytest.approx(0.01)
    assert sentence(record).startswith(
        f"What limits resnet18_cifar bf16 at batch 64 (baseline) on {H100}: "
        "the input pipeline — data wait and host-to-device copies take 40% "
        "of each step (10.0 ms)"
    )
    # After the finding that named it, the configuration is "it".
    assert sentence(record, best).startswith("What limits it: the input pipeline")


def cpu_point(intensity: float, performance: float) -> pd.DataFrame:
    config = laptop_configs()[2]
    flops = performance * 0.1
    return labelled(
        pd.DataFrame(
            [
                roofline_point(
                    config,
                    source="analytic",
                    level="algorithmic",
                    flops=flops,
                    bytes_=flops / intensity,
                    time_s=0.1,
                )
            ]
        ),
        I7,
    )


CPU_CEILINGS = [
    {
        **ceilings_document(
            "cpu",
            LAPTOP[1],
            gemm={"fp32": 1e11, "bf16": 2e11},
            bandwidth=1e10,
            datasheet={"flop_s": {"fp32": 2e11}, "memory_bandwidth_bytes_s": 2e10},
        ),
        "machine": I7,
    }
]


def test_memory_bound_reading_against_measured_and_datasheet_roofs():
    readings = roofline_readings(cpu_point(5.0, 2.5e10), CPU_CEILINGS)
    measured = readings[readings["roof"] == "measured"].iloc[0]
    # Measured: ridge 1e11 / 1e10 = 10 FLOP/B > 5 -> memory-bound; attainable 5 x 1e10 = 5e10;
    # 2.5e10 achieved = 50% of the roof, 25% of the 1e11 peak.
    assert measured["ridge_flop_per_byte"] == pytest.approx(10.0)
    assert measured["bound"] == "memory"
    assert measured["attainable_flop_s"] == pytest.approx(5e10)
    assert measured["fraction_of_roof"] == pytest.approx(0.5)
    assert measured["fraction_of_peak"] == pytest.approx(0.25)
    datasheet = readings[readings["roof"] == "datasheet"].iloc[0]
    # Datasheet: ridge 2e11 / 2e10 = 10; attainable 1e11; 25% of the roof, 12.5% of peak.
    assert datasheet["fraction_of_roof"] == pytest.approx(0.25)
    assert datasheet["fraction_of_peak"] == pytest.approx(0.125)
    verdict = preferred_verdict(roofline_verdicts(readings), measured.to_dict())
    assert verdict["roof"] == "measured" and verdict["limit"] == "algorithmic"
    assert reading_cells(verdict) == {
        "Point": "analytic",
        "Roofs": "measured",
        "Bound": "memory (main memory)",
        "Intensity (FLOP/B)": "5.00",
        "Ridge (FLOP/B)": "10.0",
        "Achieved": "25 GFLOP/s",
        "Attainable": "50 GFLOP/s",
        "Of roof": "50%",
        "Of peak": "25%",
        "Peak": "100 GFLOP/s",
        "Above roof": "",
        "Levels with a roof": "algorithmic",
    }


def test_compute_bound_reading():
    readings = roofline_readings(cpu_point(50.0, 8e10), CPU_CEILINGS)
    verdict = roofline_verdicts(readings).set_index("roof").loc["measured"]
    # 50 FLOP/B > ridge 10: compute-bound, attainable = peak 1e11; 8e10 -> 80% of both.
    assert verdict["bound"] == "compute" and verdict["limit"] == "compute"
    assert verdict["fraction_of_roof"] == pytest.approx(0.8)
    assert verdict["fraction_of_peak"] == pytest.approx(0.8)


def test_hierarchical_reading_binds_at_the_lowest_level_roof():
    c = gpu_configs()[1]
    points = labelled(
        pd.DataFrame(
            [
                roofline_point(
                    c, source="ncu", level=level, flops=1e11, bytes_=1e11 / ai, time_s=1e-3
                )
                for level, ai in (("dram", 100.0), ("l2", 20.0), ("l1", 5.0))
            ]
        ),
        H100,
    )
    kernels = labelled(gpu_kernels(), H100)
    readings = roofline_readings(points, [], kernels)
    verdict = roofline_verdicts(readings).iloc[0]
    # Profile roofs: DRAM 100 x 3e12 = 3e14, L2 20 x 1e13 = 2e14, L1 5 x 3e13 = 1.5e14, all
    # below the 5e14 tensor peak: the step is memory-bound at L1, 1e14 / 1.5e14 = 2/3.
    assert verdict["roof"] == "profile"
    assert (verdict["bound"], verdict["limit"]) == ("memory", "l1")
    assert verdict["attainable_flop_s"] == pytest.approx(1.5e14)
    assert verdict["fraction_of_roof"] == pytest.approx(2 / 3)
    assert verdict["fraction_of_peak"] == pytest.approx(0.2)
    assert verdict["levels"] == "dram l1 l2"


def test_far_below_the_roofs_reads_as_overheads():
    readings = roofline_readings(cpu_point(50.0, 1e10), CPU_CEILINGS)
    verdicts = roofline_verdicts(readings)
    config = verdicts.iloc[0].to_dict()
    record = limit_record(config, pd.DataFrame(), verdicts)
    # 1e10 of an attainable 1e11: 10% < 30% -> overheads.
    assert record.kind == "limit_overheads"
    assert record.numbers["fraction_of_roof"] == pytest.approx(0.1)
    assert (
        "overheads, not the roofs — the step reaches only 10% of the measured compute roof"
        in sentence(record)
    )


@given(
    intensity=st.floats(1e-3, 1e4),
    performance=st.floats(1e6, 1e12),
    peak=st.floats(1e9, 1e15),
    bandwidth=st.floats(1e8, 1e13),
)
def test_roofline_formulas_are_consistent(intensity, performance, peak, bandwidth):
    config = laptop_configs()[2]
    point = labelled(
        pd.DataFrame(
            [
                roofline_point(
                    config,
                    source="analytic",
                    level="algorithmic",
                    flops=performance,
                    bytes_=performance / intensity,
                    time_s=1.0,
                )
            ]
        ),
        I7,
    )
    ceiling = [
        {
            "device": "cpu",
            "machine": I7,
            "datasheet": None,
            "measured": {"gemm_flop_s": {"fp32": peak}, "memory_bandwidth_bytes_s": bandwidth},
        }
    ]
    row = roofline_readings(point, ceiling).iloc[0]
    assert row["attainable_flop_s"] <= peak * (1 + 1e-12)
    assert row["attainable_flop_s"] == pytest.approx(min(peak, intensity * bandwidth))
    assert (row["bound"] == "memory") == (intensity < peak / bandwidth)
    # The roof above a point is never higher than the peak, so the fraction of the roof is
    # at least the fraction of the peak.
    assert row["fraction_of_roof"] >= row["fraction_of_peak"] * (1 - 1e-12)


def test_top_kernels_sum_launches_and_leave_out_the_calibration_gemm():
    table = top_kernels(labelled(gpu_kernels(), H100), n=2)
    assert list(table["kernel_name"]) == [
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        "cudnn::bn_fw_tr_1C11_kernel_NCHW",
    ]
    first = table.iloc[0]
    # Two launches: 300 + 200 us of a 650 us step (the calibration GEMM is left out).
    assert first["launches"] == 2
    assert first["duration_s"] == pytest.approx(500e-6)
    assert first["share"] == pytest.approx(500 / 650)
    assert first["performance_flop_s"] == pytest.approx(5e10 / 500e-6)
    kinds = kernel_kind_shares(labelled(gpu_kernels(), H100))
    assert list(kinds["kind"]) == ["conv forward", "batch-norm", "elementwise"]


def test_oom_and_variance_notes():
    summary = labelled(summary_rows(laptop_configs()), I7)
    assert sentences(status_notes(summary, None, "oom")) == [
        f"Out of memory: resnet18_cifar fp32 at batch 128 (baseline) on {I7}: "
        "DefaultCPUAllocator: not enough memory."
    ]
    # Without a summary, runs.csv (one row per process; one for the oom configuration) says it.
    runs = labelled(runs_rows(laptop_configs(), "laptop", LAPTOP[1]), I7)
    assert sentences(status_notes(None, runs, "oom")) == sentences(
        status_notes(summary, None, "oom")
    )
    notes = sentences(variance_notes(laptop_summary(), 0.05))
    # CV across the 12 windows: sqrt((8 x 0.08^2 + 12 x 0.04^2) / 11) = 8%.
    assert notes == [
        f"High variance: resnet18_cifar fp32 at batch 64 (tuned) on {I7} — throughput CV 8.0% "
        "across 12 windows of 3 processes (threshold 5.0%); treat its numbers and speedups "
        "with care."
    ]
    # A stricter threshold flags every configuration with CV 1% too.
    assert len(sentences(variance_notes(laptop_summary(), 0.005))) == 5


def test_over_budget_is_noted_with_its_step_time_and_never_gets_a_number():
    summary = labelled(summary_rows(laptop_configs() + [over_budget_config()]), I7)
    assert sentences(status_notes(summary, None, "over_budget")) == [
        f"Over budget: resnet18_cifar bf16 at batch 256 (baseline) on {I7} was not measured — "
        "one step takes at least 13.2 s, so the 19 steps still needed (warm-up and 2 windows "
        "of 8 steps) need at least 251 s, more than the 55 s left of timing.max_seconds 60 s; "
        "raise timing.max_seconds to measure it."
    ]
    assert 256 not in set(ok_configs(summary)["batch_size"])
    # Without stop numbers (older results) the step time alone; a step that completed is no
    # lower bound, and a summary without the flag reads as measured.
    stops = [c for c in summary.columns if c.startswith("stop_")]
    exact = summary.drop(columns=["single_step_time_is_lower_bound", *stops])
    assert (
        "one training step takes 13.2 s;" in sentences(status_notes(exact, None, "over_budget"))[0]
    )
    measured = labelled(summary_rows(laptop_configs()), I7)
    assert sentences(status_notes(measured, None, "over_budget")) == []


def test_a_single_window_has_no_ci_and_says_so():
    one = Config("cpu", "m", "fp32", 8, "baseline", 50.0, None, processes=1, windows_per_process=1)
    row = ok_configs(labelled(summary_rows([one]), "box")).iloc[0].to_dict()
    assert estimate_text(row) == "50.0 img/s (95% CI n/a, 1 window)"
    table = measurement_table(labelled(summary_rows([one]), "box"))
    # No CI, so the target cannot have been met.
    assert table.iloc[0]["target_met"] is not pd.NA and not table.iloc[0]["target_met"]
    assert said(table, "ci_missed") == [
        "m fp32 at batch 8 (baseline) on box missed its CI target: no CI could be made from "
        "1 process and 1 window; the time budget ran out first (timing.max_seconds); a "
        "larger budget buys more processes and windows."
    ]


def test_measurement_table_per_configuration():
    configs = laptop_configs()
    summary = laptop_summary()
    windows = labelled(windows_rows(configs), I7)
    table = measurement_table(summary, windows).set_index(["precision", "batch_size", "variant"])
    tuned = table.loc[("fp32", 64, "tuned")]
    # Variance components (0.08 x 260)^2 and (0.04 x 260)^2 back as 8% and 4% of the mean.
    assert tuned["between_process_rsd"] == pytest.approx(0.08)
    assert tuned["within_process_rsd"] == pytest.approx(0.04)
    assert tuned["dominant_level"] == "process"
    # (270 - 250) / 2 / 260 = 3.85% against the 6% target.
    assert tuned["ci_half_width_rel"] == pytest.approx(10 / 260)
    assert bool(tuned["target_met"]) and tuned["stop_reason"] == "ci_target"
    assert (tuned["n_processes"], tuned["n_windows"]) == (3, 12)
    # Two of process 0's windows were flagged; 12 recorded.
    assert (tuned["flagged_windows"], tuned["windows_recorded"]) == (2, 12)
    assert (tuned["compile_time_s"], tuned["compile_time_s_later"]) == (20.0, 2.0)
    # 3 processes x 4 windows x 2 s = 24 s timed of a 40 s job.
    assert tuned["timed_window_s"] == 24.0 and tuned["duty_cycle"] == pytest.approx(0.6)
    assert tuned["unstable"] and tuned["unstable_reasons"] == UNSTABLE_REASON
    bf16 = table.loc[("bf16", 64, "baseline")]
    assert not bf16["target_met"] and bf16["stop_reason"] == "budget"
    oom = table.loc[("fp32", 128, "baseline")]
    assert pd.isna(oom["target_met"]) and math.isnan(oom["windows_recorded"])
    # Without windows.csv (older results) the counts are simply unknown.
    assert measurement_table(summary)["windows_recorded"].isna().all()
    assert ci_target_counts(measurement_table(summary)) == (4, 5)


def test_ci_target_findings_say_which_missed_and_why():
    table = measurement_table(laptop_summary())
    assert said(table, "ci_target_count")[0] == (
        "4 of 5 measured configurations reached their CI target (a 95% CI half-width of "
        "throughput within timing.target_ci of the estimate); 1 did not."
    )
    # (160 - 140) / 2 / 150 = 6.7% > 6%, and the budget ran out.
    assert said(table, "ci_missed") == [
        f"resnet18_cifar bf16 at batch 64 (baseline) on {I7} (±6.7% against ±6.0%) missed its "
        "CI target after 3 processes and 12 windows; the time budget ran out first "
        "(timing.max_seconds); a larger budget buys more processes and windows."
    ]
    capped = laptop_summary().assign(stop_reason="max_processes")
    assert said(measurement_table(capped), "ci_missed")[0].endswith(
        "; it reached the process limit first (timing.max_processes)."
    )
    numbers = {
        "process_spread_rel": 0.04,
        "spread_low_rel": 0.025,
        "processes_needed_low": 28,
        "target_ci": 0.01,
        "max_processes": 6,
    }
    assert stop_sentence("target_unreachable", numbers) == (
        "it stopped early, the target out of reach: process-to-process spread 4.0%: a 1% CI "
        "would need ~28 processes even at the spread's 90% lower bound (2.5%), and "
        "timing.max_processes is 6"
    )
    # A miss the machine's spread accounts for is said once, by what the machine allows.
    unreachable = laptop_summary().assign(
        stop_reason="target_unreachable", **{f"stop_{k}": v for k, v in numbers.items()}
    )
    assert said(measurement_table(unreachable), "ci_missed") == []
    assert len(said(measurement_table(unreachable), "machine_allows")) == 1
    assert LAPTOP_TARGET_CI == 0.06


def test_a_machine_whose_processes_differ_too_much_is_said_once_at_the_top():
    """Issue 31: processes 10-12% apart put a 3% target out of reach on a 2-vCPU machine;
    the section says what the machine allows once, first, with the paired comparisons'
    half-widths, and no miss per configuration; a miss of its own (the budget) keeps its line."""
    unreachable = {"processes_needed": 42, "processes_needed_low": 30, "max_processes": 48}

    def config(precision, batch, variant, mean, ci, rsd, stop="target_unreachable"):
        return Config(
            "cpu", "m", precision, batch, variant, mean, ci, processes=8, between_rsd=rsd,
            target_ci=0.03, stop_reason=stop, stop_numbers=unreachable if stop else {},
        )  # fmt: skip

    configs = [
        config("fp32", 16, "baseline", 50.0, (47.5, 52.5), 0.10),  # ±5%
        config("fp32", 16, "tuned", 52.0, (48.0, 56.0), 0.12),  # ±7.7%
        config("fp32", 32, "baseline", 54.0, (53.0, 55.0), 0.03, stop=None),  # ±1.9%, met
        config("fp32", 32, "tuned", 58.0, (55.9, 60.1), 0.06, stop="budget"),  # ±3.6%
    ]
    summary, _ = box(configs)
    table = measurement_table(summary)
    paired = pd.DataFrame(
        [
            # ±2% and ±4% of the ratio, made on the machine; a cross-machine one is not its own.
            {"a_machine": "box", "b_machine": "box", "method": "paired", "ratio": 1.5,
             "ci95_low": 1.47, "ci95_high": 1.53},
            {"a_machine": "box", "b_machine": "box", "method": "paired", "ratio": 1.0,
             "ci95_low": 0.96, "ci95_high": 1.04},
            {"a_machine": "box", "b_machine": "box", "method": "fieller", "ratio": 1.0,
             "ci95_low": 0.5, "ci95_high": 1.5},
            {"a_machine": "box", "b_machine": "other", "method": "paired", "ratio": 1.0,
             "ci95_low": 0.9, "ci95_high": 1.1},
        ]
    )  # fmt: skip
    records = quality_records(table, paired)
    allows = records[0]
    assert allows.kind == "machine_allows" and allows.about == {"machine": "box"}
    assert allows.numbers["between_rsd"] == pytest.approx(0.11)
    assert allows.numbers["half_width"] == pytest.approx((2.5 / 50 + 4.0 / 52) / 2)
    assert allows.numbers["half_width_max"] == pytest.approx(4.0 / 52)
    assert allows.numbers["paired_half_width"] == pytest.approx(0.03)
    assert (allows.numbers["missed"], allows.numbers["judged"], allows.numbers["paired"]) == (
        2,
        4,
        2,
    )
    assert sentence(allows) == (
        "On box, worker processes differ by ~11% (median relative standard deviation between "
        "processes), too much for a ±3.0% CI of absolute throughput in the time budget (it "
        "would take ~42 processes): 2 of 4 configurations missed that target for this reason. "
        "What this machine allows: absolute throughput to ±6.3% (their median 95% CI "
        "half-width; widest ±7.7%), the paired comparisons to ±3.0% (median of 2), which "
        "cancel what interleaved processes share: compare configurations by those."
    )
    # Said once: the two the machine's spread accounts for have no line of their own; the
    # one whose budget ran out first keeps its line.
    missed = sentences(r for r in records if r.kind == "ci_missed")
    assert len(missed) == 1 and missed[0].startswith("m fp32 at batch 32 (tuned) on box")
    assert [r.kind for r in records].count("machine_allows") == 1
    # Without paired comparisons it says so; a machine that met its targets says nothing.
    assert sentence(quality_records(table)[0]).endswith("; no paired comparison was made on it.")
    met = measurement_table(box([configs[2]])[0])
    assert "machine_allows" not in [r.kind for r in quality_records(met, paired)]


def test_dominant_level_and_fixed_cost_sentences():
    configs = laptop_configs()
    # One configuration where the windows of a process spread more than the processes.
    configs[0] = Config(
        "cpu",
        "resnet18_cifar",
        "fp32",
        16,
        "baseline",
        100.0,
        (95.0, 105.0),
        between_rsd=0.002,
        within_rsd=0.02,
    )
    table = measurement_table(labelled(summary_rows(configs), I7))
    assert said(table, "dominant_level") == [
        f"On {I7}, the spread between processes dominates in 4 of 5 configurations and the "
        "spread between windows of one process in 1 (median relative standard deviations: "
        "1.0% between processes, 0.5% within one); where processes dominate, more processes "
        "narrow the CI, more windows per process do not (Kalibera & Jones)."
    ]
    assert said(table, "fixed_cost") + said(table, "compile_cost") == [
        f"On {I7}, a configuration's fixed cost — its job's start to the first warm-up step — "
        "is 2.00 s (median of 5), and a worker process needs 1.50 s from its start to its "
        "first step.",
        f"On {I7}, compilation took 20.0 s in the first process (median of 1 compiled "
        "configuration) and 2.00 s in later processes, which reuse the first one's caches.",
    ]


def test_union_of_job_intervals_by_hand():
    # [0, 10] and [5, 12] overlap (12 s), [20, 21] stands alone, [20.5, 20.7] lies inside it.
    assert union_seconds([(20, 21), (0, 10), (5, 12), (20.5, 20.7)]) == pytest.approx(13)
    assert union_seconds([]) == 0


@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e3)), max_size=30))
def test_union_lies_between_the_longest_job_and_the_sum(jobs):
    intervals = [(start, start + length) for start, length in jobs]
    union = union_seconds(intervals)
    lengths = [end - start for start, end in intervals]
    assert max(lengths, default=0) <= union + 1e-6
    assert union <= sum(lengths) + 1e-6
    # The union fits inside the span of all the intervals.
    if intervals:
        span = max(e for _, e in intervals) - min(s for s, _ in intervals)
        assert union <= span + 1e-6


def laptop_jobs() -> pd.DataFrame:
    """The laptop folder's jobs as nnperf.report.results reads them from its JSONs."""
    rows = [
        ("complexity", START_UNIX - 60, START_UNIX - 55),
        ("ceilings", START_UNIX - 50, START_UNIX + 10),
    ]
    for index, c in enumerate(laptop_configs()):
        rows.append(("run", job_start(START_UNIX, index), job_start(START_UNIX, index) + c.job_s))
    frame = pd.DataFrame(rows, columns=["kind", "started_at_unix", "ended_at_unix"])
    return frame.assign(results_dir="laptop")


def test_study_cost_span_busy_time_and_duty_cycle():
    summary = laptop_summary().assign(results_dir="laptop")
    cost = study_cost(laptop_jobs(), summary, rendered_at_unix=START_UNIX + 1000)
    # Span: from the complexity job's start (-60 s) to the report (+1000 s).
    assert cost["span_s"] == 1060
    # Union: complexity 5 s; ceilings [-50, 10] with run 0 [0, 40]: 90 s; runs 1-4: 4 x 40 s;
    # the oom run: 10 s.
    assert cost["busy_s"] == 5 + 90 + 160 + 10
    # Five measured configurations x 24 s of windows.
    assert cost["timed_s"] == 120
    assert cost["timed_share_of_busy"] == pytest.approx(120 / 265)
    assert sentences(cost_records(cost)) == [
        "The study spans 17.7 min, from its first recorded job start (2023-11-14 22:12 UTC) to "
        "this report (2023-11-14 22:30 UTC); its 8 recorded jobs were busy for 4.4 min (the "
        "union of their intervals).",
        "The timed windows took 2.0 min: 11% of the span and 45% of the busy time (the duty "
        "cycle); the rest went to starting processes, warm-up, compilation, the stages that "
        "time nothing (ceilings, complexity, profiles) and the gaps between jobs.",
    ]
    folders = cost_by_folder(laptop_jobs(), summary)
    row = folders.iloc[0]
    assert row["jobs"] == "6 timed runs, 1 ceilings job, 1 complexity job"
    assert (row["busy_s"], row["timed_s"]) == (265, 120)
    assert row["machines"] == I7


def test_without_recorded_job_times_the_wall_time_is_unknown():
    cost = study_cost(None, laptop_summary(), rendered_at_unix=START_UNIX)
    assert cost["span_s"] is None and cost["timed_s"] == 120
    assert sentences(cost_records(cost)) == [
        "No job recorded when it ran (results from before jobs kept their start and end "
        "times), so the study's wall time is unknown; its timed windows took 2.0 min."
    ]
    assert cost_by_folder(None, laptop_summary()).empty


def test_ceilings_table_ratio():
    table = ceilings_table(CPU_CEILINGS)
    fp32 = table[table["roof"] == "fp32 GEMM"].iloc[0]
    assert fp32["measured_over_datasheet"] == pytest.approx(0.5)
    bandwidth = table[table["roof"] == "memory bandwidth"].iloc[0]
    assert bandwidth["measured_over_datasheet"] == pytest.approx(0.5)
    bf16 = table[table["roof"] == "bf16 GEMM"].iloc[0]
    assert bf16["datasheet"] is None or math.isnan(bf16["datasheet"])


def test_a_point_above_its_roof_voids_the_reading_and_is_noted():
    # Intensity 5 against ridge 10: attainable 5e10, but the step claims 2e11 FLOP/s (4x).
    readings = roofline_readings(cpu_point(5.0, 2e11), CPU_CEILINGS)
    verdicts = roofline_verdicts(readings)
    measured = verdicts.set_index("roof").loc["measured"]
    assert measured["fraction_of_roof"] == pytest.approx(4.0)
    shown = reading_cells(preferred_verdict(verdicts, verdicts.iloc[0]))
    assert (shown["Achieved"], shown["Attainable"], shown["Of roof"]) == (
        "200 GFLOP/s",
        "50 GFLOP/s",
        "400%",
    )
    assert shown["Bound"] == "void (point above the roof)"
    assert sentences(roof_violation_notes(verdicts)) == [
        f"Roof too low: 1 fp32 step point lies above the datasheet roofs on {I7} (worst: "
        "resnet18_cifar fp32 at batch 64 (baseline) at 200 GFLOP/s, 2.00x the 100 GFLOP/s roof); "
        "check the datasheet fp32 ceiling of cpu.",
        f"Roof too low: 1 fp32 step point lies above the measured roofs on {I7} (worst: "
        "resnet18_cifar fp32 at batch 64 (baseline) at 200 GFLOP/s, 4.00x the 50 GFLOP/s roof); "
        "check the measured fp32 ceiling of cpu.",
    ]
    # No roof holds the point and there is no phase table: nothing is claimed about limits.
    assert limit_record(verdicts.iloc[0].to_dict(), pd.DataFrame(), verdicts) is None
    # With phase times, the limiter says why there is no roofline reading.
    config = verdicts.iloc[0].to_dict()
    phases = pd.DataFrame(
        [
            {
                **{k: config[k] for k in GROUP_KEYS},
                "input_share": 0.0,
                "phase_total_s": 0.1,
                **{f"{p}_share": share for p, share in zip(PHASES, [0.0, 0.0, 0.3, 0.6, 0.1])},
            }
        ]
    )
    record = limit_record(config, phases, verdicts)
    assert record.kind == "limit_unread" and record.about["phase"] == "backward"
    assert record.numbers["phase_share"] == pytest.approx(0.6)
    text = sentence(record)
    assert (
        "no roofline reading (the step lies above the measured roof, so that roof is too low"
        in text
    )
    assert "the largest phase is backward (60% of 100 ms per step)" in text


def test_a_peak_without_a_bandwidth_roof_still_gives_the_fraction_of_peak():
    ceilings = [{**CPU_CEILINGS[0], "datasheet": {"flop_s": {"fp32": 4e11}}}]
    readings = roofline_readings(cpu_point(5.0, 2.5e10), ceilings)
    verdicts = roofline_verdicts(readings).set_index("roof")
    datasheet = verdicts.loc["datasheet"]
    # 2.5e10 of a 4e11 peak; without bandwidth no bound is read.
    assert pd.isna(datasheet["bound"]) and datasheet["limit"] == "unknown"
    assert datasheet["fraction_of_peak"] == pytest.approx(0.0625)
    preferred = preferred_verdict(verdicts.reset_index(), verdicts.reset_index().iloc[0])
    assert preferred["roof"] == "measured"


# ------------------------------------------------------------------ profiled configurations
def _h100_profiles(summary: pd.DataFrame) -> pd.DataFrame:
    """profiles.csv of the real bf16 H100 exports (eager tuned and CUDA graphs at batch 256)
    against `summary`'s timed steps."""
    kernels = pd.concat(
        [EXPORTS[name].kernels() for name in ("bf16_bs256_tuned", "bf16_bs256_cudagraphs")],
        ignore_index=True,
    )
    table = roofline.profiles_table(kernels, roofline.ncu_points(kernels), summary)
    return labelled(table, H100)


def _h100_summary() -> pd.DataFrame:
    """The H100's timed runs (shared/h100/runs/sweep): eager bf16 at batch 256 and 512 and
    the CUDA-graphs variant at batch 256, at their measured step times and 1.98 GHz."""
    m = "resnet18_cifar"
    configs = [
        Config("cuda", m, "bf16", 256, "tuned", 24112.0, (23900.0, 24300.0)),
        Config("cuda", m, "bf16", 512, "tuned", 53174.0, (52900.0, 53400.0)),
        Config("cuda", m, "bf16", 256, "cudagraphs", 62603.0, (62400.0, 62800.0)),
    ]
    summary = summary_rows(configs)
    summary.loc[0, "step_time_s_median"] = EXPORTS["bf16_bs256_tuned"].timed_step_s
    summary.loc[2, "step_time_s_median"] = EXPORTS["bf16_bs256_cudagraphs"].timed_step_s
    summary.loc[2, "compile_time_s"] = 18.0  # reduce-overhead compiled in 18 s
    return labelled(summary, H100)


def busy_sentence(profile, summary=None) -> str:
    return sentence(busy_record(profile, summary))


def test_h100_eager_step_is_host_bound_and_the_remedies_are_the_studys_own():
    summary = _h100_summary()
    profiles = _h100_profiles(summary)
    eager = profiles[profiles["variant"] == "tuned"].iloc[0].to_dict()
    record = busy_record(eager, summary)
    assert record.about["verdict"] == "host-bound"
    assert record.about["compiled"]["variant"] == "cudagraphs"
    assert record.about["larger"]["batch_size"] == 512
    assert record.numbers["compiled_ratio"] == pytest.approx(62603 / 24112)
    assert busy_sentence(eager, summary) == (
        f"resnet18_cifar bf16 at batch 256 (tuned) on {H100}: the GPU is busy 52% of the timed "
        "step (5.38 ms of kernels at the runs' 1.98 GHz, 6.71 ms at the profiled 1.59 GHz, in a "
        "10.4 ms step): host-bound — for the rest of the step the GPU waits on Python, the "
        "framework and kernel launches, so faster kernels would not shorten it. Remedies: "
        "capture the step in CUDA graphs (variant setting compile: reduce-overhead) or raise "
        "the batch size (more work per launch); in this study batch 512 already reaches 53,174 "
        "img/s, 2.21x batch 256 and the compiled variant 'cudagraphs' reaches 62,603 img/s, "
        "2.60x 'tuned'."
    )
    # Without that evidence in the study, the remedies are named on their own.
    alone = summary[summary["variant"] == "tuned"]
    alone = alone[alone["batch_size"] == 256]
    assert busy_sentence(eager, alone).endswith("(more work per launch).")


def test_h100_cuda_graphs_step_is_device_bound():
    summary = _h100_summary()
    profiles = _h100_profiles(summary)
    graphs = profiles[profiles["variant"] == "cudagraphs"].iloc[0].to_dict()
    text = busy_sentence(graphs, summary)
    assert text.startswith(
        f"resnet18_cifar bf16 at batch 256 (cudagraphs) on {H100}: the GPU is busy 111% of the "
        "timed step (4.52 ms of kernels at the runs' 1.98 GHz, 5.69 ms at the profiled 1.57 GHz, "
        "in a 4.08 ms step): device-bound"
    )
    assert "A share above 100% means the profiled kernels ran slower" in text


def test_busy_sentence_without_a_run_clock_or_a_timed_step():
    summary = _h100_summary().assign(sm_clock_hz_median=None)
    eager = _h100_profiles(summary)
    row = eager[eager["variant"] == "tuned"].iloc[0].to_dict()
    # 6.71 / 10.4 ms is under 90% even unscaled: host-bound all the same.
    assert row["busy_verdict"] == "host-bound"
    graphs = eager[eager["variant"] == "cudagraphs"].iloc[0].to_dict()
    assert graphs["busy_verdict"] == "unknown"
    assert busy_sentence(graphs, summary).endswith(
        "the timed windows recorded no SM clock (NVML, package nvidia-ml-py), so only an upper "
        "estimate is known: the GPU is busy at most 139% of the step."
    )
    untimed = _h100_profiles(summary.iloc[0:0])
    text = busy_sentence(untimed.iloc[0].to_dict())
    assert text.endswith(
        "but no timed step to compare them with, so the GPU's busy share is unknown."
    )


def test_a_profile_whose_calibration_contradicts_its_roof_or_counters_is_noted():
    profiles = _h100_profiles(_h100_summary())
    assert sentences(profile_check_notes(profiles)) == []
    bad = profiles.copy()
    bad.loc[0, "roof_ok"] = False
    bad.loc[0, "calibration_roof_fraction"] = 0.451
    bad.loc[1, "calibration_ok"] = False
    bad.loc[1, "calibration_ratio"] = 0.5
    notes = sentences(profile_check_notes(bad))
    assert notes[0].startswith(
        f"Profile roof flagged: resnet18_cifar bf16 at batch 256 (cudagraphs) on {H100} — its "
        "calibration GEMM reached 45% of the profile's bf16 compute roof ("
    )
    assert "allowed 50%–100%" in notes[0] and "2:4-sparse" in notes[0]
    assert notes[1].startswith(
        f"FLOP counters off: resnet18_cifar bf16 at batch 256 (tuned) on {H100} — the "
        "calibration GEMM counted 0.50x its known FLOPs (allowed: within 2.0%)"
    )
    # No bound is read from a flagged roof: the profile roof of that configuration is left out.
    kernels = labelled(
        pd.concat([EXPORTS[n].kernels() for n in ("bf16_bs256_tuned", "bf16_bs256_cudagraphs")]),
        H100,
    )
    assert [key[-1] for key in profile_roofs(kernels, bad)] == ["tuned"]
    points = labelled(roofline.ncu_points(kernels.drop(columns="machine")), H100)
    readings = roofline_readings(points, [], kernels, bad)
    assert set(readings["variant"]) == {"tuned"}
    assert set(roofline_readings(points, [], kernels, profiles)["variant"]) == {
        "tuned",
        "cudagraphs",
    }


# ------------------------------------------------------------------ statistics honesty
@pytest.mark.parametrize(
    "low, high, windows, processes, method, expected",
    [
        (8379.0, 8379.0, 1, 1, None, "8,379 img/s (95% CI n/a, 1 window)"),
        (8379.0, 8379.0, 4, 4, "processes", "8,379 img/s (95% CI n/a)"),  # zero width
        (8000.0, 8800.0, 4, 1, "processes", "8,379 img/s (95% CI n/a, 1 process)"),
        (8000.0, 8800.0, 4, 1, "windows", "8,379 img/s (95% CI 8,000–8,800)"),
        (8000.0, 8800.0, 1, 1, "windows", "8,379 img/s (95% CI n/a, 1 window)"),
        (None, None, 6, 3, None, "8,379 img/s (95% CI n/a)"),
    ],
)
def test_no_ci_is_printed_from_fewer_than_two_samples(
    low, high, windows, processes, method, expected
):
    from nnperf.report.format import throughput_text

    text = throughput_text(
        8379.0, low, high, n_windows=windows, n_processes=processes, method=method
    )
    assert text == expected
