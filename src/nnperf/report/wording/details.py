"""The detail sections' findings in words (`findings.DETAIL_KINDS`): the Roofline, Ceilings, Top
kernels, Operators, Input pipeline, Time breakdown and Time to accuracy sections'."""

from __future__ import annotations

from typing import Mapping

from nnperf.core.wording import count_of, missing
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
# What to check of a peak a benchmark beat, by where the peak came from.
PEAK_TOO_LOW = {
    "derived": "its clock is below the clock the cores ran at (boost), or the FLOP/cycle table "
    "under-counts this core",
    None: "check its config/peaks.yaml entry (dense vs sparse figure, the board variant)",
}
# What in this study supports the host-bound remedies: a larger batch or a compiled variant
# already runs faster.
EVIDENCE = {
    "larger": "batch {a[larger][batch_size]:int} already reaches {n[larger_img_s]:n:img/s}, "
    "{n[larger_ratio]:x} batch {a[batch_size]:int}",
    "compiled": "the compiled variant {a[compiled][variant]!r} reaches "
    "{n[compiled_img_s]:n:img/s}, {n[compiled_ratio]:x} {a[variant]!r}",
}
# The GPU busy share's verdict in words, after the shares it rests on; without one, why not.
BUSY = {
    "host-bound": ": host-bound — for the rest of the step the GPU waits on Python, the "
    "framework and kernel launches, so faster kernels would not shorten it. Remedies: capture "
    "the step in CUDA graphs (variant setting compile: reduce-overhead) or raise the batch size "
    "(more work per launch){evidence}.",
    "device-bound": ": device-bound — the kernels are the step; faster kernels (a lower "
    "precision, fusion, channels-last) shorten it, host-side tuning does not.{slower}",
    "partly": " and at most {n[busy_share_at_profiled_clock]:pct}: partly host-bound — some of "
    "the step is spent waiting on the host, some on the kernels.",
    "no_step": "no timed step to compare them with, so the GPU's busy share is unknown.",
    "no_clock": "the timed windows recorded no SM clock (NVML, package nvidia-ml-py), so only an "
    "upper estimate is known: the GPU is busy at most {n[busy_share_at_profiled_clock]:pct} of "
    "the step.",
    # Kernels that ran slower under the profiler than in the timed runs.
    "slower": " A share above 100% means the profiled kernels ran slower than in the timed runs "
    "(ncu flushes caches before each kernel; memory-bound kernels gain less from the clock than "
    "the scaling assumes).",
}
# What to try, by the remedy code of a `profile_bound` record (sentences end with it).
REMEDIES = {
    analysis.HOST_BOUND: "faster kernels cannot help until the host issues work faster: a "
    "larger batch, CUDA graphs (compile mode reduce-overhead) or fewer, fused operators do",
    analysis.DEVICE_BOUND: "only faster kernels (precision, memory layout, algorithms) or less "
    "work make it faster",
    analysis.MIXED: "both the kernels and the host's dispatch matter",
    analysis.OPERATOR_BOUND: "faster kernels, a precision the CPU computes natively or less work "
    "help, not less overhead",
    analysis.OVERHEAD_BOUND: "a larger batch or fewer, fused operators (torch.compile) help more "
    "than faster kernels",
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
# Why no profile ran, by its status.
MISSING = {
    "unsupported": "the profiler cannot run there ({a[error]}).",
    "over_budget": "{a[error]}; raise operator_profile.max_seconds to profile it.",
    "oom": "it ran out of memory ({a[error]}).",
    None: "status {a[status]} ({a[error]}).",
}
# How a profile is bound, by where its busy share was measured (the host's operators on the CPU,
# the device's kernels elsewhere); `profile_bound` adds the remedy.
BOUND = {
    analysis.BUSY_HOST: "On {machine}, {a:config} spends {n[share]:pct} of its step inside "
    "operators ({n[busy_time_s]:ms} of {n[step_time_s_mean]:ms} per profiled step, on average); "
    "the rest is Python and framework work between them, or waiting for data: the step is "
    "{a[verdict]}; ",
    None: "{a:where} is {a[verdict]}: the device is {busy} {n[share]:pct} of the step "
    "({n[device_busy_time_s]:ms} of kernels in a {n[step_s]:ms} {a[step_source]} step), and the "
    "host spends {n[host_dispatch_time_s]:ms} per step issuing work ({n[launch_time_s]:ms} of it "
    "in launch calls); ",
}
# Whether a larger batch than the profiled one fits in the device's memory.
FITS = {
    True: ". Of the device's {n[device_total_bytes]:si:B}, a batch of about {n[max_batch_size]:n} "
    "({times}x this one) would fit, if everything but parameters, gradients, optimizer state and "
    "buffers grows with the batch ({n[per_image_bytes]:si:B} per image)",
    False: ". No larger batch fits in the device's {n[device_total_bytes]:si:B}",
}
# Why it is undetermined whether data loading limits a configuration.
UNDETERMINED = {
    "no_rate": "no loader rate was measured",
    "unsettled": "the loader's interval does not settle it",
}
# A faster run that reaches the target later, and one that does not reach it.
LATER = {
    True: "reaches {n[target]:pct} test top-1 later: after {n[time_s]:n:s} of training (epoch "
    "{epochs}) against {n[first_time_s]:n:s} (epoch {first_epochs}), {where}.",
    False: "does not reach {n[target]:pct} test top-1 in {epochs_run} (best {n[best]:pct}), "
    "while {a[first]:config} reaches it in {n[first_time_s]:n:s} of training, {where}.",
}
# Why a faster-but-later ratio has no interval.
NO_INTERVAL = {
    "one_run": "one training run each: no interval",
    "no_runs": "no interval: the timed runs' processes are not at hand",
}
WORDING = {
    "null_peak": "{a[where]}: no {a[origin]} {a[precision]} peak, {a[reason]}.",
    "kernel_kind": "{a:config} on {a[machine]}: {a[kind]} kernels take {n[share]:pct} of the "
    "profiled step.",
    "largest_phase": "On {a[machine]}, {a[phase]:phase} is the largest phase in {n[count]} of "
    "{n[total]} configurations (e.g. {n[share]:pct} of the step for {a:config}).",
    "waits_on_input": "{a:config} on {a[machine]} waits on input for {n[input_share]:pct} of each "
    "step (data wait {n[data_wait_share]:pct}, host-to-device {n[h2d_share]:pct}).",
    "more_waiting": "… and {n[count]} more input-bound configurations on {a[machine]} (see the "
    "table).",
}


def above_roof(f: Finding, named=None) -> str:
    a, n = f.about, f.numbers
    if a["against"] == "bandwidth":
        what, why = f"{a['roof']} {a['level']} bandwidth roof at its intensity", UNDER["bandwidth"]
    else:
        what = f"{a['roof']} {a['precision']} {'GEMM roof' if a['roof'] == 'measured' else 'peak'}"
        why = UNDER.get(a["roof"], UNDER[None])
    return say(
        "{a:config} on {a[machine]} reached {n[performance_flop_s]:si:FLOP/s}, "
        "{n[above_fraction]:pct} of the {n[above_value]:si:FLOP/s} {what}: the roof is "
        "under-measured (" + why + ").",
        f,
        what=what,
        gemm=f"a {n['gemm_size']}³ GEMM" if n.get("gemm_size") else "the ceilings stage's GEMM",
        used=say(" ({n[clock_hz]:ghz}, {a[clock_source]})", f) if n.get("clock_hz") else "",
    )


def gpu_busy(f: Finding, named=None) -> str:
    """Host-bound (with the remedies the study's own numbers support), device-bound, partly
    host-bound, or unknown (no timed step, or no SM clock of the timed runs)."""
    a, n = f.about, f.numbers
    if a["verdict"] == "unknown":
        text = "its profiled step has {n[kernel_time_s]:ms} of kernels at "
        text += "{n[profiled_sm_clock_hz]:ghz}, but "
        text += BUSY["no_step" if missing(n["step_time_s"]) else "no_clock"]
    else:
        text = "the GPU is busy {n[busy_share]:pct} of the timed step "
        text += "({n[kernel_time_at_run_clock_s]:ms} of kernels at the runs' "
        text += "{n[run_sm_clock_hz]:ghz}, {n[kernel_time_s]:ms} at the profiled "
        text += "{n[profiled_sm_clock_hz]:ghz}, in a {n[step_time_s]:ms} step)"
        text += BUSY.get(a["verdict"], BUSY["partly"])
    found, share = [say(t, f) for k, t in EVIDENCE.items() if a.get(k)], n.get("busy_share")
    return say(
        "{a:config} on {a[machine]}: " + text,
        f,
        evidence="; in this study " + " and ".join(found) if found else "",
        slower=BUSY["slower"] if not missing(share) and float(share) > 1 else "",
    )


def above_peak(f: Finding, named=None) -> str:
    """A benchmark cannot beat the device's peak: the peak is too low."""
    return say(
        "{a[machine]}: the measured {a[roof]} ({n[measured]:si:{a[unit]}}) is {n[ratio]:pct} of "
        "the {a[origin]} peak ({n[peak]:si:{a[unit]}}): that peak is too low — {why}.",
        f,
        why=PEAK_TOO_LOW.get(f.about["origin"], PEAK_TOO_LOW[None]),
    )


def profile_missing(f: Finding, named=None) -> str:
    why = MISSING.get(f.about["status"], MISSING[None])
    return say("No operator profile for {a:where}: " + why, f)


def profile_bound(f: Finding, named=None) -> str:
    """Host- or device-bound (on the CPU: operator- or overhead-bound) with the busy share it
    rests on, the host's dispatch time, what to try and whether profiling slowed the step."""
    a = f.about
    slowed = " Recording the profile slowed the step {n[profiled_over_timed]:x} against the "
    slowed += "timed runs, so the host's share is overstated here."
    return say(
        (BOUND.get(a["busy_kind"], BOUND[None]), "{remedy}.", {"slowed": slowed}),
        f,
        machine=a.get("machine") or a["device"],
        busy="busy" if a["verdict"] == analysis.DEVICE_BOUND else "busy only",
        remedy=say(REMEDIES[a["remedy"]], f),
    )


def profile_memory(f: Finding, named=None) -> str:
    """The peak and its split, the complexity stage's activation estimate beside the
    measured activations, and how much larger a batch would fit."""
    a, n = f.about, f.numbers
    peak, largest, batch = n["peak_allocated_bytes"], n["max_batch_size"], int(a["batch_size"])
    parts = ", ".join(
        f"{CATEGORY_LABELS[c]} {fmt_si(n[c], 'B')} ({fmt_pct((n[c] or 0) / peak)})"
        for c in MEMORY_CATEGORIES
    )
    text = "{a:where} peaks at {n[peak_allocated_bytes]:si:B} allocated"
    text += (" during its {a[phase]} phase" if a.get("phase") else "") + ": {parts}"
    if not missing(n["estimate_bytes"]):
        text += "; the complexity stage counts {n[estimate_bytes]:si:B} of saved activations at "
        text += "this batch size (fp32)"
    if not missing(largest) and n["device_total_bytes"]:
        text += FITS[int(largest) > batch]
    return say(text + ".", f, parts=parts, times=fmt(largest / batch) if largest else "")


def profile_input(f: Finding, named=None) -> str:
    """What feeding the step costs; flagged when it is a quarter of the step or more."""
    workers = f.numbers["workers"]
    how = f"a DataLoader with {count_of(workers, 'worker')}" if workers is not None else ""
    text = "The input pipeline of {a:where} ({how}) costs {n[input_time_s]:ms} per step "
    text += "({n[input_share]:pct} of the step): {n[data_wait_s]:ms} fetching batches and "
    text += "{n[h2d_s]:ms} copying and preparing them"
    if f.about["input_bound"]:
        text += "; the step waits on its input more than on anything a faster kernel can fix"
    return say(text + ".", f, how=how or "batches drawn on the device")


def profile_note(f: Finding, named=None) -> str:
    note = PROFILE_NOTES.get(f.about["note"])
    note = note.format(**f.numbers) if note else f.about["note"]  # a note from before codes
    return say("Operator profile of {a:where}: {note}.", f, note=note)


def loader_text(row: Mapping) -> str:
    """`12,300 img/s (95% CI 11,900–12,700)`, or `not measured`."""
    rate, low, high = (row.get(f"loader_rate_img_s{k}") for k in ("", "_ci95_low", "_ci95_high"))
    if missing(rate):
        return "not measured"
    counts = {k: row.get(f"loader_{k}") for k in ("n_windows", "n_processes")}
    return throughput_text(rate, low, high, **counts, method=row.get("loader_ci_method"))


def input_verdicts(f: Finding, named=None) -> str:
    """One sentence: the input-bound configurations once each with both rates and the data
    wait, then the margin of the others and how many are undetermined."""
    a, n = f.about, f.numbers
    total, bound, free, unknown = (int(n[k]) for k in ("total", "bound", "free", "unknown"))
    configs, why = f"{total} measured configurations", UNDETERMINED.get(a.get("why"))
    listed = [
        config_text(r)
        + (f" on {r['machine']}" if n["machines"] > 1 else "")
        + f" (loader alone {loader_text(r)} against {estimate_text(r)} training; data wait "
        f"{fmt_pct(r.get('data_wait_share'))} of the step)"
        for r in a["named"]
    ]
    if bound > len(a["named"]):
        listed.append(f"{bound - len(a['named'])} more (see Input pipeline)")
    parts = [f"Data loading limits {bound} of {configs}: {names(listed, str)}"] if bound else []
    margin = f"the loader alone delivers at least {fmt_times(n['headroom'])} the training rate "
    margin += f"and the step waits for data at most {fmt_pct(n['wait'])} of its time"
    if free and bound:
        parts.append(f"it does not limit the other {free} ({margin})")
    elif free == total:
        parts.append(f"Data loading limits none of the {configs}: {margin}")
    elif free:
        parts.append(f"Data loading does not limit {free} of {configs} ({margin})")
    if unknown:
        whether = f"Whether data loading limits the {configs} is undetermined: {why}"
        parts.append(f"for {unknown} it is undetermined ({why})" if parts else whether)
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def faster_but_later(f: Finding, named=None) -> str:
    """`X trains 1.5x as many images per second as Y (...) but reaches 90% later` (or not
    at all); `about['ci']` the timed runs' ratio, None where it has no interval."""
    a, n = f.about, f.numbers
    interval = NO_INTERVAL.get(a["interval"]) or f"95% CI of the ratio {interval_cell(a['ci'])}"
    text = "{a[run]:config} trains {rate:x} as many images per second as {a[first]:config} "
    text += "({n[rate]:n:img/s} vs {n[first_rate]:n:img/s}; {interval}) but "
    return say(
        text + LATER[n["time_s"] is not None],
        f,
        rate=n["rate"] / n["first_rate"],
        interval=interval,
        epochs=int_cell(n.get("epochs")),
        first_epochs=int_cell(n.get("first_epochs")),
        epochs_run=count_of(0 if missing(n["epochs_run"]) else n["epochs_run"], "epoch"),
        where=f"recipe {a['recipe']} on {a['device']}",
    )
