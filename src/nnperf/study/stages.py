"""A study run stage by stage with each stage's wall time, its report kept as an example.

`make gpu-study` (`nnperf gpu-study`) runs config/gpu.yaml on a GPU machine, `make gpu-check`
(`nnperf gpu-study --check`) config/gpu-check.yaml in a lent machine's minutes. One
`snakemake` call would run the whole DAG in the order its scheduler picks, and the cost of
each stage (what `nnperf plan` estimates and config/gpu.yaml's header adds up) would be
invisible. Here each stage is one `snakemake --until <its rules>` call, timed with a
monotonic clock; a later stage finds the earlier ones' outputs done, and the last one
(`rule all`) builds the tables, figures and report. Then `snakemake --report`, and the
study's report, tables and measured ceilings are copied into an example folder
(reports/examples/...) with the stage times as a CSV and as a table in its README.md, next to
the machine, the commit and the date.

A failing stage stops the run with one line naming it; what earlier stages built stays in
results/ (Snakemake keeps finished outputs) and the example folder is not touched. Profiles
(`.ncu-rep`, traces) are never copied: they are large and belong to results/.

This module runs Snakemake as a subprocess (`run`) and reads clocks (`clock`) through
parameters, so a test drives the same orchestration on a tiny CPU study.
"""

from __future__ import annotations

import csv
import datetime
import io
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from nnperf.core import layout
from nnperf.core.files import check_table
from nnperf.core.errors import NnperfError
from nnperf.study.loading import REPO, Study

REPORT_HTML = "reports/report.html"


@dataclass(frozen=True)
class Stage:
    """One `snakemake` call: `until` its rules (empty: `rule all`), or the report."""

    name: str
    what: str
    until: tuple[str, ...] = ()
    report: bool = False

    def args(self) -> list[str]:
        if self.report:
            return ["--report", REPORT_HTML]
        return ["--until", *self.until] if self.until else []


# In DAG order (workflow/rules/*.smk). A stage whose rules have no job in the study (ncu
# without a CUDA device or ncu, training with convergence disabled) runs nothing.
STAGES = (
    Stage(
        "data_complexity_ceilings",
        "dataset, model complexity, measured ceilings",
        ("prepare_dataset", "complexity", "ceilings", "plot_ceilings"),
    ),
    Stage("timed_runs", "timed runs", ("timed_run",)),
    Stage("ncu_profiles", "Nsight Compute profiles", ("ncu_profile", "ncu_export")),
    Stage("operator_profiles", "torch.profiler operator profiles", ("operator_profile",)),
    Stage("training", "training to accuracy", ("train_to_accuracy",)),
    Stage("tables_figures_report", "tables, figures, summary report (rule all)"),
    Stage("snakemake_report", f"snakemake --report {REPORT_HTML}", report=True),
)

STAGE_TIMES_CSV = "stage_times.csv"


@dataclass(frozen=True)
class StageTime:
    stage: str
    what: str
    wall_time_s: float


def snakemake_argv(
    stage: Stage,
    configfiles: Sequence[str],
    config_entries: Sequence[str] = (),
    *,
    cores: str = "all",
    snakefile: str | Path = REPO / "Snakefile",
    workdir: str | Path = ".",
    python: str = sys.executable,
) -> list[str]:
    """The Snakemake command of one stage (`--config` last: it takes every word after it)."""
    argv = [python, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir)]
    if not stage.report:
        argv += ["--cores", str(cores)]
    argv += stage.args()
    if configfiles:
        # One flag for all: Snakemake keeps only the last of several --configfile flags.
        argv += ["--configfile", *(str(path) for path in configfiles)]
    if config_entries:
        argv += ["--config", *config_entries]
    return argv


def run_stages(
    configfiles: Sequence[str],
    config_entries: Sequence[str] = (),
    *,
    stages: Sequence[Stage] = STAGES,
    cores: str = "all",
    snakefile: str | Path = REPO / "Snakefile",
    workdir: str | Path = ".",
    run: Callable[[list[str]], int] | None = None,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = print,
    environ: dict[str, str] | None = None,
) -> list[StageTime]:
    """Run `stages` in order, timing each; NnperfError naming the first that fails.

    `run(argv)` returns the exit status (default: the command with this terminal, in
    `environ`, default this process's environment).
    """
    run = run or (lambda argv: subprocess.run(argv, check=False, env=environ).returncode)
    times: list[StageTime] = []
    for stage in stages:
        argv = snakemake_argv(
            stage, configfiles, config_entries, cores=cores, snakefile=snakefile, workdir=workdir
        )
        say(f"gpu-study: stage {stage.name} ({stage.what}): {shlex.join(argv)}")
        started = clock()
        returncode = run(argv)
        elapsed = clock() - started
        if returncode != 0:
            done = ", ".join(t.stage for t in times) or "none"
            raise NnperfError(
                f"stage {stage.name} ({stage.what}) failed after {elapsed:.0f} s (snakemake "
                f"exit status {returncode}); earlier stages' results are kept in results/ "
                f"(done: {done}); its failed jobs and their logs are listed above"
            )
        times.append(StageTime(stage.name, stage.what, elapsed))
        say(f"gpu-study: stage {stage.name} done in {elapsed:.1f} s")
    return times


# --- the example folder -----------------------------------------------------------------------

# The study's tables kept in an example (the GPU ones exist only where ncu/training ran).
EXAMPLE_TABLES = ("summary", "runs", "training", "kernels", "profiles", "roofline_points")
# What each kept file is, for the README (a device's ceilings: `<device>.json`).
FILE_NOTES = {
    "summary.html": "the generated summary (self-contained; open it in a browser)",
    "summary.csv": "one row per configuration: throughput with its CI, status",
    "runs.csv": "one row per worker process of every timed run",
    "training.csv": "the training runs: time to the target accuracy beside throughput",
    "kernels.csv": "per-kernel Nsight Compute metrics of the profiled steps",
    "profiles.csv": "each profiled configuration: clocks, calibration, the GPU's busy share",
    "roofline_points.csv": "every roofline point with its source (ncu or analytic)",
    STAGE_TIMES_CSV: "the wall time of each stage",
}


def example_sources(study: Study, workdir: str | Path = ".") -> dict[str, Path]:
    """Example file name -> the study's file: the summary, its tables, each device's
    measured ceilings. Only those that exist; never a profile."""
    root = Path(workdir)
    dataset = study.typed.dataset.key
    sources = {"summary.html": root / layout.path("summary_html", dataset=dataset)}
    for name in EXAMPLE_TABLES:
        sources[f"{name}.csv"] = root / layout.path("table", dataset=dataset, name=name)
    for device in study.devices:
        sources[f"{device}.json"] = root / layout.path("ceilings", device=device)
    return {name: path for name, path in sources.items() if path.is_file()}


def stage_times_csv(times: Sequence[StageTime]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["stage", "what", "wall_time_s"])
    for t in times:
        writer.writerow([t.stage, t.what, f"{t.wall_time_s:.1f}"])
    return out.getvalue()


def stage_times_markdown(times: Sequence[StageTime]) -> str:
    rows = ["| stage | what | wall time (s) | wall time (min) |", "|---|---|---:|---:|"]
    for t in times:
        rows.append(f"| {t.stage} | {t.what} | {t.wall_time_s:.1f} | {t.wall_time_s / 60:.1f} |")
    total = sum(t.wall_time_s for t in times)
    rows.append(f"| **total** | | **{total:.1f}** | **{total / 60:.1f}** |")
    return "\n".join(rows) + "\n"


# Environment-table columns (nnperf.core.environment's record) that say where the study ran.
MACHINE_COLUMNS = (
    ("device_name", "device"),
    ("driver", "driver"),
    ("cuda", "CUDA (torch build)"),
    ("cudnn", "cuDNN"),
    ("torch", "torch"),
    ("cpu_model", "CPU"),
    ("cpu_count_logical", "logical CPUs"),
    ("hostname", "host"),
)


def machine_lines(environment_csv: Path) -> list[str]:
    """`- device: NVIDIA H100 80GB HBM3 (cuda)`... from the study's environment table."""
    if not environment_csv.is_file():
        return ["- machine: unknown (no environment table)"]
    check_table(environment_csv)
    with open(environment_csv, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    lines = []
    for column, label in MACHINE_COLUMNS:
        values = list(dict.fromkeys(row.get(column) for row in rows if row.get(column)))
        if values:
            lines.append(f"- {label}: {', '.join(values)}")
    return lines


def commit_of(environment_csv: Path, checkout: Path) -> str:
    """The workflow commit the runs recorded (else the checkout's HEAD), `+dirty` if so."""
    if environment_csv.is_file():
        check_table(environment_csv)
        with open(environment_csv, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        commits = list(
            dict.fromkeys(row.get("git_commit") for row in rows if row.get("git_commit"))
        )
        if commits:
            dirty = any(row.get("git_dirty") == "True" for row in rows)
            return ", ".join(c[:7] for c in commits) + (" (with local changes)" if dirty else "")
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def _note(name: str) -> str:
    return FILE_NOTES.get(name) or f"the measured and datasheet ceilings of {name[:-5]}"


def readme(
    study: Study,
    times: Sequence[StageTime],
    files: Sequence[str],
    config_entries: Sequence[str],
    machine: Sequence[str],
    commit: str,
    date: datetime.date,
    check: bool = False,
) -> str:
    if check:
        command = "`nnperf gpu-study --check` (`make gpu-check`)"
    else:
        command = "`nnperf gpu-study` (`make gpu-study`)"
    configs = f"--configfile {' '.join(study.files)}" if study.files else ""
    overrides = f" --config {shlex.join(config_entries)}" if config_entries else ""
    total = sum(t.wall_time_s for t in times)
    return (
        f"# Example: {study.typed.study.name}\n\n"
        f"What {command} produced on {date.isoformat()} from "
        f"commit `{commit}`: `snakemake {configs}{overrides}`, one stage at a time, "
        f"{total / 60:.1f} minutes in all.\n\n"
        "## Machine\n\n" + "\n".join(machine) + "\n\n"
        "## Wall time per stage\n\n"
        "`preflight` is `nnperf doctor`'s checks, once; each later stage is one "
        "`snakemake --until <its rules>` call (`nnperf.study.stages.STAGES`), timed with a "
        f"monotonic clock; also in `{STAGE_TIMES_CSV}`.\n\n"
        + stage_times_markdown(times)
        + "\n## Files\n\n"
        + "\n".join(f"- `{name}`: {_note(name)}" for name in files)
        + "\n\nNsight Compute reports (`.ncu-rep`) and traces stay in results/ (too large); "
        f"Snakemake's own report is `{REPORT_HTML}` on the machine that ran the study.\n"
    )


def write_example(
    study: Study,
    times: Sequence[StageTime],
    dest: str | Path,
    config_entries: Sequence[str] = (),
    *,
    workdir: str | Path = ".",
    checkout: Path = REPO,
    today: datetime.date | None = None,
    check: bool = False,
) -> list[str]:
    """Replace `dest` with the study's example: its files, the stage times, a README (which
    names `make gpu-check` when `check`)."""
    dest = Path(dest)
    sources = example_sources(study, workdir)
    if "summary.html" not in sources:
        raise NnperfError(f"no summary report in {Path(workdir) / 'reports'}: nothing to keep")
    staging = dest.parent / f".{dest.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, source in sources.items():
        shutil.copyfile(source, staging / name)
    (staging / STAGE_TIMES_CSV).write_text(stage_times_csv(times), encoding="utf-8")
    environment = Path(workdir) / layout.path(
        "table", dataset=study.typed.dataset.key, name="environment"
    )
    names = [*sources, STAGE_TIMES_CSV]
    text = readme(
        study,
        times,
        names,
        config_entries,
        machine_lines(environment),
        commit_of(environment, checkout),
        today or datetime.date.today(),
        check,
    )
    (staging / "README.md").write_text(text, encoding="utf-8")
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
    return ["README.md", *names]
