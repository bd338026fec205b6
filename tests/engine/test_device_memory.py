"""Peak device memory of the timed steps apart from the warm-up's.

No GPU here, so CUDA's allocator counters (`torch.cuda.reset_peak_memory_stats`,
`torch.cuda.max_memory_allocated`) are a fake that the model's own forward pass drives: the
first step holds a large transient (cuDNN's autotuning workspaces, a compilation), later steps
a smaller one. Everything else is real: the tracker, and a real worker (`worker_main`, run in a
thread and spoken to over a real pipe as its parent speaks to it) training a tiny network on
the CPU.
"""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from nnperf.engine import allocator, timing, worker
from tiny_training import tiny_data, tiny_model, tiny_request

RESIDENT = 500_000_000  # parameters, gradients, optimizer state: allocated throughout
FIRST_STEP_TRANSIENT = 3_000_000_000  # autotuning workspaces, on the first step only
STEP_TRANSIENT = 1_000_000_000  # activations of an ordinary step


class FakeCudaAllocator:
    """What torch.cuda says of the caching allocator: its peak since the last reset."""

    def __init__(self):
        self.allocated = RESIDENT
        self.peak = RESIDENT
        self.steps = 0
        self.resets = 0

    def step(self) -> None:
        transient = FIRST_STEP_TRANSIENT if self.steps == 0 else STEP_TRANSIENT
        self.peak = max(self.peak, self.allocated + transient)
        self.steps += 1

    def reset_peak_memory_stats(self, device=None) -> None:
        self.peak = self.allocated
        self.resets += 1

    def max_memory_allocated(self, device=None) -> int:
        return self.peak


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCudaAllocator()
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", fake.max_memory_allocated)
    return fake


def test_the_warm_up_peak_is_not_the_timed_steps_peak(fake_cuda):
    tracker = timing.DeviceMemoryTracker(torch.device("cuda"))
    for _ in range(3):  # warm-up: the first step autotunes
        fake_cuda.step()
        tracker.sample()
    tracker.end_warmup()
    assert tracker.warmup_peak_bytes == RESIDENT + FIRST_STEP_TRANSIENT
    assert tracker.timed_peak_bytes is None  # no window yet
    window_peaks = []
    for _ in range(2):
        tracker.start_window()
        for _ in range(4):
            fake_cuda.step()
        tracker.sample()
        window_peaks.append(tracker.end_window())
    assert window_peaks == [RESIDENT + STEP_TRANSIENT] * 2
    assert tracker.timed_peak_bytes == RESIDENT + STEP_TRANSIENT
    # The warm-up's peak is kept, not overwritten by the windows' resets.
    assert tracker.warmup_peak_bytes == RESIDENT + FIRST_STEP_TRANSIENT


def test_the_timed_peak_is_the_largest_windows():
    class Growing(FakeCudaAllocator):
        def step(self):
            self.allocated += 10  # a window that leaves a little more behind
            super().step()

    fake = Growing()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
        patch.setattr(torch.cuda, "max_memory_allocated", fake.max_memory_allocated)
        tracker = timing.DeviceMemoryTracker(torch.device("cuda"))
        fake.step()
        tracker.end_warmup()
        peaks = []
        for _ in range(3):
            tracker.start_window()
            fake.step()
            peaks.append(tracker.end_window())
    assert peaks == sorted(peaks) and len(set(peaks)) == 3
    assert tracker.timed_peak_bytes == peaks[-1]


def test_the_cpu_has_no_device_peak():
    tracker = timing.DeviceMemoryTracker(torch.device("cpu"))
    tracker.end_warmup()
    tracker.start_window()
    assert tracker.end_window() is None
    assert (tracker.warmup_peak_bytes, tracker.timed_peak_bytes) == (None, None)


class Counted(torch.nn.Module):
    """The tiny network, each forward pass one step of the fake allocator."""

    def __init__(self, fake: FakeCudaAllocator):
        super().__init__()
        self.net = tiny_model()
        self.fake = fake

    def forward(self, x):
        self.fake.step()
        return self.net(x)


def test_a_worker_reports_the_warm_up_and_the_timed_peaks_apart(fake_cuda, monkeypatch):
    """The worker reads the warm-up's peak before its first window and each window's own:
    the done message and every window row carry them, none inflated by the first step."""
    real_tracker = timing.DeviceMemoryTracker
    monkeypatch.setattr(
        timing, "DeviceMemoryTracker", lambda device: real_tracker(torch.device("cuda"))
    )
    # The worker fixes malloc's thresholds for its own process; this one is pytest's.
    monkeypatch.setattr(allocator, "fix_thresholds", lambda: {})
    request = tiny_request("fp32", warmup_steps=3, timed_steps=2)
    job = worker.WorkerJob(
        request=request,
        process=0,
        collect_environment=False,
        model_factory=lambda: Counted(fake_cuda),
        data=tiny_data(),
    )
    parent, child = multiprocessing.Pipe()
    thread = threading.Thread(target=worker.worker_main, args=(child, job), daemon=True)
    thread.start()
    try:
        kinds = []
        while kinds.count("warmup") < request.training.warmup_steps:
            assert parent.poll(120), "the worker fell silent"
            message = parent.recv()
            assert message[0] not in ("error", "oom"), message
            kinds.append(message[0])
        rows = []
        for _ in range(2):
            parent.send("window")
            assert parent.poll(120)
            kind, row, _steps = parent.recv()
            assert kind == "window"
            rows.append(row)
        parent.send("stop")
        assert parent.poll(120)
        kind, closing = parent.recv()
    finally:
        thread.join(timeout=120)
    assert kind == "done"
    assert kinds[:3] == ["started", "loaded", "ready"]
    assert fake_cuda.steps == 3 + 2 * 2
    assert closing["peak_memory_device_warmup_bytes"] == RESIDENT + FIRST_STEP_TRANSIENT
    assert closing["peak_memory_device_bytes"] == RESIDENT + STEP_TRANSIENT
    assert [row["peak_memory_device_bytes"] for row in rows] == [RESIDENT + STEP_TRANSIENT] * 2
    assert fake_cuda.resets == 1 + 2  # at the start, then at each window's
