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
