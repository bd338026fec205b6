"""The roofline family in words: points above a roof, a profile's GPU busy share, null and
beaten peaks (Ceilings) and the largest kernel kind (Top kernels); record in, sentence out."""

from __future__ import annotations

from nnperf.core.wording import missing
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_ghz, fmt_pct, fmt_si, fmt_times


def _why_under(a, n) -> str:
    """Why a roof a step point beat is under-measured, by where the roof came from."""
    if a["against"] == "bandwidth":
        return (
            "caches serve part of the traffic the point's bytes count (analytic bytes assume "
            "no reuse), or the bandwidth benchmark under-measured the memory"
        )
    if a["roof"] == "measured":
        gemm = f"a {n['gemm_size']}³ GEMM" if n.get("gemm_size") else "the ceilings stage's GEMM"
        return f"{gemm} does not reach this {str(a['device']).upper()}'s peak"
    if a["roof"] == "derived":
        clock = n.get("clock_hz")
        used = f" ({fmt_ghz(clock)}, {a.get('clock_source')})" if clock else ""
        return (
            f"a derived peak is cores x clock x FLOP/cycle, and the clock it used{used} is "
            "below what the cores ran at"
        )
    if a["roof"] == "datasheet":
        return "the config/peaks.yaml entry does not fit this device, or the FLOPs are overcounted"
    return "the profile's peak_sustained x clock is too low, or the FLOPs are overcounted"


def above_roof(f: Finding) -> str:
    a, n = f.about, f.numbers
    if a["against"] == "bandwidth":
        what = f"{a['roof']} {a['level']} bandwidth roof at its intensity"
    else:
        what = f"{a['roof']} {a['precision']} {'GEMM roof' if a['roof'] == 'measured' else 'peak'}"
    return (
        f"{config_text(a)} on {a['machine']} reached {fmt_si(n['performance_flop_s'], 'FLOP/s')}, "
        f"{fmt_pct(n['above_fraction'])} of the {fmt_si(n['above_value'], 'FLOP/s')} {what}: "
        f"the roof is under-measured ({_why_under(a, n)})."
    )


def _ms(seconds) -> str:
    return fmt(float(seconds) * 1e3, "ms")


def _evidence(a, n) -> str:
    found = []
    if a.get("larger"):
        found.append(
            f"batch {int(a['larger']['batch_size'])} already reaches "
            f"{fmt(n['larger_img_s'], 'img/s')}, {fmt_times(n['larger_ratio'])} batch "
            f"{int(a['batch_size'])}"
        )
    if a.get("compiled"):
        found.append(
            f"the compiled variant {a['compiled']['variant']!r} reaches "
            f"{fmt(n['compiled_img_s'], 'img/s')}, {fmt_times(n['compiled_ratio'])} "
            f"{a['variant']!r}"
        )
    return "; in this study " + " and ".join(found) if found else ""


def gpu_busy(f: Finding) -> str:
    """Host-bound (with the remedies the study's own numbers support), device-bound, partly
    host-bound, or unknown (no timed step, or no SM clock of the timed runs)."""
    a, n = f.about, f.numbers
    head = f"{config_text(a)} on {a['machine']}: "
    upper = fmt_pct(n["busy_share_at_profiled_clock"])
    if a["verdict"] == "unknown":
        return head + (
            f"its profiled step has {_ms(n['kernel_time_s'])} of kernels at "
            f"{fmt_ghz(n['profiled_sm_clock_hz'])}, but "
            + (
                "no timed step to compare them with, so the GPU's busy share is unknown."
                if missing(n["step_time_s"])
                else "the timed windows recorded no SM clock (NVML, package nvidia-ml-py), so "
                f"only an upper estimate is known: the GPU is busy at most {upper} of the step."
            )
        )
    share = n["busy_share"]
    head += (
        f"the GPU is busy {fmt_pct(share)} of the timed step "
        f"({_ms(n['kernel_time_at_run_clock_s'])} of kernels at the runs' "
        f"{fmt_ghz(n['run_sm_clock_hz'])}, {_ms(n['kernel_time_s'])} at the profiled "
        f"{fmt_ghz(n['profiled_sm_clock_hz'])}, in a {_ms(n['step_time_s'])} step)"
    )
    if a["verdict"] == "host-bound":
        return head + (
            ": host-bound — for the rest of the step the GPU waits on Python, the framework "
            "and kernel launches, so faster kernels would not shorten it. Remedies: capture "
            "the step in CUDA graphs (variant setting compile: reduce-overhead) or raise the "
            f"batch size (more work per launch){_evidence(a, n)}."
        )
    if a["verdict"] == "device-bound":
        slower = (
            " A share above 100% means the profiled kernels ran slower than in the timed runs "
            "(ncu flushes caches before each kernel; memory-bound kernels gain less from the "
            "clock than the scaling assumes)."
        )
        return head + (
            ": device-bound — the kernels are the step; faster kernels (a lower precision, "
            "fusion, channels-last) shorten it, host-side tuning does not."
            + (slower if not missing(share) and float(share) > 1 else "")
        )
    return head + (
        f" and at most {upper}: partly host-bound — some of the step is spent waiting on the "
        "host, some on the kernels."
    )


def null_peak(f: Finding) -> str:
    a = f.about
    return f"{a['where']}: no {a['origin']} {a['precision']} peak, {a['reason']}."


def above_peak(f: Finding) -> str:
    """A benchmark cannot beat the device's peak: the peak is too low."""
    a, n = f.about, f.numbers
    why = (
        "its clock is below the clock the cores ran at (boost), or the FLOP/cycle table "
        "under-counts this core"
        if a["origin"] == "derived"
        else "check its config/peaks.yaml entry (dense vs sparse figure, the board variant)"
    )
    return (
        f"{a['machine']}: the measured {a['roof']} ({fmt_si(n['measured'], a['unit'])}) is "
        f"{fmt_pct(n['ratio'])} of the {a['origin']} peak ({fmt_si(n['peak'], a['unit'])}): "
        f"that peak is too low — {why}."
    )


def kernel_kind(f: Finding) -> str:
    a = f.about
    return (
        f"{config_text(a)} on {a['machine']}: {a['kind']} kernels take "
        f"{fmt_pct(f.numbers['share'])} of the profiled step."
    )


# Why a run's GPU clocks are not simply its own GPU's (the run document's `nvml.note`,
# `nnperf.engine.stability.NVML_NOTES`), with `{detail}` its `note_detail`.
NVML_NOTES = {
    "nvml_unavailable": "NVML unavailable ({detail}): GPU clocks not recorded",
    "unknown_uuid": "NVML knows no GPU or MIG device with torch's UUID {detail}: GPU clocks not "
    "recorded",
    "mig_parent": "MIG device {detail}: the clocks and throttle reasons are its parent GPU's, "
    "shared with every MIG instance on it",
    "mig_mode": "{detail} is in MIG mode: the clocks and throttle reasons are the whole GPU's, "
    "shared with every MIG instance on it",
    "visible_by_uuid": "CUDA_VISIBLE_DEVICES={detail} names devices by UUID or MIG id and torch "
    "gave no device UUID: GPU clocks not recorded",
    "device_order": "torch gave no device UUID and CUDA_DEVICE_ORDER is {detail}: CUDA's device "
    "numbers need not be NVML's (PCI bus order), so GPU clocks are not recorded (set "
    "CUDA_DEVICE_ORDER=PCI_BUS_ID, or use torch >= 2.4)",
    "no_such_index": "NVML has no GPU {detail}: GPU clocks not recorded",
    "found_by_index": "torch gave no device UUID: GPU found by its NVML index {detail}",
}


def nvml_note(record: dict) -> str | None:
    """A run document's `environment.nvml` record's note in words (None: no note)."""
    note = record.get("note")
    return NVML_NOTES.get(note, note).format(detail=record.get("note_detail")) if note else None


def sentence(f: Finding) -> str:
    """`f` in words: each kind is worded by the function of its name."""
    return globals()[f.kind](f)
