"""The input pipeline's own rate: the configuration's feeder iterated with no training.

A training step waits for its batch (`data_wait`) and copies and prepares it (`h2d`); the
rest is the model's. Whether the input pipeline limits a configuration is a question about
the feeder alone: how many images per second can it hand to the device when nothing else
runs? So each worker process, after its timed windows, runs a few *loader windows*: the
same feeder (the variant's DataLoader with its workers, pinned memory and prefetching, or
the device-resident path), the same number of batches as a timed window, each batch drawn
and handed to the device exactly as the timed step gets it (`next_batch()` then
`to_device()`, input preparation included), one synchronize at the window's end, no
forward, backward or optimizer step (`nnperf.engine.timing.time_loader_window`).

They are measured like the timed windows, processes x windows, and estimated with the same
two-level interval (`nnperf.engine.stopping.estimate`), so the loader's rate has a 95% CI
beside the training throughput's. Before a process's first loader window, the batches its
DataLoader workers already hold (`in_flight_batches`) are drawn untimed: while training
was slower than the loader they sat ready, and timing them would credit the loader with
work it did during training.

What they may cost: together, at most `LOADER_SHARE` of the configuration's
`timing.max_seconds` (a window is not started when the time spent so far and the longest one
seen would pass it; the configuration's first is always run, since nothing is known without
it), and at most `WINDOWS_PER_PROCESS` per process. Their time is not taken from the
training budget (`manager`: like one-time costs, it extends the budget's end), so the timed
windows, processes and stop reasons of a configuration are the same with them as without.

The parent side lives here (torch-free, imported by `nnperf.engine.manager`); the worker's
side is `nnperf.engine.timing.time_loader_window`.
"""

from __future__ import annotations

from typing import Sequence

from nnperf.core.contract import TimingSettings, VariantSettings
from nnperf.engine import stopping

# Loader windows of a configuration cost at most this share of timing.max_seconds (60 s in
# the default study: 6 s, of which an in-memory CIFAR-shaped loader uses milliseconds). A
# tenth keeps the input verdict's cost below the spread a budget already tolerates, and
# buys a slow loader (a JPEG decoded per image, no workers) a window or more in each of
# the first processes, enough for an interval.
LOADER_SHARE = 0.1
# Loader windows per process: three give a within-process spread, the processes give the
# between-process one, as for throughput.
WINDOWS_PER_PROCESS = 3
# torch.utils.data.DataLoader's prefetch_factor when none is given and workers are used.
DATALOADER_DEFAULT_PREFETCH = 2


def allowance_s(timing: TimingSettings) -> float:
    """Seconds the loader windows of one configuration may take in all."""
    return LOADER_SHARE * timing.max_seconds


def in_flight_batches(settings: VariantSettings) -> int:
    """Batches a DataLoader's workers hold ready ahead of the consumer (workers x prefetch
    factor); none without workers or on the device-resident path."""
    if settings.data_path != "dataloader" or settings.num_workers == 0:
        return 0
    prefetch = settings.prefetch_factor or DATALOADER_DEFAULT_PREFETCH
    return settings.num_workers * prefetch


def window_cost_s(row: dict) -> float:
    """What a loader window took, its untimed drain included."""
    return float(row["window_s"]) + float(row.get("drain_s") or 0.0)


def next_window_fits(spent_s: float, windows: Sequence[dict], timing: TimingSettings) -> bool:
    """Whether one more loader window fits the configuration's allowance: always the first;
    after it, when the time spent and the costliest window seen stay within it."""
    if not windows:
        return True
    longest = max(window_cost_s(row) for row in windows)
    return spent_s + longest <= allowance_s(timing)


def samples(windows: Sequence[dict]) -> list[stopping.WindowSample]:
    return [
        stopping.WindowSample(int(w["process"]), int(w["images"]), float(w["window_s"]))
        for w in windows
    ]


def loader_fields(windows: Sequence[dict], loader_s: float) -> dict:
    """The run document's loader numbers: the rate (mean of the per-process rates) with its
    95% CI, the slowest and fastest window, how it was had, and what the loader windows cost
    (`loader_time_s`)."""
    current = stopping.estimate(samples(windows))
    rates = [w.throughput for w in samples(windows)]
    return {
        "loader_rate_img_s": current.throughput,
        "loader_rate_img_s_ci95_low": current.ci_low,
        "loader_rate_img_s_ci95_high": current.ci_high,
        # The slowest and fastest window: rates the loader sustained over a whole window,
        # observed rather than inferred (nnperf.report.input_verdict reads them beside the CI).
        "loader_rate_img_s_min": min(rates) if rates else None,
        "loader_rate_img_s_max": max(rates) if rates else None,
        "loader_ci_method": current.method,
        "loader_n_processes": current.n_processes,
        "loader_n_windows": current.n_windows,
        "loader_time_s": float(loader_s),
    }


def process_rates(windows: Sequence[dict]) -> dict[int, float]:
    """Each process's loader rate: its images over its loader windows' seconds."""
    return stopping.process_throughputs(samples(windows))


def data_wait_share(steps: Sequence[dict]) -> float | None:
    """The share of the timed steps' time spent waiting for batches: summed data wait over
    summed step time. A sum, not a median: a DataLoader whose workers fall behind makes
    one step in several wait long, which a median step hides."""
    total = sum(float(s["step_time_s"]) for s in steps)
    if total <= 0:
        return None
    return sum(float(s["data_wait_s"]) for s in steps) / total
