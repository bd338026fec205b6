"""The timing rules in a real Snakemake run of the tiny config: runs, tables, figures."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest

from nnperf.core.vocab import STEP_CSV_COLUMNS, WINDOW_CSV_COLUMNS
from nnperf.report.aggregate import check_no_overlap, find_overlaps

pytestmark = pytest.mark.workflow

MODEL = "resnet18_cifar"
FIGURES = [
    f"results/figures/{kind}/synthetic/cpu/{MODEL}.png"
    for kind in ("throughput", "breakdown", "speedup")
]
BATCH_SIZES = (4, 8)  # tests/configs/tiny.yaml: 2 precisions x 2 batch sizes x 2 variants
CONFIGS = list(itertools.product(("fp32", "bf16"), BATCH_SIZES, ("baseline", "tuned")))


@pytest.fixture
def study(tiny_study):
    return tiny_study


def test_every_configuration_has_its_json_windows_steps_and_log(study):
    for precision, batch, variant in CONFIGS:
        stem = f"synthetic/cpu/{MODEL}/{precision}/bs{batch}/{variant}"
        document = json.loads((study / f"results/runs/{stem}.json").read_text())
        assert (document["precision"], document["variant"], document["batch_size"]) == (
            precision,
            variant,
            batch,
        )
        # bf16 may be hopeless on a CPU without bf16 arithmetic: then it ends over budget.
        allowed = {"ok"} if precision == "fp32" else {"ok", "over_budget"}
        assert document["status"] in allowed, document["error"]
        assert document["timed_steps"] == 2 and document["warmup_steps"] == 1
        assert document["timing"]["max_processes"] == 2 and document["timing"]["target_ci"] == 0.03
        # The variant's toggles and the training section reached the run's request.
        tuned = variant == "tuned"
        assert document["variant_settings"]["channels_last"] is tuned
        assert document["variant_settings"]["data_path"] == (
            "device_resident" if tuned else "dataloader"
        )
        assert document["lr"] == 0.1 and document["momentum"] == 0.9
        assert document["environment"]["git_commit"] is not None
        windows = pd.read_csv(study / f"results/runs/{stem}_windows.csv")
        steps = pd.read_csv(study / f"results/runs/{stem}_steps.csv")
        assert tuple(windows.columns) == WINDOW_CSV_COLUMNS
        assert tuple(steps.columns) == STEP_CSV_COLUMNS
        log = (study / f"logs/runs/{stem}.log").read_text()
        assert f"{MODEL} cpu {precision} bs{batch} {variant}:" in log
        if document["status"] == "over_budget":
            assert document["single_step_time_s"] > 0 and windows.empty
            assert document["stop_reason"] == "over_budget" and document["stop_numbers"]
            continue
        # Two worker processes (one when the budget ends it first), one or two windows each,
        # two steps per window.
        assert document["n_processes"] == 2 or document["stop_reason"] == "budget"
        assert document["n_processes"] <= 2 and 1 <= len(windows) <= 4
        assert len(steps) == 2 * len(windows) == 2 * document["n_windows"]
        assert sorted(set(windows["process"])) == list(range(document["n_processes"]))
        assert document["fixed_cost_s"] > 0
        if document["n_windows"] >= 2:
            assert document["ci_half_width_rel"] > 0
        assert document["stop_reason"] in ("ci_target", "budget", "max_processes")


def test_tables_statuses_and_no_overlap(study):
    runs = pd.read_csv(study / "results/tables/synthetic/runs.csv")
    windows = pd.read_csv(study / "results/tables/synthetic/windows.csv")
    summary = pd.read_csv(study / "results/tables/synthetic/summary.csv")
    assert len(summary) == 8
    assert set(summary.loc[summary.precision == "fp32", "status"]) == {"ok"}
    assert set(summary["status"]) <= {"ok", "over_budget"}
    # timing.disturbed_windows: keep (tests/configs/tiny.yaml): flagged, never left out.
    assert (summary["discarded_windows"] == 0).all()
    measured = summary[summary.status == "ok"]
    assert ((measured["n_processes"] == 2) | (measured["stop_reason"] == "budget")).all()
    assert measured["throughput_img_s_mean"].gt(0).all()
    assert measured.loc[measured["n_windows"] >= 2, "ci_half_width_rel"].gt(0).all()
    assert len(windows) == measured["n_windows"].sum()
    assert not runs["overlap"].any()
    assert find_overlaps(runs) == []
    check_no_overlap(runs)  # bench_slot=1 serialised the timed jobs
    # A group's second round ran its measured members in one process (the warm server's
    # worker, nnperf.engine.sharing): each names the others, and they had one pid.
    second = runs[(runs["round"] == 1) & (runs["process_status"] == "ok")]
    for _, members in second.groupby(["batch_size"]):
        if len(members) > 1:
            assert members["shared_with"].notna().all() and members["pid"].nunique() == 1
    fp32 = summary[(summary.precision == "fp32") & (summary.variant == "baseline")].iloc[0]
    assert fp32["batch_size"] == 4
    # The ratios the report states are comparisons.csv's rows, each A's mean over B's.
    comparisons = pd.read_csv(study / "results/tables/synthetic/comparisons.csv")
    assert {"precision", "variant", "batch"} <= set(comparisons["kind"])
    throughput = comparisons[comparisons["quantity"] == "throughput_img_s"]
    assert (throughput["ratio"] > 0).all()
    assert set(throughput["verdict"]) <= {
        "faster",
        "slower",
        "tie",
        "unresolved",
        "out_of_reach",
        "no_ci",
    }


def test_figures_are_pngs(study):
    for figure in FIGURES:
        data = (study / figure).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, figure
        log = (study / figure.replace("results/", "logs/").replace(".png", ".log")).read_text()
        assert f"figure of cpu/{MODEL} -> {figure}" in log
