"""The writers whose outputs the CPU test study never produces hold codes and numbers, not
sentences (issue 30; the workflow scan in tests/workflow/test_outputs_are_data.py reads only
what a CPU study writes): a GPU's datasheet entry in the ceilings JSON, a CPU's derived peak
with its null reasons, the GEMM sizes left out of a roof, an operator profile's notes and the NVML
record of a run document."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nnperf.core.cpuinfo import parse_cpuinfo
from nnperf.engine import stability
from nnperf.roofline import ceilings, compute_roofs, peaks
from nnperf.torchprof import analysis
from nnperf.torchprof import profile as opprofile

REPO = Path(__file__).resolve().parents[2]
LONGEST_WORDING = 80
CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Test CPU\nflags\t\t: {}\n"


def sentences(value, where: str = "") -> list[tuple[str, str]]:
    """(where, text) of every string in a JSON-like value longer than 80 characters with a
    space: a sentence, not a code."""
    if isinstance(value, str):
        return [(where, value)] if len(value) > LONGEST_WORDING and " " in value else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in sentences(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [s for i, v in enumerate(value) for s in sentences(v, f"{where}[{i}]")]
    return []


def test_the_scan_finds_a_sentence():
    long = "the profiler recorded no CUDA kernels (CUPTI unavailable or failed to initialise)"
    assert sentences({"notes": [long]}) == [(".notes[0]", long)]


def test_a_gpus_datasheet_entry_cites_its_peaks_yaml_entry_by_key():
    table = peaks.load_peaks(REPO / "config" / "peaks.yaml")
    entry = ceilings.datasheet_for("cuda", "NVIDIA H100 80GB HBM3", table, threads=1)
    assert entry["key"] and entry["source"] == "peaks.yaml"
    assert sentences(entry) == []


@pytest.mark.parametrize(
    ("flags", "clock_hz", "codes"),
    [
        ("sse sse2 avx avx2 fma", 2.0e9, {"bf16": "no_native_bf16"}),
        ("fp asimd", 2.0e9, {"bf16": "no_native_bf16"}),
        ("fpu", 2.0e9, {"fp32": "no_vector_isa", "bf16": "no_vector_isa"}),
        ("sse sse2 avx avx2 fma", None, {"fp32": "clock_unread", "bf16": "no_native_bf16"}),
    ],
)
def test_a_derived_peak_gives_its_null_reasons_as_codes(flags, clock_hz, codes):
    entry = peaks.derived_cpu_peak(parse_cpuinfo(CPUINFO.format(flags)), 2, clock_hz, "test")
    assert entry["flop_s_null_reasons"] == codes
    assert set(codes.values()) <= set(peaks.NULL_PEAK_REASONS)
    assert sentences(entry) == []


def test_an_operator_profiles_notes_are_codes():
    step = {"ph": "X", "cat": "user_annotation", "name": "nnperf_step#0", "pid": 1, "tid": 1}
    empty = analysis.analyse(
        {"traceEvents": [{**step, "ts": 0.0, "dur": 10.0, "args": {}}]}, "cuda"
    )
    notes = opprofile._device_notes("cuda", empty) + opprofile._device_notes("mps", empty)
    assert [n["code"] for n in notes] == ["no_cuda_kernels", "mps_no_kernels"]
    assert all(n["code"] in opprofile.NOTE_CODES for n in notes) and sentences(notes) == []


def test_the_nvml_record_is_a_code(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    record = stability.GpuSampler(0).record()
    assert (record["note"], record["note_detail"]) == ("nvml_unavailable", "ModuleNotFoundError")
    assert record["note"] in stability.NVML_NOTES and sentences(record) == []


def test_a_gemm_size_left_out_of_its_roof_gives_its_reason_as_a_code():
    # No budget: the first size is measured in warm-up and left out, the larger one with it;
    # the CPU study's default budget leaves out none, so the workflow scan never sees these.
    result = compute_roofs.measure_gemm(
        "cpu", "fp32", [32, 64], warmup=1, trials=2, min_trial_s=0.002, budget_s=0.0
    )
    reasons = [row["reason"] for row in result["skipped_sizes"]]
    assert reasons == ["measured_over_budget", "larger_than_skipped"]
    assert set(reasons) <= set(compute_roofs.SKIP_REASONS) and sentences(result) == []
