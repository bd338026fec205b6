"""Tests for nnperf.ncu.metrics, .ranges and .raw_csv: metric sets, command lines, units, the
raw-page parser, formulas."""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h100_exports import EXPORTS, Export
from ncu_writer import START_END, export_text, format_value, start_end_cell
from nnperf.core.errors import NnperfError
from nnperf.ncu import kernels
from nnperf.ncu import metrics as ncu
from nnperf.ncu import ranges, raw_csv

DATA = Path(__file__).parents[1] / "data" / "ncu"
A100 = DATA / "a100_fp32_resnet18.csv"


# ------------------------------------------------------------------ metric sets
def test_every_arch_collects_time_flops_bytes_clocks_and_peaks():
    for arch in ncu.ARCHITECTURES:
        metrics = ncu.metric_set(arch).metrics()
        assert "gpu__time_duration.sum" in metrics
        for dtype in ("d", "f", "h"):
            for op in ("add", "mul", "fma"):
                assert f"sm__sass_thread_inst_executed_op_{dtype}{op}_pred_on.sum" in metrics
        for name in (
            "dram__bytes.sum",
            "lts__t_bytes.sum",
            "l1tex__t_bytes.sum",
            "dram__bytes.sum.peak_sustained",
            "sm__cycles_elapsed.avg.per_second",
            "dram__cycles_elapsed.avg.per_second",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
        ):
            assert name in metrics
        assert metrics == sorted(set(metrics))


def test_tensor_counter_names_differ_between_ampere_and_hopper():
    ampere = ncu.metric_set("ampere").tensor
    hopper = ncu.metric_set("hopper").tensor
    assert ampere["bf16"] == ("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum",)
    assert hopper["bf16"] == ("sm__ops_path_tensor_src_bf16_dst_fp32.sum",)
    assert hopper["fp16"] == ("sm__ops_path_tensor_src_fp16.sum",)
    assert set(ampere["fp16"]) == {
        "sm__ops_path_tensor_src_fp16_dst_fp16_sparsity_off.sum",
        "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum",
    }
    assert ncu.metric_set("ada").tensor == ampere


def test_volta_counts_tensor_instructions_times_512():
    volta = ncu.metric_set("volta")
    assert volta.tensor == {"fp16": ("sm__inst_executed_pipe_tensor.sum",)}
    assert volta.tensor_flops_per_count == 512
    frame = pd.DataFrame({"sm__inst_executed_pipe_tensor.sum": [1000.0]})
    assert ncu.tensor_flops(frame, volta).iloc[0] == 512_000


@pytest.mark.parametrize(
    "capability, arch",
    [
        ("7.0", "volta"),
        ("8.0", "ampere"),
        ("8.6", "ampere"),
        ("sm_89", "ada"),
        ((9, 0), "hopper"),
        ("sm90", "hopper"),
    ],
)
def test_compute_capability_maps_to_arch(capability, arch):
    assert ncu.arch_for_compute_capability(capability) == arch


def test_unknown_arch_and_capability_are_one_line_errors():
    with pytest.raises(
        NnperfError, match=r"architecture 'turing' is unknown; allowed: volta, ampere, ada, hopper"
    ):
        ncu.metric_set("turing")
    with pytest.raises(NnperfError, match=r"compute capability 7\.5 has no ncu metric set"):
        ncu.arch_for_compute_capability("7.5")
    with pytest.raises(NnperfError, match="is not of the form"):
        ncu.arch_for_compute_capability("hopper!")


# ------------------------------------------------------------------ skip logic
@pytest.mark.parametrize(
    "setting, device, on_path, expected",
    [
        ("auto", "cuda", True, True),
        ("auto", "cuda", False, False),
        ("auto", "cpu", True, False),
        ("true", "cuda", False, True),
        (True, "cuda", False, True),
        ("true", "mps", True, False),
        ("false", "cuda", True, False),
        (False, "cuda", True, False),
        ("AUTO", "cuda", True, True),
    ],
)
def test_ncu_included(setting, device, on_path, expected):
    assert ncu.ncu_included(setting, device, on_path) is expected
    reason = ncu.ncu_exclusion_reason(setting, device, on_path)
    assert (reason is None) is expected


def test_ncu_setting_must_be_auto_true_or_false():
    with pytest.raises(
        NnperfError, match=r"ncu.enabled 'sometimes' is not allowed; allowed: auto, true, false"
    ):
        ncu.ncu_included("sometimes", "cuda", True)


def test_exclusion_reasons_say_why():
    assert "not on PATH" in ncu.ncu_exclusion_reason("auto", "cuda", False)
    assert "CUDA devices only" in ncu.ncu_exclusion_reason("true", "cpu", True)
    assert "false" in ncu.ncu_exclusion_reason("false", "cuda", True)


# ------------------------------------------------------------------ command lines
def test_profile_command_filters_start_end_ranges_and_records_settings():
    argv = ncu.profile_command(
        ["nnperf", "step", "--model", "resnet18"],
        "out/baseline.ncu-rep",
        ["a.sum", "b.sum"],
        clock_control="none",
        replay_mode="application",
    )
    assert argv[:4] == ["ncu", "--target-processes", "all", "--nvtx"]
    includes = [argv[i + 1] for i, a in enumerate(argv) if a == "--nvtx-include"]
    # start/end ranges: plain names, no trailing "/" (that would select push/pop ranges)
    assert includes == ["nnperf_step", "nnperf_calibration_gemm"]
    assert not any(i.endswith("/") for i in includes)
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--replay-mode") + 1] == "application"
    assert argv[argv.index("--metrics") + 1] == "a.sum,b.sum"
    assert argv[argv.index("-o") + 1] == "out/baseline"  # ncu appends .ncu-rep itself
    assert "--force-overwrite" in argv
    assert argv[-4:] == ["nnperf", "step", "--model", "resnet18"]


def test_profile_command_rejects_bad_settings():
    with pytest.raises(
        NnperfError, match=r"ncu.clock_control 'boost' is not allowed; allowed: base, none"
    ):
        ncu.profile_command(["x"], "r.ncu-rep", ["m"], clock_control="boost")
    with pytest.raises(NnperfError, match="replay_mode 'range' is not allowed"):
        ncu.profile_command(["x"], "r.ncu-rep", ["m"], replay_mode="range")
    with pytest.raises(NnperfError, match="no target command"):
        ncu.profile_command([], "r.ncu-rep", ["m"])


def test_export_and_query_commands():
    assert ncu.export_command("a/b.ncu-rep") == [
        "ncu",
        "--import",
        "a/b.ncu-rep",
        "--csv",
        "--page",
        "raw",
    ]
    assert ncu.query_metrics_command("gh100") == ["ncu", "--query-metrics", "--chip", "gh100"]


# ------------------------------------------------------------------ units and numbers
@pytest.mark.parametrize(
    "unit, factor, si",
    [
        ("byte", 1, "byte"),
        ("Kbyte", 1e3, "byte"),
        ("Mbyte", 1e6, "byte"),
        ("Gbyte", 1e9, "byte"),
        ("KB", 1e3, "byte"),
        ("nsecond", 1e-9, "second"),
        ("usecond", 1e-6, "second"),
        ("msecond", 1e-3, "second"),
        ("second", 1, "second"),
        ("ns", 1e-9, "second"),
        ("us", 1e-6, "second"),
        ("ms", 1e-3, "second"),
        ("inst", 1, "inst"),
        ("Kinst", 1e3, "inst"),
        ("Minst", 1e6, "inst"),
        ("Ginst", 1e9, "inst"),
        ("cycle", 1, "cycle"),
        ("cycle/nsecond", 1e9, "cycle/second"),
        ("cycle/usecond", 1e6, "cycle/second"),
        ("cycle/second", 1, "cycle/second"),
        ("Kcycle/second", 1e3, "cycle/second"),
        ("Ghz", 1e9, "1/second"),
        ("Mhz", 1e6, "1/second"),
        ("hz", 1, "1/second"),
        ("Gbyte/second", 1e9, "byte/second"),
        ("byte/cycle", 1, "byte/cycle"),
        ("Kbyte/cycle", 1e3, "byte/cycle"),
        ("inst/cycle", 1, "inst/cycle"),
        ("%", 1, "%"),
        ("", 1, ""),
    ],
)
def test_parse_unit(unit, factor, si):
    got_factor, got_si = raw_csv.parse_unit(unit)
    assert got_factor == pytest.approx(factor)
    assert got_si == si


@pytest.mark.parametrize("unit", ["furlong", "Xbyte", "byte/cycle/second", "mbyte", "kparsec"])
def test_unknown_units_are_refused(unit):
    with pytest.raises(ValueError):
        raw_csv.parse_unit(unit)


@pytest.mark.parametrize(
    "text, value",
    [
        ("0", 0.0),
        ("2,048", 2048.0),
        ("1,205.00", 1205.0),
        ("68,746,964,526.69", 68746964526.69),
        ("12.5", 12.5),
        ("-3", -3.0),
        ("1.5e-05", 1.5e-5),
        ("  7 ", 7.0),
    ],
)
def test_parse_number(text, value):
    assert raw_csv.parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["n/a", "N/A", "", "  "])
def test_missing_values_are_nan(text):
    assert math.isnan(raw_csv.parse_number(text))


@pytest.mark.parametrize(
    "text", ["1,23", "12,34,567", "27.595.520", "65,77", "abc", "1..2", "+", "e5"]
)
def test_malformed_numbers_are_refused(text):
    with pytest.raises(ValueError):
        raw_csv.parse_number(text)


# ------------------------------------------------------------------ parser on real exports
def _real(name: str = "bf16_bs256_tuned") -> Export:
    return EXPORTS[name]


def _head(kernels: int = 10, name: str = "bf16_bs256_tuned") -> list[str]:
    """The header, units row and first `kernels` kernel rows of a real export (the trim the
    fixtures' README allows; every row intact)."""
    return _real(name).text().splitlines()[: 2 + kernels]


def _set_cell(lines: list[str], line_index: int, column: str, value: str) -> list[str]:
    """`lines` with one cell replaced, re-quoted as ncu quotes (every field)."""
    header = next(csv.reader([lines[0]]))
    row = next(csv.reader([lines[line_index]]))
    row[header.index(column)] = value
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="").writerow(row)
    return lines[:line_index] + [buffer.getvalue()] + lines[line_index + 1 :]


HOPPER = ncu.metric_set("hopper").metrics()


def test_real_h100_export_parses_to_si_units():
    export = _real()
    frame = raw_csv.read_raw_csv(export.path, required=HOPPER)
    assert len(frame) == export.step_kernels + 1  # + the calibration GEMM
    assert frame["id"].is_unique
    assert frame.attrs["units"]["gpu__time_duration.sum"] == "second"
    assert frame.attrs["units"]["dram__bytes.sum"] == "byte"
    assert frame.attrs["units"]["sm__cycles_elapsed.avg.per_second"] == "1/second"
    assert frame.attrs["ncu_messages"] == []
    gemm = frame.iloc[0]  # the calibration GEMM, as exported
    assert gemm["kernel_name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert gemm["gpu__time_duration.sum"] == pytest.approx(210.688e-6)  # "210.688000" us
    assert gemm["dram__bytes.sum"] == pytest.approx(178.803968e6)  # Mbyte
    assert gemm["lts__t_bytes.sum"] == pytest.approx(1.014735e9)  # Gbyte
    assert gemm["dram__bytes.sum.peak_sustained"] == pytest.approx(1280)  # 1.28 Kbyte/cycle
    assert gemm["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.337291e9)  # Ghz
    assert gemm["sm__ops_path_tensor_src_bf16_dst_fp32.sum"] == 2 * 4096**3
    # The exported tensor peak: 8192 per SM per cycle x 132 SMs (the 2:4-sparse rate).
    assert gemm["sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained"] == 8192 * 132
    assert ranges.phase_of(gemm["nvtx_start_end"]) == "calibration"
    assert frame["cc"].unique().tolist() == ["9.0"]
    assert gemm["source_line"] == 3


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_real_export_parses_with_the_hopper_set_required(name):
    frame = raw_csv.read_raw_csv(EXPORTS[name].path, required=HOPPER)
    assert len(frame) == EXPORTS[name].step_kernels + 1
    assert (frame["gpu__time_duration.sum"] > 0).all()


def test_a100_fixture_parses_older_unit_spellings():
    frame = raw_csv.read_raw_csv(A100, required=ncu.metric_set("ampere").metrics())
    assert len(frame) == 7
    row = frame.iloc[0]
    assert row["gpu__time_duration.sum"] == pytest.approx(9.61e-3)  # "9,610.00" usecond
    assert row["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.41e9)  # cycle/nsecond
    assert row["dram__cycles_elapsed.avg.per_second"] == pytest.approx(1.215e9)  # cycle/usecond
    assert row["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"] == pytest.approx(
        68_746_964_526.69
    )
    assert frame.attrs["units"]["sm__cycles_elapsed.avg.per_second"] == "cycle/second"


def test_preamble_interleaved_tool_lines_and_crlf_are_tolerated_and_warnings_kept():
    lines = _head()
    noisy = "\r\n".join(
        [
            "==PROF== Connected to process 48213 (/usr/bin/python3.11)",
            'epoch 0: loss "nan", 3 items',
            "==WARNING== Backing up device memory in system memory.",
            *lines[:4],
            '==PROF== Profiling "sm90_xmma_fprop": 0%....50%....100% - 1 pass',
            *lines[4:],
            "==PROF== Disconnected from process 48213",
        ]
    )
    frame = raw_csv.parse_raw_csv(noisy, "noisy.csv")
    clean = raw_csv.parse_raw_csv("\n".join(lines), "clean.csv")
    pd.testing.assert_frame_equal(
        frame.drop(columns="source_line"), clean.drop(columns="source_line")
    )
    assert frame.attrs["ncu_messages"] == ["==WARNING== Backing up device memory in system memory."]


def test_utf8_bom_and_gzip_are_accepted(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + A100.read_bytes())
    assert len(raw_csv.read_raw_csv(path)) == 7
    zipped = tmp_path / "a100.csv.gz"
    zipped.write_bytes(gzip.compress(A100.read_bytes()))
    pd.testing.assert_frame_equal(raw_csv.read_raw_csv(zipped), raw_csv.read_raw_csv(A100))
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(gzip.compress(A100.read_bytes())[:200])
    with pytest.raises(NnperfError, match=r"broken\.csv\.gz: not a readable gzip file"):
        raw_csv.read_raw_csv(broken)


def test_non_numeric_optional_metric_is_kept_as_text():
    text = (
        '"ID","Kernel Name","CC","device__attribute_display_name","dram__bytes.sum"\n'
        '"","","","","byte"\n"0","k","9.0","NVIDIA H100 80GB HBM3","5"\n'
    )
    frame = raw_csv.parse_raw_csv(text, required=["dram__bytes.sum"])
    assert frame.iloc[0]["device__attribute_display_name"] == "NVIDIA H100 80GB HBM3"
    assert frame.iloc[0]["dram__bytes.sum"] == 5


# ------------------------------------------------------------------ refused, never guessed
def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _error(text: str, required=()) -> str:
    with pytest.raises(NnperfError) as info:
        raw_csv.parse_raw_csv(text, "bad.csv", required=required)
    message = str(info.value)
    assert "\n" not in message
    return message


REMAKE = (
    "make one with `nnperf ncu-command export --report bad.ncu-rep --csv bad.csv` "
    "(or `ncu --import bad.ncu-rep --csv --page raw > bad.csv`)"
)


def test_na_time_is_refused_naming_file_line_kernel_and_metric():
    lines = _set_cell(_head(), 4, "gpu__time_duration.sum", "n/a")
    message = _error("\n".join(lines), required=HOPPER)
    assert message.startswith(
        "bad.csv:5: kernel 2 (void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda"
    )
    assert "gpu__time_duration.sum is 'n/a', which must be positive" in message
    assert "every point's time" in message and "nnperf ncu-command profile" in message


def test_na_flop_counter_is_refused_not_counted_as_zero():
    lines = _set_cell(_head(), 2, "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "n/a")
    message = _error("\n".join(lines), required=HOPPER)
    assert message.startswith(
        "bad.csv:3: kernel 0 (nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT)"
    )
    assert "sm__ops_path_tensor_src_bf16_dst_fp32.sum is 'n/a'" in message
    assert "the FLOPs of the roofline points" in message


def test_na_counter_is_refused_by_the_kernels_table_too():
    """A frame parsed without `required` (nnperf ncu-kernels on an export with no meta) is
    checked where the numbers are used."""
    lines = _set_cell(_head(), 3, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "n/a")
    raw = raw_csv.parse_raw_csv("\n".join(lines), "bad.csv")
    with pytest.raises(NnperfError, match=r"^bad\.csv:4: kernel 1 .*ffma_pred_on\.sum is 'n/a'"):
        kernels.kernels_table(raw, _real().config)


def test_negative_duration_is_refused():
    lines = _set_cell(_head(), 5, "gpu__time_duration.sum", "-3.2")
    message = _error("\n".join(lines), required=HOPPER)
    assert message.startswith("bad.csv:6: kernel 3 (")
    assert "gpu__time_duration.sum is -3.2e-06 second, which must be positive" in message


def test_negative_counter_is_refused():
    lines = _set_cell(_head(), 5, "dram__bytes.sum", "-1.5")
    assert "dram__bytes.sum is -1.5e+06 byte, which must be a number >= 0" in _error(
        "\n".join(lines), required=HOPPER
    )


def test_duplicated_kernel_id_is_refused():
    lines = _head()
    message = _error("\n".join(lines + [lines[4]]), required=HOPPER)
    assert message == (
        "bad.csv:13: kernel ID 2 appears twice (first on line 5): an export lists each profiled "
        f"kernel once; were two exports joined? {REMAKE}"
    )


def test_export_without_units_row_is_refused():
    lines = _head()
    message = _error("\n".join([lines[0], *lines[2:]]))
    assert message == (
        "bad.csv:2: no units row under the header (this line is kernel '0'): without it the "
        "scale of every value is unknown (ncu prints Mbyte, us, Ghz, ... per column); " + REMAKE
    )


def test_no_kernels_profiled_says_what_ncu_said():
    text = "==PROF== Connected to process 1 (python)\n==WARNING== No kernels were profiled.\n"
    message = _error(text)
    assert message.startswith(
        "bad.csv:3: ncu profiled no kernels (it said: ==WARNING== No kernels were profiled.): "
        "no kernel ran inside the NVTX ranges 'nnperf_step' / 'nnperf_calibration_gemm'"
    )


def test_ncu_errors_and_warnings_are_quoted_verbatim():
    error = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access counters."
    assert _error(f"{error}\n") == f"bad.csv:1: ncu reported an error: {error}"
    assert _error("==WARNING== Found outstanding GPU clock reset.\nhello\n") == (
        'bad.csv:3: no header row starting with "ID" and naming "Kernel Name"; ncu said: '
        f"==WARNING== Found outstanding GPU clock reset.; {REMAKE}"
    )


def test_details_page_is_named_with_the_command_that_makes_the_raw_page():
    # The default `ncu --csv` page: one row per kernel and metric, values with separators.
    text = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n'
        '"0","5266","python3.12","127.0.0.1","nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",'
        '"1","7","(384, 1, 1)","(2, 66, 1)","0","9.0","Command line profiler metrics",'
        '"gpu__time_duration.sum","us","210.69"\n'
        '"0","5266","python3.12","127.0.0.1","nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",'
        '"1","7","(384, 1, 1)","(2, 66, 1)","0","9.0","Command line profiler metrics",'
        '"dram__bytes.sum","Mbyte","178.80"\n'
    )
    message = _error(text, required=HOPPER)
    assert message == (
        "bad.csv:1: this is the details page of an Nsight Compute export (one row per kernel "
        "and metric, 'Metric Name'/'Metric Value' columns: `ncu --csv` without `--page raw`); "
        "nnperf reads the raw page (one row per kernel, one column per metric, a units row): "
        + REMAKE
    )


def test_details_page_of_2020_is_named_too():
    text = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context",'
        '"Stream","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","28439","cfd_000","127.0.0.1","cuda_compute_step_factor(int,float*,float*,float*)",'
        '"2020-May-29 12:02:46","1","7","GPU Speed Of Light","Memory Frequency","cycle/second",'
        '"768683274.02"\n'
    )
    assert "this is the details page of an Nsight Compute export" in _error(text)


def test_short_row_names_file_and_line():
    lines = _lines(A100)
    lines[4] = lines[4].rsplit(",", 1)[0]
    assert re.match(
        r"^bad\.csv:5: row has \d+ fields but the header has \d+$", _error("\n".join(lines))
    )


def test_bad_value_in_required_metric_names_file_line_and_column():
    lines = _lines(A100)
    lines[3] = lines[3].replace('"88.10"', '"88,1"')
    message = _error("\n".join(lines), required=["dram__bytes.sum"])
    assert message == "bad.csv:4: column dram__bytes.sum: '88,1' is not a number or n/a"


def test_unknown_unit_of_required_metric_is_an_error():
    lines = _lines(A100)
    lines[1] = lines[1].replace('"Mbyte"', '"Mfoo"', 1)
    message = _error("\n".join(lines), required=["dram__bytes.sum"])
    assert message.startswith("bad.csv:2: column dram__bytes.sum: unit 'Mfoo'")


def test_missing_required_metric_is_an_error():
    message = _error(A100.read_text(), required=["sm__ops_path_tensor_src_fp16.sum"])
    assert (
        message
        == "bad.csv:1: required metrics missing from the export: sm__ops_path_tensor_src_fp16.sum"
    )


def test_no_header_duplicate_header_bad_id_and_unclosed_quote():
    assert _error("hello\nworld\n").startswith('bad.csv:3: no header row starting with "ID"')
    assert "duplicate columns in header: x__y.sum" in _error(
        '"ID","Kernel Name","x__y.sum","x__y.sum"\n"","","",""\n"0","k","1","2"\n'
    )
    assert (
        _error('"ID","Kernel Name"\n"",""\n"zero","k"\n')
        == "bad.csv:3: ID 'zero' is not an integer"
    )
    assert _error('"ID","Kernel Name"\n"0","k\n').startswith("bad.csv:2: not valid CSV")


def test_missing_file_and_binary_file(tmp_path):
    with pytest.raises(NnperfError, match=r"nope\.csv: file not found"):
        raw_csv.read_raw_csv(tmp_path / "nope.csv")
    path = tmp_path / "binary.csv"
    path.write_bytes(b'"ID","Kernel Name"\n\xff\xfe\x00junk')
    with pytest.raises(NnperfError, match=r"binary\.csv:2: not UTF-8 text"):
        raw_csv.read_raw_csv(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text_never_escapes_as_another_exception(text):
    try:
        raw_csv.parse_raw_csv(text, "fuzz.csv", required=["dram__bytes.sum"])
    except NnperfError as exc:
        assert re.match(r"^fuzz\.csv:\d+: ", str(exc))
        assert "\n" not in str(exc).strip()


JUNK = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            '"',
            '""',
            ",",
            '","',
            "n/a",
            "-1",
            "1,2,3",
            "\x00",
            "==PROF== x",
            "==WARNING== No kernels were profiled.",
            '"unclosed',
            '"Metric Name","Metric Value"',
        ]
    ),
)
REAL_HEAD = _head(8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_corrupted_real_rows_are_parsed_exactly_or_refused(data):
    """Any corruption of a real export either parses to the very numbers of the rows it left
    intact, with every required value present and non-negative, or is one NnperfError line."""
    lines = list(REAL_HEAD)
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    mode = data.draw(
        st.sampled_from(["replace", "insert", "append", "truncate", "cell", "drop"]), label="mode"
    )
    junk = data.draw(JUNK, label="junk")
    if mode == "replace":
        lines[index] = junk
    elif mode == "insert":
        lines.insert(index, junk)
    elif mode == "append":
        lines[index] = lines[index] + junk
    elif mode == "truncate":
        lines[index] = lines[index][: data.draw(st.integers(0, len(lines[index])))]
    elif mode == "drop":
        del lines[index]
    else:
        column = data.draw(st.sampled_from(HOPPER), label="column")
        lines = _set_cell(lines, max(index, 2), column, junk)
    try:
        frame = raw_csv.parse_raw_csv("\n".join(lines), "fuzz.csv", required=HOPPER)
    except NnperfError as exc:
        assert re.match(r"^fuzz\.csv:\d+: ", str(exc))
        assert "\n" not in str(exc)
    else:
        values = frame[list(HOPPER)].apply(pd.to_numeric, errors="raise")
        assert values.notna().all().all() and (values >= 0).all().all()
        assert (values[ncu.TIME_METRIC] > 0).all()


# ------------------------------------------------------------------ round trip
NAME_CHARS = st.characters(
    blacklist_categories=("Cs", "Cc"), blacklist_characters="\n\r\x85\u2028\u2029"
)
BYTE_UNITS = ["byte", "Kbyte", "Mbyte", "Gbyte"]
TIME_UNITS = ["nsecond", "usecond", "msecond", "second", "ns", "us", "ms"]


@settings(max_examples=100, deadline=None)
@given(
    names=st.lists(
        st.text(NAME_CHARS, min_size=1, max_size=60).filter(lambda s: s.strip() == s),
        min_size=0,
        max_size=6,
    ),
    byte_unit=st.sampled_from(BYTE_UNITS),
    time_unit=st.sampled_from(TIME_UNITS),
    hundredths=st.lists(st.integers(1, 10**13), min_size=12, max_size=12),
    missing=st.integers(-1, 5),
)
def test_round_trip_of_generated_exports(names, byte_unit, time_unit, hundredths, missing):
    """Generated exports read back exactly; one with an `n/a` in a required metric is refused
    at that kernel's line."""
    units = {"dram__bytes.sum": byte_unit, "gpu__time_duration.sum": time_unit}
    kernels = []
    for i, name in enumerate(names):
        values = {
            "dram__bytes.sum": hundredths[2 * i] / 100,
            "gpu__time_duration.sum": hundredths[2 * i + 1] / 100,
        }
        if i == missing:
            values["dram__bytes.sum"] = None
        meta = {
            "ID": format_value(i),
            "Kernel Name": name,
            "CC": "9.0",
            START_END: start_end_cell([(1, ranges.STEP_RANGE), (2, "backward")]),
        }
        kernels.append({"meta": meta, "metrics": values})
    text = export_text(kernels, units, preamble=["==PROF== Connected to process 1 (python)"])
    if 0 <= missing < len(names):
        with pytest.raises(NnperfError) as info:
            raw_csv.parse_raw_csv(text, "gen.csv", required=list(units))
        # preamble, header and units rows come before kernel 0
        assert str(info.value).startswith(f"gen.csv:{4 + missing}: kernel {missing} (")
        assert "dram__bytes.sum is 'n/a'" in str(info.value)
        return
    frame = raw_csv.parse_raw_csv(text, "gen.csv", required=list(units))
    assert list(frame["kernel_name"]) == names
    byte_factor, _ = raw_csv.parse_unit(byte_unit)
    time_factor, _ = raw_csv.parse_unit(time_unit)
    for i in range(len(names)):
        assert frame.iloc[i]["dram__bytes.sum"] == pytest.approx(
            hundredths[2 * i] / 100 * byte_factor, rel=1e-12
        )
        assert frame.iloc[i]["gpu__time_duration.sum"] == pytest.approx(
            hundredths[2 * i + 1] / 100 * time_factor, rel=1e-12
        )
        assert frame.iloc[i]["id"] == i
        assert ranges.phase_of(frame.iloc[i]["nvtx_start_end"]) == "backward"


# ------------------------------------------------------------------ NVTX phases
@pytest.mark.parametrize(
    "cell, phase",
    [
        (start_end_cell([(1, "nnperf_step"), (2, "forward")]), "forward"),
        (start_end_cell([(1, "nnperf_step"), (3, "backward")]), "backward"),
        (
            '"4:<default domain>:optimizer:none:none:none:none:none:none"'
            ' "1:<default domain>:nnperf_step:none:none:none:none:none:none"',
            "optimizer",
        ),
        (start_end_cell([(1, "nnperf_step")]), "step"),
        (start_end_cell([(0, "nnperf_calibration_gemm")]), "calibration"),
        ("0:<default domain>:nnperf_step:none:none:none:none:none:none", "step"),
        ("", "none"),
        (start_end_cell([(1, "forwardish")]), "none"),
    ],
)
def test_phase_of(cell, phase):
    assert ranges.phase_of(cell) == phase


# ------------------------------------------------------------------ per-kernel formulas
def test_kernel_quantities_against_hand_computed_values():
    mset = ncu.metric_set("hopper")
    row = {name: 0.0 for name in mset.metrics()}
    row.update(
        {
            "gpu__time_duration.sum": 2e-3,
            "sm__sass_thread_inst_executed_op_dadd_pred_on.sum": 1,
            "sm__sass_thread_inst_executed_op_dmul_pred_on.sum": 2,
            "sm__sass_thread_inst_executed_op_dfma_pred_on.sum": 3,
            "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": 10,
            "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": 20,
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 30,
            "sm__sass_thread_inst_executed_op_hadd_pred_on.sum": 100,
            "sm__sass_thread_inst_executed_op_hmul_pred_on.sum": 200,
            "sm__sass_thread_inst_executed_op_hfma_pred_on.sum": 300,
            "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 5000,
            "sm__ops_path_tensor_src_fp16.sum": 7000,
            "sm__ops_path_tensor_src_tf32_dst_fp32.sum": math.nan,  # n/a counts as absent
            "dram__bytes.sum": 111,
            "lts__t_bytes.sum": 222,
            "l1tex__t_bytes.sum": 333,
            "sm__cycles_elapsed.avg.per_second": 1.5e9,
            "dram__cycles_elapsed.avg.per_second": 2.0e9,
            "lts__cycles_elapsed.avg.per_second": 1.6e9,
            "l1tex__cycles_elapsed.avg.per_second": 1.5e9,
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896,
            "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448,
            "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896,
            "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 540672,
            "dram__bytes.sum.peak_sustained": 1280,
            "lts__t_bytes.sum.peak_sustained": 5120,
            "l1tex__t_bytes.sum.peak_sustained": 16896,
        }
    )
    q = ncu.kernel_quantities(pd.DataFrame([row]), mset, precision="bf16").iloc[0]
    assert q["duration_s"] == 2e-3
    assert q["flops_fp64"] == 1 + 2 + 2 * 3
    assert q["flops_fp32"] == 10 + 20 + 2 * 30
    assert q["flops_fp16"] == 2 * 100 + 2 * 200 + 4 * 300  # packed half2: 2/2/4
    assert q["flops_tensor"] == 5000 + 7000
    assert q["flops_total"] == 9 + 90 + 1800 + 12000
    assert (q["bytes_dram"], q["bytes_l2"], q["bytes_l1"]) == (111, 222, 333)
    assert q["clock_hz"] == 1.5e9
    assert q["peak_flop_s_fp32"] == pytest.approx(16896 * 2 * 1.5e9)
    assert q["peak_flop_s_fp64"] == pytest.approx(8448 * 2 * 1.5e9)
    assert q["peak_flop_s_fp16"] == pytest.approx(16896 * 4 * 1.5e9)
    # Hopper exports the 2:4-sparse tensor peak: the dense roof is half of it.
    assert q["peak_flop_s_tensor"] == pytest.approx(540672 * 1.5e9 / 2)
    assert q["peak_bytes_s_dram"] == pytest.approx(1280 * 2.0e9)
    assert q["peak_bytes_s_l2"] == pytest.approx(5120 * 1.6e9)
    assert q["peak_bytes_s_l1"] == pytest.approx(16896 * 1.5e9)


def test_only_hopper_halves_its_exported_tensor_peak():
    assert ncu.metric_set("hopper").dense_divisor("bf16") == 2
    assert ncu.metric_set("hopper").dense_divisor("tf32") == 2
    assert ncu.metric_set("hopper").dense_divisor("fp64") == 1  # no sparse FP64 mode
    for arch in ("volta", "ampere", "ada"):
        assert ncu.metric_set(arch).dense_divisor("fp16") == 1
    assert "2:4-sparse" in ncu.metric_set("hopper").tensor_peak_basis


def test_fp32_precision_has_no_tensor_peak():
    mset = ncu.metric_set("ampere")
    frame = pd.DataFrame([{name: 1.0 for name in mset.metrics()}])
    assert math.isnan(
        ncu.kernel_quantities(frame, mset, precision="fp32").iloc[0]["peak_flop_s_tensor"]
    )
    assert ncu.kernel_quantities(frame, mset, precision="tf32").iloc[0]["peak_flop_s_tensor"] == 1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=9, max_size=9))
def test_cuda_core_flops_formula(counts):
    mset = ncu.metric_set("ampere")
    names = [n for dtype in ("fp64", "fp32", "fp16") for n in mset.cuda_core[dtype]]
    frame = pd.DataFrame([dict(zip(names, map(float, counts)))])
    d, f, h = counts[0:3], counts[3:6], counts[6:9]
    assert ncu.cuda_core_flops(frame, "fp64", mset).iloc[0] == d[0] + d[1] + 2 * d[2]
    assert ncu.cuda_core_flops(frame, "fp32", mset).iloc[0] == f[0] + f[1] + 2 * f[2]
    assert ncu.cuda_core_flops(frame, "fp16", mset).iloc[0] == 2 * h[0] + 2 * h[1] + 4 * h[2]
