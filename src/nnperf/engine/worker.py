"""The child side of a measurement: a worker process that builds and times one configuration.

A worker is forked warm, from multiprocessing's fork server (which imports `PRELOAD` once)
or from the machine's shared one (`nnperf.engine.warmserver`). It initialises the device
itself, loads the prepared data, builds the model (`nnperf.engine.build`), warms up and runs
the windows its parent asks for. The parent (`nnperf.engine.manager`) starts it and enforces
the budget; this side never imports the parent's modules (`manager`, `runner`), as pyperf's
worker never imports its manager.

Its stdout and stderr are the write end of a pipe its job reads (`adopt_output`): whichever
server forked it, its prints, warnings and a native library's last words (fd 1 and 2) reach
the job's log, and a crash's last lines reach the job's error (`nnperf.engine.workerlog`).

The protocol over the connection (child -> parent; the parent answers each window). A
multiprocessing pipe pickles it; the warm server's socket carries it as JSON
(`warmprotocol.JsonConnection`), so every message is plain data: strings, numbers, lists and
dicts (a tuple arrives as a list).

    ("started", pid)            first, so the parent can kill it
    ("loaded", {...})           the data's classes, input size and images
    ("ready", {...})            built (process 0: with the environment record); about to
                                run its first warm-up step
    ("warmup", seconds)         after each warm-up step
    ("window", row, steps)      after each timed window; the parent replies "window", "loader"
                                or "stop"
    ("loader", row)             after each "loader": one loader window, the feeder iterated
                                with no training (`nnperf.engine.loader`); the parent replies
                                "loader" or "stop". A worker that measures no loader (a
                                rehearsal's) answers ("loader", None).
    ("done", {...})             after "stop": peak memory (the warm-up's, the timed steps'), loss
    ("oom", message) / ("error", kind, message)
"""

from __future__ import annotations

import dataclasses
import faulthandler
import multiprocessing
import os
import sys
import time
import traceback
from typing import Any, Callable

from nnperf.core.contract import RunRequest
from nnperf.core.errors import NnperfError
from nnperf.engine import stability


def process_started_at_unix() -> float | None:
    """When this OS process started (Linux: /proc), so fixed costs include interpreter start
    and imports. None where unreadable."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            start_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime"))
        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# What the fork server imports once, so that no worker pays for it: the worker's side only.
PRELOAD = (
    "torch",
    "nnperf.workload.datasets",
    "nnperf.core.devices",
    "nnperf.core.environment",
    "nnperf.workload.models",
    "nnperf.engine.build",
    "nnperf.engine.timing",
    "nnperf.engine.step",
    "nnperf.engine.worker",
)


# The start method of workers forked by the machine's shared warm server.
WARM = "warm_server"


def start_method() -> str:
    """forkserver on Linux (warm, clean workers), spawn elsewhere (fork is unsafe on macOS)."""
    linux = sys.platform.startswith("linux")
    return (
        "forkserver"
        if linux and "forkserver" in multiprocessing.get_all_start_methods()
        else "spawn"
    )


@dataclasses.dataclass
class WorkerJob:
    """What one worker process is asked to do: pickled to a multiprocessing worker, sent as
    plain data to the warm server (`warmprotocol.job_message`). Without `model_factory` and
    `data` the worker loads them by name from the request; given, they must pickle (a
    module-level function, arrays), and the warm server refuses them."""

    request: RunRequest
    process: int
    collect_environment: bool
    workflow_dir: str | None = None
    model_factory: Callable[[], Any] | None = None
    data: Any = None


def _own_threads(request: RunRequest) -> int:
    """Threads the run keeps busy: torch's intra-op pool on CPU, the host thread and its
    autograd thread on an accelerator; plus DataLoader workers."""
    import torch

    busy = torch.get_num_threads() if request.device == "cpu" else 2
    return busy + request.settings.num_workers


def adopt_output(fd: int) -> None:
    """Make `fd` (the job's pipe) this process's stdout and stderr, at the descriptor level,
    so that native code's output goes there too; a fatal signal prints the Python stack."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if fd > 2:
        os.close(fd)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a crash must not swallow a print
    if sys.stderr is not None:
        faulthandler.enable(file=sys.stderr)


def forked_main(conn, job: WorkerJob, output) -> None:
    """Body of a worker started by multiprocessing: `output` is a connection object that
    carries the job's output pipe (multiprocessing passes descriptors only inside one)."""
    fd = os.dup(output.fileno())
    output.close()
    adopt_output(fd)
    worker_main(conn, job)


def worker_main(conn, job: WorkerJob) -> None:
    """Body of one worker process (module docstring has the protocol)."""
    try:
        conn.send(("started", os.getpid()))
        _work(conn, job)
    except NnperfError as exc:
        conn.send(("error", "nnperf", str(exc)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the job
        from nnperf.engine.build import one_line
        from nnperf.engine.step import is_out_of_memory

        if is_out_of_memory(exc):
            conn.send(("oom", one_line(exc)))
        else:
            conn.send(("error", "crash", traceback.format_exc()))
    finally:
        conn.close()


def _work(conn, job: WorkerJob) -> None:
    from nnperf.core.devices import require_available
    from nnperf.engine import allocator
    from nnperf.engine import timing
    from nnperf.engine.build import build, load_run_data
    from nnperf.engine.step import resolved_optimizer_impl

    request = job.request
    require_available(request.device, request.precision)
    malloc = allocator.fix_thresholds()  # before the model and data take their memory
    if job.model_factory is None:
        job.data, job.model_factory = load_run_data(request)
    data = job.data
    conn.send(
        (
            "loaded",
            {
                "num_classes": int(data.num_classes),
                "input_size": int(data.input_size),
                "train_images": int(len(data.labels)),
            },
        )
    )
    training = build(request, job.model_factory, job.data, request.seed_of(job.process))
    params = [p for group in training.optimizer.param_groups for p in group["params"]]
    optimizer_impl = resolved_optimizer_impl(request.settings.optimizer_impl, params)
    memory = timing.DeviceMemoryTracker(training.device)
    host = stability.HostSampler(_own_threads(request))
    gpu = stability.GpuSampler(_cuda_index(training.device))
    environment = None
    if job.collect_environment:
        # Before the first step, so a configuration cut off as over budget still has it.
        from nnperf.core.environment import collect_environment

        environment = collect_environment(
            device=request.device,
            precision=request.precision,
            settings=request.settings,
            optimizer_impl_resolved=optimizer_impl,
            workflow_dir=job.workflow_dir,
        )
        environment["host_allocator"] = malloc
        if training.device.type == "cuda":
            # Where the windows' clocks come from (the GPU found by its UUID), or why none.
            environment["nvml"] = gpu.record()
    conn.send(("ready", {"first_step_at_unix": time.time(), "environment": environment}))
    loss_start = None
    for _ in range(request.training.warmup_steps):
        seconds, loss = timing.warmup_step(training, memory)
        if loss_start is None:
            loss_start = float(loss.float().cpu())
        conn.send(("warmup", seconds))
    memory.end_warmup()
    window = 0
    loader_window = 0
    while True:
        command = conn.recv()
        if command == "loader":
            conn.send(("loader", _loader_row(training, request, job.process, loader_window)))
            loader_window += 1
            continue
        if command != "window":
            break
        before = host.snapshot()
        memory.start_window()
        result = timing.time_window(training, request.training.timed_steps, memory)
        peak_memory = memory.end_window()
        after = host.snapshot()
        images = request.batch_size * request.training.timed_steps
        row = {
            "process": job.process,
            "window": window,
            "steps": request.training.timed_steps,
            "images": images,
            "window_s": result.window_s,
            "throughput_img_s": images / result.window_s,
            "started_at_unix": result.started_at_unix,
            "ended_at_unix": result.ended_at_unix,
            "loss_end": result.loss_end,
            "peak_memory_device_bytes": peak_memory,
            **gpu.window_fields(),
            **host.window_fields(before, after, result.window_s),
        }
        steps = [{"process": job.process, "window": window, **step} for step in result.steps]
        conn.send(("window", row, steps))
        window += 1
    conn.send(
        (
            "done",
            {
                "loss_start": loss_start,
                "peak_memory_device_bytes": memory.timed_peak_bytes,
                "peak_memory_device_warmup_bytes": memory.warmup_peak_bytes,
                "peak_memory_host_bytes": timing.peak_host_memory_bytes(),
                "optimizer_impl": optimizer_impl,
            },
        )
    )


def _loader_row(training, request: RunRequest, process: int, index: int) -> dict:
    """One loader window (`nnperf.engine.loader`): the feeder alone, as many batches as a
    timed window; the process's first drains what its DataLoader workers hold ready."""
    from nnperf.engine import loader, timing

    drain = loader.in_flight_batches(request.settings) if index == 0 else 0
    result = timing.time_loader_window(training, request.training.timed_steps, drain)
    images = request.batch_size * request.training.timed_steps
    return {
        "process": process,
        "window": index,
        "batches": request.training.timed_steps,
        "images": images,
        "window_s": result.window_s,
        "loader_rate_img_s": images / result.window_s,
        "drained_batches": result.drained,
        "drain_s": result.drain_s,
        "started_at_unix": result.started_at_unix,
        "ended_at_unix": result.ended_at_unix,
    }


def _cuda_index(device) -> int | None:
    if device.type != "cuda":
        return None
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()
