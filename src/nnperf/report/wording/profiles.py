"""An operator profile (torch.profiler) in words: why one did not run, what bounds its step
and what to try, its peak memory and headroom, its input pipeline's cost, its own notes."""

from __future__ import annotations

from nnperf.core.wording import missing
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_pct, fmt_si, fmt_times
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

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
    "input": "the input pipeline comes first: it alone takes {input_share} of the step",
}

# A profile's own notes (`nnperf.torchprof.profile.NOTE_CODES`).
NOTES = {
    "mps_no_kernels": "torch.profiler records no MPS kernels: device time, device busy share "
    "and host-bound/device-bound are not available on mps",
    "no_cuda_kernels": "the profiler recorded no CUDA kernels (CUPTI unavailable or failed to "
    "initialise: see the job's log); device time and busy share are missing",
    "layers_fused": "compiled model: operators are not grouped by layer (layers are fused)",
    "steps_cut": "cut to {warmup_steps} warm-up and {profiled_steps} profiled steps to fit "
    "operator_profile.max_seconds = {max_seconds:g} s",
}


def _ms(seconds) -> str:
    return "n/a" if missing(seconds) else fmt(float(seconds) * 1e3, "ms")


def _where(a) -> str:
    return f"{config_text(a)} on {a.get('machine') or a['device']}"


def profile_missing(f: Finding) -> str:
    a = f.about
    head, error = f"No operator profile for {_where(a)}", a["error"]
    if a["status"] == "unsupported":
        return f"{head}: the profiler cannot run there ({error})."
    if a["status"] == "over_budget":
        return f"{head}: {error}; raise operator_profile.max_seconds to profile it."
    if a["status"] == "oom":
        return f"{head}: it ran out of memory ({error})."
    return f"{head}: status {a['status']} ({error})."


def profile_bound(f: Finding) -> str:
    """Host- or device-bound (on the CPU: operator- or overhead-bound) with the busy share it
    rests on, the host's dispatch time, what to try and whether profiling slowed the step."""
    a, n = f.about, f.numbers
    remedy = REMEDIES[a["remedy"]].format(input_share=fmt_pct(n["input_share"]))
    if a["busy_kind"] == analysis.BUSY_HOST:
        text = (
            f"On {a.get('machine') or a['device']}, {config_text(a)} spends "
            f"{fmt_pct(n['share'])} of its step inside operators ({_ms(n['busy_time_s'])} of "
            f"{_ms(n['step_time_s_mean'])} per profiled step, on average); the rest is Python "
            f"and framework work between them, or waiting for data: the step is "
            f"{a['verdict']}; {remedy}"
        )
    else:
        busy = "busy" if a["verdict"] == analysis.DEVICE_BOUND else "busy only"
        text = (
            f"{_where(a)} is {a['verdict']}: the device is {busy} {fmt_pct(n['share'])} of the "
            f"step ({_ms(n['device_busy_time_s'])} of kernels in a {_ms(n['step_s'])} "
            f"{a['step_source']} step), and the host spends {_ms(n['host_dispatch_time_s'])} "
            f"per step issuing work ({_ms(n['launch_time_s'])} of it in launch calls); {remedy}"
        )
    if a.get("slowed"):
        text += (
            f". Recording the profile slowed the step {fmt_times(n['profiled_over_timed'])} "
            "against the timed runs, so the host's share is overstated here"
        )
    return text + "."


def profile_memory(f: Finding) -> str:
    """The peak and its split, the complexity stage's activation estimate beside the
    measured activations, and how much larger a batch would fit."""
    a, n = f.about, f.numbers
    peak = n["peak_allocated_bytes"]
    parts = ", ".join(
        f"{CATEGORY_LABELS[c]} {fmt_si(n[c], 'B')} ({fmt_pct((n[c] or 0) / peak)})"
        for c in MEMORY_CATEGORIES
    )
    when = f" during its {a['phase']} phase" if a.get("phase") else ""
    text = f"{_where(a)} peaks at {fmt_si(peak, 'B')} allocated{when}: {parts}"
    if not missing(n["estimate_bytes"]):
        text += (
            f"; the complexity stage counts {fmt_si(n['estimate_bytes'], 'B')} of saved "
            "activations at this batch size (fp32)"
        )
    largest, total, batch = n["max_batch_size"], n["device_total_bytes"], int(a["batch_size"])
    if not missing(largest) and total and int(largest) > batch:
        text += (
            f". Of the device's {fmt_si(total, 'B')}, a batch of about {fmt(largest)} "
            f"({fmt(largest / batch)}x this one) would fit, if everything but parameters, "
            "gradients, optimizer state and buffers grows with the batch "
            f"({fmt_si(n['per_image_bytes'], 'B')} per image)"
        )
    elif not missing(largest) and total:
        text += f". No larger batch fits in the device's {fmt_si(total, 'B')}"
    return text + "."


def profile_input(f: Finding) -> str:
    """What feeding the step costs; flagged when it is a quarter of the step or more."""
    a, n = f.about, f.numbers
    workers = n["workers"]
    how = (
        "batches drawn on the device"
        if workers is None
        else f"a DataLoader with {workers} worker{'s' if workers != 1 else ''}"
    )
    text = (
        f"The input pipeline of {_where(a)} ({how}) costs {_ms(n['input_time_s'])} per step "
        f"({fmt_pct(n['input_share'])} of the step): {_ms(n['data_wait_s'])} fetching batches "
        f"and {_ms(n['h2d_s'])} copying and preparing them"
    )
    if a["input_bound"]:
        text += "; the step waits on its input more than on anything a faster kernel can fix"
    return text + "."


def profile_note(f: Finding) -> str:
    note = NOTES.get(f.about["note"])
    note = note.format(**f.numbers) if note else f.about["note"]  # a note from before codes
    return f"Operator profile of {_where(f.about)}: {note}."


def sentence(f: Finding) -> str:
    """`f` in words: each kind is worded by the function of its name."""
    return globals()[f.kind](f)
