"""Aggregation of real run documents: runs.csv, summary.csv, speedups, the overlap check."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from nnperf import aggregate
from nnperf.contract import TablesRequest
from nnperf.errors import NnperfError
from nnperf.files import write_json
from tiny_training import STUDY_OOM_BATCH, study_documents


def _pairs(documents):
    return [(f"doc{i}", document) for i, document in enumerate(documents)]


@pytest.fixture(scope="module")
def documents():
    return study_documents()


@pytest.fixture(scope="module")
def runs(documents):
    return aggregate.runs_table(_pairs(documents))


def _row(frame, **keys):
    chosen = frame
    for key, value in keys.items():
        chosen = chosen[chosen[key] == value]
    assert len(chosen) == 1, keys
    return chosen.iloc[0]


def test_runs_table_one_row_per_rep(runs, documents):
    assert len(runs) == len(documents) == 11
    for column in (
        *aggregate.REP_KEYS,
        "status",
        "throughput_img_s",
        "step_time_s_median",
        "data_wait_s",
        "h2d_s",
        "forward_s",
        "backward_s",
        "optimizer_s",
        "peak_memory_host_bytes",
        "started_at_unix",
        "ended_at_unix",
        "variant_channels_last",
        "device_name",
        "git_commit",
        "overlap",
    ):
        assert column in runs.columns, column
    assert list(runs.columns[:6]) == list(aggregate.REP_KEYS)
    assert set(runs["status"]) == {"ok", "oom"}
    assert not runs["overlap"].any()  # these ran one after another in this process
    row = _row(runs, precision="bf16", batch_size=8, variant="baseline", rep=1)
    source = next(
        d for d in documents if (d["precision"], d["batch_size"], d["rep"]) == ("bf16", 8, 1)
    )
    assert row["throughput_img_s"] == source["throughput_img_s"]
    assert row["forward_s"] == source["phase_time_s"]["forward"]


def test_summary_rows_statistics_and_speedups(runs):
    summary = aggregate.summary_table(runs, cv_threshold=0.05)
    assert len(summary) == 6
    for column in (
        "n_reps",
        "n_ok",
        "status",
        "throughput_img_s_median",
        "throughput_img_s_q1",
        "throughput_img_s_q3",
        "throughput_img_s_iqr",
        "throughput_img_s_ci95_low",
        "throughput_img_s_ci95_high",
        "throughput_img_s_cv",
        "high_variance",
        "step_time_s_median",
        "speedup_vs_fp32",
        "speedup_vs_baseline",
        "data_wait_s_median",
        "optimizer_s_median",
    ):
        assert column in summary.columns, column
    fp32 = _row(summary, precision="fp32", batch_size=8, variant="baseline")
    bf16 = _row(summary, precision="bf16", batch_size=8, variant="baseline")
    tuned = _row(summary, precision="fp32", batch_size=8, variant="tuned")
    reps = runs[(runs.precision == "fp32") & (runs.batch_size == 8) & (runs.variant == "baseline")]
    a, b = sorted(reps["throughput_img_s"])
    assert fp32["throughput_img_s_median"] == pytest.approx((a + b) / 2)
    assert fp32["throughput_img_s_ci95_low"] == a and fp32["throughput_img_s_ci95_high"] == b
    assert fp32["n_reps"] == 2 and fp32["n_ok"] == 2 and fp32["status"] == "ok"
    assert fp32["speedup_vs_fp32"] == pytest.approx(1.0)
    assert fp32["speedup_vs_baseline"] == pytest.approx(1.0)
    assert bf16["speedup_vs_fp32"] == pytest.approx(
        bf16["throughput_img_s_median"] / fp32["throughput_img_s_median"]
    )
    assert tuned["speedup_vs_baseline"] == pytest.approx(
        tuned["throughput_img_s_median"] / fp32["throughput_img_s_median"]
    )
    oom = _row(summary, batch_size=STUDY_OOM_BATCH)
    assert oom["status"] == "oom" and oom["n_ok"] == 0 and oom["n_reps"] == 1
    assert math.isnan(oom["throughput_img_s_median"])
    assert "allocate memory" in oom["error"] or "out of memory" in oom["error"]


def test_high_variance_flag_follows_the_threshold(runs):
    loose = aggregate.summary_table(runs, cv_threshold=1e6)
    strict = aggregate.summary_table(runs, cv_threshold=1e-12)
    assert not loose["high_variance"].any()
    assert strict.loc[strict["n_ok"] >= 2, "high_variance"].all()


def _overlapping(documents, shift_s=0.0, **changes):
    """Move rep 1 of the fp32/bs4 config onto rep 0's interval (plus shift)."""
    moved = [dict(d) for d in documents]
    first = next(d for d in moved if (d["precision"], d["batch_size"], d["rep"]) == ("fp32", 4, 0))
    second = next(d for d in moved if (d["precision"], d["batch_size"], d["rep"]) == ("fp32", 4, 1))
    duration = second["ended_at_unix"] - second["started_at_unix"]
    second["started_at_unix"] = first["started_at_unix"] + shift_s
    second["ended_at_unix"] = second["started_at_unix"] + duration
    second["environment"] = {**second["environment"], **changes}
    return moved


def test_overlap_is_found_and_flagged(documents):
    runs = aggregate.runs_table(_pairs(_overlapping(documents)))
    flagged = runs[runs["overlap"]]
    assert set(zip(flagged["batch_size"], flagged["rep"])) >= {(4, 0), (4, 1)}
    assert (flagged["overlapping_reps"] >= 1).all()
    with pytest.raises(
        NnperfError,
        match=r"^reps cpu/tiny/fp32/4/baseline/0 and "
        r"cpu/tiny/fp32/4/baseline/1 overlapped in time",
    ):
        aggregate.check_no_overlap(runs)
    summary = aggregate.summary_table(runs)
    assert bool(_row(summary, precision="fp32", batch_size=4, variant="baseline")["overlap"])


def test_runs_on_other_hosts_do_not_overlap(documents):
    runs = aggregate.runs_table(_pairs(_overlapping(documents, hostname="other-node")))
    assert not runs["overlap"].any()
    aggregate.check_no_overlap(runs)


def test_touching_intervals_do_not_overlap():
    frame = pd.DataFrame(
        {
            "device": ["cpu"] * 3,
            "model": ["m"] * 3,
            "precision": ["fp32"] * 3,
            "batch_size": [8] * 3,
            "variant": ["baseline"] * 3,
            "rep": [0, 1, 2],
            "hostname": ["h"] * 3,
            "gpu_uuid": [None] * 3,
            "started_at_unix": [0.0, 10.0, 15.0],
            "ended_at_unix": [10.0, 20.0, 16.0],
        }
    )
    # rep 0 ends as rep 1 starts (no overlap); rep 2 lies inside rep 1.
    assert aggregate.find_overlaps(frame) == [(1, 2)]
    cuda = frame.assign(device="cuda", gpu_uuid=["GPU-a", "GPU-b", "GPU-c"])
    assert aggregate.find_overlaps(cuda) == []  # different GPUs of one node run side by side


def test_duplicate_rep_is_refused(documents):
    with pytest.raises(NnperfError, match="hold the same configuration and rep"):
        aggregate.runs_table(_pairs([documents[0], documents[0]]))
    with pytest.raises(NnperfError, match="no run JSON files given"):
        aggregate.runs_table([])


def _write_study(folder: Path, documents) -> list[Path]:
    """Run JSONs under names that say nothing: the keys must come from the documents."""
    paths = []
    for i, document in enumerate(documents):
        path = folder / f"run{i:02d}.json"
        write_json(path, {k: v for k, v in document.items() if k != "schema_version"})
        paths.append(path)
    return paths


def test_write_tables(documents, tmp_path, capsys):
    paths = _write_study(tmp_path / "runs", documents)
    out_runs, out_summary = tmp_path / "tables" / "runs.csv", tmp_path / "tables" / "summary.csv"
    aggregate.write_tables(TablesRequest(cv_threshold=0.1), paths, out_runs, out_summary)
    assert (
        "11 reps, 6 configurations, 1 out of memory, 0 overlapping reps" in capsys.readouterr().out
    )
    runs = pd.read_csv(out_runs)
    summary = pd.read_csv(out_summary)
    assert len(runs) == 11 and len(summary) == 6
    assert sorted(runs["source"]) == sorted(map(str, paths))
    assert set(summary["status"]) == {"ok", "oom"}
    assert summary["speedup_vs_fp32"].notna().sum() == 5
    tuned = _row(runs, variant="tuned", rep=1)
    assert (tuned["precision"], tuned["batch_size"]) == ("fp32", 8)
    expected = aggregate.summary_table(aggregate.runs_table(_pairs(documents)), cv_threshold=0.1)
    assert summary["high_variance"].tolist() == expected["high_variance"].tolist()


def test_write_tables_warns_on_overlap(documents, tmp_path, capsys):
    paths = _write_study(tmp_path / "runs", _overlapping(documents, shift_s=0.01))
    runs, _ = aggregate.write_tables(TablesRequest(), paths, tmp_path / "r.csv", tmp_path / "s.csv")
    assert capsys.readouterr().err.startswith("warning: reps cpu/tiny/fp32/4/baseline/0")
    assert pd.read_csv(tmp_path / "r.csv")["overlap"].sum() == runs["overlap"].sum() >= 2


def test_write_tables_refuses_other_documents_and_bad_thresholds(tmp_path):
    path = tmp_path / "sidecar.json"
    write_json(path, {"kind": "profile_step"})
    with pytest.raises(NnperfError, match=r"sidecar\.json: kind 'profile_step' is not a timed run"):
        aggregate.write_tables(TablesRequest(), [path], tmp_path / "r.csv", tmp_path / "s.csv")
    with pytest.raises(NnperfError, match=r"^cv_threshold 0\.0 is not allowed; allowed: > 0"):
        aggregate.write_tables(
            TablesRequest(cv_threshold=0.0), [path], tmp_path / "r.csv", tmp_path / "s.csv"
        )
    assert not (tmp_path / "r.csv").exists()
