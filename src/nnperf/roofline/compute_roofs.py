"""Compute roofs: the best FLOP/s large square GEMMs reach, per precision, within a time budget.

`measure_gemm` times square GEMMs of several sizes in one precision (CPU: fp32, bf16; CUDA:
fp32 with TF32 off, tf32, fp16, bf16) and reports the best over the sizes measured. Sizes run
from small to large within a time budget per precision (`GEMM_BUDGET_S`): a size projected to
overrun it (`gemm_cost_s`, from probe GEMMs or the previous size) is skipped, and the result
says which and why (`skipped_sizes`), so a CPU without native bf16 costs seconds, not minutes.
Timing is `nnperf.roofline.microbench`'s; the ceilings document that holds these roofs is
`nnperf.roofline.ceilings`.
"""

from __future__ import annotations

import contextlib
import time

from nnperf.ncu.ranges import gemm_flops
from nnperf.roofline.microbench import window_s, time_interleaved, window_iters

# Seconds one precision's GEMMs may take (all sizes: warm-up, calibration, trials). Sizes run
# from small to large; a size whose projected cost would overrun this is skipped, with the
# reason in the document. Why bound it: a CPU without native bf16 runs bf16 GEMMs 100x or
# more slower than fp32 (2-core Xeon VM: fp32 120-166 GFLOP/s; bf16 1.3 at 512^3, 0.9 at
# 1024^3, 0.3 at 2048^3), so the 2048^3 bf16 call alone takes ~60 s and the unbounded
# stage took 579 s, in a CPU study meant to take minutes (bounded: 11 s).
# A few seconds still lets every default CPU size run where fp32 or bf16 reach ~50 GFLOP/s
# (a 2048^3 call is 0.34 s; warm-up and 3 trials ~2-3 s), and a GPU's sizes take well
# under a second (an H100's 8192^3 fp32 call, the slowest, is 21 ms).
GEMM_BUDGET_S = {"cpu": 5.0, "cuda": 30.0, "mps": 15.0}
# Smallest probe GEMM. A call's time is projected to a larger size at the same FLOP rate,
# which is only trusted over one doubling of the size (8x the FLOPs) or from a call of at
# least GEMM_TRUSTED_CALL_S: a short call is mostly dispatch and, on a busy machine, waiting
# for a time slice (a 32^3 GEMM took 16 ms instead of 10 us on this 2-core VM under load),
# which 8x-per-doubling scaling would blow up into a skipped size. So sizes are probed from
# here, doubling, up to half the size to project, as long as the budget affords the probe;
# even a user's 8192^3 on a slow CPU is never started blind. Probes cost a fraction of the
# size they are for and are not reported as roofs.
GEMM_PROBE_SIZE = 128
GEMM_TRUSTED_CALL_S = 0.1


def gemm_cost_s(call_s: float, *, warmup: int, trials: int, min_trial_s: float) -> float:
    """Projected seconds to measure one GEMM size whose call takes `call_s`: `warmup` calls,
    calibration (windows of 1, 2, 4 ... calls; none when one call fills a window), then
    `trials` windows, each after one untimed call (see `time_interleaved`)."""
    iters = window_iters(call_s, min_trial_s)
    calibration = 0 if iters == 1 else 2 * iters - 1
    return (warmup + calibration + trials * (1 + iters)) * call_s


def projected_call_s(call_s: float, size: int, new_size: int) -> float:
    """A square GEMM call's seconds at `new_size` from one at `size`, at the same FLOP rate.

    Usually an over-estimate, as larger GEMMs run at a higher rate. Where the rate falls
    with size (bf16 emulated on a CPU: 1.3 GFLOP/s at 512, 0.9 at 1024) it under-estimates;
    `measure_gemm` then checks again on the size's own warm-up call before any trial, so the
    overrun is at most its warm-up calls."""
    return call_s * gemm_flops(new_size, new_size, new_size) / gemm_flops(size, size, size)


@contextlib.contextmanager
def float32_matmul_mode(precision: str):
    """fp32 means TF32 off; tf32 allows it. Restores the previous setting."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def torch_dtype(precision: str):
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[precision]


def _gemm_call(device: str, dtype, size: int, generator):
    """One square GEMM `out = a @ b` of `size`, its operands drawn on the device (an 8192^2
    matrix takes ~1 s to draw on a CPU)."""
    import torch

    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    out = torch.empty(size, size, device=device, dtype=dtype)
    return lambda: torch.matmul(a, b, out=out)


def _fastest_call_s(call, device: str, calls: int, min_trial_s: float) -> float:
    """The fastest of `calls` timed calls, and of one more when one call is shorter than a
    window: a first call carries one-time costs (allocation, thread pools, kernel choice)."""
    times = [window_s(call, device, 1) for _ in range(calls)]
    if len(times) == 1 and times[0] < min_trial_s:
        times.append(window_s(call, device, 1))
    return min(times)


def _probe_up_to(size: int, estimate, left_s, device: str, dtype, generator, min_trial_s):
    """(size, seconds per call) to project `size` from: `estimate` when it is trusted for it
    (see GEMM_PROBE_SIZE), else probe GEMMs of doubling sizes below `size` while `left_s()`
    affords two calls of the next one; None when `size` needs no projection (<= the probe
    size)."""
    while True:
        if estimate is None:
            if size <= GEMM_PROBE_SIZE:
                return None
            probe_size = GEMM_PROBE_SIZE
        else:
            probe_size = 2 * estimate[0]
            trusted = size <= probe_size or estimate[1] >= GEMM_TRUSTED_CALL_S
            if trusted or 2 * projected_call_s(estimate[1], estimate[0], probe_size) > left_s():
                return estimate
        probe = _gemm_call(device, dtype, probe_size, generator)
        estimate = (probe_size, _fastest_call_s(probe, device, 2, min_trial_s))


def _skip_rows(sizes, reason: str, **numbers) -> list[dict]:
    """The first size left out carries the reason (a `SKIP_REASONS` code) and its numbers; the
    larger ones point at it."""
    return [{"size": sizes[0], "reason": reason, **numbers}] + [
        {"size": size, "reason": "larger_than_skipped", "first": sizes[0]} for size in sizes[1:]
    ]


# Why a GEMM size was left out of a roof (`skipped_sizes`' `reason`), in words for the job's
# log; `{device}` the document's. A reason that is no code (ceilings JSON written before the
# codes) is its own text.
SKIP_REASONS = {
    "projected_over_budget": "a {size}^3 call is projected at {call_s:.3g} s from the "
    "{from_size}^3 GEMM's rate, so warm-up and {trials} trials would take ~{cost_s:.3g} s; "
    "{left_s:.3g} s were left of the {budget_s:g} s per precision "
    "(ceilings.GEMM_BUDGET_S[{device!r}])",
    "measured_over_budget": "a {size}^3 call takes {call_s:.3g} s (measured in warm-up), so "
    "{trials} trials would take ~{cost_s:.3g} s more; {left_s:.3g} s were left of the "
    "{budget_s:g} s per precision (ceilings.GEMM_BUDGET_S[{device!r}])",
    "larger_than_skipped": "larger than {first}, which did not fit the budget",
}


def skip_reason(row: dict, device: str) -> str:
    """A `skipped_sizes` row's reason in words."""
    reason = row["reason"]
    return SKIP_REASONS[reason].format(device=device, **row) if reason in SKIP_REASONS else reason


def measure_gemm(
    device: str,
    precision: str,
    sizes,
    *,
    warmup: int,
    trials: int,
    min_trial_s: float,
    budget_s: float | None = None,
    seed: int = 0,
) -> dict:
    """Square GEMM throughput per size; the roof is the best over the sizes measured.

    Sizes run from small to large within `budget_s` seconds (None: `GEMM_BUDGET_S`). A
    size's cost (`gemm_cost_s`) is projected before it starts, from the previous size's
    call or from probe GEMMs (`GEMM_PROBE_SIZE`), and again after its warm-up calls, which
    are timed one by one, from its own fastest call. A size whose cost would overrun
    what is left of the budget is skipped with every larger size; `skipped_sizes` says why
    (a `SKIP_REASONS` code and its numbers).
    Nothing is reported for a size that was not measured whole: with no size left,
    `sizes` is empty and the roofs are None. The sizes kept are then timed together,
    trials interleaved; a size whose call fills a window alone is not calibrated again.
    """
    import torch

    budget = GEMM_BUDGET_S[device] if budget_s is None else budget_s
    generator = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(precision)
    ordered = sorted(set(sizes))
    started = time.perf_counter()
    committed = 0.0  # projected seconds of the kept sizes' calibration and trials
    kept, calls, known_iters, skipped = [], [], [], []
    estimate = None  # (size, seconds per call) the next size is projected from

    def left_s() -> float:
        return budget - (time.perf_counter() - started) - committed

    with float32_matmul_mode(precision):
        for index, size in enumerate(ordered):
            estimate = _probe_up_to(size, estimate, left_s, device, dtype, generator, min_trial_s)
            if estimate is not None:
                call_s = projected_call_s(estimate[1], estimate[0], size)
                cost = gemm_cost_s(call_s, warmup=warmup, trials=trials, min_trial_s=min_trial_s)
                if cost > left_s():
                    skipped = _skip_rows(
                        ordered[index:],
                        "projected_over_budget",
                        call_s=call_s,
                        from_size=estimate[0],
                        trials=trials,
                        cost_s=cost,
                        left_s=max(0.0, left_s()),
                        budget_s=budget,
                    )
                    break
            call = _gemm_call(device, dtype, size, generator)
            call_s = _fastest_call_s(call, device, max(1, warmup), min_trial_s)
            rest = gemm_cost_s(call_s, warmup=0, trials=trials, min_trial_s=min_trial_s)
            if rest > left_s():
                skipped = _skip_rows(
                    ordered[index:],
                    "measured_over_budget",
                    call_s=call_s,
                    trials=trials,
                    cost_s=rest,
                    left_s=max(0.0, left_s()),
                    budget_s=budget,
                )
                break
            committed += rest
            kept.append(size)
            calls.append(call)
            known_iters.append(1 if call_s >= min_trial_s else None)
            estimate = (size, call_s)
        timings = (
            time_interleaved(
                calls,
                device,
                warmup=0,
                trials=trials,
                min_trial_s=min_trial_s,
                iters=known_iters,
            )
            if calls
            else []
        )
    rows = []
    for size, timing in zip(kept, timings):
        flops = gemm_flops(size, size, size)
        rows.append(
            {
                "m": size,
                "n": size,
                "k": size,
                "flops": flops,
                "best_time_s": timing["best_time_s"],
                "median_time_s": timing["median_time_s"],
                "best_flop_s": flops / timing["best_time_s"],
                "median_flop_s": flops / timing["median_time_s"],
                "trials": trials,
                "iters_per_trial": timing["iters_per_trial"],
            }
        )
    best = max(rows, key=lambda r: r["best_flop_s"]) if rows else None
    return {
        "best_flop_s": best["best_flop_s"] if best else None,
        "median_flop_s": best["median_flop_s"] if best else None,
        "best_size": best["m"] if best else None,
        "sizes": rows,
        "skipped_sizes": skipped,
        "budget_s": budget,
        "duration_s": time.perf_counter() - started,
    }
