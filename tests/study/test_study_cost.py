"""benchmarks/study_cost.py: the analysis of a hand-made results folder, numbers by hand."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def study_cost():
    return load_benchmark("study_cost")


def run_doc(variant, status, **fields):
    """A timed_run document with the fields the analysis reads (brief's format)."""
    base = {
        "schema_version": 1,
        "kind": "timed_run",
        "status": status,
        "stop_reason": None,
        "device": "cpu",
        "model": "resnet18_cifar",
        "precision": "fp32",
        "batch_size": 16,
        "variant": variant,
        "timing": {"target_ci": 0.03},
        "n_processes": 0,
        "n_windows": 0,
        "ci_half_width_rel": None,
        "ci_target_met": False,
        "timed_window_s": 0.0,
        "fixed_cost_s": None,
        "process_fixed_cost_s": None,
        "compile_time_s": None,
        "compile_time_s_later": None,
        "duty_cycle": None,
        "unstable": False,
        "unstable_reasons": [],
        "processes": [],
    }
    return {**base, **fields}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    folder = root / "runs" / "cpu" / "resnet18_cifar" / "fp32" / "bs16"
    folder.mkdir(parents=True)
    ok = run_doc(
        "baseline",
        "ok",
        stop_reason="ci_target",
        n_processes=2,
        n_windows=6,
        ci_half_width_rel=0.02,
        ci_target_met=True,
        timed_window_s=6.0,
        fixed_cost_s=2.5,
        process_fixed_cost_s=0.8,
        compile_time_s=20.0,
        compile_time_s_later=4.0,
        duty_cycle=0.5,
        unstable=True,
        unstable_reasons=["1 of 6 windows: other processes used 1.3 of 2 cores", "clock"],
        process_started_at_unix=1000.0,
        ended_at_unix=1012.0,
        processes=[{"fixed_cost_s": 0.5}, {"fixed_cost_s": 1.1}],
    )
    over = run_doc(
        "tuned",
        "over_budget",
        error="over budget: one step takes 13.2 s",
        process_started_at_unix=1020.0,
        ended_at_unix=1030.0,
        fixed_cost_s=3.0,
        processes=[{"fixed_cost_s": 0.9}],
    )
    (folder / "baseline.json").write_text(json.dumps(ok))
    (folder / "tuned.json").write_text(json.dumps(over))
    # Not a run document: skipped, as are the per-window and per-step CSVs.
    (folder / "baseline_windows.csv").write_text("process,window\n0,0\n")
    (root / "runs" / "other.json").write_text(json.dumps({"kind": "profile"}))
    (root / "ceilings").mkdir()
    (root / "ceilings" / "cpu.json").write_text(json.dumps({"duration_s": 42.0}))
    return root


def test_analysis_of_a_hand_made_study(study_cost, results):
    table, summary = study_cost.analyse(results)
    assert list(table["variant"]) == ["baseline", "tuned"]
    assert list(table["status"]) == ["ok", "over_budget"]
    assert list(table["processes_x_windows"]) == ["2 x 3", "0 x 0"]
    first = table.iloc[0]
    assert first["ci_half_width_rel"] == 0.02 and first["target_ci"] == 0.03
    assert first["job_s"] == 12.0 and first["compile_time_s_later"] == 4.0
    assert first["unstable_reasons"] == "1 of 6 windows: other processes used 1.3 of 2 cores; clock"
    # Wall time from the documents: 1000 -> 1030; 6 timed seconds of it.
    assert summary["wall_s"] == 30.0 and summary["wall_source"] == "span of run documents"
    assert summary["timed_window_s"] == 6.0
    assert summary["duty_cycle"] == pytest.approx(0.2)
    assert summary["timed_run_jobs_s"] == 22.0
    assert summary["timed_share_of_jobs"] == pytest.approx(6 / 22)
    assert summary["median_process_fixed_cost_s"] == 0.9  # of 0.5, 1.1, 0.9
    assert summary["median_job_fixed_cost_s"] == 2.75
    assert summary["ceilings_s"] == 42.0 and summary["ci_target_met"] == 1
    assert summary["status_counts"] == {"ok": 1, "over_budget": 1}


def test_measured_wall_time_wins_and_the_report_prints_it(study_cost, results):
    table, summary = study_cost.analyse(results, wall_s=60.0)
    assert summary["duty_cycle"] == pytest.approx(0.1) and summary["wall_source"] == "measured"
    text = study_cost.format_report(table, summary)
    assert "study wall time: 60.0 s (measured)" in text
    assert "timed windows: 6.0 s = 10.0% of wall time" in text
    assert "median per worker process 0.9 s" in text and "over_budget" in text


def test_results_option_accepts_the_workdir(study_cost, results, capsys):
    assert study_cost.main(["--results", str(results.parent)]) == 0
    assert "configurations: 2" in capsys.readouterr().out


def test_a_study_without_ceilings_says_so(study_cost, results):
    for path in (results / "ceilings").iterdir():
        path.unlink()
    table, summary = study_cost.analyse(results)
    assert summary["ceilings_s"] is None
    assert "ceilings stage: n/a" in study_cost.format_report(table, summary)


def test_empty_results_fail_with_one_line(study_cost, tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="no timed_run documents found"):
        study_cost.analyse(tmp_path)
