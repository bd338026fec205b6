"""Datasheet peaks: the YAML schema check, device-name matching and the derived CPU peak."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from nnperf.core.cpuinfo import parse_cpuinfo, physical_cores_of
from nnperf.core.errors import NnperfError
from nnperf.roofline import peaks

PEAKS_YAML = Path(__file__).resolve().parents[2] / "config" / "peaks.yaml"

# Names as torch.cuda.get_device_name() reports them (nvidia-smi --query-gpu=name prints the
# same strings) -> the entry they must select.
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100_sxm",
    "NVIDIA H100 PCIe": "h100_pcie",
    "NVIDIA H100 NVL": "h100_nvl",
    "NVIDIA H200": "h200_sxm",
    "NVIDIA H200 NVL": "h200_nvl",
    "NVIDIA A100-SXM4-40GB": "a100_sxm_40gb",
    "NVIDIA A100-SXM4-80GB": "a100_sxm_80gb",
    "NVIDIA A100-PCIE-40GB": "a100_pcie_40gb",
    "NVIDIA A100 80GB PCIe": "a100_pcie_80gb",
    "NVIDIA A10": "a10",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA GeForce RTX 4090": "rtx_4090",
    "NVIDIA GeForce RTX 3090": "rtx_3090",
    "Tesla V100-SXM2-16GB": "v100_sxm2",
    "Tesla V100-SXM2-32GB": "v100_sxm2",
    "Tesla V100-PCIE-16GB": "v100_pcie",
    "Tesla V100-PCIE-32GB": "v100_pcie",
    "Tesla V100S-PCIE-32GB": "v100s_pcie",
    "Tesla T4": "t4",
}

# A genuine /proc/cpuinfo layout (two processors shown in full, trimmed flags) of a
# 1-socket, 2-core, 2-thread-per-core Intel machine: 4 logical CPUs, 2 physical cores.
CPUINFO_SMT = "\n\n".join(f"""processor	: {cpu}
vendor_id	: GenuineIntel
cpu family	: 6
model		: 85
model name	: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
stepping	: 7
cpu MHz		: {2100.000 + cpu:.3f}
cache size	: 28160 KB
physical id	: 0
siblings	: 4
core id		: {cpu % 2}
cpu cores	: 2
flags		: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512_vnni
""" for cpu in range(4))

# arm64 /proc/cpuinfo: no model name, no core ids, `Features` instead of `flags`.
CPUINFO_ARM = "\n\n".join(f"""processor	: {cpu}
BogoMIPS	: 243.75
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1
""" for cpu in range(8))


@pytest.fixture(scope="module")
def table():
    return peaks.load_peaks(PEAKS_YAML)


@pytest.mark.parametrize("name,key", sorted(DEVICE_NAMES.items()))
def test_every_listed_device_name_matches_its_entry(table, name, key):
    entry = peaks.match_device("cuda", name, table)
    assert entry is not None and entry["key"] == key


def test_every_entry_is_matched_by_a_real_device_name(table):
    assert set(DEVICE_NAMES.values()) == set(table)


@pytest.mark.parametrize(
    "name", ["NVIDIA GeForce RTX 3090 Ti", "NVIDIA B200", "Radeon RX 7900", ""]
)
def test_unknown_device_matches_nothing(table, name):
    assert peaks.match_device("cuda", name, table) is None


def test_cuda_entries_do_not_match_a_cpu(table):
    assert peaks.match_device("cpu", "NVIDIA H100 80GB HBM3", table) is None


def test_units_are_converted_to_si(table):
    h100 = table["h100_sxm"]
    assert h100["flop_s"]["bf16"] == pytest.approx(989.5e12)
    assert h100["flop_s"]["fp32"] == pytest.approx(67e12)
    assert h100["memory_bandwidth_bytes_s"] == pytest.approx(3.35e12)
    assert table["v100_sxm2"]["flop_s"]["bf16"] is None
    assert "datasheet" in h100["source"].lower() and h100["derived"] is False


def test_dense_tensor_figures_are_at_least_the_fp32_rate(table):
    for entry in table.values():
        fp32 = entry["flop_s"]["fp32"]
        for precision in ("tf32", "fp16", "bf16"):
            value = entry["flop_s"].get(precision)
            assert value is None or value >= fp32, (entry["key"], precision)


def _entry(**changes):
    base = {
        "name": "Test GPU",
        "device": "cuda",
        "match": ["Test GPU"],
        "dense_tflop_s": {"fp32": 10, "bf16": 100},
        "memory_gb_s": 1000,
        "source": "Test datasheet",
    }
    base.update(changes)
    return {"devices": {"test_gpu": base}}


@pytest.mark.parametrize(
    "document,message",
    [
        ({"gpus": {}}, "top-level key 'devices' is missing"),
        ({"devices": {}, "extra": 1}, "unknown top-level key 'extra'"),
        ({"devices": {"x": [1, 2]}}, "devices.x is list; expected a mapping"),
        (_entry(source=None), "devices.test_gpu.source is None; expected a non-empty string"),
        (_entry(device="tpu"), "devices.test_gpu.device is 'tpu'; allowed: cpu, cuda, mps"),
        (
            _entry(match="Test GPU"),
            "devices.test_gpu.match is 'Test GPU'; expected a non-empty list",
        ),
        (
            _entry(match=["(unclosed"]),
            "devices.test_gpu.match pattern '(unclosed' is not a valid regular expression",
        ),
        (
            _entry(dense_tflop_s={"fp64": 1}),
            "devices.test_gpu.dense_tflop_s has key 'fp64'; allowed: fp32, tf32, fp16, bf16",
        ),
        (
            _entry(dense_tflop_s={"fp32": -1}),
            "devices.test_gpu.dense_tflop_s.fp32 is -1; expected a positive number or null",
        ),
        (_entry(dense_tflop_s={"fp32": "67e12"}), "devices.test_gpu.dense_tflop_s.fp32 is '67e12'"),
        (
            _entry(memory_gb_s=True),
            "devices.test_gpu.memory_gb_s is True; expected a positive number",
        ),
        (_entry(boost_mhz=1980), "devices.test_gpu has unknown key 'boost_mhz'"),
    ],
)
def test_schema_errors_name_the_entry_and_key(document, message):
    with pytest.raises(NnperfError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        peaks.parse_peaks(document, "peaks.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith("peaks.yaml: ")


def test_missing_required_key_is_named():
    document = _entry()
    del document["devices"]["test_gpu"]["memory_gb_s"]
    with pytest.raises(NnperfError, match="devices.test_gpu lacks key 'memory_gb_s'"):
        peaks.parse_peaks(document)


def test_load_reports_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(NnperfError, match="nope.yaml: file not found"):
        peaks.load_peaks(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [unclosed\n")
    with pytest.raises(NnperfError, match="bad.yaml: not valid YAML"):
        peaks.load_peaks(bad)


def test_ambiguous_patterns_are_an_error(tmp_path):
    document = _entry()
    document["devices"]["other"] = dict(document["devices"]["test_gpu"], match=["GPU"])
    table = peaks.parse_peaks(document)
    with pytest.raises(NnperfError, match="matches several entries \\(test_gpu, other\\)"):
        peaks.match_device("cuda", "Test GPU", table)


def test_real_file_round_trips_through_yaml():
    # The file on disk is plain YAML that a user can edit and re-check.
    document = yaml.safe_load(PEAKS_YAML.read_text())
    assert set(peaks.parse_peaks(document)) == set(DEVICE_NAMES.values())


# --- CPU ------------------------------------------------------------------------------


def test_parse_cpuinfo_counts_physical_cores_not_smt_threads():
    info = parse_cpuinfo(CPUINFO_SMT)
    assert info["model_name"] == "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
    assert info["vendor"] == "GenuineIntel" and info["family"] == 6
    assert info["logical_cpus"] == 4 and info["physical_cores"] == 2
    assert info["cpu_mhz"] == pytest.approx(2103.0)
    assert {"avx512f", "fma", "avx2"} <= set(info["flags"])
    assert physical_cores_of(CPUINFO_SMT, {0, 2}) == 1  # SMT siblings of core 0
    assert physical_cores_of(CPUINFO_SMT, {0, 1}) == 2


def test_parse_cpuinfo_arm_without_core_ids():
    info = parse_cpuinfo(CPUINFO_ARM)
    assert info["physical_cores"] == 8 and "asimd" in info["flags"] and info["cpu_mhz"] is None
    assert peaks.cpu_flop_per_cycle(info["flags"])["fp32"] == 4 * 2 * 2


@pytest.mark.parametrize(
    "flags,vendor,family,fma_units,fp32,bf16",
    [
        # 512 bits / 32 = 16 lanes x 2 FMA units x 2 FLOP = 64; VDPBF16PS doubles it.
        ("avx512f avx2 fma avx512_bf16", "AuthenticAMD", 26, 2, 64, 128),
        # Zen 4 (family 25) runs AVX-512 on 256-bit halves: 8 x 2 x 2.
        ("avx512f avx2 fma avx512_bf16", "AuthenticAMD", 25, 2, 32, 64),
        # Sapphire Rapids: AMX tiles, 1024 BF16 FLOP/cycle.
        ("avx512f avx2 fma avx512_bf16 amx_bf16 amx_tile", "GenuineIntel", 6, 2, 64, 1024),
        # Sierra Forest: bf16 converted in hardware (AVX-NE-CONVERT), fp32 FMAs: 8 x 2 x 2.
        ("avx avx2 fma avx_vnni avx_ne_convert", "GenuineIntel", 6, 2, 32, 32),
        # Neoverse V1 (arm64 FEAT_BF16): 4 lanes x 2 x 2 = 16, BFDOT doubles it.
        ("fp asimd bf16", None, None, 2, 16, 32),
        # Xeon Silver: one 512-bit FMA unit; no bf16 instructions -> emulated, no bf16 peak.
        ("avx512f avx2 fma", "GenuineIntel", 6, 1, 32, None),
        ("avx avx2 fma", "GenuineIntel", 6, 2, 32, None),  # Haswell..: 8 x 2 x 2
        ("avx sse2", "GenuineIntel", 6, 2, 16, None),  # Sandy Bridge: 8 lanes x (add + mul)
        ("sse sse2", "GenuineIntel", 6, 2, 8, None),  # 4 lanes x (add + mul)
        ("fp asimd", None, None, 2, 16, None),  # arm64 without BF16
    ],
)
def test_cpu_flop_per_cycle_by_hand(flags, vendor, family, fma_units, fp32, bf16):
    result = peaks.cpu_flop_per_cycle(flags.split(), vendor, family, fma_units)
    assert (result["fp32"], result["bf16"]) == (fp32, bf16)
    # A null rate always comes with its reason, a number never does.
    assert set(result["null_reasons"]) == ({"bf16"} if bf16 is None else set())


def test_cpu_without_vector_flags_has_no_derived_peak():
    assert peaks.cpu_flop_per_cycle(["fpu"])["fp32"] is None


def test_derived_cpu_peak_by_hand():
    info = parse_cpuinfo(CPUINFO_SMT)
    entry = peaks.derived_cpu_peak(info, cores=2, clock_hz=2.1e9, clock_source="test", fma_units=2)
    # 2 cores x 2.1e9 Hz x (16 lanes x 2 FMA x 2 FLOP) = 268.8 GFLOP/s.
    assert entry["flop_s"]["fp32"] == pytest.approx(268.8e9)
    assert entry["derived"] is True and entry["memory_bandwidth_bytes_s"] is None
    # A code, with the numbers it rests on beside it (no sentence in the ceilings JSON).
    assert entry["source"] == "derived"
    assert (entry["cores"], entry["clock_hz"], entry["flop_per_cycle_per_core"]["fp32"]) == (
        2,
        2.1e9,
        64,
    )
    assert "(derived peak)" in entry["name"]


def _with_flags(text: str, flags: str) -> str:
    """`text` (a /proc/cpuinfo) with every processor's flags line replaced by `flags`."""
    return "\n".join(
        f"flags\t\t: {flags}" if line.startswith("flags") else line for line in text.splitlines()
    )


NO_BF16 = "no_native_bf16"


@pytest.mark.parametrize(
    "flags,bf16_per_cycle",
    [
        # Cascade Lake (CPUINFO_SMT's own flags), Zen 2/3 and Haswell: no bf16 arithmetic.
        ("fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512_vnni", None),
        ("fpu sse sse2 avx fma avx2 sha_ni vaes", None),
        # Cooper Lake / Zen 4+: VDPBF16PS, 2 x 64; Sapphire Rapids: AMX, 1024.
        ("fpu sse sse2 avx fma avx2 avx512f avx512_bf16", 128),
        ("fpu sse sse2 avx fma avx2 avx512f avx512_bf16 amx_tile amx_bf16", 1024),
    ],
)
def test_derived_bf16_peak_only_with_bf16_arithmetic_in_the_flags(flags, bf16_per_cycle):
    info = parse_cpuinfo(_with_flags(CPUINFO_SMT, flags))
    assert info["flags"] == sorted(flags.split())
    entry = peaks.derived_cpu_peak(info, cores=2, clock_hz=2.1e9, clock_source="test")
    if bf16_per_cycle is None:
        # Not the fp32 roof: an emulated bf16 GEMM runs ~50x below it, so no roof at all.
        assert entry["flop_s"]["bf16"] is None
        assert entry["flop_per_cycle_per_core"]["bf16"] is None
        assert entry["flop_s_null_reasons"] == {"bf16": NO_BF16}
        assert entry["bf16_flags"] == ["amx_bf16", "avx512_bf16", "avx_ne_convert"]
    else:
        assert entry["flop_s"]["bf16"] == pytest.approx(2 * 2.1e9 * bf16_per_cycle)
        assert entry["flop_s_null_reasons"] == {}
    assert entry["flop_s"]["fp32"] > 0


def test_arm_without_bf16_names_the_arm_flag():
    info = parse_cpuinfo(CPUINFO_ARM)
    entry = peaks.derived_cpu_peak(info, cores=8, clock_hz=3.0e9, clock_source="test")
    assert entry["flop_s"]["fp32"] == pytest.approx(8 * 3.0e9 * 16)
    assert entry["flop_s_null_reasons"] == {"bf16": "no_native_bf16"}
    assert peaks.null_peak_reason("no_native_bf16", entry) == (
        "no native bf16 arithmetic (flags lack bf16): bf16 runs emulated, no derived peak"
    )
    with_bf16 = parse_cpuinfo(
        CPUINFO_ARM.replace("Features\t: fp asimd", "Features\t: fp asimd bf16")
    )
    entry = peaks.derived_cpu_peak(with_bf16, cores=8, clock_hz=3.0e9, clock_source="test")
    assert entry["flop_s"]["bf16"] == pytest.approx(8 * 3.0e9 * 32)


def test_derived_cpu_peak_without_clock_is_null():
    entry = peaks.derived_cpu_peak(parse_cpuinfo(CPUINFO_SMT), 2, None, "unreadable")
    assert entry["flop_s"] == {"fp32": None, "bf16": None}
    assert entry["flop_s_null_reasons"]["fp32"] == "clock_unread"
    assert (
        peaks.null_peak_reason("clock_unread", entry)
        == "the CPU clock could not be read (unreadable)"
    )


def test_bad_fma_units_is_a_clear_error():
    with pytest.raises(NnperfError, match="cpu_fma_units is 0; expected an integer >= 1"):
        peaks.cpu_flop_per_cycle(["avx512f"], fma_units=0)


@given(cores=st.integers(1, 512), clock_ghz=st.floats(0.5, 6.0), fma_units=st.integers(1, 4))
def test_derived_peak_is_cores_times_clock_times_flop_per_cycle(cores, clock_ghz, fma_units):
    info = {"flags": ["avx2", "fma"], "vendor": "GenuineIntel", "family": 6, "model_name": "x"}
    entry = peaks.derived_cpu_peak(info, cores, clock_ghz * 1e9, "test", fma_units)
    assert entry["flop_s"]["fp32"] == pytest.approx(cores * clock_ghz * 1e9 * 8 * fma_units * 2)
