"""What nnperf writes is data: codes and numbers, never sentences (issue 30).

Words belong to the pages (the summary, the console), made from the records when they are
rendered; a table or JSON document that carries a sentence cannot be diffed between two
studies, filtered or re-worded. The scan reads every CSV and JSON the tiny study wrote under
results/ and names each string cell longer than 80 characters that contains a space.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.workflow

LONGEST_WORDING = 80
# Raw exports of tools that are not nnperf's own writing (an ncu page as ncu wrote it).
NOT_NNPERF_WRITING = ("ncu_raw",)


def sentences_in(value, where: str):
    """(where, text) for every string in a JSON value that reads as a sentence."""
    if isinstance(value, str):
        if len(value) > LONGEST_WORDING and " " in value:
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from sentences_in(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from sentences_in(item, f"{where}[{index}]")


def written_files(results: Path) -> list[Path]:
    found = sorted([*results.rglob("*.csv"), *results.rglob("*.json")])
    return [path for path in found if not any(part in str(path) for part in NOT_NNPERF_WRITING)]


def test_no_table_or_json_nnperf_writes_holds_a_sentence(tiny_study):
    results = tiny_study / "results"
    paths = written_files(results)
    assert any(path.name == "summary.csv" for path in paths)
    found = []
    for path in paths:
        name = str(path.relative_to(tiny_study))
        if path.suffix == ".json":
            found += list(sentences_in(json.loads(path.read_text(encoding="utf-8")), name))
            continue
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        for column in frame.columns:
            for row, cell in frame[column].items():
                found += [(f"{name}:{row}:{column}", text) for _, text in sentences_in(cell, "")]
    assert not found, "\n".join(f"{where}: {text[:120]}" for where, text in found[:20])


def test_the_scan_finds_a_sentence():
    row = {
        "noise_detail": "the process-to-process spread is 12%, and a slowdown shared by every configuration of the round explains most of it"
    }
    assert list(sentences_in(row, "summary.csv")) == [
        ("summary.csv.noise_detail", row["noise_detail"])
    ]
    assert not list(sentences_in({"noise_cause": "shared_slowdown", "r2": 0.81}, "x"))
