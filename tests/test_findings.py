"""Findings computed from tables in the contract's shape, against hand-computed numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnperf import findings
from report_tables import (
    GPU_BOX,
    LAPTOP,
    Config,
    ceilings_document,
    gpu_configs,
    gpu_kernels,
    laptop_configs,
    roofline_point,
    runs_rows,
    summary_rows,
)

H100 = "NVIDIA H100 80GB HBM3 (gpu01)"
I7 = "Intel(R) Core(TM) i7-1185G7 (laptop)"


def labelled(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    return frame.assign(machine=machine)


def gpu_summary() -> pd.DataFrame:
    return labelled(summary_rows(gpu_configs()), H100)


def laptop_summary() -> pd.DataFrame:
    return labelled(summary_rows(laptop_configs()), I7)


def test_precision_speedup_sentence_has_ratio_and_both_cis():
    table = findings.speedups(gpu_summary(), "precision", "fp32")
    assert len(table) == 1
    row = table.iloc[0].to_dict()
    # 1800 / 1000 by hand.
    assert row["speedup"] == pytest.approx(1.8)
    assert not row["ci_overlap"]  # [1750, 1850] and [980, 1020] are apart
    assert findings.speedup_sentence(row, "precision") == (
        f"bf16 is 1.80x faster than fp32 for resnet18_cifar at batch 64 (baseline) on {H100}: "
        "1,800 img/s (95% CI 1,750–1,850) vs 1,000 img/s (95% CI 980–1,020)."
    )


def test_slower_precision_and_overlapping_cis_are_said_so():
    configs = [
        Config("cpu", "m", "fp32", 8, "baseline", 200.0, (150.0, 250.0)),
        Config("cpu", "m", "bf16", 8, "baseline", 160.0, (120.0, 210.0)),
    ]
    row = findings.speedups(labelled(summary_rows(configs), "box"), "precision", "fp32").iloc[0]
    # 160 / 200 = 0.8 -> 1/0.8 = 1.25x slower; CIs [120, 210] and [150, 250] overlap.
    text = findings.speedup_sentence(row.to_dict(), "precision")
    assert text.startswith("bf16 is 1.25x slower than fp32 for m at batch 8 (baseline) on box")
    assert text.endswith("the 95% CIs overlap, so the difference is within the run-to-run spread.")


def test_variant_speedup_against_baseline():
    table = findings.speedups(laptop_summary(), "variant", "baseline")
    assert list(table["variant"]) == ["tuned"]
    # 260 / 200 = 1.3 at fp32, batch 64.
    assert table["speedup"].iloc[0] == pytest.approx(1.3)
    assert findings.speedup_sentence(table.iloc[0].to_dict(), "variant").startswith(
        f"The tuned variant is 1.30x faster than baseline for resnet18_cifar fp32 at batch 64 on {I7}"
    )


def test_batch_scaling_gain_saturation_and_oom():
    table = findings.batch_scaling(laptop_summary())
    row = table[(table["precision"] == "fp32") & (table["variant"] == "baseline")].iloc[0]
    # 100 -> 190 -> 200 img/s at 16/32/64; 95% of 200 = 190, reached at 32; 128 ran OOM.
    assert (row["smallest_batch_size"], row["largest_batch_size"]) == (16, 64)
    assert row["gain"] == pytest.approx(2.0)
    assert row["best_batch_size"] == 64 and row["saturation_batch_size"] == 32
    assert row["oom_batch_sizes"] == "128"
    assert findings.scaling_sentence(row.to_dict()) == (
        f"For resnet18_cifar fp32 (baseline) on {I7}, throughput changes 2.00x from batch 16 "
        "(100 img/s) to batch 64 (200 img/s); batch 32 already reaches 95% of the best "
        "(200 img/s at batch 64); batch 128 ran out of memory."
    )


def test_phase_shares_from_summary_medians():
    shares = findings.phase_shares(gpu_summary())
    bf16 = shares[shares["precision"] == "bf16"].iloc[0]
    # 4 + 0 + 2 + 3 + 1 = 10 ms: data wait 40%, forward 20%, backward 30%, optimizer 10%.
    assert bf16["phase_total_s"] == pytest.approx(0.010)
    assert [round(bf16[f"{p}_share"], 6) for p in findings.PHASES] == [0.4, 0.0, 0.2, 0.3, 0.1]
    assert bf16["input_share"] == pytest.approx(0.4)


def test_phase_shares_fall_back_to_runs_medians():
    configs = gpu_configs()
    runs = labelled(runs_rows(configs, "gpu01", GPU_BOX[1]), H100)
    summary = gpu_summary().drop(columns=[f"{p}_s_median" for p in findings.PHASES])
    shares = findings.phase_shares(summary, runs)
    fp32 = shares[shares["precision"] == "fp32"].iloc[0]
    assert fp32["backward_share"] == pytest.approx(0.5)


def test_input_bound_configuration_is_named_as_such():
    summary = gpu_summary()
    phases = findings.phase_shares(summary)
    best = summary[summary["precision"] == "bf16"].iloc[0].to_dict()
    text = findings.limiter_sentence(best, phases, pd.DataFrame())
    assert text.startswith(
        f"What limits resnet18_cifar bf16 at batch 64 (baseline) on {H100}: "
        "the input pipeline — data wait and host-to-device copies take 40% "
        "of each step (10.0 ms)"
    )


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
    readings = findings.roofline_readings(cpu_point(5.0, 2.5e10), CPU_CEILINGS)
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
    verdict = findings.preferred_verdict(findings.roofline_verdicts(readings), measured.to_dict())
    assert verdict["roof"] == "measured" and verdict["limit"] == "algorithmic"
    assert findings.verdict_sentence(verdict) == (
        f"resnet18_cifar fp32 at batch 64 (baseline) on {I7} (analytic step point, measured "
        "roofs): memory-bound at main memory — arithmetic intensity 5.00 FLOP/B is left of the "
        "ridge point (10.0 FLOP/B); it reaches 25 GFLOP/s, 50% of the roof above it and 25% of "
        "the fp32 compute peak (100 GFLOP/s)."
    )


def test_compute_bound_reading():
    readings = findings.roofline_readings(cpu_point(50.0, 8e10), CPU_CEILINGS)
    verdict = findings.roofline_verdicts(readings).set_index("roof").loc["measured"]
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
    readings = findings.roofline_readings(points, [], kernels)
    verdict = findings.roofline_verdicts(readings).iloc[0]
    # Profile roofs: DRAM 100 x 3e12 = 3e14, L2 20 x 1e13 = 2e14, L1 5 x 3e13 = 1.5e14, all
    # below the 5e14 tensor peak: the step is memory-bound at L1, 1e14 / 1.5e14 = 2/3.
    assert verdict["roof"] == "profile"
    assert (verdict["bound"], verdict["limit"]) == ("memory", "l1")
    assert verdict["attainable_flop_s"] == pytest.approx(1.5e14)
    assert verdict["fraction_of_roof"] == pytest.approx(2 / 3)
    assert verdict["fraction_of_peak"] == pytest.approx(0.2)
    assert verdict["levels"] == "dram l1 l2"


def test_far_below_the_roofs_reads_as_overheads():
    readings = findings.roofline_readings(cpu_point(50.0, 1e10), CPU_CEILINGS)
    verdicts = findings.roofline_verdicts(readings)
    config = verdicts.iloc[0].to_dict()
    text = findings.limiter_sentence(config, pd.DataFrame(), verdicts)
    # 1e10 of an attainable 1e11: 10% < 30% -> overheads.
    assert (
        "overheads, not the roofs — the step reaches only 10% of the measured compute roof" in text
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
    row = findings.roofline_readings(point, ceiling).iloc[0]
    assert row["attainable_flop_s"] <= peak * (1 + 1e-12)
    assert row["attainable_flop_s"] == pytest.approx(min(peak, intensity * bandwidth))
    assert (row["bound"] == "memory") == (intensity < peak / bandwidth)
    # The roof above a point is never higher than the peak, so the fraction of the roof is
    # at least the fraction of the peak.
    assert row["fraction_of_roof"] >= row["fraction_of_peak"] * (1 - 1e-12)


def test_top_kernels_sum_launches_and_leave_out_the_calibration_gemm():
    table = findings.top_kernels(labelled(gpu_kernels(), H100), n=2)
    assert list(table["kernel_name"]) == [
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        "cudnn::bn_fw_tr_1C11_kernel_NCHW",
    ]
    first = table.iloc[0]
    # Two launches: 300 + 200 us of a 650 us step (the 10 us calibration GEMM is left out).
    assert first["launches"] == 2
    assert first["duration_s"] == pytest.approx(500e-6)
    assert first["share"] == pytest.approx(500 / 650)
    assert first["performance_flop_s"] == pytest.approx(5e10 / 500e-6)
    kinds = findings.kernel_kind_shares(labelled(gpu_kernels(), H100))
    assert list(kinds["kind"]) == ["conv forward", "batch-norm", "elementwise"]


def test_oom_and_variance_notes():
    runs = labelled(runs_rows(laptop_configs(), "laptop", LAPTOP[1]), I7)
    assert findings.oom_notes(runs, None) == [
        f"Out of memory: resnet18_cifar fp32 at batch 128 (baseline) on {I7} (3 reps with "
        "status oom): DefaultCPUAllocator: not enough memory."
    ]
    notes = findings.variance_notes(laptop_summary(), 0.05)
    assert notes == [
        f"High variance: resnet18_cifar fp32 at batch 64 (tuned) on {I7} — throughput CV 8.0% "
        "across 3 reps (threshold 5.0%); treat its numbers and speedups with care."
    ]
    # A stricter threshold flags every configuration with CV 1% too.
    assert len(findings.variance_notes(laptop_summary(), 0.005)) == 5


def test_ceilings_table_ratio():
    table = findings.ceilings_table(CPU_CEILINGS)
    fp32 = table[table["roof"] == "fp32 GEMM"].iloc[0]
    assert fp32["measured_over_datasheet"] == pytest.approx(0.5)
    bandwidth = table[table["roof"] == "memory bandwidth"].iloc[0]
    assert bandwidth["measured_over_datasheet"] == pytest.approx(0.5)
    bf16 = table[table["roof"] == "bf16 GEMM"].iloc[0]
    assert bf16["datasheet"] is None or math.isnan(bf16["datasheet"])


def test_a_point_above_its_roof_voids_the_reading_and_is_noted():
    # Intensity 5 against ridge 10: attainable 5e10, but the step claims 2e11 FLOP/s (4x).
    readings = findings.roofline_readings(cpu_point(5.0, 2e11), CPU_CEILINGS)
    verdicts = findings.roofline_verdicts(readings)
    measured = verdicts.set_index("roof").loc["measured"]
    assert measured["fraction_of_roof"] == pytest.approx(4.0)
    text = findings.verdict_sentence(findings.preferred_verdict(verdicts, verdicts.iloc[0]))
    assert (
        "it reaches 200 GFLOP/s, 4.00x the roof above it (50 GFLOP/s): a point cannot beat" in text
    )
    assert findings.roof_violation_notes(verdicts) == [
        f"Roof too low: 1 fp32 step point lies above the datasheet roofs on {I7} (worst: "
        "resnet18_cifar fp32 at batch 64 (baseline) at 200 GFLOP/s, 2.00x the 100 GFLOP/s roof); "
        "check the datasheet fp32 ceiling of cpu.",
        f"Roof too low: 1 fp32 step point lies above the measured roofs on {I7} (worst: "
        "resnet18_cifar fp32 at batch 64 (baseline) at 200 GFLOP/s, 4.00x the 50 GFLOP/s roof); "
        "check the measured fp32 ceiling of cpu.",
    ]
    # No roof holds the point and there is no phase table: nothing is claimed about limits.
    assert findings.limiter_sentence(verdicts.iloc[0].to_dict(), pd.DataFrame(), verdicts) is None
    # With phase times, the limiter says why there is no roofline reading.
    config = verdicts.iloc[0].to_dict()
    phases = pd.DataFrame(
        [{**{k: config[k] for k in findings.GROUP_KEYS}, "input_share": 0.0,
          "phase_total_s": 0.1, **{f"{p}_share": share for p, share in
                                   zip(findings.PHASES, [0.0, 0.0, 0.3, 0.6, 0.1])}}]
    )
    text = findings.limiter_sentence(config, phases, verdicts)
    assert "no roofline reading (the step lies above the measured roof, so that roof is too low" in text
    assert "the largest phase is backward (60% of 100 ms per step)" in text


def test_a_peak_without_a_bandwidth_roof_still_gives_the_fraction_of_peak():
    ceilings = [{**CPU_CEILINGS[0], "datasheet": {"flop_s": {"fp32": 4e11}}}]
    readings = findings.roofline_readings(cpu_point(5.0, 2.5e10), ceilings)
    verdicts = findings.roofline_verdicts(readings).set_index("roof")
    datasheet = verdicts.loc["datasheet"]
    # 2.5e10 of a 4e11 peak; without bandwidth no bound is read.
    assert pd.isna(datasheet["bound"]) and datasheet["limit"] == "unknown"
    assert datasheet["fraction_of_peak"] == pytest.approx(0.0625)
    preferred = findings.preferred_verdict(verdicts.reset_index(), verdicts.reset_index().iloc[0])
    assert preferred["roof"] == "measured"
