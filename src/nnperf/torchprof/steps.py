"""The steps of an operator profile under torch.profiler: layer ranges, phase ranges, the
profiler session and what the memory analysis needs from the live tensors.

Each profiled step is a `record_function` range `nnperf_step#<i>` with one range per phase
inside, and every module's forward call in a range named by its module path: these ranges are
the contract with the analysis (`nnperf.torchprof.analysis`), which reads them back from the
exported trace. The job that warms up, budgets and writes the files is
`nnperf.torchprof.profile`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import torch

from nnperf.engine.build import one_line
from nnperf.engine.step import Training
from nnperf.engine.timing import synchronize
from nnperf.torchprof import events
from nnperf.torchprof import memory as step_memory
from nnperf.torchprof.budget import PROFILED_STEP_COST, PROFILER_WARMUP_STEPS


class ProfilerUnavailable(Exception):
    """The profiler cannot run here; the message is the one-line reason."""


# --- layer ranges ------------------------------------------------------------------------


def layer_modules(training: Training, compiled: bool) -> list[tuple[str, torch.nn.Module]]:
    """(row name, module) of every module of the model (its root as `ROOT_MODULE`) and the
    loss; a compiled model has none: its layers are fused into graphs, and hooks would be
    traced into them."""
    if compiled:
        return []
    named = [(name or events.ROOT_MODULE, m) for name, m in training.model.named_modules()]
    return [*named, (events.LOSS_MODULE, training.criterion)]


class LayerRanges:
    """A profiler range around every forward call of the given modules, named
    `nnperf_module:<path>` (forward pre-hook opens it, forward hook closes it).

    Forward hooks do not touch the autograd graph, so the step is the step the timed runs
    run; backward time is attributed through autograd's sequence numbers instead
    (`nnperf.torchprof.analysis`). Outside a profiler the ranges cost a few microseconds a call.
    """

    def __init__(self, modules: Iterable[tuple[str, torch.nn.Module]]):
        self._open: dict[int, list] = {}
        self._handles = []
        for name, module in modules:
            self._handles.append(module.register_forward_pre_hook(self._opener(name)))
            self._handles.append(module.register_forward_hook(self._close, always_call=True))

    def _opener(self, name: str):
        range_name = events.MODULE_RANGE_PREFIX + name

        def open_range(module, _inputs):
            handle = torch.autograd.profiler.record_function(range_name)
            handle.__enter__()
            self._open.setdefault(id(module), []).append(handle)

        return open_range

    def _close(self, module, _inputs, _output):
        stack = self._open.get(id(module))
        if stack:
            stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        for stack in self._open.values():
            while stack:
                stack.pop().__exit__(None, None, None)


# --- what the memory analysis needs from the live tensors -----------------------------------


def device_total_bytes(device: torch.device) -> int | None:
    """The device's memory: the GPU's, MPS's recommended working set, or the machine's RAM."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type == "mps" and hasattr(torch.mps, "recommended_max_memory"):
        return int(torch.mps.recommended_max_memory())
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def persistent_bytes(training: Training) -> dict[str, int]:
    """Bytes of what lives across steps: parameters, buffers, optimizer state, and the
    training split when it is resident on the device."""
    from nnperf.engine.feeders import DeviceResidentFeeder

    model = training.model
    state = [
        value
        for per_parameter in training.optimizer.state.values()
        for value in per_parameter.values()
        if isinstance(value, torch.Tensor)
    ]
    feeder = training.feeder
    resident = 0
    if isinstance(feeder, DeviceResidentFeeder):
        resident = feeder.images.nbytes + feeder.labels.nbytes
    return {
        "parameter_bytes": sum(p.nbytes for p in model.parameters()),
        "buffer_bytes": sum(b.nbytes for b in model.buffers()),
        "optimizer_state_bytes": sum(t.nbytes for t in state),
        "resident_data_bytes": int(resident),
    }


def allocated_bytes(device: torch.device, persistent: Mapping[str, int]) -> tuple[int, str]:
    """(bytes allocated now, where the number comes from): the CUDA allocator's count, or on
    a CPU (no allocator statistics) the persistent tensors' bytes."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device)), "allocator"
    if device.type == "mps":
        return int(torch.mps.current_allocated_memory()), "allocator"
    return int(sum(persistent.values())), "persistent tensors"


def gradient_storages(training: Training) -> dict[str, int]:
    """{address: bytes} of the gradients' storages (addresses as text: JSON keys)."""
    storages = {}
    for parameter in training.model.parameters():
        if parameter.grad is not None:
            storage = parameter.grad.untyped_storage()
            storages[str(storage.data_ptr())] = int(storage.nbytes())
    return storages


# --- the steps --------------------------------------------------------------------------


@contextlib.contextmanager
def phase_range(phase: str) -> Iterator[None]:
    with torch.autograd.profiler.record_function(events.PHASE_RANGE_PREFIX + phase):
        yield


def marked_step(training: Training, index: int, last: bool) -> dict[str, int]:
    """One training step inside `nnperf_step#<index>`, each phase in its range; returns the
    gradient storages noted between backward and the optimizer step. The last step waits
    for the device inside its range, so the profiled window ends when the device is done."""
    with torch.autograd.profiler.record_function(f"{events.STEP_RANGE_PREFIX}{index}"):
        with phase_range("data_wait"):
            batch = training.next_batch()
        with phase_range("h2d"):
            inputs, labels = training.to_device(batch)
        with phase_range("forward"):
            loss = training.forward(inputs, labels)
        with phase_range("backward"):
            training.backward(loss)
        gradients = gradient_storages(training)
        with phase_range("optimizer"):
            training.optimizer_step()
        if last:
            synchronize(training.device)
    return gradients


def make_profiler(device: str, with_stack: bool):
    """The profiler of a profile (raises ProfilerUnavailable where there is none)."""
    if not torch.autograd.kineto_available():
        raise ProfilerUnavailable("this torch build has no Kineto profiler (torch.profiler)")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    else:
        # A CUDA build of torch on a machine without a GPU: Kineto probes for one when it
        # starts and logs "gpuGetDeviceCount failed with code 35" as an ERROR on a run that
        # succeeds. Read when Kineto starts (the first profile of the process); a level the
        # user set is kept.
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    try:
        return torch.profiler.profile(
            activities=activities,
            record_shapes=True,
            profile_memory=True,
            with_stack=with_stack,
        )
    except Exception as exc:  # noqa: BLE001 - any failure to set the profiler up is the note
        raise ProfilerUnavailable(f"torch.profiler cannot be set up: {one_line(exc)}") from None


@contextlib.contextmanager
def profiling(device: str, with_stack: bool, metadata: Mapping | None = None):
    """A started profiler; failures to start or stop it are ProfilerUnavailable, failures
    of the code inside (out of memory) propagate as they are."""
    profiler = make_profiler(device, with_stack)
    if metadata is not None:
        profiler.preset_metadata_json("nnperf", json.dumps(metadata))
    try:
        profiler.__enter__()
    except Exception as exc:  # noqa: BLE001 - a CUPTI failure raises here
        raise ProfilerUnavailable(f"torch.profiler failed to start: {one_line(exc)}") from None
    failed = True
    try:
        yield profiler
        failed = False
    finally:
        try:
            profiler.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            if not failed:
                raise ProfilerUnavailable(
                    f"torch.profiler failed to stop: {one_line(exc)}"
                ) from None


def export_trace(profiler) -> bytes:
    """The profiler's Chrome trace, gzipped (torch gzips when the path ends in .gz)."""
    with tempfile.TemporaryDirectory(prefix="nnperf_trace_") as folder:
        path = os.path.join(folder, "trace.json.gz")
        try:
            profiler.export_chrome_trace(path)
            with open(path, "rb") as handle:
                return handle.read()
        except Exception as exc:  # noqa: BLE001
            raise ProfilerUnavailable(f"exporting the trace failed: {one_line(exc)}") from None


@dataclass
class ProfiledSteps:
    """What the profiled window left behind: the gzipped trace and the memory inventory."""

    trace: bytes
    inventory: dict
    steps: int


def profile_steps(
    training: Training,
    steps: int,
    with_stack: bool,
    metadata: Mapping | None = None,
    deadline: float | None = None,
    step_time_s: float | None = None,
) -> ProfiledSteps:
    """Up to `steps` marked steps under the profiler (after a thrown-away profiled step on
    CUDA, `PROFILER_WARMUP_STEPS`), with the memory inventory of
    `nnperf.torchprof.memory.memory_breakdown`.

    With a `deadline` (`time.perf_counter`), a step is made the last one when another after
    it would not end before the deadline, at the profiled steps' own pace (`step_time_s`
    times `PROFILED_STEP_COST` before the first has run); at least one step runs.
    """
    device = training.device
    for _ in range(PROFILER_WARMUP_STEPS.get(device.type, 0)):
        with profiling(device.type, with_stack):
            training.step()
    persistent = persistent_bytes(training)
    gradients = []
    synchronize(device)
    with profiling(device.type, with_stack, metadata) as profiler:
        start_allocated, source = allocated_bytes(device, persistent)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        pace = step_time_s * PROFILED_STEP_COST if step_time_s is not None else None
        for index in range(steps):
            started = time.perf_counter()
            last = index == steps - 1 or (
                deadline is not None and pace is not None and started + 2 * pace > deadline
            )
            storages = marked_step(training, index, last=last)
            gradients.append({"step": index, "storages": storages})
            pace = time.perf_counter() - started
            if last:
                break
        peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
    inventory = {
        "device_type": step_memory.DEVICE_TYPES.get(device.type),
        "start_allocated_bytes": start_allocated,
        "start_allocated_source": source,
        **persistent,
        "allocator_peak_bytes": peak,
        "gradients": gradients,
        "device_total_bytes": device_total_bytes(device),
    }
    return ProfiledSteps(trace=export_trace(profiler), inventory=inventory, steps=len(gradients))
