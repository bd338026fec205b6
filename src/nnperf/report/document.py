"""The written summary: findings laid out in sections, then rendered as HTML and Markdown.

`build_document` turns the labelled tables (`ReportInputs`) into a `Document`: key findings
first (what is fastest on each machine and what limits it), then one `Section` per topic —
environment, study matrix, throughput, speedups, time breakdown, roofline, ceilings, top
kernels, complexity, machines compared, measurement cost and quality, notes — each with its
findings, display tables, figures and the files its numbers came from. The numbers and
sentences come from `nnperf.report.findings`; this module chooses what a reader sees and in which
order.

Rendering fills the Jinja templates in `nnperf/report/templates/` and takes a function that turns a
figure path into an image source (a data URI for the self-contained HTML, a relative path for
Markdown). The two edges at the bottom read the results folders and write files:
`render_files` (rule `render_report`, `nnperf render-report`) and `compare_machines` (rule
`compare_machines`, `nnperf compare-machines`).
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from nnperf.core import files
from nnperf.core.contract import ReportRequest
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import PHASES, REFERENCE_PRECISION, REFERENCE_VARIANT, precision_rank
from nnperf.core.wording import count_of, missing
from nnperf.report import results
from nnperf.report import machines as machines_mod
from nnperf.report.findings import (
    CI_HIGH,
    CI_LOW,
    DEFAULT_TOP_KERNELS,
    GROUP_KEYS,
    LEVEL_LABELS,
    MEAN,
    PHASE_LABELS,
    REFERENCE,
    ROOF_TOLERANCE,
    STOP_LABELS,
    at_largest_batch,
    batch_scaling,
    breakdown_findings,
    busy_sentence,
    ceilings_table,
    ci_missed_sentences,
    ci_target_counts,
    ci_target_sentence,
    complexity_table,
    cost_by_folder,
    cost_sentences,
    dominant_level_sentences,
    estimate_text,
    fixed_cost_sentences,
    kernel_kind_shares,
    limiter_sentence,
    measurement_table,
    ok_configs,
    oom_notes,
    over_budget_notes,
    phase_shares,
    preferred_verdict,
    profile_check_notes,
    roof_violation_notes,
    roofline_readings,
    roofline_verdicts,
    scaling_sentence,
    sort_configs,
    sort_notes,
    speedup_sentence,
    speedups,
    study_cost,
    target_met,
    top_kernels,
    unstable_notes,
    variance_notes,
    verdict_sentence,
)
from nnperf.report.format import (
    ci_interval,
    config_text,
    fmt,
    fmt_duration,
    fmt_ghz,
    fmt_pct,
    fmt_si,
    fmt_times,
    fmt_utc,
    truthy,
)
from nnperf.report.operator_findings import bound_sentence, profile_findings
from nnperf.report.time_to_accuracy import faster_but_later_sentences, time_to_accuracy_sentences
from nnperf.roofline.points import CALIBRATION_ROOF_RANGE
from nnperf.torchprof import analysis as operators_mod
from nnperf.torchprof.memory import CATEGORY_LABELS


# ------------------------------------------------------------------------------------------
# Document model.
# ------------------------------------------------------------------------------------------
@dataclass
class Table:
    caption: str
    frame: pd.DataFrame


@dataclass
class Figure:
    path: str
    caption: str


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    findings: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    # Large families of figures (a roofline per configuration): folded away in the HTML,
    # listed as links in Markdown, so the section stays readable.
    folded: list["FigureGroup"] = field(default_factory=list)


@dataclass
class FigureGroup:
    title: str
    figures: list[Figure]


@dataclass
class Document:
    title: str
    description: str
    key_findings: list[str]
    sections: list[Section]
    machines: list[str]


@dataclass
class ReportInputs:
    """Everything the report reads, already labelled with machines."""

    summary: pd.DataFrame | None = None
    runs: pd.DataFrame | None = None
    windows: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    profiles: pd.DataFrame | None = None
    training: pd.DataFrame | None = None
    environment: pd.DataFrame | None = None
    complexity: list[dict] = field(default_factory=list)
    ceilings: list[dict] = field(default_factory=list)
    # One row per job that recorded when it ran (nnperf.report.results.JOB_COLUMNS).
    jobs: pd.DataFrame | None = None
    # torch.profiler operator profiles (nnperf.report.results.OperatorProfileFiles).
    opprofiles: list = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# Display tables (formatted strings, only the columns a reader needs).
# ------------------------------------------------------------------------------------------
def _drop_single_machine(frame: pd.DataFrame, machines: Sequence[str]) -> pd.DataFrame:
    if len(machines) <= 1 and "Machine" in frame.columns:
        return frame.drop(columns=["Machine"])
    return frame


KEY_LABELS = {
    "machine": "Machine",
    "device": "Device",
    "model": "Model",
    "precision": "Precision",
    "batch_size": "Batch",
    "variant": "Variant",
}


def _key_columns(frame: pd.DataFrame, keys: Sequence[str] = GROUP_KEYS) -> dict[str, pd.Series]:
    return {
        KEY_LABELS[k]: frame[k].astype(str) if k != "batch_size" else frame[k].astype(int)
        for k in keys
        if k in frame.columns
    }


def throughput_display(summary: pd.DataFrame | None, cv_threshold: float) -> pd.DataFrame:
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = sort_configs(summary)
    rows = s.to_dict("records")
    return pd.DataFrame(
        {
            **_key_columns(s),
            "Status": [str(r.get("status", "ok")).replace("_", " ") for r in rows],
            "Processes": [_int(r.get("n_processes"), "—") for r in rows],
            "Windows": [_int(r.get("n_windows"), "—") for r in rows],
            "Mean (img/s)": [fmt(r.get(MEAN)) for r in rows],
            "95% CI (img/s)": [ci_cell(r) for r in rows],
            "CI half-width": [fmt_pct(r.get("ci_half_width_rel")) for r in rows],
            "Median over windows (img/s)": [fmt(r.get("throughput_img_s_median")) for r in rows],
            "IQR (img/s)": [fmt(r.get("throughput_img_s_iqr")) for r in rows],
            "CV": [fmt_pct(r.get("throughput_img_s_cv")) for r in rows],
            "Flag": [quality_flags(r, cv_threshold) for r in rows],
        }
    )


def ci_cell(row) -> str:
    """The CI as `low–high`; for a measured configuration without one, why (`ci_interval`:
    `n/a, 1 window`)."""
    if str(row.get("status", "ok")) != "ok" or missing(row.get(MEAN)):
        return "n/a"
    interval, why = ci_interval(
        row.get(CI_LOW),
        row.get(CI_HIGH),
        n_windows=row.get("n_windows"),
        n_processes=row.get("n_processes"),
        method=row.get("ci_method"),
    )
    return interval or why


def quality_flags(row, cv_threshold: float) -> str:
    """What a reader must know before trusting a measured number: unstable windows, a CV
    above the threshold, a CI wider than its target."""
    if str(row.get("status", "ok")) != "ok":
        return ""
    flags = []
    if truthy(row.get("unstable")):
        flags.append("unstable")
    cv = row.get("throughput_img_s_cv")
    if truthy(row.get("high_variance")) or (not missing(cv) and float(cv) > cv_threshold):
        flags.append("high variance")
    if target_met(row) is False:
        flags.append("CI target missed")
    return ", ".join(flags)


def _int(value, unknown: str = "?") -> str:
    return unknown if missing(value) else str(int(value))


def speedup_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k in table.columns]
    return pd.DataFrame(
        {
            **_key_columns(table, keys),
            "Against": table["reference"].astype(str),
            "Speedup": [fmt_times(v) for v in table["speedup"]],
            "Mean (img/s)": [
                estimate_text(r).replace(" img/s", "") for r in table.to_dict("records")
            ],
            "Reference mean (img/s)": [
                estimate_text(r, REFERENCE).replace(" img/s", "") for r in table.to_dict("records")
            ],
            "CIs overlap": [
                "yes" if v is True else "no" if v is False else "n/a"
                for v in table["ci_overlap"].astype(object)
            ],
        }
    )


def scaling_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    return pd.DataFrame(
        {
            **_key_columns(table, keys),
            "Batch range": [
                f"{a}–{b}"
                for a, b in zip(table["smallest_batch_size"], table["largest_batch_size"])
            ],
            "Mean throughput (img/s)": [
                f"{fmt(a)} → {fmt(b)}"
                for a, b in zip(table["smallest_mean"], table["largest_mean"])
            ],
            "Gain": [fmt_times(v) for v in table["gain"]],
            "Best batch": table["best_batch_size"].astype(int),
            "95% of best from batch": table["saturation_batch_size"].astype(int),
            "OOM batches": table["oom_batch_sizes"].astype(str),
            "Over-budget batches": table["over_budget_batch_sizes"].astype(str),
        }
    )


def breakdown_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            **_key_columns(table),
            "Step (ms, sum of phase medians)": [fmt(v * 1e3) for v in table["phase_total_s"]],
            **{
                PHASE_LABELS[p].capitalize(): [fmt_pct(v) for v in table[f"{p}_share"]]
                for p in PHASES
            },
        }
    )


def bound_text(verdict: dict) -> str:
    """The Bound cell: compute, memory (level), or why no bound is read."""
    if verdict["bound"] is None or missing(verdict["bound"]):
        return "n/a (no bandwidth roof)"
    if verdict["fraction_of_roof"] > ROOF_TOLERANCE:
        return "void (point above the roof)"
    if verdict["bound"] == "compute":
        return "compute"
    return f"memory ({LEVEL_LABELS.get(verdict['limit'], verdict['limit'])})"


def readings_display(readings: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    if verdicts.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            **_key_columns(verdicts),
            "Point": verdicts["source"].astype(str),
            "Roofs": verdicts["roof"].astype(str),
            "Bound": [bound_text(row) for row in verdicts.to_dict("records")],
            "Intensity (FLOP/B)": [fmt(v) for v in verdicts["arithmetic_intensity_flop_per_byte"]],
            "Ridge (FLOP/B)": [fmt(v) for v in verdicts["ridge_flop_per_byte"]],
            "Achieved": [fmt_si(v, "FLOP/s") for v in verdicts["performance_flop_s"]],
            "Attainable": [fmt_si(v, "FLOP/s") for v in verdicts["attainable_flop_s"]],
            "Of roof": [fmt_pct(v) for v in verdicts["fraction_of_roof"]],
            "Of peak": [fmt_pct(v) for v in verdicts["fraction_of_peak"]],
            "Levels with a roof": verdicts["levels"].astype(str),
        }
    )


def _ms_cell(seconds) -> str:
    return "n/a" if missing(seconds) else fmt(float(seconds) * 1e3)


def profiles_display(table: pd.DataFrame | None) -> pd.DataFrame:
    """One row per profiled configuration: the GPU's busy share of the timed step with both
    clocks beside it, and the checks the calibration GEMM made of the profile."""
    if table is None or table.empty:
        return pd.DataFrame()
    rows = table.to_dict("records")
    low, high = CALIBRATION_ROOF_RANGE

    def roof_check(row) -> str:
        if missing(row.get("calibration_roof_fraction")):
            return "unchecked (no calibration GEMM)"
        verdict = "ok" if truthy(row.get("roof_ok")) else f"FLAGGED (allowed {low:.0%}–{high:.0%})"
        return f"{fmt_pct(row['calibration_roof_fraction'])} of roof: {verdict}"

    return pd.DataFrame(
        {
            **_key_columns(table),
            "Kernels": [_int(r.get("kernels"), "—") for r in rows],
            "Kernel time (ms) at profiled clock": [_ms_cell(r.get("kernel_time_s")) for r in rows],
            "Profiled SM clock (ncu)": [fmt_ghz(r.get("profiled_sm_clock_hz")) for r in rows],
            "Runs' SM clock": [fmt_ghz(r.get("run_sm_clock_hz")) for r in rows],
            "Kernel time (ms) at runs' clock": [
                _ms_cell(r.get("kernel_time_at_run_clock_s")) for r in rows
            ],
            "Timed step (ms)": [_ms_cell(r.get("step_time_s")) for r in rows],
            "GPU busy": [fmt_pct(r.get("busy_share")) for r in rows],
            "GPU busy, upper": [fmt_pct(r.get("busy_share_at_profiled_clock")) for r in rows],
            "Step is": [str(r.get("busy_verdict", "unknown")) for r in rows],
            "ncu / analytic FLOPs": [fmt_times(r.get("ratio_ncu_to_analytic")) for r in rows],
            "Calibration FLOPs": [
                (
                    "n/a"
                    if missing(r.get("calibration_ratio"))
                    else f"{fmt_times(r['calibration_ratio'])}"
                    + ("" if truthy(r.get("calibration_ok")) else " FLAGGED")
                )
                for r in rows
            ],
            "Calibration GEMM": [roof_check(r) for r in rows],
            "Compute roof": [str(r.get("roof_basis", "")) for r in rows],
        }
    )


# ------------------------------------------------------------------------------------------
# Operator profiles (torch.profiler).
# ------------------------------------------------------------------------------------------
def _opprofile_order(profile) -> tuple:
    d = profile.document
    return (
        str(d.get("machine")),
        str(d.get("device")),
        str(d.get("model")),
        precision_rank(str(d.get("precision"))),
        int(d.get("batch_size") or 0),
        str(d.get("variant")),
    )


def sorted_opprofiles(profiles: Sequence) -> list:
    """Operator profiles in the report's order of configurations."""
    return sorted(profiles, key=_opprofile_order)


def _profile_keys(document: dict) -> dict:
    return {k: document.get(k) for k in GROUP_KEYS}


def _mib(value) -> str:
    return "n/a" if missing(value) else fmt(float(value) / 2**20)


def opprofiles_display(profiles: Sequence) -> pd.DataFrame:
    """One row per operator profile: how its step splits between busy and waiting, what
    that makes of it, and its peak memory and batch headroom."""
    rows = []
    for profile in profiles:
        d = profile.document
        summary, memory = d.get("summary") or {}, d.get("memory") or {}
        kind = "device" if summary.get("busy_kind") == "device" else "operators"
        rows.append(
            {
                **_profile_keys(d),
                "Status": str(d.get("status")).replace("_", " "),
                "Profiled steps": _int(d.get("profiled_steps"), "—"),
                "Profiled step (ms)": _ms_cell(summary.get("step_time_s")),
                "Timed step (ms)": _ms_cell(summary.get("timed_step_time_s")),
                "Busy": (
                    "n/a"
                    if missing(summary.get("bound_share"))
                    else f"{kind} {fmt_pct(summary['bound_share'])}"
                ),
                "Step is": str(summary.get("bound") or "n/a"),
                "Host dispatch (ms)": _ms_cell(summary.get("host_dispatch_time_s")),
                "Input (ms)": _ms_cell(summary.get("input_time_s")),
                "Peak memory (MiB)": _mib(memory.get("peak_allocated_bytes")),
                "Largest batch that fits": _int(memory.get("max_batch_size"), "n/a"),
            }
        )
    frame = pd.DataFrame(rows)
    return frame.rename(columns=KEY_LABELS) if not frame.empty else frame


def top_operators_display(profiles: Sequence, table: str, limit: int | None = None) -> pd.DataFrame:
    """The top rows of each profile's `operators` or `layers` table, by device time where
    there is any, else by host time (`nnperf.torchprof.analysis.time_column`)."""
    name = "operator" if table == "operators" else "layer"
    rows = []
    for profile in profiles:
        d, frame = profile.document, profile.tables.get(table)
        if frame is None or frame.empty:
            continue
        n = limit or int((d.get("settings") or {}).get("top_operators", 10))
        column = operators_mod.time_column(frame)
        share = column.replace("_time_s", "_share")
        for rank, row in enumerate(operators_mod.top(frame, n, column).to_dict("records"), 1):
            device_time = row.get("device_self_time_s", row.get("device_time_s"))
            host_time = row.get("host_self_time_s", row.get("host_time_s"))
            entry = {
                **_profile_keys(d),
                "#": rank,
                name.capitalize(): _shorten(str(row[name]), 60),
                "Host (ms)": _ms_cell(host_time),
                "Device (ms)": _ms_cell(device_time),
                "Share": fmt_pct(row.get(share)),
            }
            if table == "operators":
                entry["Calls per step"] = fmt(row.get("calls_per_step"))
                entry["Input shapes"] = _shorten(str(row.get("input_shapes") or ""), 60)
            rows.append(entry)
    frame = pd.DataFrame(rows)
    return frame.rename(columns=KEY_LABELS) if not frame.empty else frame


def memory_display(profiles: Sequence) -> pd.DataFrame:
    """Each profile's peak memory by category (MiB), beside the complexity stage's
    saved-activation estimate."""
    rows = []
    for profile in profiles:
        d, memory = profile.document, profile.document.get("memory") or {}
        if not memory.get("peak_allocated_bytes"):
            continue
        rows.append(
            {
                **_profile_keys(d),
                "Peak (MiB)": _mib(memory.get("peak_allocated_bytes")),
                **{
                    label.capitalize(): _mib(memory.get(f"{category}_bytes"))
                    for category, label in CATEGORY_LABELS.items()
                },
                "Saved activations, complexity estimate": _mib(
                    d.get("saved_activation_estimate_bytes")
                ),
            }
        )
    frame = pd.DataFrame(rows)
    return frame.rename(columns=KEY_LABELS) if not frame.empty else frame


# ------------------------------------------------------------------------------------------
# Time to accuracy.
# ------------------------------------------------------------------------------------------
TIMED_THROUGHPUT = "timed_throughput_img_s"


def training_display(table: pd.DataFrame) -> pd.DataFrame:
    """One row per training run: its time to the target next to its throughput."""
    rows = []
    for row in table.to_dict("records"):
        reached = truthy(row.get("reached")) and not missing(row.get("time_to_target_s"))
        target = row.get("target_accuracy")
        rows.append(
            {
                **{KEY_LABELS.get(k, k): row.get(k) for k in GROUP_KEYS if k in row},
                "Recipe": row.get("recipe"),
                "Status": str(row.get("status")).replace("_", " "),
                "Target": fmt_pct(target) if not missing(target) else "none",
                "Time to target": (
                    fmt_duration(row["time_to_target_s"])
                    if reached
                    else ("n/a" if missing(target) else "not reached")
                ),
                "Epoch at target": _int(row.get("epochs_to_target"), "—") if reached else "—",
                "Best top-1": fmt_pct(row.get("best_test_top1")),
                "Epochs": f"{_int(row.get('epochs_run'), '0')} of {_int(row.get('max_epochs'))}",
                "Training (img/s)": fmt(row.get("throughput_img_s")),
                "Timed runs (img/s)": fmt(row.get(TIMED_THROUGHPUT)),
            }
        )
    return pd.DataFrame(rows)


def accuracy_section(inputs: ReportInputs, figures: list, drop) -> Section:
    """Time to a target accuracy next to throughput, and where they disagree."""
    table = inputs.training
    throughput = TIMED_THROUGHPUT if TIMED_THROUGHPUT in table.columns else "throughput_img_s"
    findings = faster_but_later_sentences(table, throughput) + time_to_accuracy_sentences(table)
    return Section(
        "accuracy",
        "Time to accuracy",
        intro="Each selected configuration trained under each recipe for some epochs or until "
        "its test top-1 reaches the target, evaluated on the test split every epoch. Time to "
        "target counts training seconds only (evaluation and checkpoints apart), as MLPerf "
        "Training and DAWNBench rank systems: a configuration that trains more images per "
        "second (timed runs) can still reach the target later, or not at all.",
        findings=findings,
        tables=[
            t for t in [Table("Training runs", drop(training_display(table)))] if not t.frame.empty
        ],
        figures=figures,
        sources=_sources(inputs, "training"),
    )


def operators_section(inputs: ReportInputs, figures: list, drop) -> Section:
    """Where each profiled step's time and memory go, from its torch.profiler profile."""
    profiles = sorted_opprofiles(inputs.opprofiles)
    findings = [
        sentence
        for profile in profiles
        for sentence in profile_findings(
            profile.document, profile.tables, machine=profile.document.get("machine")
        )
    ]
    tables = [
        Table("Where each profiled step goes", drop(opprofiles_display(profiles))),
        Table("Top operators", drop(top_operators_display(profiles, "operators"))),
        Table("Top layers", drop(top_operators_display(profiles, "layers"))),
        Table("Peak memory by category (MiB)", drop(memory_display(profiles))),
    ]
    return Section(
        "operators",
        "Operators, layers and memory",
        intro="A few training steps of each configuration under torch.profiler, after warm-up "
        "and apart from the timed runs: the operators and layers the step spends its time in "
        "(host self time beside the device time of the kernels they launch), how busy the "
        "device is over the step (on a CPU: the share of the step inside operators) and so "
        "whether the host or the device bounds it, and what the peak memory holds. Each "
        "profile's trace (`.pt.trace.json.gz` beside its tables under results/opprofiles/) "
        "opens in Perfetto and TensorBoard.",
        findings=findings,
        tables=[t for t in tables if not t.frame.empty],
        figures=figures,
        sources=_sources(inputs, "opprofiles"),
    )


def kernels_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            **_key_columns(table),
            "#": table["rank"].astype(int),
            "Kernel": [_shorten(str(k)) for k in table["kernel_name"]],
            "Kind": table["kind"].astype(str),
            "Launches": table["launches"].astype(int),
            "Time (µs)": [fmt(v * 1e6) for v in table["duration_s"]],
            "Share": [fmt_pct(v) for v in table["share"]],
            "FLOP/s": [fmt_si(v, "FLOP/s") for v in table["performance_flop_s"]],
            "Intensity, DRAM (FLOP/B)": [
                fmt(v) for v in table["arithmetic_intensity_dram_flop_per_byte"]
            ],
        }
    )


def _shorten(name: str, limit: int = 90) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def kinds_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            **_key_columns(table),
            "Kind": table["kind"].astype(str),
            "Time (µs)": [fmt(v * 1e6) for v in table["duration_s"]],
            "Share": [fmt_pct(v) for v in table["share"]],
        }
    )


def complexity_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Model": table["model"],
            "Dataset": table["dataset"],
            "Input": table["input_shape"],
            "Parameters": [fmt_si(v, "") for v in table["params"]],
            "Forward FLOP/image": [fmt_si(v, "FLOP") for v in table["forward_flops_per_image"]],
            "Train step FLOP/image": [
                fmt_si(v, "FLOP") for v in table["train_step_flops_per_image"]
            ],
            "Saved activations/image": [
                fmt_si(v, "B") for v in table["saved_activation_bytes_per_image"]
            ],
            "Weights": [fmt_si(v, "B") for v in table["weight_bytes"]],
            "Optimizer state": [fmt_si(v, "B") for v in table["optimizer_state_bytes"]],
            "fp32 traffic (fixed + per image)": [
                f"{fmt_si(a, 'B')} + {fmt_si(b, 'B')}"
                for a, b in zip(
                    table["fp32_traffic_fixed_bytes"], table["fp32_traffic_per_image_bytes"]
                )
            ],
        }
    )


def ceilings_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Machine": table["machine"].astype(str),
            "Device": table["device"].astype(str),
            "Roof": table["roof"],
            "Measured": [fmt_si(v, u) for v, u in zip(table["measured"], table["unit"])],
            "Datasheet": [fmt_si(v, u) for v, u in zip(table["datasheet"], table["unit"])],
            "Measured / datasheet": [fmt_pct(v) for v in table["measured_over_datasheet"]],
        }
    )


def null_peak_findings(ceilings: Sequence[dict]) -> list[str]:
    """One sentence per compute peak a ceilings JSON gives as null with a reason (a CPU's
    derived bf16 peak where bf16 has no hardware arithmetic): the table shows a dash, this
    says why."""
    findings = []
    for document in ceilings:
        sheet = document.get("datasheet") or {}
        origin = "derived" if sheet.get("derived") else "datasheet"
        where = document.get("machine") or document.get("device_name") or document.get("device")
        for dtype, reason in (sheet.get("flop_s_null_reasons") or {}).items():
            findings.append(f"{where}: no {origin} {dtype} peak, {reason}.")
    return findings


def settings_display(table: pd.DataFrame) -> pd.DataFrame:
    """Column names as words: `cudnn_benchmark` -> `cudnn benchmark`."""
    return table.rename(
        columns=lambda c: "Machine" if c == "machine" else c.replace("_", " ").capitalize()
    )


def matrix_cell(row) -> str:
    """`ok 3p/12w` (worker processes / timed windows), or the status that stopped it."""
    status = str(row.get("status", "ok"))
    if status != "ok":
        return status.replace("_", " ")
    return f"ok {_int(row.get('n_processes'))}p/{_int(row.get('n_windows'))}w"


def matrix_display(summary: pd.DataFrame | None) -> pd.DataFrame:
    """The study matrix: one row per (machine, device, model, precision, variant), one
    column per batch size, each cell the status with how many worker processes and timed
    windows measured it."""
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = summary.copy()
    s["cell"] = [matrix_cell(r) for r in s.to_dict("records")]
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    wide = s.pivot_table(
        index=keys, columns="batch_size", values="cell", aggfunc="first"
    ).reset_index()
    wide = sort_configs(wide.assign(batch_size=0)).drop(columns=["batch_size"])
    wide.columns = [
        f"bs {c}" if isinstance(c, (int, float)) and not isinstance(c, bool) else c
        for c in wide.columns
    ]
    renamed = {
        "machine": "Machine",
        "device": "Device",
        "model": "Model",
        "precision": "Precision",
        "variant": "Variant",
    }
    return wide.rename(columns=renamed).fillna("—")


def measurement_display(table: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: processes and windows, CI half-width against its target, why it
    stopped, the dominant variance level with both components as relative standard
    deviations, fixed costs, compile times, duty cycle and the unstable flag."""
    if table.empty:
        return pd.DataFrame()
    rows = table.to_dict("records")
    return pd.DataFrame(
        {
            **_key_columns(table),
            "Status": [str(r["status"]).replace("_", " ") for r in rows],
            "Processes": [_int(r["n_processes"], "—") for r in rows],
            "Windows": [_int(r["n_windows"], "—") for r in rows],
            "CI half-width": [half_width_cell(r) for r in rows],
            "Target": [fmt_pct(r["ci_target"]) for r in rows],
            "Met": [_yes_no(r["target_met"]) for r in rows],
            "Stopped on": [STOP_LABELS.get(r["stop_reason"], "") for r in rows],
            "Dominant level": [
                r["dominant_level"] if isinstance(r["dominant_level"], str) else "" for r in rows
            ],
            "Between-process RSD": [fmt_pct(r["between_process_rsd"]) for r in rows],
            "Within-process RSD": [fmt_pct(r["within_process_rsd"]) for r in rows],
            "Fixed cost (s)": [fmt(r["fixed_cost_s"]) for r in rows],
            "Per-process fixed cost (s)": [fmt(r["process_fixed_cost_s"]) for r in rows],
            "Compile, first / later processes (s)": [compile_cell(r) for r in rows],
            "Timed (s)": [fmt(r["timed_window_s"]) for r in rows],
            "Elapsed (s)": [fmt(r["elapsed_s"]) for r in rows],
            "Duty cycle": [fmt_pct(r["duty_cycle"]) for r in rows],
            # No windows.csv (older results): unknown, shown as a dash.
            "Flagged windows": [
                (
                    None
                    if missing(r["windows_recorded"])
                    else f"{int(r['flagged_windows'])}/{int(r['windows_recorded'])}"
                )
                for r in rows
            ],
            "Unstable": [unstable_cell(r) for r in rows],
        }
    )


def half_width_cell(row) -> str:
    if not missing(row["ci_half_width_rel"]) and float(row["ci_half_width_rel"]) > 0:
        return fmt_pct(row["ci_half_width_rel"])
    if str(row["status"]) == "ok" and not missing(row["n_windows"]) and int(row["n_windows"]) < 2:
        return f"n/a, {count_of(row['n_windows'], 'window')}"
    return "n/a"


def compile_cell(row) -> str:
    """`20.0 / 2.00`; empty for a variant that does not compile."""
    if missing(row["compile_time_s"]):
        return ""
    later = "—" if missing(row["compile_time_s_later"]) else fmt(row["compile_time_s_later"])
    return f"{fmt(row['compile_time_s'])} / {later}"


def unstable_cell(row) -> str:
    if not row["unstable"]:
        return ""
    reasons = row["unstable_reasons"]
    return f"yes: {reasons}" if isinstance(reasons, str) and reasons.strip() else "yes"


def _yes_no(value) -> str:
    if value is None or value is pd.NA or missing(value):
        return "n/a"
    return "yes" if bool(value) else "no"


def cost_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Results folder": table["results_dir"].astype(str),
            "Machines": table["machines"].astype(str),
            "Jobs recorded": table["jobs"].astype(str),
            "First start": [fmt_utc(v) for v in table["first_start"]],
            "Last end": [fmt_utc(v) for v in table["last_end"]],
            "Busy (union of jobs)": [fmt_duration(v) for v in table["busy_s"]],
            "Timed windows": [fmt_duration(v) for v in table["timed_s"]],
            "Timed share of busy": [fmt_pct(v) for v in table["timed_share_of_busy"]],
        }
    )


# ------------------------------------------------------------------------------------------
# Figures per section.
# ------------------------------------------------------------------------------------------
# Path keywords -> section, first match wins (machines/throughput.png is a machine figure).
FIGURE_SECTIONS = (
    ("figures/accuracy/", "accuracy"),
    ("figures/operators/", "operators"),
    ("figures/memory/", "operators"),
    ("machines", "machines"),
    ("speedup", "speedups"),
    ("breakdown", "breakdown"),
    ("phase", "breakdown"),
    ("sweep", "ceilings"),
    ("ceiling", "ceilings"),
    ("roofline", "roofline"),
    ("flops", "roofline"),
    ("kernel", "kernels"),
    ("throughput", "throughput"),
    ("complexity", "complexity"),
    ("environment", "environment"),
)


def figure_section(path: str) -> str:
    lowered = path.replace("\\", "/").lower()
    for keyword, section in FIGURE_SECTIONS:
        if keyword in lowered:
            return section
    return "figures"


# A section shows at most this many figures of one kind inline; more are folded.
FOLD_AFTER = 6


def figure_kind(path: str) -> str:
    """The folder right below `figures/` (throughput, roofline, ...)."""
    parts = path.replace("\\", "/").split("/")
    if "figures" in parts and parts.index("figures") + 2 < len(parts):
        return parts[parts.index("figures") + 1]
    return "figures"


def fold_figures(figures: list[Figure], limit: int = FOLD_AFTER) -> tuple[list, list]:
    """(shown, folded groups): kinds with more than `limit` figures are folded whole."""
    kinds: dict[str, list[Figure]] = {}
    for figure in figures:
        kinds.setdefault(figure_kind(figure.path), []).append(figure)
    shown = [f for group in kinds.values() if len(group) <= limit for f in group]
    folded = [
        FigureGroup(f"{len(group)} {kind.replace('_', ' ')} figures", group)
        for kind, group in kinds.items()
        if len(group) > limit
    ]
    return shown, folded


def figure_caption(path: str) -> str:
    """The figure's path below `figures/`, which names its experiment (keys in order)."""
    parts = path.replace("\\", "/").split("/")
    if "figures" in parts:
        parts = parts[parts.index("figures") + 1 :]
    return " / ".join(parts).removesuffix(".png")


# ------------------------------------------------------------------------------------------
# The document.
# ------------------------------------------------------------------------------------------
def profile_to_quote(profiles: Sequence, group: pd.DataFrame, best: dict) -> dict | None:
    """The operator profile a key finding quotes for a machine and model: the fastest
    configuration's, or, when that one was not profiled, the profiled configuration that
    trained fastest (`group`: the machine's and model's measured configurations)."""
    candidates = [
        p.document
        for p in profiles
        if p.document.get("status") == "ok"
        and all(str(p.document.get(k)) == str(best[k]) for k in ("machine", "device", "model"))
    ]
    if not candidates:
        return None

    def speed(document: dict) -> float:
        match = group
        for k in GROUP_KEYS:
            match = match[match[k].astype(str) == str(document.get(k))]
        return float(match[MEAN].iloc[0]) if not match.empty else -1.0

    return max(candidates, key=speed)


def key_findings(
    inputs: ReportInputs,
    machines: Sequence[str],
    phases: pd.DataFrame,
    verdicts: pd.DataFrame,
    precision_table: pd.DataFrame,
    variant_table: pd.DataFrame,
    scaling: pd.DataFrame,
    notes: Sequence[str],
    cost: dict | None = None,
    measurement: pd.DataFrame | None = None,
) -> list[str]:
    """The short list a newcomer reads first: per machine and model the fastest
    configuration, what limits it, the best precision and variant, batch scaling; then the
    machine comparison, what the study cost and how many results were flagged."""
    findings = []
    ok = ok_configs(inputs.summary)
    for (machine, model), group in ok.groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEAN].idxmax()].to_dict()
        findings.append(
            f"Fastest configuration on {machine}: {config_text(best)}, {estimate_text(best)}."
        )
        limiter = limiter_sentence(best, phases, verdicts)
        if limiter:
            findings.append(limiter)
        profile = profile_to_quote(inputs.opprofiles, group, best)
        if profile is not None:
            findings.extend(s for s in (bound_sentence(profile, machine),) if s is not None)
        for table, column in ((precision_table, "precision"), (variant_table, "variant")):
            rows = table[(table["machine"] == machine) & (table["model"] == model)]
            if rows.empty:
                continue
            at = rows[rows["batch_size"] == rows["batch_size"].max()]
            if column == "precision" and (at["variant"] == REFERENCE_VARIANT).any():
                at = at[at["variant"] == REFERENCE_VARIANT]
            if column == "variant" and (at["precision"] == best["precision"]).any():
                at = at[at["precision"] == best["precision"]]
            findings.append(speedup_sentence(at.loc[at["speedup"].idxmax()].to_dict(), column))
        scale = scaling
        for k in ("machine", "device", "model", "precision", "variant"):
            scale = scale[scale[k] == best[k]]
        if not scale.empty:
            findings.append(scaling_sentence(scale.iloc[0].to_dict()))
    if inputs.profiles is not None and "busy_verdict" in inputs.profiles:
        host_bound = inputs.profiles[inputs.profiles["busy_verdict"] == "host-bound"]
        findings.extend(
            busy_sentence(row, inputs.summary)
            for row in sort_configs(host_bound).to_dict("records")
        )
    if inputs.training is not None and not inputs.training.empty:
        table = inputs.training
        rate = TIMED_THROUGHPUT if TIMED_THROUGHPUT in table.columns else "throughput_img_s"
        findings.extend(faster_but_later_sentences(table, rate))
    findings.extend(machine_comparison_findings(ok, machines))
    if cost is not None and cost["first_start"] is not None and not ok.empty:
        text = (
            f"Measuring took {fmt_duration(cost['busy_s'])} of busy time, "
            f"{fmt_pct(cost['timed_share_of_busy'])} of it in timed windows"
        )
        met, judged = ci_target_counts(measurement) if measurement is not None else (0, 0)
        if judged:
            text += f"; {met} of {judged} measured configurations reached their CI target"
        findings.append(text + " — see Measurement cost and quality.")
    prefixes = (
        ("Out of memory", "ran out of memory"),
        ("Over budget", "took too long per step to measure within the time budget"),
        ("Unstable", "flagged unstable"),
        ("High variance", "flagged for high variance"),
    )
    counts = []
    for prefix, what in prefixes:
        n = sum(1 for note in notes if note.startswith(prefix + ":"))
        if n:
            counts.append(f"{n} configuration{'s' if n != 1 else ''} {what}")
    n_roof = sum(1 for n in notes if n.startswith("Roof too low"))
    if n_roof:
        counts.append(f"{n_roof} roof{'s lie' if n_roof != 1 else ' lies'} below measured points")
    if counts:
        text = "; ".join(counts)
        findings.append(text[0].upper() + text[1:] + " — see Notes.")
    return findings


def machine_comparison_findings(ok: pd.DataFrame, machines: Sequence[str]) -> list[str]:
    """Per model, the fastest and slowest machine on the largest configuration they share."""
    if len(machines) < 2 or ok.empty:
        return []
    findings = []
    config = ["model", "precision", "batch_size", "variant"]
    for model, group in ok.groupby("model", sort=True):
        counts = group.groupby(config)["machine"].nunique()
        shared = counts[counts == counts.max()]
        if shared.max() < 2:
            continue
        candidates = pd.DataFrame(list(shared.index), columns=config)
        candidates = candidates.assign(
            _fp32=candidates["precision"] != REFERENCE_PRECISION,
            _base=candidates["variant"] != REFERENCE_VARIANT,
        )
        chosen = candidates.sort_values(
            ["_fp32", "_base", "batch_size"], ascending=[True, True, False]
        ).iloc[0]
        rows = group
        for k in config:
            rows = rows[rows[k] == chosen[k]]
        rows = rows.sort_values(MEAN, ascending=False)
        fast, slow = rows.iloc[0].to_dict(), rows.iloc[-1].to_dict()
        findings.append(
            f"Across machines, {config_text(fast)} runs fastest on {fast['machine']} at "
            f"{estimate_text(fast)}, {fmt_times(fast[MEAN] / slow[MEAN])} the slowest machine, "
            f"{slow['machine']}, at {estimate_text(slow)}."
        )
    return findings


def _sources(inputs: ReportInputs, *kinds: str) -> list[str]:
    paths = []
    for kind in kinds:
        paths.extend(inputs.sources.get(kind, []))
    return list(dict.fromkeys(paths))


def measurement_section(
    inputs: ReportInputs,
    cost: dict,
    measurement: pd.DataFrame,
    drop: Callable[[pd.DataFrame], pd.DataFrame],
) -> Section:
    """What the measurements cost in wall time and how good they are."""
    findings = []
    if inputs.summary is not None or inputs.jobs is not None:
        findings += cost_sentences(cost)
    target = ci_target_sentence(measurement)
    if target:
        findings.append(target)
    findings += ci_missed_sentences(measurement)
    findings += dominant_level_sentences(measurement)
    findings += fixed_cost_sentences(measurement)
    folders = cost_by_folder(inputs.jobs, inputs.summary)
    tables = [
        Table("Measurement per configuration", drop(measurement_display(measurement))),
        Table("Wall time per results folder", cost_display(folders)),
    ]
    return Section(
        "measurement",
        "Measurement cost and quality",
        intro="What measuring cost and how far the numbers can be trusted. The study's span "
        "runs from the first recorded job start to this report; busy time is the union of the "
        "recorded job intervals (timed runs, ceilings, complexity); the duty cycle is the "
        "share spent inside timed windows. Per configuration: worker processes and windows, "
        "the 95% CI half-width against its target (timing.target_ci), why measurement "
        "stopped, which level dominates the variance — between processes or between windows "
        "of one process — with both components as relative standard deviations "
        "(Kalibera & Jones), the fixed cost from the job's start to its first warm-up step "
        "(and per further process), compile time in the first and in later processes, and "
        "the unstable flag with its reasons.",
        findings=findings,
        tables=[t for t in tables if not t.frame.empty],
        sources=_sources(inputs, "summary", "windows", "jobs"),
    )


def build_document(
    inputs: ReportInputs,
    *,
    title: str,
    description: str,
    cv_threshold: float,
    top_n_kernels: int = DEFAULT_TOP_KERNELS,
    rendered_at_unix: float | None = None,
) -> Document:
    """Every section of the summary, written from `inputs`.

    `rendered_at_unix` is when the report is written (now when None): the end of the
    study's span in the measurement-cost section.
    """
    rendered_at = time.time() if rendered_at_unix is None else rendered_at_unix
    machines = sorted(
        {
            m
            for frame in (inputs.summary, inputs.environment, inputs.roofline_points)
            if frame is not None and "machine" in frame
            for m in frame["machine"].dropna()
        }
    )

    def drop(frame: pd.DataFrame) -> pd.DataFrame:
        return _drop_single_machine(frame, machines)

    summary = inputs.summary
    precision_table = speedups(summary, "precision", REFERENCE_PRECISION)
    variant_table = speedups(summary, "variant", REFERENCE_VARIANT)
    scaling = batch_scaling(summary)
    phases = phase_shares(summary)
    measurement = measurement_table(summary, inputs.windows)
    cost = study_cost(inputs.jobs, summary, rendered_at)
    readings = roofline_readings(
        inputs.roofline_points, inputs.ceilings, inputs.kernels, inputs.profiles
    )
    profiled = sort_configs(inputs.profiles) if inputs.profiles is not None else None
    verdicts = roofline_verdicts(readings)
    figures: dict[str, list[Figure]] = {}
    for path in inputs.figures:
        figures.setdefault(figure_section(path), []).append(Figure(path, figure_caption(path)))

    notes = list(inputs.notes)
    notes += oom_notes(summary, inputs.runs)
    notes += over_budget_notes(summary, inputs.runs)
    notes += unstable_notes(summary)
    notes += variance_notes(summary, cv_threshold)
    notes += roof_violation_notes(verdicts)
    notes += profile_check_notes(profiled)
    if summary is None:
        notes.append(
            "No timed runs: results/tables/summary.csv was not part of this report, so "
            "there are no throughput, speedup or breakdown numbers."
        )
    cuda_ran = any(
        frame is not None and "device" in frame and (frame["device"] == "cuda").any()
        for frame in (summary, inputs.environment)
    )
    if cuda_ran and inputs.kernels is None:
        notes.append(
            "No per-kernel table (kernels.csv) although CUDA runs were timed: Nsight "
            "Compute (ncu) was not part of this run, so CUDA rooflines are analytic."
        )
    if summary is not None and inputs.roofline_points is None:
        notes.append("No roofline points (roofline_points.csv) were part of this report.")
    if inputs.roofline_points is not None and not inputs.ceilings:
        notes.append(
            "No ceilings JSON: there are no measured or datasheet roofs to read the "
            "roofline points against."
        )
    notes = sort_notes(notes)

    sections = []
    env_frame = inputs.environment
    sections.append(
        Section(
            "environment",
            "Environment",
            intro="Where the numbers were measured: one column per machine (host name and device "
            "name from the environment record of every run). CUDA and cuDNN are the versions "
            "that ran on a machine with GPU runs; a machine whose runs all used the CPU did not "
            "use them, and the versions its torch was built with are listed as its torch build.",
            tables=[
                t
                for t in (
                    Table("Machines", machines_mod.machine_table(env_frame)),
                    Table(
                        "Math and pipeline settings the runs recorded",
                        drop(settings_display(machines_mod.settings_table(env_frame))),
                    ),
                )
                if not t.frame.empty
            ],
            figures=figures.get("environment", []),
            sources=_sources(inputs, "environment"),
        )
    )
    sections.append(
        Section(
            "matrix",
            "Study matrix",
            intro="Every configuration of the study, per batch size: its status and, when "
            "measured, how many worker processes (p) and timed windows (w) measured it. "
            "oom: out of memory; over budget: one step too slow to measure within "
            "timing.max_seconds.",
            tables=[
                t
                for t in [Table("Configurations", drop(matrix_display(summary)))]
                if not t.frame.empty
            ],
            sources=_sources(inputs, "summary"),
        )
    )
    top = ok_configs(summary)
    throughput_findings = []
    for (machine, model), group in top.groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEAN].idxmax()].to_dict()
        worst = group.loc[group[MEAN].idxmin()].to_dict()
        throughput_findings.append(
            f"{model} on {machine}: from {estimate_text(worst)} for {config_text(worst)} to "
            f"{estimate_text(best)} for {config_text(best)}."
        )
    sections.append(
        Section(
            "throughput",
            "Throughput",
            intro="Images per second while training. Each configuration ran several worker "
            "processes, each timing several windows of steps; its throughput is the mean of the "
            "processes' throughputs (each its images over its windows' seconds), with a 95% "
            "confidence interval (a t-interval over the process means, or over the windows of "
            "a single process; none from a single window). The median, interquartile range and "
            "coefficient of variation are across all windows. Flags: unstable (windows disturbed, "
            "see Notes), high variance (CV above the threshold), CI target missed.",
            findings=throughput_findings,
            tables=[
                t
                for t in [
                    Table(
                        "Throughput per configuration",
                        drop(throughput_display(summary, cv_threshold)),
                    )
                ]
                if not t.frame.empty
            ],
            figures=figures.get("throughput", []),
            sources=_sources(inputs, "summary"),
        )
    )
    speedup_findings = [
        speedup_sentence(r, "precision")
        for r in at_largest_batch(precision_table, "precision").to_dict("records")
    ]
    speedup_findings += [
        speedup_sentence(r, "variant")
        for r in at_largest_batch(variant_table, "variant").to_dict("records")
    ]
    speedup_findings += [scaling_sentence(r) for r in scaling.to_dict("records")]
    sections.append(
        Section(
            "speedups",
            "Speedups",
            intro=f"Ratios of mean throughputs: each precision against {REFERENCE_PRECISION} "
            f"and each variant against {REFERENCE_VARIANT} at the same batch size, and each "
            "configuration across batch sizes. Where the two 95% CIs overlap the difference is "
            "within the measured spread.",
            findings=speedup_findings,
            tables=[
                t
                for t in (
                    Table(
                        f"Precisions against {REFERENCE_PRECISION}",
                        drop(speedup_display(precision_table, "precision")),
                    ),
                    Table(
                        f"Variants against {REFERENCE_VARIANT}",
                        drop(speedup_display(variant_table, "variant")),
                    ),
                    Table("Batch-size scaling", drop(scaling_display(scaling))),
                )
                if not t.frame.empty
            ],
            figures=figures.get("speedups", []),
            sources=_sources(inputs, "summary"),
        )
    )
    sections.append(
        Section(
            "breakdown",
            "Time breakdown",
            intro="Where a training step's time goes: the median time of each phase (data wait, "
            "host-to-device copy, forward, backward, optimizer) as a share of their sum.",
            findings=breakdown_findings(phases),
            tables=[
                t
                for t in [Table("Phase shares", drop(breakdown_display(phases)))]
                if not t.frame.empty
            ],
            figures=figures.get("breakdown", []),
            sources=_sources(inputs, "summary"),
        )
    )
    sections.append(
        Section(
            "roofline",
            "Roofline",
            intro="Each training step as a point (FLOPs per byte moved, FLOP/s achieved) against "
            "the roofs: the compute peak of its precision and the bandwidth of each memory "
            "level. The lowest roof above the point binds it; left of the ridge point it is "
            "memory-bound, right of it compute-bound. Profile roofs are Nsight Compute's "
            "own peaks at the profiled clock, measured roofs the ceilings stage's "
            "benchmarks, datasheet roofs the vendor's numbers. Analytic points (CPU, MPS) count FLOPs from the "
            "model and bytes as algorithmic no-reuse traffic, which overstates bytes: they sit "
            "left of where the hardware really is.",
            findings=[
                verdict_sentence(verdict)
                for config in verdicts.drop_duplicates(list(GROUP_KEYS)).to_dict("records")
                if (verdict := preferred_verdict(verdicts, config)) is not None
            ]
            + [
                busy_sentence(row, summary)
                for row in (profiled.to_dict("records") if profiled is not None else [])
            ],
            tables=[
                t
                for t in [
                    Table("Reading per configuration", drop(readings_display(readings, verdicts))),
                    Table(
                        "Profiled configurations: GPU busy share, clocks and checks",
                        drop(profiles_display(profiled)),
                    ),
                ]
                if not t.frame.empty
            ],
            figures=figures.get("roofline", []),
            sources=_sources(inputs, "roofline_points", "profiles", "ceilings", "kernels"),
        )
    )
    sections.append(
        Section(
            "ceilings",
            "Ceilings",
            intro="The roofs: the ceilings stage's measured GEMM throughput per dtype and "
            "main-memory bandwidth next to the datasheet peaks.",
            findings=null_peak_findings(inputs.ceilings),
            tables=[
                t
                for t in [
                    Table(
                        "Measured and datasheet roofs",
                        drop(ceilings_display(ceilings_table(inputs.ceilings))),
                    )
                ]
                if not t.frame.empty
            ],
            figures=figures.get("ceilings", []),
            sources=_sources(inputs, "ceilings"),
        )
    )
    kernels_top = top_kernels(inputs.kernels, top_n_kernels)
    kinds = kernel_kind_shares(inputs.kernels)
    kernel_findings = []
    for key, group in kinds.groupby(list(GROUP_KEYS), sort=True):
        first = group.iloc[0].to_dict()
        kernel_findings.append(
            f"{config_text(first)} on {first['machine']}: {first['kind']} "
            f"kernels take {fmt_pct(first['share'])} of the profiled step."
        )
    sections.append(
        Section(
            "kernels",
            "Top kernels",
            intro=f"The {top_n_kernels} kernels that took the most time in the profiled step of "
            "each configuration (launches of one kernel summed), and the time per kernel kind.",
            findings=kernel_findings,
            tables=[
                t
                for t in (
                    Table("Top kernels by time", drop(kernels_display(kernels_top))),
                    Table("Time per kernel kind", drop(kinds_display(kinds))),
                )
                if not t.frame.empty
            ],
            figures=figures.get("kernels", []),
            sources=_sources(inputs, "kernels"),
        )
    )
    sections.append(
        Section(
            "complexity",
            "Model complexity",
            intro="Per image: parameters, FLOPs of the forward pass and of a whole training step "
            "(FLOPs, not MACs), activation bytes saved for backward, and the algorithmic "
            "memory traffic of a training step in fp32 (fixed + per image).",
            tables=[
                t
                for t in [
                    Table("Complexity", complexity_display(complexity_table(inputs.complexity)))
                ]
                if not t.frame.empty
            ],
            figures=figures.get("complexity", []),
            sources=_sources(inputs, "complexity"),
        )
    )
    if inputs.training is not None and not inputs.training.empty:
        sections.append(accuracy_section(inputs, figures.get("accuracy", []), drop))
    if inputs.opprofiles:
        sections.append(operators_section(inputs, figures.get("operators", []), drop))
    if len(machines) > 1 or figures.get("machines"):
        sections.append(
            Section(
                "machines",
                "Machines compared",
                intro="The same configurations on every machine whose results were merged.",
                findings=machine_comparison_findings(ok_configs(summary), machines),
                figures=figures.get("machines", []),
                sources=_sources(inputs, "summary", "environment"),
            )
        )
    if figures.get("figures"):
        sections.append(Section("figures", "More figures", figures=figures["figures"]))
    sections.append(measurement_section(inputs, cost, measurement, drop))
    sections.append(
        Section(
            "notes",
            "Notes: skipped and flagged",
            findings=notes,
            sources=_sources(inputs, "runs", "summary") + list(inputs.sources.get("notes", [])),
        )
    )
    for section in sections:
        section.figures, section.folded = fold_figures(section.figures)
    sections = [
        s for s in sections if s.tables or s.figures or s.folded or s.findings or s.id == "notes"
    ]
    findings = key_findings(
        inputs,
        machines,
        phases,
        verdicts,
        precision_table,
        variant_table,
        scaling,
        notes,
        cost,
        measurement,
    )
    if not findings:
        findings = ["No timed results yet: only the sections below with data were written."]
    return Document(
        title=title,
        description=description,
        key_findings=findings,
        sections=sections,
        machines=machines,
    )


# ------------------------------------------------------------------------------------------
# Rendering.
# ------------------------------------------------------------------------------------------
def _template_environment(autoescape: bool):
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("nnperf.report", "templates"),
        autoescape=autoescape,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


MISSING_CELL = "—"


def display_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, missing values as a dash (not `nan`/`None`)."""
    return frame.astype(object).apply(
        lambda column: [MISSING_CELL if missing(v) else str(v) for v in column]
    )


def table_html(frame: pd.DataFrame) -> str:
    return display_cells(frame).to_html(index=False, escape=True, border=0, classes="data")


def table_markdown(frame: pd.DataFrame) -> str:
    # A `|` inside a cell would end the cell in Markdown.
    cells = display_cells(frame).map(_md_escape).replace({r"\|": r"\\|"}, regex=True)
    cells.columns = [str(c).replace("|", r"\|") for c in cells.columns]
    # disable_numparse: tabulate would reformat "14.0" as "14" and "0.0464" its own way.
    return cells.to_markdown(index=False, disable_numparse=True)


def render_html(document: Document, figure_src: Callable[[str], str], generated_from: str) -> str:
    """The self-contained HTML summary; `figure_src(path)` gives each image's src (data URI)."""
    import markupsafe

    template = _template_environment(True).get_template("summary.html.j2")
    return template.render(
        doc=document,
        generated_from=generated_from,
        table=lambda frame: markupsafe.Markup(table_html(frame)),
        figure_src=figure_src,
    )


def render_markdown(
    document: Document, figure_src: Callable[[str], str], generated_from: str
) -> str:
    """The Markdown summary; `figure_src(path)` gives each image's link (relative path)."""
    template = _template_environment(False).get_template("summary.md.j2")
    return template.render(
        doc=document,
        generated_from=generated_from,
        table=table_markdown,
        figure_src=figure_src,
        md=_md_escape,
    )


def _md_escape(text: str) -> str:
    """Text safe in Markdown: `*` would start emphasis and `<` an HTML tag (kernel names
    such as `FillFunctor<float>`); underscores inside words are literal in CommonMark."""
    return re.sub(r"([*])", r"\\\1", str(text)).replace("<", "&lt;")


# ------------------------------------------------------------------------------------------
# The edges: results folders in, files out.
# ------------------------------------------------------------------------------------------
# Resolution of the machine-comparison figure (the run figures use their own).
MACHINES_FIGURE_DPI = 120


def data_uri(path: str | os.PathLike) -> str:
    """The file as a `data:` URI, so the HTML needs nothing beside itself."""
    mime = mimetypes.guess_type(os.fspath(path))[0] or "application/octet-stream"
    try:
        payload = Path(path).read_bytes()
    except FileNotFoundError:
        raise NnperfError(f"figure {os.fspath(path)!r}: file not found") from None
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def relative_link(path: str | os.PathLike, document: str | os.PathLike) -> str:
    """`path` relative to the folder of `document`, with forward slashes (Markdown links)."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(Path(document).parent))
    return Path(relative).as_posix()


def render_files(
    request: ReportRequest,
    local: results.FolderFiles,
    figures: Sequence[str | os.PathLike] | None,
    out_html: str | os.PathLike,
    out_md: str | os.PathLike,
    note_sources: Sequence[str] = (),
    rendered_at_unix: float | None = None,
) -> Document:
    """Write the summary of this machine's files and `request.extra_results` as HTML
    (self-contained: CSS inline, figures as data URIs) and Markdown (figures linked).

    `figures` None means every PNG under each folder's `figures/`; `note_sources` are the
    files `request.notes` came from, listed under the Notes section's sources;
    `rendered_at_unix` (now when None) ends the study's span.
    """
    if request.cv_threshold <= 0:
        raise NnperfError(
            f"cv_threshold {request.cv_threshold}: must be > 0 (config report.cv_threshold)"
        )
    folders = results.with_extra_results(local, request.extra_results)
    loaded = results.load(folders)
    shown = results.figures(folders) if figures is None else [os.fspath(f) for f in figures]
    sources = dict(loaded.sources)
    if note_sources:
        sources["notes"] = list(note_sources)
    inputs = ReportInputs(
        summary=loaded.summary,
        runs=loaded.runs,
        windows=loaded.windows,
        kernels=loaded.kernels,
        roofline_points=loaded.roofline_points,
        profiles=loaded.profiles,
        training=loaded.training,
        environment=loaded.environment,
        complexity=loaded.complexity,
        ceilings=loaded.ceilings,
        jobs=loaded.jobs,
        opprofiles=loaded.opprofiles,
        figures=shown,
        notes=list(request.notes),
        sources=sources,
    )
    document = build_document(
        inputs,
        title=request.title,
        description=request.description,
        cv_threshold=request.cv_threshold,
        rendered_at_unix=rendered_at_unix,
    )
    origin = "the files listed under Sources in each section"
    html = render_html(document, data_uri, origin)
    markdown = render_markdown(document, lambda path: relative_link(path, out_md), origin)
    for path, text in ((out_html, html), (out_md, markdown)):
        with files.atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    print(
        f"render-report: {len(document.sections)} sections, {len(shown)} figures, "
        f"{len(document.machines)} machine(s) -> {os.fspath(out_html)}, {os.fspath(out_md)}"
    )
    return document


def compare_machines(
    request: ReportRequest,
    local: results.FolderFiles,
    out_csv: str | os.PathLike,
    out_figure: str | os.PathLike,
) -> pd.DataFrame:
    """This machine's summary merged with `request.extra_results`' (a `machine` column on
    every row) and the figure of throughput per machine. Returns the merged summary."""
    # Imported here: seaborn costs a second and rendering the summary does not draw.
    import matplotlib.pyplot as plt

    from nnperf.report.plots.machines import throughput_by_machine

    loaded = results.load(results.with_extra_results(local, request.extra_results))
    if loaded.summary is None:
        raise NnperfError(
            "compare-machines: no summary.csv in any results folder; run the timed runs "
            "(rule aggregate_runs) first"
        )
    files.write_csv(out_csv, loaded.summary)
    grid = throughput_by_machine(loaded.summary, loaded.runs)
    try:
        with files.atomic_path(out_figure) as tmp:
            grid.figure.savefig(tmp, dpi=MACHINES_FIGURE_DPI, bbox_inches="tight", format="png")
    finally:
        plt.close(grid.figure)
    print(
        f"compare-machines: {len(loaded.summary)} configurations on "
        f"{loaded.summary['machine'].nunique()} machine(s) -> {os.fspath(out_csv)}, "
        f"{os.fspath(out_figure)}"
    )
    return loaded.summary
