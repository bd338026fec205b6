"""The Operators, layers and memory section: what each torch.profiler profile says. Findings
are what its tables (step, top operators and layers, peak memory) cannot say: what bounds the
step and what to try, the memory headroom, the input's cost, or why the profile did not run."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import CONFIG_KEYS
from nnperf.core.wording import missing
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, KEY_LABELS, MIB, MS, cells, fmt, fmt_pct, shorten
from nnperf.report.format import sort_configs
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.input_verdict import INPUT_BOUND_SHARE
from nnperf.report.wording.templates import PHASE_LABELS
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

# A profiled step this much slower than the timed runs' step was slowed by recording it
# (every operator, its shapes and allocations): the host's side of its breakdown is then
# overstated, and the report says so next to the verdict.
PROFILER_SLOWDOWN_NOTE = 1.25


def _remedy(document: Mapping, verdict: str) -> str:
    """What to try: the input pipeline first when it takes a quarter of a step the host waits
    on; a larger batch for a compiled variant still host- or overhead-bound."""
    waiting = verdict in (analysis.HOST_BOUND, analysis.OVERHEAD_BOUND, analysis.MIXED)
    input_share = (document.get("summary") or {}).get("input_share")
    if waiting and not missing(input_share) and float(input_share) >= INPUT_BOUND_SHARE:
        return "input"
    compiled = (document.get("variant_settings") or {}).get("compile")
    if compiled and verdict in (analysis.HOST_BOUND, analysis.OVERHEAD_BOUND):
        return "compiled"
    return verdict


def _about(document: Mapping, machine: str | None, **more) -> dict:
    return {**{k: document.get(k) for k in CONFIG_KEYS}, "machine": machine, **more}


def bound_record(document: Mapping, machine: str | None = None) -> Finding | None:
    """Host- or device-bound (on the CPU: operator- or overhead-bound), and the evidence."""
    summary = document.get("summary") or {}
    verdict, share = summary.get("bound"), summary.get("bound_share")
    if document.get("status") != "ok" or verdict is None or missing(share):
        return None
    timed, ratio = summary.get("timed_step_time_s"), summary.get("profiled_over_timed")
    about = _about(document, machine, verdict=verdict, busy_kind=summary.get("busy_kind"))
    about.update(remedy=_remedy(document, verdict), step_source="timed" if timed else "profiled")
    about["slowed"] = not missing(ratio) and float(ratio) >= PROFILER_SLOWDOWN_NOTE
    numbers = {k: summary.get(k) for k in BOUND_NUMBERS}
    numbers.update(share=share, step_s=timed or summary.get("step_time_s"))
    return Finding("profile_bound", about, numbers)


BOUND_NUMBERS = (
    *("busy_time_s", "step_time_s_mean", "device_busy_time_s", "host_dispatch_time_s"),
    *("launch_time_s", "input_share", "profiled_over_timed"),
)

MEMORY_NUMBERS = ("peak_allocated_bytes", "max_batch_size", "device_total_bytes", "per_image_bytes")


def memory_record(document: Mapping, machine: str | None = None) -> Finding | None:
    memory = document.get("memory") or {}
    if document.get("status") != "ok" or not memory.get("peak_allocated_bytes"):
        return None
    phase = memory.get("peak_phase")
    numbers = {c: memory.get(f"{c}_bytes") for c in MEMORY_CATEGORIES}
    numbers.update({k: memory.get(k) for k in MEMORY_NUMBERS})
    numbers["estimate_bytes"] = document.get("saved_activation_estimate_bytes")
    about = _about(document, machine, phase=PHASE_LABELS.get(phase, phase))
    return Finding("profile_memory", about, numbers)


def input_record(document: Mapping, machine: str | None = None) -> Finding | None:
    summary = document.get("summary") or {}
    if document.get("status") != "ok" or missing(summary.get("input_time_s")):
        return None
    settings = document.get("variant_settings") or {}
    loader = settings.get("data_path", "dataloader") == "dataloader"
    share = summary.get("input_share")
    numbers = {k: summary.get(k) for k in ("input_time_s", "data_wait_s", "h2d_s", "input_share")}
    numbers["workers"] = int(settings.get("num_workers") or 0) if loader else None
    bound = not missing(share) and float(share) >= INPUT_BOUND_SHARE
    return Finding("profile_input", _about(document, machine, input_bound=bound), numbers)


def profile_records(document: Mapping, machine: str | None = None) -> list[Finding]:
    status = document.get("status")
    if status != "ok":
        error = str(document.get("error") or "").rstrip(".")
        return [Finding("profile_missing", _about(document, machine, status=status, error=error))]
    found = [f(document, machine) for f in (bound_record, memory_record, input_record)]
    for note in document.get("notes") or []:
        coded = isinstance(note, Mapping)
        about = _about(document, machine, note=note.get("code") if coded else note)
        found.append(Finding("profile_note", about, note if coded else {}))
    return [f for f in found if f is not None]


INTRO = (
    "A few training steps of each configuration under torch.profiler, after warm-up "
    "and apart from the timed runs: the operators and layers the step spends its time in "
    "(host self time beside the device time of the kernels they launch), how busy the "
    "device is over the step (on a CPU: the share of the step inside operators) and so "
    "whether the host or the device bounds it, and what the peak memory holds. Each "
    "profile's trace (`.pt.trace.json.gz` beside its tables under results/opprofiles/) "
    "opens in Perfetto and TensorBoard."
)


def _profile_keys(document: dict) -> dict:
    return {KEY_LABELS[k]: document.get(k) for k in GROUP_KEYS}


def _busy(kind, share) -> str | None:
    if missing(share):
        return None
    return f"{'device' if kind == 'device' else 'operators'} {fmt_pct(share)}"


STEP_COLUMNS = {
    "Status": ("status", lambda status: str(status).replace("_", " ")),
    "Profiled steps": ("profiled_steps", int),
    "Profiled step (ms)": ("step_time_s", MS),
    "Timed step (ms)": ("timed_step_time_s", MS),
    "Busy": (("busy_kind", "bound_share"), _busy),
    "Step is": ("bound", str),
    "Host dispatch (ms)": ("host_dispatch_time_s", MS),
    "Input (ms)": ("input_time_s", MS),
    "Peak memory (MiB)": ("peak_allocated_bytes", MIB),
    "Largest batch that fits": ("max_batch_size", int),
}
MEMORY_COLUMNS = {
    "Peak (MiB)": ("peak_allocated_bytes", MIB),
    **{label.capitalize(): (f"{c}_bytes", MIB) for c, label in CATEGORY_LABELS.items()},
    "Saved activations, complexity estimate": ("saved_activation_estimate_bytes", MIB),
}
TOP_COLUMNS = {"Host (ms)": ("host_time", MS), "Device (ms)": ("device_time", MS)}
TOP_COLUMNS["Share"] = ("share", fmt_pct)
TOP_EXTRA_COLUMNS = {
    "operators": {
        "Calls per step": ("calls_per_step", fmt),
        "Input shapes": (("input_shapes",), lambda shapes: shorten(str(shapes or ""), 60)),
    },
    "layers": {"Forward (ms)": ("forward", MS), "Backward (ms)": ("backward", MS)},
}


def profile_rows(profiles: Sequence, spec, with_memory: bool = False) -> pd.DataFrame:
    """`spec` over each profile's document, summary and memory."""
    rows = [
        {**p.document, **(p.document.get("summary") or {}), **(p.document.get("memory") or {})}
        for p in profiles
    ]
    rows = [r for r in rows if r.get("peak_allocated_bytes") or not with_memory]
    return cells(pd.DataFrame(rows), spec, pd.DataFrame([_profile_keys(r) for r in rows]))


def top_operators_display(profiles: Sequence, table: str, limit: int | None = None) -> pd.DataFrame:
    """The top rows of each profile's `operators` or `layers` table, by device time if any."""
    name = "operator" if table == "operators" else "layer"
    tops = []
    for profile in profiles:
        d, frame = profile.document, profile.tables.get(table)
        if frame is None or frame.empty:
            continue
        n = limit or int((d.get("settings") or {}).get("top_operators", 10))
        column = analysis.time_column(frame)
        top = analysis.top(frame, n, column)
        # An operator's own time (self), not its children's; a layer's all of it.
        own = "_self" if "host_self_time_s" in frame else ""
        times = {"host_time": f"host{own}_time_s", "device_time": f"device{own}_time_s"}
        times.update(share=column.replace("_time_s", "_share"), forward=f"forward_{column}")
        times["backward"] = f"backward_{column}"
        ranked = {**_profile_keys(d), "#": range(1, len(top) + 1)}
        ranked[name.capitalize()] = top[name].map(lambda v: shorten(str(v), 60))
        tops.append(top.assign(**ranked, **{k: top.get(c) for k, c in times.items()}))
    frame = pd.concat(tops, ignore_index=True) if tops else pd.DataFrame()
    first = [*(KEY_LABELS[k] for k in GROUP_KEYS), "#", name.capitalize()]
    spec = {**TOP_COLUMNS, **TOP_EXTRA_COLUMNS[table]}
    return cells(frame, spec, frame[first] if not frame.empty else None)


def build(page: Page) -> Section | None:
    opprofiles = page.tables.opprofiles
    if not opprofiles:
        return None
    keys = pd.DataFrame([p.document for p in opprofiles], columns=list(GROUP_KEYS))
    profiles = [opprofiles[i] for i in sort_configs(keys.astype({"batch_size": int})).index]
    documents = [p.document for p in profiles]
    memory = page.drop(profile_rows(profiles, MEMORY_COLUMNS, with_memory=True))
    return section(
        "operators",
        "Operators, layers and memory",
        intro=INTRO,
        findings=[f for d in documents for f in profile_records(d, d.get("machine"))],
        tables=(
            Table("Where each profiled step goes", page.drop(profile_rows(profiles, STEP_COLUMNS))),
            Table("Top operators", page.drop(top_operators_display(profiles, "operators"))),
            Table("Top layers", page.drop(top_operators_display(profiles, "layers"))),
            Table("Peak memory by category (MiB)", memory),
        ),
        figures=page.figures_of("operators"),
        sources=page.sources("opprofiles"),
    )
