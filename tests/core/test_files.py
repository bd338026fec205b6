"""Atomic writes: nothing half-written, versioned JSON, readable permissions."""

from __future__ import annotations

import math
import os
import stat

import pandas as pd
import pytest

from nnperf.core import files
from nnperf.core.errors import NnperfError


def test_json_round_trip_with_schema_version_and_no_nan(tmp_path):
    path = tmp_path / "a" / "doc.json"
    files.write_json(path, {"x": 1.5, "bad": math.nan, "nested": {"inf": math.inf}})
    text = path.read_text()
    assert text.index("schema_version") < text.index('"x"')
    assert files.read_json(path) == {"schema_version": files.SCHEMA_VERSION, "x": 1.5, "bad": None,
                                  "nested": {"inf": None}}


def test_failed_write_leaves_neither_target_nor_temp(tmp_path):
    path = tmp_path / "doc.json"
    with pytest.raises(TypeError):
        files.write_json(path, {"obj": object()})
    assert list(tmp_path.iterdir()) == []


def test_existing_file_survives_a_failed_write(tmp_path):
    path = tmp_path / "doc.json"
    files.write_json(path, {"x": 1})
    with pytest.raises(TypeError):
        files.write_json(path, {"obj": object()})
    assert files.read_json(path)["x"] == 1


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_csv(tmp_path / "t.csv", pd.DataFrame({"a": [1]}))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.csv").stat().st_mode) == 0o644


def test_unknown_schema_version_is_refused(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text('{"schema_version": 99}')
    with pytest.raises(NnperfError, match=r"doc.json: schema_version 99 is not supported"):
        files.read_json(path)


# --- tables carry their row count and hash (<table>.meta) ---------------------------

FRAME = pd.DataFrame(
    {"precision": ["fp32", "fp32", "bf16", "bf16"], "note": ["a,b", "two\nlines", "c", "d"]}
)


def table_in_results(tmp_path, frame=FRAME):
    path = tmp_path / "results" / "tables" / "synthetic" / "summary.csv"
    files.write_csv(path, frame)
    return path


def test_a_table_and_its_sidecar_round_trip(tmp_path):
    path = table_in_results(tmp_path)
    meta = files.load_json(files.meta_path(path))
    assert meta["rows"] == 4 and len(meta["sha256"]) == 64
    assert files.read_table(path)["note"].tolist() == FRAME["note"].tolist()
    # An empty table (a profile that recorded nothing) is checked like any other.
    empty = tmp_path / "results" / "tables" / "synthetic" / "empty.csv"
    files.write_csv(empty, pd.DataFrame())
    assert files.read_table(empty, empty_ok=True).empty


@pytest.mark.parametrize(
    ("cut", "found"),
    [
        (lambda text: "".join(text.splitlines(keepends=True)[:3]), "holds 2"),  # head -n 3
        (lambda text: text[:-4], "holds 4 with other content"),  # mid-row
        (lambda text: text.replace("fp32", "fp16", 1), "holds 4 with other content"),  # edited
    ],
)
def test_a_table_cut_short_or_edited_is_one_line_naming_it(tmp_path, cut, found):
    path = table_in_results(tmp_path)
    path.write_text(cut(path.read_text()))
    with pytest.raises(NnperfError) as info:
        files.read_table(path, hint="snakemake --forcerun aggregate_runs")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: not the table its writer wrote")
    assert "summary.csv.meta expects 4 rows" in message and found in message
    assert message.endswith("; snakemake --forcerun aggregate_runs")


def test_a_table_without_its_sidecar_is_refused_only_in_a_results_folder(tmp_path):
    path = table_in_results(tmp_path)
    files.meta_path(path).unlink()
    with pytest.raises(NnperfError, match=r"summary\.csv: no summary\.csv\.meta beside it"):
        files.read_table(path)
    # A committed example (reports/examples/...) or a table a person wrote: read as it is.
    example = tmp_path / "reports" / "examples" / "summary.csv"
    example.parent.mkdir(parents=True)
    FRAME.to_csv(example, index=False)
    assert len(files.read_table(example)) == 4


def test_a_copied_table_keeps_its_sidecar_and_a_damaged_source_is_not_copied(tmp_path):
    source = table_in_results(tmp_path)
    target = tmp_path / "results" / "runs" / "copy.csv"
    files.copy_table(source, target)
    assert target.read_bytes() == source.read_bytes()
    assert len(files.read_table(target)) == 4
    source.write_text(source.read_text()[:-4])
    with pytest.raises(NnperfError, match="not the table its writer wrote"):
        files.copy_table(source, tmp_path / "results" / "runs" / "again.csv")
    assert not (tmp_path / "results" / "runs" / "again.csv").exists()
    legacy = tmp_path / "legacy.csv"
    FRAME.to_csv(legacy, index=False)
    with pytest.raises(NnperfError, match=r"legacy\.csv: no legacy\.csv\.meta beside it"):
        files.copy_table(legacy, tmp_path / "results" / "runs" / "again.csv")


def test_the_tables_beside_a_run_json_are_checked_with_it(tmp_path):
    from nnperf.core import layout

    keys = {"dataset": "synthetic", "device": "cpu", "model": "m", "precision": "fp32",
            "batch_size": 4, "variant": "baseline"}
    run = tmp_path / layout.path("run", **keys)
    windows = tmp_path / layout.path("run_windows", **keys)
    files.write_json(run, {"kind": "timed_run"})
    files.write_csv(windows, FRAME)
    files.check_run_tables(run)
    windows.write_text(windows.read_text()[:-4])
    with pytest.raises(NnperfError, match=r"baseline_windows\.csv: not the table its writer"):
        files.check_run_tables(run)
    # A run JSON outside a results folder's layout (named by hand) has no tables to check.
    files.check_run_tables(tmp_path / "some.json")
