"""The Operators, layers and memory section: what each torch.profiler profile says.

Findings are the sentences the tables cannot say (what bounds the step and what to try, the
memory headroom, the input pipeline's cost), or a profile's one status note when it did not
run; the tables hold its step, top operators and layers and peak memory by category. What
the numbers are is `nnperf.torchprof.analysis`'.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import precision_rank
from nnperf.core.wording import missing
from nnperf.report.configurations import GROUP_KEYS, KEY_LABELS
from nnperf.report.format import (
    config_text,
    fmt,
    fmt_pct,
    fmt_si,
    fmt_times,
    MIB,
    MS,
    cells,
    shorten,
)
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.sections.breakdown import INPUT_BOUND_SHARE, PHASE_LABELS
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

# A profiled step this much slower than the timed runs' step was slowed by recording it
# (every operator, its shapes and allocations): the host's side of its breakdown is then
# overstated, and the report says so next to the verdict.
PROFILER_SLOWDOWN_NOTE = 1.25


# What to try, by verdict (sentences end with it).
REMEDIES = {
    analysis.HOST_BOUND: (
        "faster kernels cannot help until the host issues work faster: a larger batch, "
        "CUDA graphs (compile mode reduce-overhead) or fewer, fused operators do"
    ),
    analysis.DEVICE_BOUND: (
        "only faster kernels (precision, memory layout, algorithms) or less work make it faster"
    ),
    analysis.MIXED: "both the kernels and the host's dispatch matter",
    analysis.OPERATOR_BOUND: (
        "faster kernels, a precision the CPU computes natively or less work help, not less "
        "overhead"
    ),
    analysis.OVERHEAD_BOUND: (
        "a larger batch or fewer, fused operators (torch.compile) help more than faster kernels"
    ),
}


# A compiled variant already fuses operators (and with reduce-overhead, replays CUDA graphs):
# what is left to try when it is still host- or overhead-bound.
COMPILED_REMEDY = "a larger batch helps more than faster kernels"


# When the input pipeline takes this much of a step the host or the operators wait on, it is
# the first thing to fix (the input-bound threshold of the timed runs' findings).
INPUT_REMEDY = "the input pipeline comes first: it alone takes {share} of the step"


def _remedy(document: Mapping, verdict: str) -> str:
    """What to try for a step with this verdict."""
    waiting = verdict in (analysis.HOST_BOUND, analysis.OVERHEAD_BOUND, analysis.MIXED)
    input_share = (document.get("summary") or {}).get("input_share")
    if waiting and not missing(input_share) and float(input_share) >= INPUT_BOUND_SHARE:
        return INPUT_REMEDY.format(share=fmt_pct(input_share))
    compiled = (document.get("variant_settings") or {}).get("compile")
    if compiled and verdict in (analysis.HOST_BOUND, analysis.OVERHEAD_BOUND):
        return COMPILED_REMEDY
    return REMEDIES[verdict]


def _where(document: Mapping, machine: str | None) -> str:
    return f"{config_text(document)} on {machine or document['device']}"


def _ms(seconds) -> str:
    return "n/a" if missing(seconds) else fmt(float(seconds) * 1e3, "ms")


def _bytes(value) -> str:
    return fmt_si(value, "B")


def status_note(document: Mapping, machine: str | None = None) -> str | None:
    """The one note of a profile that did not run (None for one that did)."""
    status = document.get("status")
    if status == "ok":
        return None
    error = str(document.get("error") or "").rstrip(".")
    where = _where(document, machine)
    if status == "unsupported":
        return f"No operator profile for {where}: the profiler cannot run there ({error})."
    if status == "over_budget":
        return (
            f"No operator profile for {where}: {error}; raise operator_profile.max_seconds "
            "to profile it."
        )
    if status == "oom":
        return f"No operator profile for {where}: it ran out of memory ({error})."
    return f"No operator profile for {where}: status {status} ({error})."


def bound_sentence(document: Mapping, machine: str | None = None) -> str | None:
    """Host-bound or device-bound (on the CPU: operator- or overhead-bound), with the busy
    share it rests on, the host's dispatch time and the check against the timed runs."""
    summary = document.get("summary") or {}
    verdict, share = summary.get("bound"), summary.get("bound_share")
    if document.get("status") != "ok" or verdict is None or missing(share):
        return None
    where = _where(document, machine)
    step = summary.get("timed_step_time_s") or summary.get("step_time_s")
    step_source = "timed" if summary.get("timed_step_time_s") else "profiled"
    if summary.get("busy_kind") == analysis.BUSY_HOST:
        text = (
            f"On {machine or document['device']}, {config_text(document)} spends "
            f"{fmt_pct(share)} of its step inside operators "
            f"({_ms(summary.get('busy_time_s'))} of {_ms(summary.get('step_time_s_mean'))} "
            "per profiled step, on average); the "
            f"rest is Python and framework work between them, or waiting for data: the step "
            f"is {verdict}; {_remedy(document, verdict)}"
        )
    else:
        busy = "busy" if verdict == analysis.DEVICE_BOUND else "busy only"
        text = (
            f"{where} is {verdict}: the device is {busy} {fmt_pct(share)} of the step "
            f"({_ms(summary.get('device_busy_time_s'))} of kernels in a {_ms(step)} "
            f"{step_source} step), and the host spends "
            f"{_ms(summary.get('host_dispatch_time_s'))} per step issuing work "
            f"({_ms(summary.get('launch_time_s'))} of it in launch calls); "
            f"{_remedy(document, verdict)}"
        )
    ratio = summary.get("profiled_over_timed")
    if not missing(ratio) and float(ratio) >= PROFILER_SLOWDOWN_NOTE:
        text += (
            f". Recording the profile slowed the step {fmt_times(ratio)} against the timed "
            "runs, so the host's share is overstated here"
        )
    return text + "."


def memory_sentence(document: Mapping, machine: str | None = None) -> str | None:
    """The peak and its split, the complexity stage's activation estimate beside the
    measured activations, and how much larger a batch would fit."""
    memory = document.get("memory") or {}
    peak = memory.get("peak_allocated_bytes")
    if document.get("status") != "ok" or not peak:
        return None
    parts = ", ".join(
        f"{CATEGORY_LABELS[c]} {_bytes(memory.get(f'{c}_bytes'))} "
        f"({fmt_pct(memory.get(f'{c}_bytes', 0) / peak)})"
        for c in MEMORY_CATEGORIES
    )
    phase = memory.get("peak_phase")
    when = f" during its {PHASE_LABELS.get(phase, phase)} phase" if phase else ""
    text = f"{_where(document, machine)} peaks at {_bytes(peak)} allocated{when}: {parts}"
    estimate = document.get("saved_activation_estimate_bytes")
    if not missing(estimate):
        text += (
            f"; the complexity stage counts {_bytes(estimate)} of saved activations at this "
            "batch size (fp32)"
        )
    largest, total = memory.get("max_batch_size"), memory.get("device_total_bytes")
    if not missing(largest) and total:
        batch = int(document["batch_size"])
        if int(largest) > batch:
            text += (
                f". Of the device's {_bytes(total)}, a batch of about {fmt(largest)} "
                f"({fmt(largest / batch)}x this one) would fit, if everything but "
                f"parameters, gradients, optimizer state and buffers grows with the batch "
                f"({_bytes(memory.get('per_image_bytes'))} per image)"
            )
        else:
            text += f". No larger batch fits in the device's {_bytes(total)}"
    return text + "."


def input_pipeline_sentence(document: Mapping, machine: str | None = None) -> str | None:
    """What feeding the step costs: fetching batches (`data_wait`) and copying them to the
    device (`h2d`), per step and as a share of it; flagged when it is a quarter or more."""
    summary = document.get("summary") or {}
    if document.get("status") != "ok" or missing(summary.get("input_time_s")):
        return None
    settings = document.get("variant_settings") or {}
    if settings.get("data_path", "dataloader") == "dataloader":
        workers = int(settings.get("num_workers") or 0)
        how = f"a DataLoader with {workers} worker{'s' if workers != 1 else ''}"
    else:
        how = "batches drawn on the device"
    share = summary.get("input_share")
    text = (
        f"The input pipeline of {_where(document, machine)} ({how}) costs "
        f"{_ms(summary['input_time_s'])} per step ({fmt_pct(share)} of the step): "
        f"{_ms(summary.get('data_wait_s'))} fetching batches and "
        f"{_ms(summary.get('h2d_s'))} copying and preparing them"
    )
    if not missing(share) and float(share) >= INPUT_BOUND_SHARE:
        text += "; the step waits on its input more than on anything a faster kernel can fix"
    return text + "."


def note_sentences(document: Mapping, machine: str | None = None) -> list[str]:
    """The profile's own notes (missing device activity, steps cut to the budget)."""
    where = _where(document, machine)
    return [f"Operator profile of {where}: {note}." for note in document.get("notes") or []]


def profile_findings(document: Mapping, machine: str | None = None) -> list[str]:
    """Every sentence of one profile, in the report's order (or its one status note)."""
    note = status_note(document, machine)
    if note is not None:
        return [note]
    sentences = [
        bound_sentence(document, machine),
        memory_sentence(document, machine),
        input_pipeline_sentence(document, machine),
    ]
    return [s for s in sentences if s] + note_sentences(document, machine)


INTRO = (
    "A few training steps of each configuration under torch.profiler, after warm-up "
    "and apart from the timed runs: the operators and layers the step spends its time in "
    "(host self time beside the device time of the kernels they launch), how busy the "
    "device is over the step (on a CPU: the share of the step inside operators) and so "
    "whether the host or the device bounds it, and what the peak memory holds. Each "
    "profile's trace (`.pt.trace.json.gz` beside its tables under results/opprofiles/) "
    "opens in Perfetto and TensorBoard."
)


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
    return {KEY_LABELS[k]: document.get(k) for k in GROUP_KEYS}


def _busy(kind, share) -> str | None:
    if missing(share):
        return None
    return f"{'device' if kind == 'device' else 'operators'} {fmt_pct(share)}"


# One row per operator profile: how its step splits between busy and waiting, what that
# makes of it, and its peak memory and batch headroom.
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
# Each profile's peak memory by category (MiB), beside the complexity stage's
# saved-activation estimate.
MEMORY_COLUMNS = {
    "Peak (MiB)": ("peak_allocated_bytes", MIB),
    **{label.capitalize(): (f"{c}_bytes", MIB) for c, label in CATEGORY_LABELS.items()},
    "Saved activations, complexity estimate": ("saved_activation_estimate_bytes", MIB),
}
TOP_COLUMNS = {
    "Host (ms)": ("host_time", MS),
    "Device (ms)": ("device_time", MS),
    "Share": ("share", fmt_pct),
}


def profile_rows(profiles: Sequence, spec, with_memory: bool = False) -> pd.DataFrame:
    """`spec` over one row per profile (`with_memory`: per profile that recorded its memory):
    its document's fields, summary and memory."""
    rows = []
    for profile in profiles:
        d = profile.document
        values = {**d, **(d.get("summary") or {}), **(d.get("memory") or {})}
        if with_memory and not values.get("peak_allocated_bytes"):
            continue
        rows.append(values)
    frame = pd.DataFrame(rows)
    return cells(frame, spec, pd.DataFrame([_profile_keys(r) for r in rows]))


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
        column = analysis.time_column(frame)
        share = column.replace("_time_s", "_share")
        for rank, row in enumerate(analysis.top(frame, n, column).to_dict("records"), 1):
            rows.append(
                {
                    **_profile_keys(d),
                    "#": rank,
                    name.capitalize(): shorten(str(row[name]), 60),
                    "host_time": row.get("host_self_time_s", row.get("host_time_s")),
                    "device_time": row.get("device_self_time_s", row.get("device_time_s")),
                    "share": row.get(share),
                    "calls": row.get("calls_per_step"),
                    "shapes": shorten(str(row.get("input_shapes") or ""), 60),
                    "forward": row.get("forward_" + column),
                    "backward": row.get("backward_" + column),
                }
            )
    frame = pd.DataFrame(rows)
    spec = {**TOP_COLUMNS}
    if table == "operators":
        spec.update({"Calls per step": ("calls", fmt), "Input shapes": ("shapes", str)})
    else:
        spec.update({"Forward (ms)": ("forward", MS), "Backward (ms)": ("backward", MS)})
    first = [*(KEY_LABELS[k] for k in GROUP_KEYS), "#", name.capitalize()]
    return cells(frame, spec, frame[first] if not frame.empty else None)


def build(page: Page) -> Section | None:
    """Where each profiled step's time and memory go, from its torch.profiler profile."""
    if not page.tables.opprofiles:
        return None
    profiles = sorted_opprofiles(page.tables.opprofiles)
    findings = [
        sentence
        for profile in profiles
        for sentence in profile_findings(profile.document, profile.document.get("machine"))
    ]
    return section(
        "operators",
        "Operators, layers and memory",
        intro=INTRO,
        findings=findings,
        tables=(
            Table("Where each profiled step goes", page.drop(profile_rows(profiles, STEP_COLUMNS))),
            Table("Top operators", page.drop(top_operators_display(profiles, "operators"))),
            Table("Top layers", page.drop(top_operators_display(profiles, "layers"))),
            Table(
                "Peak memory by category (MiB)",
                page.drop(profile_rows(profiles, MEMORY_COLUMNS, with_memory=True)),
            ),
        ),
        figures=page.figures_of("operators"),
        sources=page.sources("opprofiles"),
    )
