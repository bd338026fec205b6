"""Timing a small kernel for a roof: warm-up calls, calibrated windows, interleaved trials.

Every empirical roof (`nnperf.roofline.compute_roofs`, `nnperf.roofline.memory_roofs`) is timed
the same way, the way the timed runs are: warm-up calls first, then repeated trials, each trial
a window of back-to-back calls closed by one synchronisation (CUDA events on GPU,
`time.perf_counter` on CPU); best and median over trials are reported. The number of calls per
window is calibrated so a window lasts at least a minimum (`calibrate_iters`, as
`timeit.Timer.autorange` does), which keeps launch and timer overheads out of the figures.
Trials of several kernels are interleaved round-robin (`time_interleaved`), so a burst of
interference spreads over one trial of many kernels rather than all trials of one.

Not here: what is timed (the roofs' modules) or the document (`nnperf.roofline.ceilings`).
torch is imported inside the functions that need it.
"""

from __future__ import annotations

import statistics
import time

MAX_ITERS_PER_TRIAL = 100_000


def window_iters(call_s: float, min_trial_s: float) -> int:
    """Calls per timed window as `calibrate_iters` finds them for a call of `call_s`: the
    smallest power of two whose window lasts `min_trial_s` (1 for a call that long)."""
    iters = 1
    while iters * call_s < min_trial_s and iters < MAX_ITERS_PER_TRIAL:
        iters = min(MAX_ITERS_PER_TRIAL, iters * 2)
    return iters


def summarize_times(times_s: list[float]) -> dict:
    """Best (shortest) and median of per-call times."""
    return {"best_time_s": min(times_s), "median_time_s": statistics.median(times_s)}


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def window_s(fn, device: str, iters: int) -> float:
    """Seconds for `iters` back-to-back calls, closed by one synchronisation."""
    import torch

    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(device)
    return time.perf_counter() - t0


def calibrate_iters(fn, device: str, min_trial_s: float) -> int:
    """Calls per timed window, as timeit.Timer.autorange finds them: double until a window
    lasts `min_trial_s`. (Calibrating on one call would let a single stalled call shrink
    every window to a call or two.)"""
    iters = 1
    while window_s(fn, device, iters) < min_trial_s and iters < MAX_ITERS_PER_TRIAL:
        iters = min(MAX_ITERS_PER_TRIAL, iters * 2)
    return iters


def time_interleaved(
    fns, device: str, *, warmup: int, trials: int, min_trial_s: float, iters=None
) -> list[dict]:
    """Per-call seconds of each function in `fns`, trials interleaved round-robin.

    Round-robin (trial 1 of every function, then trial 2, ...) spreads a burst of
    interference from other processes over one trial of many measurements instead of all
    trials of one, so best-of-trials stays clean on a shared machine. One untimed call
    before each window puts that function's data back in the caches the previous
    function evicted; with a single function nothing evicts them, so it is left out (for a
    GEMM that takes seconds a call, it would double the cost of every trial).

    `iters` gives calls per window where the caller already knows them (None entries, or
    no list, are calibrated): a call known to fill a window alone needs no calibration.
    """
    known = list(iters) if iters is not None else [None] * len(fns)
    iters = []
    for fn, n in zip(fns, known):
        for _ in range(warmup):
            fn()
        iters.append(n or calibrate_iters(fn, device, min_trial_s))
    refresh = len(fns) > 1
    times = [[] for _ in fns]
    for _ in range(trials):
        for fn, n, out in zip(fns, iters, times):
            if refresh:
                fn()
            out.append(window_s(fn, device, n) / n)
    return [
        {"times_s": t, "iters_per_trial": n, "trials": trials, **summarize_times(t)}
        for t, n in zip(times, iters)
    ]
