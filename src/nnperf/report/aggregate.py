"""Run JSONs -> runs.csv (per process), windows.csv (per window), summary.csv (per configuration).

A run document holds the whole measurement of one configuration (its worker processes, its
timed windows, the engine's estimate). Nothing is re-estimated here: the documents are
flattened into tidy tables, plus what needs more than one document: whether two processes
shared a machine (`mark_overlaps`) and whether a noisy configuration slowed with its whole
interleaved group (`noise.shared_slowdown`). Keys come from the documents, never from paths;
`write_tables()` is the file edge (rule `aggregate_runs`).
"""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import pandas as pd

from nnperf.core import stats
from nnperf.core.contract import TablesRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import check_run_tables, read_json, write_csv
from nnperf.core.wording import missing, stop_numbers_of, unstable_columns
from nnperf.core.jobs import warn
from nnperf.core.vocab import CONFIG_KEYS, DISCARD_CAUSES, PHASES, RUN_KIND, RUN_STATUSES
from nnperf.core.vocab import STOP_NUMBERS, WINDOW_CSV_COLUMNS
from nnperf.report import comparisons, input_verdict, noise

Documents = Iterable[tuple[str | None, dict]]
# Per-process numbers copied from the document's `processes` entries (`loader_*`: the feeder
# alone, after the timed windows, nnperf.engine.loader).
PROCESS_COLUMNS = (
    *("seed", "pid", "throughput_img_s", "n_windows", "loader_rate_img_s", "n_loader_windows"),
    *("compile_time_s", "first_step_time_s", "warmup_time_s", "fixed_cost_s"),
    *("peak_memory_device_bytes", "peak_memory_device_warmup_bytes", "peak_memory_host_bytes"),
    *("started_at_unix", "ended_at_unix"),
)
ENVIRONMENT_COLUMNS = (
    *("device_name", "hostname", "torch", "cuda", "cudnn", "driver", "cpu_threads", "git_commit"),
)
# Scalars of the run document copied into summary.csv under the same name, in this order.
SUMMARY_TIMES = (
    *("single_step_time_s", "single_step_time_is_lower_bound", "compile_time_s"),
    *("compile_time_s_later", "first_step_time_s", "warmup_time_s", "fixed_cost_s"),
    *("process_fixed_cost_s", "images_timed", "timed_window_s", "elapsed_s", "duty_cycle"),
)


def process_rows(document: dict, source: str | None = None) -> list[dict]:
    """runs.csv's rows of one document. A document without processes (out of memory, a step
    too slow for the budget) gives one row for process 0 spanning the job, so the
    configuration is listed and its time still counts in the overlap check."""
    environment = document.get("environment") or {}
    # `group` is the interleaved job (empty before interleaving): processes of one group
    # with the same `round` ran next to each other.
    shared = {k: document.get(k) for k in ("dataset", "status", "error", "group")}
    tail = {f"variant_{k}": v for k, v in (document.get("variant_settings") or {}).items()}
    tail.update({name: environment.get(name) for name in ENVIRONMENT_COLUMNS})
    tail["gpu_uuid"] = (environment.get("gpu") or {}).get("uuid")
    tail["slurm_job_id"] = (environment.get("slurm") or {}).get("job_id")
    tail["source"] = source
    processes = document.get("processes") or [
        {"process": 0, **{k: document.get(k) for k in ("started_at_unix", "ended_at_unix")}}
    ]
    return [
        {
            **{key: document.get(key) for key in CONFIG_KEYS},
            **{k: process.get(k) for k in ("process", "round")},
            # The members it shared its process with (`nnperf.engine.sharing`), as codes.
            "shared_with": "|".join(process.get("shared_with") or []),
            **shared,
            "process_status": process.get("status"),
            **{k: process.get(k) for k in PROCESS_COLUMNS},
            **tail,
        }
        for process in processes
    ]


def _checked(documents: Documents) -> list[tuple[str | None, dict]]:
    documents = list(documents)
    if not documents:
        raise NnperfError("no run JSON files given; allowed: one or more")
    seen: dict[tuple, str | None] = {}
    for source, document in documents:
        keys = tuple(document.get(key) for key in CONFIG_KEYS)
        if keys in seen:
            raise NnperfError(
                f"run files {seen[keys]} and {source} hold the same configuration "
                f"{'/'.join(map(str, keys))}; allowed: one file per (device, model, "
                "precision, batch_size, variant)"
            )
        seen[keys] = source
    return documents


def runs_table(documents: Documents) -> pd.DataFrame:
    """runs.csv: one row per worker process, sorted by the keys, with the overlap columns."""
    rows = [row for source, doc in _checked(documents) for row in process_rows(doc, source)]
    frame = pd.DataFrame(rows).sort_values([*CONFIG_KEYS, "process"], kind="stable")
    return mark_overlaps(frame.reset_index(drop=True))


def windows_table(documents: Documents) -> pd.DataFrame:
    """windows.csv: one row per timed window of every configuration (none for oom ones)."""
    rows = [
        {
            **{key: document.get(key) for key in CONFIG_KEYS},
            **{name: window.get(name) for name in WINDOW_CSV_COLUMNS},
            "dataset": document.get("dataset"),
        }
        for _, document in _checked(documents)
        for window in document.get("windows") or []
    ]
    frame = pd.DataFrame(rows, columns=[*CONFIG_KEYS, *WINDOW_CSV_COLUMNS, "dataset"])
    by = [*CONFIG_KEYS, "process", "window"]
    return frame.sort_values(by, kind="stable").reset_index(drop=True)


def find_overlaps(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Index pairs of processes on one machine (the same host for CPU runs, the same GPU for
    CUDA runs) whose [started, ended] intervals intersect. The members of one shared process
    (`nnperf.engine.sharing`: one pid at one time, their windows taking turns) are not."""
    # object dtype first: read back from CSV, an all-empty column is float NaN.
    gpu = frame["gpu_uuid"].astype(object).where(frame["device"] == "cuda").fillna("")
    machine = frame["hostname"].astype(object).fillna("").astype(str) + "|" + gpu.astype(str)
    pairs = []
    for _, group in frame.groupby(machine, sort=False):
        ordered = group.sort_values("started_at_unix")
        starts = ordered["started_at_unix"].to_numpy(dtype=float)
        ends = ordered["ended_at_unix"].to_numpy(dtype=float)
        # Sorted by start: a later process overlaps one that has not ended when it starts.
        first, later = np.nonzero(np.triu(starts[None, :] < ends[:, None], k=1))
        index = ordered.index.to_numpy()
        pids = ordered["pid"].to_numpy() if "pid" in ordered else np.full(len(ordered), None)
        pairs += [
            tuple(sorted((int(index[a]), int(index[b]))))
            for a, b in zip(first, later)
            if pd.isna(pids[a]) or pids[a] != pids[b]
        ]
    return sorted(pairs)


def mark_overlaps(frame: pd.DataFrame) -> pd.DataFrame:
    """With `overlapping_processes` (how many others ran beside it on its machine), `overlap`."""
    ends = [i for pair in find_overlaps(frame) for i in pair]
    counts = pd.Series(ends, dtype=object).value_counts().reindex(frame.index, fill_value=0)
    counts = counts.to_numpy(dtype=int)
    return frame.assign(overlapping_processes=counts, overlap=counts > 0)


def check_no_overlap(frame: pd.DataFrame) -> None:
    """Raise NnperfError naming the first two processes that ran at the same time."""
    pairs = find_overlaps(frame)
    if pairs:
        a, b = (
            "/".join(str(frame.at[i, key]) for key in CONFIG_KEYS)
            + f" process {frame.at[i, 'process']}"
            for i in pairs[0]
        )
        raise NnperfError(
            f"processes {a} and {b} overlapped in time on the same "
            f"machine ({len(pairs)} overlapping pair(s)); allowed: none "
            "(run timed jobs with the bench_slot resource limited to 1)"
        )


def summary_row(document: dict, cv_threshold: float = TablesRequest.cv_threshold) -> dict:
    """One row of summary.csv (overlap and shared slowdowns come later): the engine's estimate
    (`throughput_img_s_mean`, the mean of the per-process throughputs, is what its CI is
    for), the windows' spread with pyperf's min, max and Tukey outliers, and for a
    configuration that missed its CI target the likely cause of its noise (`noise`)."""
    doc = document.get
    stop, variance = stop_numbers_of(document), doc("variance") or {}
    q1, q3, cv = (doc(f"throughput_img_s_{k}") for k in ("q1", "q3", "cv"))
    # The windows the estimate used: a discarded one (disturbed, measured again) stays in
    # windows.csv and in the noise causes' evidence, not in the spread beside the estimate.
    windows = [w for w in doc("windows") or [] if not w.get("discarded")]
    clocks = np.array([w["sm_clock_mhz"] for w in windows if w.get("sm_clock_mhz") is not None])
    clocks = clocks.astype(float)[np.isfinite(clocks.astype(float))]

    def copied(*names: str) -> dict:
        return {name: doc(name) for name in names}

    return {
        **copied(*CONFIG_KEYS, "dataset", "status", "stop_reason"),
        **{f"stop_{name}": stop.get(name) for name in STOP_NUMBERS},
        # The group members a comparison with was given up (`nnperf.engine.interleave`), "|"-
        # joined codes: comparisons.csv is built from the runs, and says `out_of_reach` by this.
        "comparisons_out_of_reach": "|".join(doc("comparisons_out_of_reach") or []),
        **copied("over_budget_phase", "error", "n_processes", "n_windows"),
        # Disturbed windows left out of the estimate and measured again, by cause; 0 for a
        # document from before windows were discarded.
        "discarded_windows": doc("discarded_windows") or 0,
        **{f"discarded_{c}": (doc("discarded_causes") or {}).get(c, 0) for c in DISCARD_CAUSES},
        "throughput_img_s_mean": doc("throughput_img_s"),
        **copied("throughput_img_s_ci95_low", "throughput_img_s_ci95_high", "ci_half_width_rel"),
        "ci_target": (doc("timing") or {}).get("target_ci"),
        **copied("ci_target_met", "ci_method", "throughput_img_s_median"),
        "throughput_img_s_q1": q1,
        "throughput_img_s_q3": q3,
        "throughput_img_s_iqr": q3 - q1 if q1 is not None and q3 is not None else None,
        "throughput_img_s_cv": cv,
        "high_variance": stats.is_high_variance(np.nan if cv is None else cv, cv_threshold),
        **noise.spread_columns(windows),
        **{f"variance_{k}": variance.get(k) for k in ("between_processes", "within_process")},
        **{k: variance.get(k) for k in ("dominant_level", "optimal_windows_per_process")},
        "step_time_s_median": (doc("step_time_s") or {}).get("median"),
        **{f"{phase}_s_median": (doc("phase_time_s") or {}).get(phase) for phase in PHASES},
        **copied(*SUMMARY_TIMES),
        # The loader's own rate, the data-wait share and whether input limits the step.
        **input_verdict.summary_columns(document),
        "unstable": bool(doc("unstable")),
        **unstable_columns(document),
        **noise.noise_columns(document),
        # The timed windows' SM clock (NVML): a profile taken at another clock (ncu locks
        # base clocks) is scaled to it (nnperf.roofline.points.profiles_table).
        "sm_clock_hz_median": float(np.median(clocks)) * 1e6 if len(clocks) else None,
        # The warm-up's peak beside the timed steps' (autotuning and compilation hold memory).
        **{f"{m}_max": doc(m) for m in PROCESS_COLUMNS if m.startswith("peak_memory")},
        **copied("process_started_at_unix", "started_at_unix", "ended_at_unix"),
    }


def summary_table(
    documents: Documents, runs: pd.DataFrame, cv_threshold: float = TablesRequest.cv_threshold
) -> pd.DataFrame:
    """summary.csv, sorted by the keys. `runs` (`runs_table(documents)`) flags `overlap` and,
    where a noisy configuration's processes rose and fell with the rest of its interleaved
    group's round by round, puts `shared_slowdown` first among its noise causes."""
    summary = pd.DataFrame([summary_row(doc, cv_threshold) for _, doc in _checked(documents)])
    overlapped = runs.groupby(list(CONFIG_KEYS))["overlap"].any()
    keys = pd.MultiIndex.from_frame(summary[list(CONFIG_KEYS)])
    summary["overlap"] = overlapped.reindex(keys, fill_value=False).to_numpy(dtype=bool)
    summary = summary.sort_values([*CONFIG_KEYS, "dataset"], kind="stable").reset_index(drop=True)
    if "group" not in runs.columns or "noise_cause" not in summary.columns:
        return summary
    for index, row in summary[summary["noise_cause"].map(lambda c: not missing(c))].iterrows():
        own = comparisons.process_rates(runs, row)
        groups = set(own["group"].dropna())
        if len(groups) != 1:
            continue
        members = runs.loc[runs["group"] == groups.pop(), list(CONFIG_KEYS)].drop_duplicates()
        others = [
            comparisons.rates_by_round(comparisons.process_rates(runs, member)).to_dict()
            for member in members.to_dict("records")
            if any(str(member[k]) != str(row[k]) for k in CONFIG_KEYS)
        ]
        found = noise.shared_slowdown(comparisons.rates_by_round(own).to_dict(), others)
        columns = noise.with_shared_slowdown(row.to_dict(), found)
        summary.loc[index, list(columns)] = list(columns.values())
    return summary


def read_runs(paths: Iterable[str | os.PathLike]) -> list[tuple[str, dict]]:
    """(path, document) of each run JSON; anything but a timed run's document is an error.
    Every file is read first and the one error names every bad file (a study with two
    corrupt files is fixed in one round, not two)."""
    documents, problems = [], []
    for path in paths:
        try:
            document = read_json(path)
            check_run_tables(path)
            if document.get("kind") != RUN_KIND:
                raise NnperfError(
                    f"{path}: kind {document.get('kind')!r} is not a timed run; "
                    "allowed: run JSONs written by rule timed_run or `nnperf run`"
                )
            if document.get("status") not in RUN_STATUSES:
                raise NnperfError(
                    f"{path}: status {document.get('status')!r} is not allowed; "
                    f"allowed: {', '.join(RUN_STATUSES)}"
                )
            documents.append((str(path), document))
        except NnperfError as exc:
            problems.append(str(exc))
    if problems:
        head = "" if len(problems) == 1 else f"{len(problems)} run JSON files are unusable: "
        raise NnperfError(
            f"{head}{' | '.join(problems)} (delete it and run snakemake again to copy it again "
            "from its group's folder, results/runs/<dataset>/<device>/<model>/groups/"
            "bs<batch sizes>; delete that folder as well to measure its configurations again)"
        )
    return documents


def write_tables(
    request: TablesRequest,
    run_paths: Iterable[str | os.PathLike],
    out_runs: str | os.PathLike,
    out_windows: str | os.PathLike,
    out_summary: str | os.PathLike,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Processes that overlapped in time are flagged and named in a warning, not an error:
    the tables are still worth reading, and the report shows the flag."""
    # None would be refused (`_checked`): tables of zero runs would replace finished ones.
    documents = read_runs(run_paths)
    runs = runs_table(documents)
    windows = windows_table(documents)
    summary = summary_table(documents, runs, request.cv_threshold)
    # Written only once all three are built, each atomically: a failure above leaves the
    # previous tables as they were (rule aggregate_runs flags them `update`, so Snakemake
    # neither removes them before the job nor keeps a half-done set after it).
    write_csv(out_runs, runs)
    write_csv(out_windows, windows)
    write_csv(out_summary, summary)
    n_overlap = int(runs["overlap"].sum())
    counts = summary["status"].value_counts()
    print(
        f"{len(summary)} configurations, {len(runs)} processes, {len(windows)} windows, "
        f"{int(counts.get('oom', 0))} out of memory, {int(counts.get('over_budget', 0))} "
        f"over budget, {n_overlap} overlapping processes"
    )
    if n_overlap:
        try:
            check_no_overlap(runs)
        except NnperfError as exc:
            warn(str(exc))
    return runs, windows, summary
