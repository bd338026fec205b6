"""Damaged tables and run JSONs: one line naming the file, never a pandas KeyError or a
report that renders blanks.

The results folders are the report tests' hand-built ones (tests/report_tables.py); each
test damages one file the way a hand edit, a cut copy or an older nnperf would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from report_tables import gpu_folder, inside, laptop_folder

from nnperf.cli import main
from nnperf.core import files
from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.report import aggregate, folders, results
from nnperf.report.plots import runs as run_plots


@pytest.fixture
def laptop(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return laptop_folder(Path("laptop"))


def drop_columns(path: Path, *columns: str) -> None:
    files.write_csv(path, pd.read_csv(path).drop(columns=list(columns)))


def one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


def test_read_table_names_the_file_the_missing_columns_their_reader_and_the_rule(laptop):
    summary = inside(laptop, "table", name="summary")
    drop_columns(summary, "status", "throughput_img_s_mean")
    with pytest.raises(NnperfError) as info:
        results.read_table(summary, ["device", "status", "throughput_img_s_mean"], "a test")
    assert one_line(info) == (
        f"{summary}: lacks column(s) status, throughput_img_s_mean (needed by a test); "
        "write it again with rule aggregate_runs (snakemake --forcerun aggregate_runs)"
    )
    # Present columns pass; an empty file is a table only where the reader allows it.
    assert len(results.read_table(summary, ["device"])) == len(pd.read_csv(summary))
    empty = laptop / "empty.csv"
    empty.write_text("")
    assert results.read_table(empty, empty_ok=True).empty
    with pytest.raises(
        NnperfError, match=r"empty.csv: not a readable CSV table \(the file is empty\)"
    ):
        results.read_table(empty)


def test_the_throughput_figure_of_a_summary_without_a_column_is_one_line(laptop, tmp_path):
    summary = inside(laptop, "table", name="summary")
    drop_columns(summary, "throughput_img_s_ci95_high")
    request = FigureRequest(kind="throughput", device="cpu", model="resnet18_cifar")
    with pytest.raises(NnperfError) as info:
        run_plots.draw(request, summary, tmp_path / "t.png", inside(laptop, "table", name="runs"))
    assert one_line(info).startswith(
        f"{summary}: lacks column(s) throughput_img_s_ci95_high (needed by the throughput figure)"
    )
    assert not (tmp_path / "t.png").exists()


def render(*args: str) -> int:
    return main(
        ["render-report", "--out-html", "r/summary.html", "--out-md", "r/summary.md", *args]
    )


def test_render_report_with_a_broken_table_exits_with_one_line_not_blanks(laptop, capsys):
    assert render("--results", "laptop") == 0
    capsys.readouterr()
    summary = inside(laptop, "table", name="summary")
    drop_columns(summary, "throughput_img_s_mean")
    Path("r/summary.md").unlink()
    assert render("--results", "laptop") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"nnperf render-report: error: {summary}: lacks column(s) throughput_img_s_mean "
        "(needed by the report); write it again with rule aggregate_runs "
        "(snakemake --forcerun aggregate_runs)"
    )
    assert not Path("r/summary.md").exists()


def test_another_machines_broken_table_is_named_too(laptop, capsys):
    gpu = gpu_folder(Path("gpu"))
    runs = inside(gpu, "table", name="runs")
    drop_columns(runs, "process")
    assert render("--results", "laptop", "--extra-results", "gpu") == 2
    assert (
        f"error: {runs}: lacks column(s) process (needed by the report)" in capsys.readouterr().err
    )


def test_every_bad_run_json_is_named_in_one_line(laptop):
    paths = sorted((laptop / "runs").rglob("*.json"))
    assert len(paths) >= 3
    paths[0].write_text('{"cut')
    document = json.loads(paths[2].read_text())
    paths[2].write_text(json.dumps({**document, "kind": "training_run"}))
    with pytest.raises(NnperfError) as info:
        aggregate.read_runs(paths)
    message = one_line(info)
    assert message.startswith("2 run JSON files are unusable: ")
    assert f"{paths[0]}: not valid JSON" in message
    assert f"{paths[2]}: kind 'training_run' is not a timed run" in message
    assert str(paths[1]) not in message
    # The report reads them the same way.
    with pytest.raises(NnperfError, match="2 run JSON files are unusable"):
        results.load([results.discover(laptop)])


def test_aggregation_writes_nothing_when_a_run_json_is_bad(laptop, tmp_path):
    paths = sorted((laptop / "runs").rglob("*.json"))
    outputs = [tmp_path / f"{name}.csv" for name in ("runs", "windows", "summary")]
    for path in outputs:
        path.write_text("previous\n")
    paths[1].write_text("")
    with pytest.raises(NnperfError, match=f"{paths[1]}: not valid JSON"):
        aggregate.write_tables(aggregate.TablesRequest(), paths, *outputs)
    assert [path.read_text() for path in outputs] == ["previous\n"] * 3


def test_extra_results_folders_are_checked_and_their_files_listed(laptop):
    Path("notes").mkdir()
    with pytest.raises(NnperfError, match="entry 'notes' is not a results folder: no tables/"):
        folders.extra_results_inputs(["notes"], "synthetic")
    shutil.copytree("laptop", "box/results")
    with pytest.raises(NnperfError, match=r"entry 'box' is not .*\(did you mean 'box/results'\?\)"):
        folders.extra_results_inputs(["box"], "synthetic")
    with pytest.raises(NnperfError, match="has no results of dataset 'cifar10'"):
        folders.extra_results_inputs(["laptop"], "cifar10")
    listed = folders.extra_results_inputs(["laptop"], "synthetic")
    assert str(inside(laptop, "table", name="summary")) in listed
    assert all(Path(path).is_file() for path in listed)
    assert {str(p) for p in (laptop / "runs").rglob("*.json")} <= set(listed)
