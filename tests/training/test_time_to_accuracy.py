"""Time to accuracy next to throughput: the table, the sentences, the accuracy figure.

The sentence tests use hand-written summary documents whose numbers are chosen so every
ratio is checked by hand; the figure is drawn from real per-epoch rows of toy runs.
"""

from __future__ import annotations

import pandas as pd
import pytest

from nnperf.core.errors import NnperfError
from nnperf.report import training_table
from nnperf.report.plots import accuracy
from nnperf.report.sections.accuracy import faster_but_later, training_display
from nnperf.report.wording.words import sentence
from nnperf.training import to_accuracy as convergence

from test_to_accuracy import request, restore_threads, synthetic, toy_cnn  # noqa: F401


def faster_but_later_sentences(table, throughput_column="throughput_img_s", runs=None):
    return [sentence(f) for f in faster_but_later(table, throughput_column, runs)]


def summary(precision, batch_size, throughput, time_to_target, best, status="ok", **extra):
    reached = time_to_target is not None
    return {
        "kind": "training_run",
        "dataset": "synthetic",
        "device": "cpu",
        "model": "resnet18_cifar",
        "precision": precision,
        "batch_size": batch_size,
        "variant": "baseline",
        "recipe": "default",
        "status": status,
        "stop_reason": "target" if reached else "epochs",
        "target_accuracy": 0.9,
        "reached": reached,
        "time_to_target_s": time_to_target,
        "epochs_to_target": 3 if reached else None,
        "best_test_top1": best,
        "best_epoch": 3 if reached else 5,
        "final_test_top1": best,
        "epochs_run": 3 if reached else 5,
        "train_time_s": time_to_target or 500.0,
        "throughput_img_s": throughput,
        "convergence": {"epochs": 5},
        **extra,
    }


@pytest.fixture
def table() -> pd.DataFrame:
    return training_table.training_table(
        [
            summary("bf16", 256, 1800.0, 150.0, 0.93),  # faster, later
            summary("fp32", 128, 1000.0, 100.0, 0.95),  # first at the target
            summary("bf16", 512, 2500.0, None, 0.84),  # fastest, never
            summary("fp32", 64, 600.0, 130.0, 0.94),  # slower and later: no finding
            summary("fp32", 1024, None, None, 0.1, status="oom"),
        ]
    )


def test_the_table_has_one_row_per_run_in_the_shared_order(table):
    assert list(table.columns) == list(training_table.TABLE_COLUMNS)
    assert list(zip(table["batch_size"], table["precision"])) == [
        (64, "fp32"),
        (128, "fp32"),
        (256, "bf16"),
        (512, "bf16"),
        (1024, "fp32"),
    ]
    assert table["max_epochs"].tolist() == [5] * 5


def test_faster_configurations_that_reach_the_target_later_or_never_are_named(table):
    records = faster_but_later(table)
    assert [(r.about["run"]["batch_size"], r.numbers["time_s"]) for r in records] == [
        (256, 150.0),
        (512, None),
    ]
    sentences = faster_but_later_sentences(table)
    assert sentences == [
        "resnet18_cifar bf16 at batch 256 (baseline) trains 1.80x as many images per second as "
        "resnet18_cifar fp32 at batch 128 (baseline) (1,800 img/s vs 1,000 img/s; one training run "
        "each: no interval) but reaches "
        "90% test top-1 later: after 150 s of training (epoch 3) against 100 s (epoch 3), "
        "recipe default on cpu.",
        "resnet18_cifar bf16 at batch 512 (baseline) trains 2.50x as many images per second as "
        "resnet18_cifar fp32 at batch 128 (baseline) (2,500 img/s vs 1,000 img/s; one training run "
        "each: no interval) but does not "
        "reach 90% test top-1 in 5 epochs (best 84%), while resnet18_cifar fp32 at batch 128 "
        "(baseline) reaches it in 100 s of training, recipe default on cpu.",
    ]


def test_no_finding_when_the_fastest_is_first_or_nobody_reached_the_target():
    first_is_fastest = training_table.training_table(
        [summary("fp32", 128, 1000.0, 100.0, 0.95), summary("bf16", 256, 900.0, 120.0, 0.95)]
    )
    assert faster_but_later_sentences(first_is_fastest) == []
    nobody = training_table.training_table(
        [summary("fp32", 128, 1000.0, None, 0.5), summary("bf16", 256, 2000.0, None, 0.6)]
    )
    assert faster_but_later_sentences(nobody) == []


def test_one_row_per_run_with_time_to_target_and_throughput(table):
    rows = training_display(table).to_dict("records")
    shown = ("Time to target", "Epoch at target", "Training (img/s)", "Best top-1", "Best epoch")
    assert (rows[1]["Batch"], rows[1]["Target"]) == (128, "90%")
    assert [rows[1][c] for c in shown] == ["100 s", "3", "1,000", "95%", "3"]
    assert [rows[3][c] for c in shown] == ["not reached", "—", "2,500", "84%", "5"]
    assert (rows[3]["Epochs"][:4], rows[3]["Training time"]) == ("5 of", "8.3 min")
    assert (rows[4]["Batch"], rows[4]["Status"]) == (1024, "oom")


def test_the_timed_runs_throughput_joins_by_configuration(table):
    timed = pd.DataFrame(
        {
            "device": ["cpu", "cpu"],
            "model": ["resnet18_cifar"] * 2,
            "precision": ["fp32", "bf16"],
            "batch_size": [128, 256],
            "variant": ["baseline"] * 2,
            "dataset": ["synthetic"] * 2,
            "status": ["ok", "ok"],
            "throughput_img_s_mean": [1100.0, 2000.0],
        }
    )
    joined = training_table.add_timed_throughput(table, timed)
    by_batch = dict(zip(joined["batch_size"], joined["timed_throughput_img_s"]))
    assert by_batch[128] == 1100.0 and by_batch[256] == 2000.0 and pd.isna(by_batch[64])
    sentences = faster_but_later_sentences(joined, throughput_column="timed_throughput_img_s")
    assert len(sentences) == 1 and "1.82x as many images per second" in sentences[0]


@pytest.fixture(scope="module")
def epochs() -> pd.DataFrame:
    """Per-epoch rows of two real toy runs: one reaches 20% test top-1, one is never asked."""
    data = synthetic(96, 40)
    rows = []
    for precision, batch_size in (("fp32", 16), ("bf16", 32)):
        run = request(precision, batch_size, epochs=3, target_accuracy=None)
        rows += convergence.train_to_accuracy(run, toy_cnn, data).epochs
    return convergence.epochs_frame(rows)


def test_the_accuracy_figure_has_both_panels_the_target_and_units(epochs):
    figure = accuracy.accuracy_figure(epochs, target=0.2)
    by_epoch, by_time = figure.axes
    assert by_epoch.get_xlabel() == "epoch" and by_time.get_xlabel().startswith("training time (s")
    assert by_epoch.get_ylabel() == "test top-1 accuracy (%)"
    assert [line.get_label() for line in by_time.get_legend().get_lines()] == [
        "fp32 bs16 baseline",
        "bf16 bs32 baseline",
    ]
    targets = [line for line in by_epoch.get_lines() if line.get_linestyle() == "--"]
    assert len(targets) == 1 and list(targets[0].get_ydata()) == [20.0, 20.0]
    # One curve per run, every epoch a point, epoch 0 included.
    curves = [line for line in by_epoch.get_lines() if line.get_linestyle() == "-"]
    assert [len(line.get_xdata()) for line in curves] == [4, 4]
    reached = epochs[epochs["test_top1"] >= 0.2].groupby(["precision", "batch_size"]).ngroups
    rings = by_epoch.collections[-1].get_offsets()
    assert len(rings) == reached


def test_draw_writes_a_png_from_the_epoch_csvs(epochs, tmp_path):
    paths = []
    for (precision, batch_size), rows in epochs.groupby(["precision", "batch_size"]):
        paths.append(tmp_path / f"{precision}_bs{batch_size}_epochs.csv")
        rows.to_csv(paths[-1], index=False)
    out = tmp_path / "figures" / "accuracy.png"
    accuracy.draw(paths, out, target=0.5)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(NnperfError, match="no per-epoch tables given"):
        accuracy.draw([], out)


def test_write_training_table_reads_the_runs_and_joins_the_timed_throughput(tmp_path):
    from nnperf.core.files import write_csv, write_json

    runs = []
    for i, document in enumerate(
        [summary("fp32", 128, 1000.0, 100.0, 0.95), summary("bf16", 256, 1800.0, 150.0, 0.93)]
    ):
        runs.append(tmp_path / f"run{i}.json")
        write_json(runs[-1], document)
    timed = tmp_path / "summary.csv"
    write_csv(
        timed,
        pd.DataFrame(
            [
                {
                    "device": "cpu",
                    "model": "resnet18_cifar",
                    "precision": "fp32",
                    "batch_size": 128,
                    "variant": "baseline",
                    "dataset": "synthetic",
                    "status": "ok",
                    "throughput_img_s_mean": 1100.0,
                }
            ]
        ),
    )
    out = tmp_path / "training.csv"
    written = training_table.write_training_table(runs, timed, out)
    on_disk = pd.read_csv(out)
    assert len(on_disk) == len(written) == 2
    assert on_disk.set_index("precision").loc["fp32", "timed_throughput_img_s"] == 1100.0
    assert pd.isna(on_disk.set_index("precision").loc["bf16", "timed_throughput_img_s"])
    other = tmp_path / "other.json"
    write_json(other, {"kind": "timed_run"})
    with pytest.raises(NnperfError, match=r"other\.json: kind 'timed_run' is not a training run"):
        training_table.write_training_table([other], timed, tmp_path / "x.csv")
    with pytest.raises(NnperfError, match="no training runs given"):
        training_table.write_training_table([], timed, tmp_path / "x.csv")


def test_runs_of_different_machines_are_not_compared(table):
    """The report's table holds every machine's runs: a faster machine is not 'faster but
    later' against a slower one."""
    two = pd.concat([table.assign(machine="a"), table.assign(machine="b")], ignore_index=True)
    sentences = faster_but_later_sentences(two)
    assert len(sentences) == 2 * len(faster_but_later_sentences(table))


def _timed_processes(rates_by_precision: dict) -> pd.DataFrame:
    rows = []
    for precision, batch_size, rates in rates_by_precision:
        for process, rate in enumerate(rates):
            rows.append(
                {
                    "device": "cpu",
                    "model": "resnet18_cifar",
                    "precision": precision,
                    "batch_size": batch_size,
                    "variant": "baseline",
                    "dataset": "synthetic",
                    "process": process,
                    "status": "ok",
                    "throughput_img_s": rate,
                    "round": None,
                    "group": None,
                }
            )
    return pd.DataFrame(rows)


def test_faster_is_said_only_where_the_timed_processes_separate_the_two(table):
    timed = pd.DataFrame(
        {
            "device": ["cpu", "cpu"],
            "model": ["resnet18_cifar"] * 2,
            "precision": ["fp32", "bf16"],
            "batch_size": [128, 256],
            "variant": ["baseline"] * 2,
            "dataset": ["synthetic"] * 2,
            "status": ["ok", "ok"],
            "throughput_img_s_mean": [1100.0, 2000.0],
        }
    )
    joined = training_table.add_timed_throughput(table, timed)
    column = "timed_throughput_img_s"
    apart = _timed_processes(
        [("fp32", 128, [1090.0, 1100.0, 1110.0]), ("bf16", 256, [1990.0, 2000.0, 2010.0])]
    )
    (sentence,) = faster_but_later_sentences(joined, column, apart)
    assert "1.82x as many images per second" in sentence and "95% CI of the ratio" in sentence
    tied = _timed_processes([("fp32", 128, [600.0, 1600.0]), ("bf16", 256, [900.0, 3100.0])])
    assert faster_but_later_sentences(joined, column, tied) == []
