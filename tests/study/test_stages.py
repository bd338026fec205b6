"""`nnperf gpu-study` (`make gpu-study`): the stages in order with a fake Snakemake and clock,
and the example folder they leave (tests/study/test_gpu_check.py rehearses them for real)."""

from __future__ import annotations

import csv
import datetime
import io
import sys

import pandas as pd
import pytest
from conftest import REPO, TINY_CONFIG

from nnperf.core import layout
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_csv
from nnperf.study import loading as study
from nnperf.study import stages as study_run
from nnperf.study.stages import STAGES, StageTime

class FakeClock:
    """A monotonic clock that the fake Snakemake moves forward."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_stages_run_in_dag_order_each_timed():
    clock = FakeClock()
    calls = []
    durations = iter([30.0, 840.0, 420.0, 210.0, 120.0, 90.0, 12.5])

    def run(argv):
        calls.append(argv)
        clock.now += next(durations)
        return 0

    said = []
    times = study_run.run_stages(
        ["config/gpu.yaml"], ["dataset=synthetic"], run=run, clock=clock, say=said.append
    )
    assert [t.stage for t in times] == [
        "data_complexity_ceilings",
        "timed_runs",
        "ncu_profiles",
        "operator_profiles",
        "training",
        "tables_figures_report",
        "snakemake_report",
    ]
    assert [t.wall_time_s for t in times] == [30.0, 840.0, 420.0, 210.0, 120.0, 90.0, 12.5]
    snakefile = str(REPO / "Snakefile")
    head = [sys.executable, "-m", "snakemake", "--snakefile", snakefile, "--directory", "."]
    tail = ["--configfile", "config/gpu.yaml", "--config", "dataset=synthetic"]
    assert (
        calls[0]
        == head
        + [
            "--cores",
            "all",
            "--until",
            "prepare_dataset",
            "complexity",
            "ceilings",
            "plot_ceilings",
        ]
        + tail
    )
    assert calls[1] == head + ["--cores", "all", "--until", "timed_run"] + tail
    assert calls[2] == head + ["--cores", "all", "--until", "ncu_profile", "ncu_export"] + tail
    assert calls[5] == head + ["--cores", "all"] + tail  # rule all
    assert calls[6] == head + ["--report", "reports/report.html"] + tail
    assert said[1] == "gpu-study: stage data_complexity_ceilings done in 30.0 s"


def test_several_study_files_go_to_snakemake_in_one_flag():
    # Snakemake keeps only the last of several --configfile flags: the check's own file would
    # be dropped under a second one.
    argv = study_run.snakemake_argv(STAGES[1], ["config/gpu-check.yaml", "cpu.yaml"], ["x=1"])
    assert argv[-5:] == ["--configfile", "config/gpu-check.yaml", "cpu.yaml", "--config", "x=1"]
    assert argv.count("--configfile") == 1


def test_a_failing_stage_stops_with_one_line_naming_it():
    clock = FakeClock()
    statuses = iter([0, 0, 1])
    calls = []

    def run(argv):
        calls.append(argv)
        clock.now += 60.0
        return next(statuses)

    with pytest.raises(NnperfError) as error:
        study_run.run_stages(["config/gpu.yaml"], run=run, clock=clock, say=lambda text: None)
    assert len(calls) == 3  # nothing after the failing stage
    assert str(error.value) == (
        "stage ncu_profiles (Nsight Compute profiles) failed after 60 s (snakemake exit status "
        "1); earlier stages' results are kept in results/ (done: data_complexity_ceilings, "
        "timed_runs); its failed jobs and their logs are listed above"
    )


def test_stage_times_as_csv_and_markdown():
    times = [
        StageTime("timed_runs", "timed runs", 840.04),
        StageTime("ncu_profiles", "ncu", 419.96),
    ]
    rows = list(csv.DictReader(io.StringIO(study_run.stage_times_csv(times))))
    assert rows == [
        {"stage": "timed_runs", "what": "timed runs", "wall_time_s": "840.0"},
        {"stage": "ncu_profiles", "what": "ncu", "wall_time_s": "420.0"},
    ]
    assert study_run.stage_times_markdown(times).splitlines() == [
        "| stage | what | wall time (s) | wall time (min) |",
        "|---|---|---:|---:|",
        "| timed_runs | timed runs | 840.0 | 14.0 |",
        "| ncu_profiles | ncu | 420.0 | 7.0 |",
        "| **total** | | **1260.0** | **21.0** |",
    ]


def test_the_example_keeps_report_tables_and_ceilings_never_a_profile(tmp_path):
    loaded = study.load_study([TINY_CONFIG])
    root = tmp_path / "study"
    wanted = {
        layout.path("summary_html", dataset="synthetic"): "<html>summary</html>",
        layout.path("table", dataset="synthetic", name="summary"): "a,b\n1,2\n",
        layout.path("table", dataset="synthetic", name="kernels"): "k\n1\n",
        layout.path("ceilings", device="cpu"): "{}",
    }
    unwanted = {
        layout.path(
            "profile_report",
            dataset="synthetic",
            device="cuda",
            model="m",
            precision="bf16",
            batch_size=256,
            variant="tuned",
        ): "report",
        layout.path("table", dataset="synthetic", name="windows"): "w\n",
        "reports/report.html": "<html>snakemake</html>",
    }
    environment = layout.path("table", dataset="synthetic", name="environment")
    for path, text in {**wanted, **unwanted}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    # Written as nnperf writes tables (with the sidecar machine_lines checks it against).
    write_csv(
        root / environment,
        pd.DataFrame(
            [
                {
                    "device": "cuda",
                    "device_name": "NVIDIA H100 80GB HBM3",
                    "driver": "580.95.05",
                    "cuda": "13.0",
                    "torch": "2.14.1+cu130",
                    "cpu_model": "Intel Xeon",
                    "git_commit": "0123456789abcdef",
                    "git_dirty": False,
                }
            ]
        ),
    )
    dest = tmp_path / "examples" / "h100-gpu-study"
    dest.mkdir(parents=True)
    (dest / "stale.csv").write_text("from an earlier run")
    times = [StageTime(s.name, s.what, 60.0) for s in STAGES]
    files = study_run.write_example(
        loaded,
        times,
        dest,
        ["dataset=synthetic"],
        workdir=root,
        today=datetime.date(2026, 11, 25),
    )
    assert (
        sorted(p.name for p in dest.iterdir())
        == sorted(files)
        == sorted(
            [
                "README.md",
                "summary.html",
                "summary.csv",
                "kernels.csv",
                "cpu.json",
                "stage_times.csv",
            ]
        )
    )
    assert (dest / "summary.csv").read_text() == "a,b\n1,2\n"
    readme = (dest / "README.md").read_text()
    assert readme.startswith("# Example: tiny test study\n")
    assert "on 2026-11-25 from commit `0123456`" in readme
    assert f"--configfile {TINY_CONFIG} --config dataset=synthetic" in readme
    assert "- device: NVIDIA H100 80GB HBM3" in readme and "- driver: 580.95.05" in readme
    assert "| training | training to accuracy | 60.0 | 1.0 |" in readme
    assert "| **total** | | **420.0** | **7.0** |" in readme
    assert "- `kernels.csv`: per-kernel Nsight Compute metrics" in readme
    assert not list(tmp_path.glob("examples/.*"))  # no staging folder left behind


def test_no_summary_report_keeps_the_example_folder_as_it_was(tmp_path):
    dest = tmp_path / "example"
    dest.mkdir()
    (dest / "README.md").write_text("kept")
    with pytest.raises(NnperfError, match="no summary report in"):
        study_run.write_example(study.load_study([TINY_CONFIG]), [], dest, workdir=tmp_path)
    assert (dest / "README.md").read_text() == "kept"


# The orchestration rehearsed for real on a CPU: tests/study/test_gpu_check.py runs
# `nnperf gpu-study --check` on config/gpu-check.yaml brought down to this CPU.
