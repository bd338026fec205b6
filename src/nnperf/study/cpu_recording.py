"""The 2-core CPU's recorded timings, taken from the committed example of the default study.

`nnperf plan` replays a study's timed groups through the real engine on a fake clock
(`nnperf.engine.rehearsal`), with step timings a machine recorded. For the H100 those are
nnperf's own run documents (`recordings/h100.json`); for the CPU they are the default study
that `make run` measured on a 2-vCPU VM, kept in reports/examples/cpu-default-study: its
`runs.csv` has one row per worker process (throughput, warm-up steps, fixed cost) and its
`summary.csv` one per configuration (the step-to-step spread inside a process). This module
turns those two tables into the recording's run-document form (`recording_from_tables`), and
`python -m nnperf.study.cpu_recording` rewrites `src/nnperf/engine/recordings/cpu.json` from
them; a test holds the two equal, so the recording cannot drift from the example.

Each configuration keeps every measured process: its steady step (batch / its throughput),
its two warm-up steps as recorded, and the configuration's median worker start (fork to first
step: the warm server's one-time start in the first process is not a worker's cost, the plan
prices it on its own).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from nnperf.core.files import check_table
from nnperf.core.vocab import PHASES

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "reports" / "examples" / "cpu-default-study"
RECORDING = REPO / "src" / "nnperf" / "engine" / "recordings" / "cpu.json"
# The variant settings runs.csv records (`variant_<name>` columns) that tell the rehearsal's
# kinds apart (`nnperf.engine.rehearsal.variant_kind`).
VARIANT_COLUMNS = ("channels_last", "cudnn_benchmark", "compile", "optimizer_impl", "data_path")


def _float(value: str) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _setting(text: str):
    """A variant setting as runs.csv writes it: True/False, or a word."""
    return {"True": True, "False": False}.get(text, text)


def recording_from_tables(runs: list[dict], summary: list[dict], warmup_steps: int) -> dict:
    """The recording (the form of `recordings/h100.json`) of an example's tables: `runs`
    and `summary` are the rows of its runs.csv and summary.csv; `warmup_steps` is the
    study's training.warmup_steps (the warm-up after the first step is split evenly)."""
    documents = []
    for row in summary:
        if row["status"] != "ok":
            continue
        key = tuple(row[k] for k in ("precision", "batch_size", "variant"))
        batch = int(row["batch_size"])
        processes, settings = [], {}
        for run in runs:
            if tuple(run[k] for k in ("precision", "batch_size", "variant")) != key:
                continue
            settings = {name: _setting(run[f"variant_{name}"]) for name in VARIANT_COLUMNS}
            rate = _float(run["throughput_img_s"])
            first = _float(run["first_step_time_s"])
            warmup = _float(run["warmup_time_s"])
            if not rate or first is None or warmup is None:
                continue
            rest = max(0.0, warmup - first) / max(1, warmup_steps - 1)
            processes.append(
                {
                    "process": int(run["process"]),
                    "throughput_img_s": rate,
                    "warmup_step_time_s": [first] + [rest] * (warmup_steps - 1),
                    "fixed_cost_s": _float(row["process_fixed_cost_s"]),
                }
            )
        mean_rate = statistics.mean(p["throughput_img_s"] for p in processes)
        # The spread of a window's throughput inside a process, as a step's: a window of n
        # steps averages n steps' noise.
        steps_per_window = int(row["images_timed"]) / int(row["n_windows"]) / batch
        window_cv = math.sqrt(float(row["variance_within_process"])) / mean_rate
        median = batch / mean_rate
        documents.append(
            {
                "dataset": row["dataset"],
                "device": row["device"],
                "model": row["model"],
                "precision": row["precision"],
                "batch_size": batch,
                "variant": row["variant"],
                "variant_settings": settings,
                "throughput_img_s": mean_rate,
                "step_time_s": {
                    "median": median,
                    "std": median * window_cv * math.sqrt(steps_per_window),
                },
                "phase_time_s": {phase: _float(row[f"{phase}_s_median"]) for phase in PHASES},
                "processes": processes,
                "file": f"{row['precision']}/bs{batch}/{row['variant']} "
                f"({len(processes)} processes)",
            }
        )
    return {
        "schema_version": 1,
        "kind": "recorded_timings",
        "machine": "2-vCPU AMD EPYC VM (KVM), no GPU",
        "recorded_by": "make run (the default study, interleaved groups)",
        "source": "reports/examples/cpu-default-study (runs.csv, summary.csv)",
        "process_start_s": statistics.median(
            p["fixed_cost_s"] for d in documents for p in d["processes"] if p["fixed_cost_s"]
        ),
        "runs": documents,
    }


def read_example(folder: Path = EXAMPLE) -> tuple[list[dict], list[dict]]:
    """The rows of an example's runs.csv and summary.csv."""
    for name in ("runs.csv", "summary.csv"):
        check_table(folder / name)
    with open(folder / "runs.csv", encoding="utf-8", newline="") as handle:
        runs = list(csv.DictReader(handle))
    with open(folder / "summary.csv", encoding="utf-8", newline="") as handle:
        summary = list(csv.DictReader(handle))
    return runs, summary


def example_recording(warmup_steps: int | None = None) -> dict:
    """The recording of the committed example, at the default study's warm-up steps."""
    if warmup_steps is None:
        from nnperf.study.loading import load_study

        warmup_steps = load_study([], detect=lambda: "cpu").typed.training.warmup_steps
    return recording_from_tables(*read_example(), warmup_steps=warmup_steps)


def main() -> None:
    RECORDING.write_text(json.dumps(example_recording(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RECORDING}")


if __name__ == "__main__":
    main()
