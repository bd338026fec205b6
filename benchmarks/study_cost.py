"""What does a study cost, and how much of it is measurement?

Runs the study with Snakemake into a scratch folder (never this checkout's results/), timing
its wall clock from outside, then reads every run document (`results/runs/**/*.json`, kind
"timed_run", one per configuration) and prints

* the study's wall time, the seconds spent inside timed windows and their share (duty cycle);
* per configuration: status, processes x windows, CI half-width against its target, the
  job's fixed cost (job process start -> first warm-up step), the median per-process fixed
  cost, compile time of the first process against the later ones, the job's duty cycle and
  whether it was flagged unstable;
* summary ratios: median per-process fixed cost, share of wall time in timed windows, and
  the ceilings stage's duration (`results/ceilings/*.json`), the other big measurement.

With `--results DIR` it only analyses a study that already ran (the wall time is then the
span of the documents: earliest job start to latest end).

    python benchmarks/study_cost.py --cores 2
    python benchmarks/study_cost.py --configfile config/gpu.yaml --cores all
    python benchmarks/study_cost.py --results results

Not a test: it runs the whole study. `analyse` is tested on a hand-made folder
(tests/study/test_study_cost.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
RUN_KIND = "timed_run"
KEYS = ["device", "model", "precision", "batch_size", "variant"]


def read_runs(results: Path) -> list[dict]:
    """Every timed-run document under `results`/runs, in path order."""
    documents = []
    for path in sorted((results / "runs").rglob("*.json")):
        document = json.loads(path.read_text())
        if document.get("kind") == RUN_KIND:
            documents.append(document)
    return documents


def _windows_per_process(doc: dict) -> str:
    processes, windows = doc.get("n_processes") or 0, doc.get("n_windows") or 0
    return f"{processes} x {windows / processes:.3g}" if processes else "0 x 0"


def configuration_row(doc: dict) -> dict:
    """One configuration's cost and quality, from its run document."""
    span = None
    if doc.get("ended_at_unix") is not None and doc.get("process_started_at_unix") is not None:
        span = doc["ended_at_unix"] - doc["process_started_at_unix"]
    return {
        **{key: doc.get(key) for key in KEYS},
        "status": doc.get("status"),
        "stop_reason": doc.get("stop_reason"),
        "processes_x_windows": _windows_per_process(doc),
        "ci_half_width_rel": doc.get("ci_half_width_rel"),
        "target_ci": (doc.get("timing") or {}).get("target_ci"),
        "ci_target_met": doc.get("ci_target_met"),
        "timed_window_s": doc.get("timed_window_s") or 0.0,
        "job_s": span,
        "fixed_cost_s": doc.get("fixed_cost_s"),
        "process_fixed_cost_s": doc.get("process_fixed_cost_s"),
        "compile_time_s": doc.get("compile_time_s"),
        "compile_time_s_later": doc.get("compile_time_s_later"),
        "duty_cycle": doc.get("duty_cycle"),
        "unstable": doc.get("unstable"),
        "unstable_reasons": "; ".join(doc.get("unstable_reasons") or []),
    }


def analyse(results: Path, wall_s: float | None = None) -> tuple[pd.DataFrame, dict]:
    """Per-configuration table and study summary of the run documents under `results`.

    `wall_s` is the study's wall time measured from outside; None takes the span of the
    documents (earliest job process start to latest end), which leaves out Snakemake's own
    start-up and the jobs that write no run document (ceilings, complexity, report).
    """
    documents = read_runs(results)
    if not documents:
        raise SystemExit(f"{results}/runs: no {RUN_KIND} documents found")
    table = pd.DataFrame([configuration_row(doc) for doc in documents])
    starts = [d["process_started_at_unix"] for d in documents if d.get("process_started_at_unix")]
    ends = [d["ended_at_unix"] for d in documents if d.get("ended_at_unix")]
    span_s = max(ends) - min(starts) if starts and ends else None
    wall = wall_s if wall_s is not None else span_s
    process_fixed = [
        p["fixed_cost_s"]
        for doc in documents
        for p in doc.get("processes") or []
        if p.get("fixed_cost_s") is not None
    ]
    ceilings = sorted((results / "ceilings").glob("*.json"))
    ceilings_s = (
        sum(json.loads(path.read_text()).get("duration_s") or 0.0 for path in ceilings)
        if ceilings
        else None
    )
    timed = float(table["timed_window_s"].sum())
    jobs = float(table["job_s"].dropna().sum())
    summary = {
        "configurations": len(table),
        "status_counts": table["status"].value_counts().to_dict(),
        "wall_s": wall,
        "wall_source": "measured" if wall_s is not None else "span of run documents",
        "timed_window_s": timed,
        "duty_cycle": timed / wall if wall else None,
        "timed_run_jobs_s": jobs,
        "timed_share_of_jobs": timed / jobs if jobs else None,
        "ceilings_s": ceilings_s,
        "median_process_fixed_cost_s": statistics.median(process_fixed) if process_fixed else None,
        "median_job_fixed_cost_s": table["fixed_cost_s"].median(),
        "ci_target_met": int(table["ci_target_met"].fillna(False).astype(bool).sum()),
    }
    return table, summary


def format_report(table: pd.DataFrame, summary: dict) -> str:
    """The printed result: the summary lines, then the table."""

    def seconds(value):
        return "n/a" if value is None or pd.isna(value) else f"{value:.1f} s"

    def share(value):
        return "n/a" if value is None else f"{value:.1%}"

    lines = [
        f"configurations: {summary['configurations']} {summary['status_counts']}, "
        f"CI target met by {summary['ci_target_met']}",
        f"study wall time: {seconds(summary['wall_s'])} ({summary['wall_source']})",
        f"timed windows: {seconds(summary['timed_window_s'])} = {share(summary['duty_cycle'])} of "
        "wall time (duty cycle)",
        f"timed_run jobs: {seconds(summary['timed_run_jobs_s'])}, of which "
        f"{share(summary['timed_share_of_jobs'])} in timed windows",
        f"ceilings stage: {seconds(summary['ceilings_s'])}",
        f"fixed cost: median per job {seconds(summary['median_job_fixed_cost_s'])}, "
        f"median per worker process {seconds(summary['median_process_fixed_cost_s'])}",
        "",
    ]
    with pd.option_context("display.width", 250, "display.max_columns", None):
        lines.append(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return "\n".join(lines)


def run_study(args) -> tuple[Path, float]:
    """Run the study in `args.directory` (a fresh temporary folder by default); return the
    folder and the wall seconds Snakemake took, start-up included."""
    workdir = Path(args.directory or tempfile.mkdtemp(prefix="nnperf-study-cost-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # The Snakefile reads config/config.yaml and config/peaks.yaml relative to the workdir.
    shutil.copytree(REPO / "config", workdir / "config", dirs_exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        str(args.cores),
    ]
    for path in args.configfile:
        command += ["--configfile", str(Path(path).resolve())]
    if args.config:
        command += ["--config", *args.config]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    log = workdir / "study_cost_snakemake.log"
    print(f"running: {' '.join(command)}\n  log: {log}", file=sys.stderr)
    started = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    if result.returncode != 0:
        print(f"snakemake exited with {result.returncode}; see {log}", file=sys.stderr)
    return workdir, wall


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configfile", action="append", default=[], help="study file(s) passed to Snakemake"
    )
    parser.add_argument(
        "--config", nargs="+", default=[], help="KEY=VALUE overrides passed to Snakemake"
    )
    parser.add_argument("--cores", default="all", help="Snakemake --cores (default: all)")
    parser.add_argument(
        "--directory", help="scratch folder to run the study in (default: a new temporary one)"
    )
    parser.add_argument(
        "--results",
        help="only analyse this results folder (or a folder holding results/); runs nothing",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.results:
        results = Path(args.results)
        if (results / "results" / "runs").is_dir():
            results = results / "results"
        table, summary = analyse(results)
    else:
        workdir, wall = run_study(args)
        table, summary = analyse(workdir / "results", wall_s=wall)
    print(format_report(table, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
