"""The timing rules in a real Snakemake run of the tiny config: runs, tables, figures."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest

from nnperf.aggregate import check_no_overlap, find_overlaps
from nnperf.vocab import STEP_CSV_COLUMNS

pytestmark = pytest.mark.workflow

MODEL = "resnet18_cifar"
FIGURES = [
    f"results/figures/{kind}/cpu/{MODEL}.png" for kind in ("throughput", "breakdown", "speedup")
]
BATCH_SIZES = (4, 8)  # tests/configs/tiny.yaml: 2 precisions x 2 batch sizes x 2 variants x 2 reps


@pytest.fixture
def study(tiny_study):
    return tiny_study


def test_every_rep_has_its_json_steps_and_log(study):
    for precision, batch, variant, rep in itertools.product(
        ("fp32", "bf16"), BATCH_SIZES, ("baseline", "tuned"), (0, 1)
    ):
        stem = f"cpu/{MODEL}/{precision}/bs{batch}/{variant}/rep{rep}"
        document = json.loads((study / f"results/runs/{stem}.json").read_text())
        assert document["status"] == "ok"
        assert (
            document["precision"],
            document["variant"],
            document["rep"],
            document["batch_size"],
        ) == (precision, variant, rep, batch)
        assert document["timed_steps"] == 2 and document["warmup_steps"] == 1
        # The variant's toggles and the training section reached the run's request.
        tuned = variant == "tuned"
        assert document["variant_settings"]["channels_last"] is tuned
        assert document["variant_settings"]["data_path"] == (
            "device_resident" if tuned else "dataloader"
        )
        assert document["lr"] == 0.1 and document["momentum"] == 0.9
        assert document["environment"]["git_commit"] is not None
        steps = pd.read_csv(study / f"results/runs/{stem}_steps.csv")
        assert tuple(steps.columns) == STEP_CSV_COLUMNS and len(steps) == 2
        log = (study / f"logs/runs/{stem}.log").read_text()
        assert f"{MODEL} cpu {precision} bs{batch} {variant} rep{rep}:" in log


def test_tables_statuses_and_no_overlap(study):
    runs = pd.read_csv(study / "results/tables/runs.csv")
    summary = pd.read_csv(study / "results/tables/summary.csv")
    assert len(runs) == 16 and set(runs["status"]) == {"ok"}
    assert not runs["overlap"].any()
    assert find_overlaps(runs) == []
    check_no_overlap(runs)  # bench_slot=1 serialised the timed jobs
    assert len(summary) == 8 and (summary["n_reps"] == 2).all()
    fp32 = summary[(summary.precision == "fp32") & (summary.variant == "baseline")].iloc[0]
    assert fp32["batch_size"] == 4
    assert fp32["speedup_vs_fp32"] == pytest.approx(1.0)
    assert fp32["speedup_vs_baseline"] == pytest.approx(1.0)
    assert summary["speedup_vs_fp32"].notna().all()
    assert summary["throughput_img_s_median"].gt(0).all()
    log = (study / "logs/tables/runs.log").read_text()
    assert "16 reps, 8 configurations, 0 out of memory, 0 overlapping reps" in log


def test_figures_are_pngs(study):
    for figure in FIGURES:
        data = (study / figure).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, figure
        log = (study / figure.replace("results/", "logs/").replace(".png", ".log")).read_text()
        assert f"figure of cpu/{MODEL} -> {figure}" in log
