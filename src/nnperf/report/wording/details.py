"""The detail sections' findings in words (`nnperf.report.findings.DETAIL_KINDS`): the Roofline,
Ceilings and Top kernels sections', an operator profile's (torch.profiler), and the Input
pipeline, Time breakdown and Time to accuracy sections'."""

from __future__ import annotations

from typing import Mapping

from nnperf.core.wording import missing
from nnperf.report.comparisons import interval_cell, names
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, estimate_text, fmt, fmt_pct, fmt_si, fmt_times
from nnperf.report.format import int_cell, throughput_text
from nnperf.report.wording.templates import say
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

# Why a roof a step point beat is under-measured: a bandwidth roof, or by where the compute
# roof came from.
UNDER = {
    "bandwidth": "caches serve part of the traffic the point's bytes count (analytic bytes "
    "assume no reuse), or the bandwidth benchmark under-measured the memory",
    "measured": "{gemm} does not reach this {a[device]:upper}'s peak",
    "derived": "a derived peak is cores x clock x FLOP/cycle, and the clock it used{used} is "
    "below what the cores ran at",
    "datasheet": "the config/peaks.yaml entry does not fit this device, or the FLOPs are "
    "overcounted",
    None: "the profile's peak_sustained x clock is too low, or the FLOPs are overcounted",
}


def _why_under(f: Finding) -> str:
    a, n = f.about, f.numbers
    roof = "bandwidth" if a["against"] == "bandwidth" else a["roof"]
    return say(
        UNDER.get(roof, UNDER[None]),
        f,
        gemm=f"a {n['gemm_size']}³ GEMM" if n.get("gemm_size") else "the ceilings stage's GEMM",
        used=say(" ({n[clock_hz]:ghz}, {a[clock_source]})", f) if n.get("clock_hz") else "",
    )


def above_roof(f: Finding, named=None) -> str:
    a = f.about
    if a["against"] == "bandwidth":
        what = f"{a['roof']} {a['level']} bandwidth roof at its intensity"
    else:
        what = f"{a['roof']} {a['precision']} {'GEMM roof' if a['roof'] == 'measured' else 'peak'}"
    return say(
        "{a:config} on {a[machine]} reached {n[performance_flop_s]:si:FLOP/s}, "
        "{n[above_fraction]:pct} of the {n[above_value]:si:FLOP/s} {what}: the roof is "
        "under-measured ({why}).",
        f,
        what=what,
        why=_why_under(f),
    )


def _evidence(f: Finding) -> str:
    a, found = f.about, []
    if a.get("larger"):
        found.append(
            "batch {a[larger][batch_size]:int} already reaches {n[larger_img_s]:n:img/s}, "
            "{n[larger_ratio]:x} batch {a[batch_size]:int}"
        )
    if a.get("compiled"):
        found.append(
            "the compiled variant {a[compiled][variant]!r} reaches {n[compiled_img_s]:n:img/s}, "
            "{n[compiled_ratio]:x} {a[variant]!r}"
        )
    return say("; in this study " + " and ".join(found), f) if found else ""


# The GPU busy share's verdict in words, after the shares it rests on.
BUSY = {
    "host-bound": ": host-bound — for the rest of the step the GPU waits on Python, the "
    "framework and kernel launches, so faster kernels would not shorten it. Remedies: capture "
    "the step in CUDA graphs (variant setting compile: reduce-overhead) or raise the batch size "
    "(more work per launch){evidence}.",
    "device-bound": ": device-bound — the kernels are the step; faster kernels (a lower "
    "precision, fusion, channels-last) shorten it, host-side tuning does not.{slower}",
    "partly": " and at most {n[busy_share_at_profiled_clock]:pct}: partly host-bound — some of "
    "the step is spent waiting on the host, some on the kernels.",
}
SLOWER = (
    " A share above 100% means the profiled kernels ran slower than in the timed runs (ncu "
    "flushes caches before each kernel; memory-bound kernels gain less from the clock than the "
    "scaling assumes)."
)


def gpu_busy(f: Finding, named=None) -> str:
    """Host-bound (with the remedies the study's own numbers support), device-bound, partly
    host-bound, or unknown (no timed step, or no SM clock of the timed runs)."""
    a, n = f.about, f.numbers
    head = "{a:config} on {a[machine]}: "
    if a["verdict"] == "unknown":
        return say(
            head + "its profiled step has {n[kernel_time_s]:ms} of kernels at "
            "{n[profiled_sm_clock_hz]:ghz}, but "
            + (
                "no timed step to compare them with, so the GPU's busy share is unknown."
                if missing(n["step_time_s"])
                else "the timed windows recorded no SM clock (NVML, package nvidia-ml-py), so "
                "only an upper estimate is known: the GPU is busy at most "
                "{n[busy_share_at_profiled_clock]:pct} of the step."
            ),
            f,
        )
    share = n["busy_share"]
    slower = SLOWER if not missing(share) and float(share) > 1 else ""
    return say(
        head + "the GPU is busy {n[busy_share]:pct} of the timed step "
        "({n[kernel_time_at_run_clock_s]:ms} of kernels at the runs' {n[run_sm_clock_hz]:ghz}, "
        "{n[kernel_time_s]:ms} at the profiled {n[profiled_sm_clock_hz]:ghz}, in a "
        "{n[step_time_s]:ms} step)" + BUSY.get(a["verdict"], BUSY["partly"]),
        f,
        evidence=_evidence(f) if a["verdict"] == "host-bound" else "",
        slower=slower,
    )


def above_peak(f: Finding, named=None) -> str:
    """A benchmark cannot beat the device's peak: the peak is too low."""
    why = (
        "its clock is below the clock the cores ran at (boost), or the FLOP/cycle table "
        "under-counts this core"
        if f.about["origin"] == "derived"
        else "check its config/peaks.yaml entry (dense vs sparse figure, the board variant)"
    )
    return say(
        "{a[machine]}: the measured {a[roof]} ({n[measured]:si:{a[unit]}}) is {n[ratio]:pct} of "
        "the {a[origin]} peak ({n[peak]:si:{a[unit]}}): that peak is too low — {why}.",
        f,
        why=why,
    )


ROOFLINE = {
    "null_peak": "{a[where]}: no {a[origin]} {a[precision]} peak, {a[reason]}.",
    "kernel_kind": "{a:config} on {a[machine]}: {a[kind]} kernels take {n[share]:pct} of the "
    "profiled step.",
}


# What to try, by the remedy code of a `profile_bound` record (sentences end with it).
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
    # A compiled variant already fuses operators (and replays CUDA graphs).
    "compiled": "a larger batch helps more than faster kernels",
    "input": "the input pipeline comes first: it alone takes {n[input_share]:pct} of the step",
}

# A profile's own notes (`nnperf.torchprof.profile.NOTE_CODES`).
PROFILE_NOTES = {
    "mps_no_kernels": "torch.profiler records no MPS kernels: device time, device busy share "
    "and host-bound/device-bound are not available on mps",
    "no_cuda_kernels": "the profiler recorded no CUDA kernels (CUPTI unavailable or failed to "
    "initialise: see the job's log); device time and busy share are missing",
    "layers_fused": "compiled model: operators are not grouped by layer (layers are fused)",
    "steps_cut": "cut to {warmup_steps} warm-up and {profiled_steps} profiled steps to fit "
    "operator_profile.max_seconds = {max_seconds:g} s",
}


def profile_missing(f: Finding, named=None) -> str:
    status = f.about["status"]
    return say("No operator profile for {a:where}: " + MISSING.get(status, MISSING[None]), f)


# Why no profile ran, by its status.
MISSING = {
    "unsupported": "the profiler cannot run there ({a[error]}).",
    "over_budget": "{a[error]}; raise operator_profile.max_seconds to profile it.",
    "oom": "it ran out of memory ({a[error]}).",
    None: "status {a[status]} ({a[error]}).",
}


def profile_bound(f: Finding, named=None) -> str:
    """Host- or device-bound (on the CPU: operator- or overhead-bound) with the busy share it
    rests on, the host's dispatch time, what to try and whether profiling slowed the step."""
    a = f.about
    if a["busy_kind"] == analysis.BUSY_HOST:
        text = (
            "On {machine}, {a:config} spends {n[share]:pct} of its step inside operators "
            "({n[busy_time_s]:ms} of {n[step_time_s_mean]:ms} per profiled step, on average); "
            "the rest is Python and framework work between them, or waiting for data: the step "
            "is {a[verdict]}; "
        )
    else:
        text = (
            "{a:where} is {a[verdict]}: the device is {busy} {n[share]:pct} of the step "
            "({n[device_busy_time_s]:ms} of kernels in a {n[step_s]:ms} {a[step_source]} step), "
            "and the host spends {n[host_dispatch_time_s]:ms} per step issuing work "
            "({n[launch_time_s]:ms} of it in launch calls); "
        )
    if a.get("slowed"):
        text += (
            "{remedy}. Recording the profile slowed the step {n[profiled_over_timed]:x} against "
            "the timed runs, so the host's share is overstated here."
        )
    return say(
        text if a.get("slowed") else text + "{remedy}.",
        f,
        machine=a.get("machine") or a["device"],
        busy="busy" if a["verdict"] == analysis.DEVICE_BOUND else "busy only",
        remedy=say(REMEDIES[a["remedy"]], f),
    )


def profile_memory(f: Finding, named=None) -> str:
    """The peak and its split, the complexity stage's activation estimate beside the
    measured activations, and how much larger a batch would fit."""
    a, n = f.about, f.numbers
    peak = n["peak_allocated_bytes"]
    parts = ", ".join(
        f"{CATEGORY_LABELS[c]} {fmt_si(n[c], 'B')} ({fmt_pct((n[c] or 0) / peak)})"
        for c in MEMORY_CATEGORIES
    )
    when = " during its {a[phase]} phase" if a.get("phase") else ""
    text = "{a:where} peaks at {n[peak_allocated_bytes]:si:B} allocated" + when + ": {parts}"
    if not missing(n["estimate_bytes"]):
        text += (
            "; the complexity stage counts {n[estimate_bytes]:si:B} of saved activations at "
            "this batch size (fp32)"
        )
    largest, total, batch = n["max_batch_size"], n["device_total_bytes"], int(a["batch_size"])
    if not missing(largest) and total and int(largest) > batch:
        text += (
            ". Of the device's {n[device_total_bytes]:si:B}, a batch of about "
            "{n[max_batch_size]:n} ({times}x this one) would fit, if everything but parameters, "
            "gradients, optimizer state and buffers grows with the batch "
            "({n[per_image_bytes]:si:B} per image)"
        )
    elif not missing(largest) and total:
        text += ". No larger batch fits in the device's {n[device_total_bytes]:si:B}"
    return say(text + ".", f, parts=parts, times=fmt(largest / batch) if largest else "")


def profile_input(f: Finding, named=None) -> str:
    """What feeding the step costs; flagged when it is a quarter of the step or more."""
    workers = f.numbers["workers"]
    how = (
        "batches drawn on the device"
        if workers is None
        else f"a DataLoader with {workers} worker{'s' if workers != 1 else ''}"
    )
    text = (
        "The input pipeline of {a:where} ({how}) costs {n[input_time_s]:ms} per step "
        "({n[input_share]:pct} of the step): {n[data_wait_s]:ms} fetching batches and "
        "{n[h2d_s]:ms} copying and preparing them"
    )
    if f.about["input_bound"]:
        text += "; the step waits on its input more than on anything a faster kernel can fix"
    return say(text + ".", f, how=how)


def profile_note(f: Finding, named=None) -> str:
    note = PROFILE_NOTES.get(f.about["note"])
    note = note.format(**f.numbers) if note else f.about["note"]  # a note from before codes
    return say("Operator profile of {a:where}: {note}.", f, note=note)


def loader_text(row: Mapping) -> str:
    """`12,300 img/s (95% CI 11,900–12,700)`, or `not measured`."""
    if missing(row.get("loader_rate_img_s")):
        return "not measured"
    return throughput_text(
        row.get("loader_rate_img_s"),
        row.get("loader_rate_img_s_ci95_low"),
        row.get("loader_rate_img_s_ci95_high"),
        n_windows=row.get("loader_n_windows"),
        n_processes=row.get("loader_n_processes"),
        method=row.get("loader_ci_method"),
    )


def input_verdicts(f: Finding, named=None) -> str:
    """One sentence: the input-bound configurations once each with both rates and the data
    wait, then the margin of the others and how many are undetermined."""
    a, n = f.about, f.numbers
    total, bound, free, unknown = (int(n[k]) for k in ("total", "bound", "free", "unknown"))

    def where(row: Mapping) -> str:
        return config_text(row) + (f" on {row['machine']}" if n["machines"] > 1 else "")

    named = [
        f"{where(r)} (loader alone {loader_text(r)} against {estimate_text(r)} training; data "
        f"wait {fmt_pct(r.get('data_wait_share'))} of the step)"
        for r in a["named"]
    ]
    if bound > len(a["named"]):
        named.append(f"{bound - len(a['named'])} more (see Input pipeline)")
    parts = []
    if bound:
        parts.append(
            f"Data loading limits {bound} of {total} measured configurations: " + names(named, str)
        )
    margin = (
        f"the loader alone delivers at least {fmt_times(n['headroom'])} the training rate and "
        f"the step waits for data at most {fmt_pct(n['wait'])} of its time"
    )
    if free and bound:
        parts.append(f"it does not limit the other {free} ({margin})")
    elif free == total:
        parts.append(f"Data loading limits none of the {total} measured configurations: {margin}")
    elif free:
        parts.append(
            f"Data loading does not limit {free} of {total} measured configurations ({margin})"
        )
    why = {
        "no_rate": "no loader rate was measured",
        "unsettled": "the loader's interval does not settle it",
    }.get(a.get("why"))
    if unknown and parts:
        parts.append(f"for {unknown} it is undetermined ({why})")
    elif unknown:
        parts.append(
            f"Whether data loading limits the {total} measured configurations is "
            f"undetermined: {why}"
        )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _epochs(value) -> str:
    n = 0 if missing(value) else int(value)
    return f"{n} epoch" + ("" if n == 1 else "s")


def faster_but_later(f: Finding, named=None) -> str:
    """`X trains 1.5x as many images per second as Y (...) but reaches 90% later` (or not
    at all); `about['ci']` the timed runs' ratio, None where it has no interval."""
    a, n = f.about, f.numbers
    interval = {
        "one_run": "one training run each: no interval",
        "no_runs": "no interval: the timed runs' processes are not at hand",
    }.get(a["interval"]) or f"95% CI of the ratio {interval_cell(a['ci'])}"
    text = (
        "{a[run]:config} trains {rate:x} as many images per second as {a[first]:config} "
        "({n[rate]:n:img/s} vs {n[first_rate]:n:img/s}; {interval}) but "
    )
    if n["time_s"] is not None:
        text += (
            "reaches {n[target]:pct} test top-1 later: after {n[time_s]:n:s} of training (epoch "
            "{epochs}) against {n[first_time_s]:n:s} (epoch {first_epochs}), {where}."
        )
    else:
        text += (
            "does not reach {n[target]:pct} test top-1 in {epochs_run} (best {n[best]:pct}), "
            "while {a[first]:config} reaches it in {n[first_time_s]:n:s} of training, {where}."
        )
    return say(
        text,
        f,
        rate=n["rate"] / n["first_rate"],
        interval=interval,
        epochs=int_cell(n.get("epochs")),
        first_epochs=int_cell(n.get("first_epochs")),
        epochs_run=_epochs(n["epochs_run"]),
        where=f"recipe {a['recipe']} on {a['device']}",
    )


WORDING = {
    **ROOFLINE,
    "largest_phase": "On {a[machine]}, {a[phase]:phase} is the largest phase in {n[count]} of "
    "{n[total]} configurations (e.g. {n[share]:pct} of the step for {a:config}).",
    "waits_on_input": "{a:config} on {a[machine]} waits on input for {n[input_share]:pct} of each "
    "step (data wait {n[data_wait_share]:pct}, host-to-device {n[h2d_share]:pct}).",
    "more_waiting": "… and {n[count]} more input-bound configurations on {a[machine]} (see the "
    "table).",
}
