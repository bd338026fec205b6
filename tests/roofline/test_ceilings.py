"""Ceilings: formulas by hand, real (tiny) measurements on this CPU, the JSON and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nnperf.core.contract import CeilingsRequest, CeilingsSettings, from_dict
from nnperf.core.cpuinfo import parse_cpuinfo
from nnperf.core.errors import NnperfError
from nnperf.core.files import read_json, write_json
from nnperf.report.plots import ceilings as ceilings_plots
from nnperf.roofline import ceilings, compute_roofs, memory_roofs, microbench
from nnperf.roofline.memory_roofs import GIB, KIB, MIB

ROOT = Path(__file__).resolve().parents[2]
PEAKS_YAML = ROOT / "config" / "peaks.yaml"
# A tiny request as rule `ceilings` hands it over (plain data); `fast()` shortens the
# settings that are module constants rather than config keys.
TINY = {
    "device": "cpu",
    "settings": {
        "gemm_sizes": [64, 256],
        "trials": 2,
        "bandwidth_bytes": 4 * MIB,
        "sweep_min_bytes": 16 * KIB,
        "sweep_max_bytes": 1 * MIB,
    },
    "peaks_path": str(PEAKS_YAML),
}


def tiny_request(threads=None, device="cpu", **settings) -> CeilingsRequest:
    plain = {**TINY, "device": device, "settings": {**TINY["settings"], **settings}}
    return from_dict(CeilingsRequest, {**plain, "threads": threads})


def fast(monkeypatch) -> None:
    monkeypatch.setattr(ceilings, "WARMUP_CALLS", 1)
    monkeypatch.setattr(ceilings, "MIN_TRIAL_S", {"cpu": 0.002, "cuda": 0.002, "mps": 0.002})
    monkeypatch.setattr(ceilings, "SWEEP_STEPS_PER_OCTAVE", 1)


def measure(monkeypatch, **changes) -> dict:
    fast(monkeypatch)
    return ceilings.measure_ceilings(tiny_request(**changes))


# Verbatim output of `lscpu -B -C --json` (util-linux 2.38) on an AMD EPYC VM.
LSCPU_JSON = """{
   "caches": [
      {"name": "L1d", "one-size": "49152", "all-size": "98304", "ways": 12, "type": "Data", "level": 1,
       "sets": 64, "phy-line": 1, "coherency-size": 64},
      {"name": "L1i", "one-size": "32768", "all-size": "65536", "ways": 8, "type": "Instruction",
       "level": 1, "sets": 64, "phy-line": 1, "coherency-size": 64},
      {"name": "L2", "one-size": "1048576", "all-size": "2097152", "ways": 16, "type": "Unified",
       "level": 2, "sets": 1024, "phy-line": 1, "coherency-size": 64},
      {"name": "L3", "one-size": "33554432", "all-size": "33554432", "ways": 16, "type": "Unified",
       "level": 3, "sets": 32768, "phy-line": 1, "coherency-size": 64}
   ]
}"""


@pytest.fixture(scope="module")
def cpu_doc():
    """One real, tiny measurement of this machine's CPU."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return measure(monkeypatch)


# --- formulas ---------------------------------------------------------------------------


def test_gemm_cost_by_hand():
    # A call that fills a window alone: no calibration; 2 warm-up calls, then 3 trials of
    # one untimed call and a one-call window.
    assert microbench.window_iters(0.5, 0.02) == 1
    assert compute_roofs.gemm_cost_s(0.5, warmup=2, trials=3, min_trial_s=0.02) == pytest.approx(
        4.0
    )
    # 3 ms calls: windows of 8 calls (4 x 3 ms < 20 ms <= 8 x 3 ms), calibrated through
    # windows of 1, 2, 4, 8 calls (15 calls): (2 + 15 + 3 x 9) x 3 ms.
    assert microbench.window_iters(0.003, 0.02) == 8
    assert compute_roofs.gemm_cost_s(0.003, warmup=2, trials=3, min_trial_s=0.02) == pytest.approx(
        0.132
    )
    # Twice the size, eight times the FLOPs, eight times the time at the same rate.
    assert compute_roofs.projected_call_s(0.1, 512, 1024) == pytest.approx(0.8)


def test_stream_bytes_follow_the_stream_convention():
    n = 1_000_000
    assert memory_roofs.stream_bytes("copy", n, 8) == 16_000_000  # read b, write a
    assert memory_roofs.stream_bytes("triad", n, 8) == 24_000_000  # read b, c, write a
    assert memory_roofs.stream_bytes("copy", n) == 8_000_000  # fp32 arrays by default
    with pytest.raises(NnperfError, match="stream kernel 'scale' is unknown; allowed: copy, triad"):
        memory_roofs.stream_bytes("scale", n)


def test_sweep_call_bytes_and_repeats_by_hand():
    assert memory_roofs.sweep_repeats(16 * KIB, 64 * MIB) == 4096
    assert memory_roofs.sweep_repeats(1 * GIB, 64 * MIB) == 1
    # 4096 reads of 16 KiB plus 4096 fp32 results written.
    assert memory_roofs.sweep_call_bytes(16 * KIB, 4096) == 4096 * 16384 + 4096 * 4


def test_sweep_working_sets_default_span():
    sizes = memory_roofs.sweep_working_sets(16 * KIB, 1 * GIB, 2)
    assert sizes[0] == 16 * KIB and sizes[-1] == 1 * GIB and len(sizes) == 33
    assert sizes[2] == 32 * KIB and sizes[1] == 23296  # 16 KiB x sqrt(2), 256-byte aligned


@given(low=st.integers(1, 1 << 24), factor=st.integers(1, 1 << 12), steps=st.integers(1, 4))
def test_sweep_working_sets_properties(low, factor, steps):
    high = low * factor + 256
    sizes = memory_roofs.sweep_working_sets(low, high, steps)
    assert sizes == sorted(set(sizes))
    assert all(s % 256 == 0 and low <= s <= high for s in sizes)
    assert sizes[0] < low + 256 and sizes[-1] > high - 256


def test_sweep_working_sets_rejects_bad_range():
    with pytest.raises(
        NnperfError, match="ceilings.sweep_min_bytes..sweep_max_bytes is 2048..1024"
    ):
        memory_roofs.sweep_working_sets(2048, 1024, 1)
    with pytest.raises(NnperfError, match="ceilings.sweep_steps_per_octave is 0"):
        memory_roofs.sweep_working_sets(1024, 2048, 0)


def test_bandwidth_array_bytes():
    assert memory_roofs.bandwidth_array_bytes(32 * MIB) == 256 * MIB  # 4 x 32 MiB < 256 MiB floor
    assert memory_roofs.bandwidth_array_bytes(100 * MIB) == 400 * MIB  # 4 x LLC wins
    assert memory_roofs.bandwidth_array_bytes(None) == 256 * MIB
    assert memory_roofs.bandwidth_array_bytes(100 * MIB + 1) == 401 * MIB  # rounded up to whole MiB


def test_cache_parsers():
    assert memory_roofs.parse_cache_size("48K\n") == 48 * KIB
    assert memory_roofs.parse_cache_size("32768K") == 32 * MIB
    assert memory_roofs.parse_cache_size("2M") == 2 * MIB
    assert memory_roofs.count_cpu_list("0-3,8,10-11\n") == 7
    caches = memory_roofs.caches_from_lscpu_json(LSCPU_JSON)
    assert [(c["name"], c["level"], c["size_bytes"]) for c in caches] == [
        ("L1d", 1, 49152),
        ("L2", 2, 1048576),
        ("L3", 3, 33554432),
    ]
    assert memory_roofs.last_level_cache_bytes(caches) == 32 * MIB
    assert memory_roofs.last_level_cache_bytes([]) is None


def test_read_sysfs_caches_from_a_sysfs_tree(tmp_path):
    # The layout of /sys/devices/system/cpu/cpu0/cache (Linux ABI, sysfs-devices-system-cpu).
    layout = {
        "index0": ("1", "Data", "32K", "0-1"),
        "index1": ("1", "Instruction", "32K", "0-1"),
        "index2": ("2", "Unified", "1024K", "0-1"),
        "index3": ("3", "Unified", "16384K", "0-15"),
    }
    for index, (level, kind, size, shared) in layout.items():
        folder = tmp_path / index
        folder.mkdir()
        for name, value in (
            ("level", level),
            ("type", kind),
            ("size", size),
            ("shared_cpu_list", shared),
        ):
            (folder / name).write_text(value + "\n")
    caches = memory_roofs.read_sysfs_caches(tmp_path)
    assert [(c["name"], c["size_bytes"], c["shared_cpu_count"]) for c in caches] == [
        ("L1d", 32 * KIB, 2),
        ("L2", MIB, 2),
        ("L3", 16 * MIB, 16),
    ]
    assert memory_roofs.read_sysfs_caches(tmp_path / "absent") == []


# --- roofs, ratios, MFU ----------------------------------------------------------------

DOC = {
    "measured": {
        "gemm_flop_s": {"bf16": 500e12, "fp32": 50e12},
        "memory_bandwidth_bytes_s": 3.0e12,
    },
    "datasheet": {"flop_s": {"bf16": 1000e12, "fp32": 67e12}, "memory_bandwidth_bytes_s": 3.35e12},
}


def test_fraction_of_roofs():
    assert ceilings.fraction_of_roofs(250e12, DOC, "bf16") == {"measured": 0.5, "datasheet": 0.25}
    assert ceilings.fraction_of_roofs(250e12, DOC, "fp16") == {"measured": None, "datasheet": None}
    assert ceilings.fraction_of_roofs(None, DOC, "bf16") == {"measured": None, "datasheet": None}
    no_sheet = {**DOC, "datasheet": None}
    assert ceilings.fraction_of_roofs(100e12, no_sheet, "bf16") == {
        "measured": 0.2,
        "datasheet": None,
    }


def test_ratios_and_notes_for_known_and_unknown_devices():
    ratio = ceilings.ratios(DOC["measured"], DOC["datasheet"])
    assert ratio["gemm_flop_s"]["bf16"] == pytest.approx(0.5)
    assert ratio["memory_bandwidth_bytes_s"] == pytest.approx(3.0 / 3.35)
    none = ceilings.ratios(DOC["measured"], None)
    assert none == {"gemm_flop_s": {"bf16": None, "fp32": None}, "memory_bandwidth_bytes_s": None}
    note = ceilings.notes_for("cuda", "NVIDIA B300", None, none, "config/peaks.yaml", {})
    assert "No entry in config/peaks.yaml matches cuda device name 'NVIDIA B300'" in note
    sheet = {"name": "X", "source": "X datasheet", "derived": False}
    over = ceilings.notes_for(
        "cuda",
        "X",
        sheet,
        {"gemm_flop_s": {"bf16": 1.9}, "memory_bandwidth_bytes_s": 0.9},
        "p.yaml",
        {"tf32": "unavailable", "fp16": "needs 7.0"},  # a code, and text from before the codes
        capability="7.5",
    )
    assert (
        "Measured bf16 GEMM is 1.90x the datasheet value" in over
        and "tf32 not measured: precision 'tf32' needs CUDA compute capability 8.0+, but X is 7.5"
        in over
        and "fp16 not measured: needs 7.0" in over
    )


def test_note_explains_a_derived_peak_below_measurement():
    sheet = {"derived": True, "clock_hz": 2.5e9, "clock_source": "/proc/cpuinfo"}
    note = ceilings.notes_for(
        "cpu",
        "CPU",
        sheet,
        {"gemm_flop_s": {"bf16": 1.3}, "memory_bandwidth_bytes_s": None},
        "p.yaml",
        {},
    )
    assert "DERIVED" in note and ">= 3.25 GHz implied" in note


# /proc/cpuinfo of a 2-core VM, as the kernel writes it; FLAGS is replaced per test.
CPUINFO = "\n\n".join(f"""processor\t: {cpu}
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC
cpu MHz\t\t: 2450.000
physical id\t: 0
core id\t\t: {cpu}
flags\t\t: FLAGS
""" for cpu in range(2))
# Measured on such a VM: bf16 emulated, 80x below fp32.
EMULATED_BF16 = {"gemm_flop_s": {"fp32": 69e9, "bf16": 0.84e9}, "memory_bandwidth_bytes_s": 1e10}


@pytest.mark.parametrize(
    "flags,bf16_roof",
    [
        ("fpu sse sse2 avx fma avx2 vaes sha_ni", None),
        # Zen 4 (family 25, 256-bit datapath) with VDPBF16PS:
        # 2 cores x 2.45 GHz x 2 x (8 lanes x 2 FMA x 2 FLOP).
        ("fpu sse sse2 avx fma avx2 avx512f avx512_bf16", 2 * 2.45e9 * 2 * 32),
    ],
)
def test_the_ceilings_note_says_why_a_cpu_has_no_derived_bf16_roof(flags, bf16_roof):
    cpuinfo = parse_cpuinfo(CPUINFO.replace("FLAGS", flags))
    sheet = ceilings.peaks_mod.derived_cpu_peak(cpuinfo, 2, 2.45e9, "/proc/cpuinfo 'cpu MHz'")
    ratio = ceilings.ratios(EMULATED_BF16, sheet)
    note = ceilings.notes_for("cpu", "AMD EPYC", sheet, ratio, "p.yaml", {})
    roof = sheet["flop_s"]["bf16"]
    assert roof == (None if bf16_roof is None else pytest.approx(bf16_roof))
    why = (
        "Derived bf16 peak is null: no native bf16 arithmetic (flags lack amx_bf16, "
        "avx512_bf16, avx_ne_convert): bf16 runs emulated, no derived peak."
    )
    if bf16_roof is None:
        # No roof, no ratio: not 0.84 / 69 of an fp32 roof that an emulated bf16 never nears.
        assert ratio["gemm_flop_s"]["bf16"] is None and why in note
    else:
        assert ratio["gemm_flop_s"]["bf16"] == pytest.approx(0.84e9 / bf16_roof)
        assert "bf16 peak is null" not in note
    assert ratio["gemm_flop_s"]["fp32"] == pytest.approx(69e9 / (2 * 2.45e9 * 32))
    assert ceilings.fraction_of_roofs(
        0.5e9, {"measured": EMULATED_BF16, "datasheet": sheet}, "bf16"
    )["datasheet"] == (None if bf16_roof is None else pytest.approx(0.5e9 / bf16_roof))


def test_unknown_gpu_gives_null_datasheet_without_crashing():
    table = ceilings.peaks_mod.load_peaks(PEAKS_YAML)
    assert (
        ceilings.datasheet_for(
            "cuda", "NVIDIA Future GPU", table, threads=1, cpu_clock_hz=None, cpu_fma_units=2
        )
        is None
    )


# --- real measurements on this CPU -----------------------------------------------------


def gemm_sizes_built(monkeypatch) -> list[int]:
    """Record the size of every GEMM measure_gemm builds (the real one still runs)."""
    built = []
    real = compute_roofs._gemm_call

    def recording(device, dtype, size, generator):
        built.append(size)
        return real(device, dtype, size, generator)

    monkeypatch.setattr(compute_roofs, "_gemm_call", recording)
    return built


def test_gemm_budget_skips_the_sizes_that_would_overrun_it(monkeypatch):
    # A 4096^3 fp32 call takes >= 50 ms on any CPU a test runs on; projected from the
    # largest probe the budget affords (a busy machine's slower probes over-estimate), its
    # warm-up and trials need far more than the 0.3 s budget, so it is never built; 32 (and
    # 64 unless the machine is very busy) take milliseconds once the GEMM library is loaded:
    # a process's first matmul (run first in the suite, this test saw it) loads it, outside
    # the budget here.
    torch.ones(8, 8) @ torch.ones(8, 8)
    built = gemm_sizes_built(monkeypatch)
    result = compute_roofs.measure_gemm(
        "cpu", "fp32", [4096, 64, 32], warmup=2, trials=2, min_trial_s=0.002, budget_s=0.3
    )
    measured = [row["m"] for row in result["sizes"]]
    assert measured[0] == 32 and 4096 not in measured and 4096 not in built
    assert [row["size"] for row in result["skipped_sizes"]][-1] == 4096
    first = result["skipped_sizes"][0]
    assert (first["reason"], first["budget_s"]) == ("projected_over_budget", 0.3)
    assert "0.3 s per precision" in compute_roofs.skip_reason(first, "cpu")
    # Probes double from GEMM_PROBE_SIZE and stop below the size they are for.
    probes = [size for size in built if size not in (32, 64)]
    assert probes == [128 * 2**i for i in range(len(probes))] and max(probes, default=0) < 4096
    # The roof is the best of what was measured, nothing else.
    assert result["best_flop_s"] == max(row["best_flop_s"] for row in result["sizes"])
    assert result["budget_s"] == 0.3 and result["duration_s"] < 2.0


def test_gemm_budget_generous_enough_measures_every_size(monkeypatch):
    result = compute_roofs.measure_gemm(
        "cpu", "bf16", [64, 32], warmup=1, trials=2, min_trial_s=0.002, budget_s=60.0
    )
    assert [row["m"] for row in result["sizes"]] == [32, 64]
    assert result["skipped_sizes"] == []


def test_gemm_budget_of_zero_reports_no_number(monkeypatch):
    # Small first size: its warm-up call is measured, then nothing fits.
    result = compute_roofs.measure_gemm(
        "cpu", "fp32", [32, 64], warmup=1, trials=2, min_trial_s=0.002, budget_s=0.0
    )
    assert result["sizes"] == [] and result["best_flop_s"] is None
    first, larger = result["skipped_sizes"]
    assert (first["size"], first["reason"]) == (32, "measured_over_budget")
    assert "(measured in warm-up), so 2 trials would take" in compute_roofs.skip_reason(
        first, "cpu"
    )
    assert larger == {"size": 64, "reason": "larger_than_skipped", "first": 32}
    assert (
        compute_roofs.skip_reason(larger, "cpu") == "larger than 32, which did not fit the budget"
    )
    # A ceilings JSON from before the codes holds the reason's text: said as it is.
    assert compute_roofs.skip_reason({"size": 8, "reason": "too slow"}, "cpu") == "too slow"
    # Large first size: only probe GEMMs run; the size itself is never built.
    built = gemm_sizes_built(monkeypatch)
    result = compute_roofs.measure_gemm(
        "cpu", "fp32", [4096], warmup=1, trials=2, min_trial_s=0.002, budget_s=0.0
    )
    assert built == [compute_roofs.GEMM_PROBE_SIZE] and result["sizes"] == []
    assert "from the 128^3 GEMM's rate" in compute_roofs.skip_reason(
        result["skipped_sizes"][0], "cpu"
    )


def test_one_long_call_is_not_repeated_needlessly(monkeypatch):
    # Calls per window known (a call fills a window alone): no calibration; one function
    # alone: no untimed refresh call before each window. Two functions: the refresh is back.
    counts = [0, 0]

    def one():
        counts[0] += 1

    def two():
        counts[1] += 1

    microbench.time_interleaved([one], "cpu", warmup=0, trials=3, min_trial_s=1.0, iters=[1])
    assert counts == [3, 0]
    microbench.time_interleaved(
        [one, two], "cpu", warmup=1, trials=3, min_trial_s=1.0, iters=[1, 1]
    )
    assert counts == [3 + 1 + 6, 1 + 6]


def test_ceilings_document_names_the_skipped_sizes(monkeypatch):
    # 2048^3 projected from 64^3 (~0.3 s a call at the 64^3 rate of any CPU) cannot fit
    # 0.2 s; fp32 and bf16 are still measured at 64.
    monkeypatch.setitem(compute_roofs.GEMM_BUDGET_S, "cpu", 0.2)
    doc = measure(monkeypatch, gemm_sizes=[64, 2048], sweep_max_bytes=16 * KIB)
    for precision in ("fp32", "bf16"):
        gemm = doc["measured"]["gemm"][precision]
        assert [row["m"] for row in gemm["sizes"]] == [64]
        assert doc["measured"]["gemm_flop_s"][precision] == gemm["sizes"][0]["best_flop_s"]
        assert [row["size"] for row in doc["skipped_gemm_sizes"][precision]] == [2048]
        assert f"{precision} GEMM roof leaves out size(s) 2048: a 2048^3 call" in ceilings.notes_of(
            doc
        )
    assert doc["settings"]["gemm_budget_s"] == 0.2
    # No time at all: no roof, and the precision is listed as not measured, with why.
    monkeypatch.setitem(compute_roofs.GEMM_BUDGET_S, "cpu", 0.0)
    doc = measure(monkeypatch, gemm_sizes=[64], sweep_max_bytes=16 * KIB)
    assert doc["measured"]["gemm_flop_s"] == {} and doc["measured"]["gemm"] == {}
    assert doc["skipped_precisions"]["fp32"] == "no_size_fits"
    assert "fp32 not measured: no GEMM size fits the time budget: a 64^3 call" in ceilings.notes_of(
        doc
    )
    assert ceilings.summary(doc).startswith(
        f"{doc['device_name']} (cpu): no GEMM roof (see below); memory"
    )


def test_document_has_the_contract_keys(cpu_doc):
    for key in (
        "device",
        "device_name",
        "threads",
        "measured",
        "datasheet",
        "ratio_measured_to_datasheet",
    ):
        assert key in cpu_doc
    # Codes, not the conventions' descriptions (nnperf.roofline.memory_roofs has them).
    assert cpu_doc["measured"]["bandwidth"]["convention"] == "stream"
    assert cpu_doc["measured"]["sweep_kernel"] == "expand_sum_readonly"
    assert cpu_doc["device"] == "cpu" and cpu_doc["threads"] >= 1
    measured = cpu_doc["measured"]
    assert set(measured["gemm_flop_s"]) == {"fp32", "bf16"}
    assert all(v > 0 for v in measured["gemm_flop_s"].values())
    assert measured["memory_bandwidth_bytes_s"] > 0
    assert [p["working_set_bytes"] for p in measured["sweep"]] == [
        16 * KIB,
        32 * KIB,
        64 * KIB,
        128 * KIB,
        256 * KIB,
        512 * KIB,
        MIB,
    ]
    assert all(p["bandwidth_bytes_s"] > 0 for p in measured["sweep"])
    sheet = cpu_doc["datasheet"]
    assert set(sheet) >= {"key", "name", "flop_s", "memory_bandwidth_bytes_s", "source"}
    # This CPU's own flags decide its derived bf16 roof: a number with bf16 arithmetic,
    # else null with the reason in the entry and the note.
    flags = set(parse_cpuinfo(Path("/proc/cpuinfo").read_text())["flags"])
    if sheet["clock_hz"] and not flags & {"amx_bf16", "avx512_bf16", "avx_ne_convert", "bf16"}:
        assert sheet["flop_s"]["bf16"] is None and sheet["flop_s"]["fp32"] > 0
        assert "Derived bf16 peak is null: no native bf16 arithmetic" in ceilings.notes_of(cpu_doc)
    elif sheet["clock_hz"]:
        assert sheet["flop_s"]["bf16"] > 0 and "bf16 peak is null" not in ceilings.notes_of(cpu_doc)
    assert set(cpu_doc["ratio_measured_to_datasheet"]) == {
        "gemm_flop_s",
        "memory_bandwidth_bytes_s",
    }
    assert (
        cpu_doc["settings"]["gemm_sizes"] == [64, 256]
        and cpu_doc["settings"]["bandwidth_bytes"] == 4 * MIB
    )


def test_gemm_rows_count_two_mnk_flops(cpu_doc):
    for precision, gemm in cpu_doc["measured"]["gemm"].items():
        assert [row["m"] for row in gemm["sizes"]] == [64, 256]
        for row in gemm["sizes"]:
            assert row["flops"] == 2 * row["m"] ** 3
            assert row["best_flop_s"] == pytest.approx(row["flops"] / row["best_time_s"])
            assert row["best_flop_s"] >= row["median_flop_s"]
        assert gemm["best_flop_s"] == max(row["best_flop_s"] for row in gemm["sizes"])
        assert cpu_doc["measured"]["gemm_flop_s"][precision] == gemm["best_flop_s"]


def test_bandwidth_counts_stream_bytes(cpu_doc):
    bandwidth = cpu_doc["measured"]["bandwidth"]
    n = 4 * MIB // 4
    assert bandwidth["copy"]["bytes_per_call"] == 2 * n * 4
    assert bandwidth["triad"]["bytes_per_call"] == 3 * n * 4
    for kernel in ("copy", "triad"):
        row = bandwidth[kernel]
        assert row["best_bandwidth_bytes_s"] == pytest.approx(
            row["bytes_per_call"] / row["best_time_s"]
        )
    kernel = cpu_doc["measured"]["memory_bandwidth_kernel"]
    assert (
        cpu_doc["measured"]["memory_bandwidth_bytes_s"]
        == bandwidth[kernel]["best_bandwidth_bytes_s"]
    )


def test_sweep_counts_repeated_reads(cpu_doc):
    for point in cpu_doc["measured"]["sweep"]:
        repeats = memory_roofs.sweep_repeats(
            point["working_set_bytes"], ceilings.SWEEP_BYTES_PER_CALL["cpu"]
        )
        assert point["repeats_per_call"] == repeats
        assert point["bytes_per_call"] == memory_roofs.sweep_call_bytes(
            point["working_set_bytes"], repeats
        )


def test_measured_fp32_gemm_is_near_or_below_the_derived_cpu_peak(monkeypatch):
    # Sizes large enough to be compute-bound. Only fp32 is asserted: the derived peak uses
    # the clock /proc/cpuinfo reports, which under a hypervisor is the nominal (TSC) clock,
    # and bf16 GEMMs on a boosting core can exceed it (the note then says so).
    doc = measure(monkeypatch, gemm_sizes=[512], trials=3)
    peak = doc["datasheet"]["flop_s"]["fp32"]
    if doc["datasheet"].get("derived") and peak is None:
        pytest.skip("CPU clock unreadable here: no derived peak to compare with")
    ratio = doc["ratio_measured_to_datasheet"]["gemm_flop_s"]["fp32"]
    assert doc["measured"]["gemm_flop_s"]["fp32"] == pytest.approx(ratio * peak)
    # Below the peak, or above it only as far as a boost clock over the nominal one reaches
    # (then the note says why, rather than the number passing unremarked).
    assert 0 < ratio < 1.6
    if ratio > 1:
        assert "x the derived peak: the clock used" in ceilings.notes_of(doc)


def test_threads_setting_is_applied_and_recorded(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        doc = measure(monkeypatch, gemm_sizes=[64], sweep_max_bytes=16 * KIB, threads=1)
    finally:
        torch.set_num_threads(before)
    assert doc["threads"] == 1 and doc["settings"]["threads"] == 1
    if doc["datasheet"].get("derived"):
        assert doc["datasheet"]["cores"] == 1


def test_json_round_trip(cpu_doc, tmp_path):
    path = tmp_path / "cpu.json"
    write_json(path, cpu_doc)
    back = read_json(path)
    assert (
        back["schema_version"] == 1
        and back["measured"]["gemm_flop_s"] == cpu_doc["measured"]["gemm_flop_s"]
    )


def test_settings_are_the_request_s_and_the_constants(cpu_doc):
    settings = cpu_doc["settings"]
    assert settings["trials"] == 2 and settings["sweep_max_bytes"] == MIB
    assert settings["warmup"] == 1 and settings["min_trial_s"] == 0.002  # fast()
    assert settings["gemm_budget_s"] == compute_roofs.GEMM_BUDGET_S["cpu"]
    assert settings["gemm_probe_size"] == compute_roofs.GEMM_PROBE_SIZE
    assert settings["sweep_steps_per_octave"] == 1
    assert settings["peaks"] == str(PEAKS_YAML) and settings["threads"] is None
    assert settings["cpu_fma_units"] == ceilings.peaks_mod.DEFAULT_FMA_UNITS


def test_null_gemm_sizes_mean_the_device_s_own(monkeypatch):
    # The device's table entry is what a null `ceilings.gemm_sizes` measures (patched small
    # here so the test takes milliseconds, not the seconds of a 2048^3 GEMM).
    monkeypatch.setitem(ceilings.DEFAULT_GEMM_SIZES, "cpu", (96,))
    doc = measure(monkeypatch, gemm_sizes=None, sweep_max_bytes=16 * KIB)
    assert doc["settings"]["gemm_sizes"] == [96]
    assert [row["m"] for row in doc["measured"]["gemm"]["fp32"]["sizes"]] == [96]
    assert CeilingsSettings().gemm_sizes is None
    assert set(ceilings.DEFAULT_GEMM_SIZES) == set(ceilings.DEVICES)


def test_write_ceilings_and_draw_the_sweep(monkeypatch, tmp_path):
    """What rules ceilings and plot_ceilings do: the JSON, its log line, the PNG."""
    fast(monkeypatch)
    out = tmp_path / "results" / "ceilings" / "cpu.json"
    returned = ceilings.write_ceilings(
        tiny_request(gemm_sizes=[64, 128], sweep_max_bytes=64 * KIB), out
    )
    doc = read_json(out)
    assert doc == {"schema_version": 1, **json.loads(json.dumps(returned))}
    assert doc["device"] == "cpu"
    assert doc["threads"] >= 1 and doc["settings"]["gemm_sizes"] == [64, 128]
    assert [p["working_set_bytes"] for p in doc["measured"]["sweep"]] == [
        16 * KIB,
        32 * KIB,
        64 * KIB,
    ]
    line = ceilings.summary(doc)
    assert line.startswith(f"{doc['device_name']} (cpu): fp32 ") and "GFLOP/s" in line
    png = tmp_path / "results" / "figures" / "ceilings" / "cpu_sweep.png"
    ceilings_plots.draw(out, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"trials": 0}, "ceilings.trials is 0; expected an integer >= 1"),
        ({"gemm_sizes": [0]}, r"ceilings.gemm_sizes is \[0\]"),
        ({"gemm_sizes": []}, r"ceilings.gemm_sizes is \[\]"),
        ({"bandwidth_bytes": 0}, "ceilings.bandwidth_bytes is 0"),
        ({"threads": 0}, "threads is 0; expected null"),
        ({"device": "tpu"}, "device 'tpu' is unknown; allowed: cpu, cuda, mps"),
    ],
)
def test_bad_settings_fail_before_measuring(changes, message, tmp_path):
    with pytest.raises(NnperfError, match=message):
        ceilings.write_ceilings(tiny_request(**changes), tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


def test_missing_peaks_file_is_one_line_and_writes_nothing(tmp_path):
    request = from_dict(CeilingsRequest, {**TINY, "peaks_path": "nope.yaml"})
    with pytest.raises(NnperfError) as info:
        ceilings.write_ceilings(request, tmp_path / "x.json")
    assert str(info.value) == "nope.yaml: file not found (datasheet peaks, see config/peaks.yaml)"
    assert list(tmp_path.iterdir()) == []


def test_nvidia_smi_clocks_in_hz(monkeypatch):
    """Clocks come from the environment record's nvidia-smi query (MHz there, Hz here)."""
    from nnperf.core import environment as envinfo

    row = dict.fromkeys(envinfo.NVIDIA_SMI_FIELDS)
    row.update(
        {
            "clocks.sm": "1980",
            "clocks.max.sm": "1980",
            "clocks.mem": "2619",
            "clocks.max.mem": "2619",
            "driver_version": "550.54.15",
        }
    )
    monkeypatch.setattr(envinfo, "nvidia_smi_rows", lambda: [row])
    assert ceilings.nvidia_smi_clocks() == {
        "sm_clock_hz": 1.98e9,
        "sm_clock_max_hz": 1.98e9,
        "memory_clock_hz": 2.619e9,
        "memory_clock_max_hz": 2.619e9,
        "driver": "550.54.15",
    }
    monkeypatch.setattr(envinfo, "nvidia_smi_rows", lambda: [])
    assert ceilings.nvidia_smi_clocks() is None
