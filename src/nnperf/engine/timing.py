"""Phase timers and the timed training loop.

Protocol (docs/concepts.md, "How runs are timed"): warm-up steps first (cuDNN autotune,
allocator growth, torch.compile), each synchronised on its own, then timed windows of
`timed_steps` steps (how many, and in how many processes, is `nnperf.engine.stopping`'s
decision). Between the phases of every step a clock is marked; marks are shared, so step i's
end is step i+1's start and the per-step times add up to the window exactly.

* GPU (cuda, mps): a timing event is recorded on the stream at every mark; the host never
  waits inside the window. One synchronize closes the window, then the events are read.
  A phase's time is therefore the device-timeline time between its marks: when the host is
  the bottleneck (a slow DataLoader) the device idles between the marks and that idle time
  lands in the phase that caused it; when the device is the bottleneck, host work overlaps
  and costs nothing.
* CPU: `time.perf_counter` at every mark (CPU ops run synchronously).

Throughput = images in the window / host wall time of the window (synchronised at both ends).
Warm-up steps are not part of any window; their times are reported (the first one as
`first_step_time_s`, the excess over steady state as compile time).

What this module is not: it does not build models or data (`nnperf.engine.step`) or write files.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time

import numpy as np
import torch

from nnperf.core.vocab import PHASES, STEP_CSV_COLUMNS


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished all queued work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class HostClock:
    """perf_counter marks; exact for work that runs synchronously on the host."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, start: float, end: float) -> float:
        return end - start


class EventClock:
    """Timing events recorded on the device stream, created up front (none in the loop)."""

    def __init__(self, device: torch.device, n_marks: int):
        if device.type == "cuda":
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(n_marks)]
        elif device.type == "mps":
            self._events = [torch.mps.event.Event(enable_timing=True) for _ in range(n_marks)]
        else:
            raise ValueError(f"no timing events on device {device.type}")
        self._next = 0

    def mark(self):
        event = self._events[self._next]
        self._next += 1
        event.record()
        return event

    def seconds(self, start, end) -> float:
        # elapsed_time is in milliseconds; only valid once the window has been synchronised.
        return start.elapsed_time(end) / 1e3


def make_clock(device: torch.device, n_marks: int):
    """The clock for `device`: events on GPUs, perf_counter on CPU."""
    return HostClock() if device.type == "cpu" else EventClock(device, n_marks)


def marks_per_window(n_steps: int) -> int:
    return n_steps * len(PHASES) + 1


def run_marked_steps(training, clock, n_steps: int) -> tuple[list, list[torch.Tensor]]:
    """Run `n_steps` steps marking the clock between phases; no host sync in here."""
    marks = [clock.mark()]
    losses = []
    for _ in range(n_steps):
        batch = training.next_batch()
        marks.append(clock.mark())
        inputs, labels = training.to_device(batch)
        marks.append(clock.mark())
        loss = training.forward(inputs, labels)
        marks.append(clock.mark())
        training.backward(loss)
        marks.append(clock.mark())
        training.optimizer_step()
        marks.append(clock.mark())
        losses.append(loss.detach())
    return marks, losses


def step_rows(marks: list, clock, losses: list[float]) -> list[dict]:
    """Per-step phase times from the marks of one window (rows of the per-step CSV)."""
    n_phases = len(PHASES)
    rows = []
    for step, loss in enumerate(losses):
        base = step * n_phases
        row = {"step": step}
        for offset, phase in enumerate(PHASES):
            row[f"{phase}_s"] = clock.seconds(marks[base + offset], marks[base + offset + 1])
        row["step_time_s"] = clock.seconds(marks[base], marks[base + n_phases])
        row["loss"] = loss
        rows.append(row)
    return rows


class DeviceMemoryTracker:
    """Peak device memory, the warm-up's apart from the timed steps': the allocator's own
    peak on CUDA, sampled maxima on MPS, nothing on the CPU.

    The warm-up holds what no timed step does: cuDNN's autotuning tries algorithms with their
    workspaces, compilation and CUDA-graph recording allocate on their own. A peak read over
    the whole process would charge that to the configuration (a tuned or compiled variant's
    footprint overstated against the baseline's). So the worker reads the warm-up's peak at its
    end (`end_warmup`), then resets the peak at each window's start and reads it at its end
    (`start_window`, `end_window`): the timed steps' peak is the largest window's.

    MPS has no peak counter, so `sample()` is called at every synchronised point (after each
    warm-up step and after each window) and the maximum is kept: a lower bound of the true peak.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._sampled = 0
        self.warmup_peak_bytes: int | None = None
        self.timed_peak_bytes: int | None = None
        self._reset()

    def _reset(self) -> None:
        """Start a new peak from what is allocated now."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self._sampled = 0
        self.sample()

    def sample(self) -> None:
        if self.device.type == "mps":
            self._sampled = max(self._sampled, torch.mps.current_allocated_memory())

    def peak_bytes(self) -> int | None:
        """The peak since the last reset (construction, the warm-up's end, a window's start)."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.device.type == "mps":
            return int(self._sampled)
        return None

    def end_warmup(self) -> None:
        """Keep the warm-up's peak (everything since construction)."""
        self.warmup_peak_bytes = self.peak_bytes()

    def start_window(self) -> None:
        self._reset()

    def end_window(self) -> int | None:
        """The window's own peak, and the timed steps' so far updated with it."""
        peak = self.peak_bytes()
        if peak is not None:
            self.timed_peak_bytes = max(peak, self.timed_peak_bytes or 0)
        return peak


def peak_host_memory_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss if sys.platform == "darwin" else maxrss * 1024)


def warmup_step(training, memory: DeviceMemoryTracker) -> tuple[float, torch.Tensor]:
    """One untimed step, synchronised on both sides; returns (seconds, detached loss)."""
    synchronize(training.device)
    start = time.perf_counter()
    loss = training.step()
    synchronize(training.device)
    seconds = time.perf_counter() - start
    memory.sample()
    return seconds, loss


@dataclasses.dataclass
class WindowResult:
    """One timed window of `timed_steps` steps (raw)."""

    window_s: float
    started_at_unix: float
    ended_at_unix: float
    steps: list[dict]
    loss_end: float


def time_window(training, timed_steps: int, memory: DeviceMemoryTracker) -> WindowResult:
    """Time one window: marks between phases, one synchronize at its end (module docstring)."""
    device = training.device
    clock = make_clock(device, marks_per_window(timed_steps))
    synchronize(device)
    started_at_unix = time.time()
    wall_start = time.perf_counter()
    marks, losses = run_marked_steps(training, clock, timed_steps)
    synchronize(device)  # the window's one synchronize
    wall_end = time.perf_counter()
    ended_at_unix = time.time()
    memory.sample()
    loss_values = torch.stack(losses).float().cpu().tolist()
    return WindowResult(
        window_s=wall_end - wall_start,
        started_at_unix=started_at_unix,
        ended_at_unix=ended_at_unix,
        steps=step_rows(marks, clock, loss_values),
        loss_end=float(loss_values[-1]),
    )


@dataclasses.dataclass
class LoaderWindow:
    """One loader window (`nnperf.engine.loader`): `batches` batches drawn and handed to the
    device with no training, after `drained` in-flight batches drawn untimed."""

    window_s: float
    drain_s: float
    drained: int
    started_at_unix: float
    ended_at_unix: float


def time_loader_window(training, batches: int, drain: int = 0) -> LoaderWindow:
    """Time the feeder alone: each batch drawn (`next_batch`, the data wait) and handed to
    the device (`to_device`: copy and input preparation) as a timed step gets it, then
    dropped; one synchronize closes the window, as a timed window's does. `drain` batches
    are drawn first, untimed (the DataLoader's ready batches)."""
    device = training.device
    drain_start = time.perf_counter()
    for _ in range(drain):
        training.to_device(training.next_batch())
    synchronize(device)
    drain_s = time.perf_counter() - drain_start
    started_at_unix = time.time()
    wall_start = time.perf_counter()
    for _ in range(batches):
        training.to_device(training.next_batch())
    synchronize(device)
    wall_end = time.perf_counter()
    return LoaderWindow(
        window_s=wall_end - wall_start,
        drain_s=drain_s if drain else 0.0,
        drained=drain,
        started_at_unix=started_at_unix,
        ended_at_unix=time.time(),
    )
