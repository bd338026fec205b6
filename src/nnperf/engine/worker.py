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

A *shared* process (`WorkerJob.partners`, `nnperf.engine.sharing`) holds several members'
trainings, each its own model, optimizer and feeder, built and warmed up one after another:
every message above but "started" arrives wrapped as ("member", m, message), and the parent's
commands name their member, [command, m]; the process ends when every member has had its
"stop". A member's device and host memory peaks are not its own there (the others' models
and optimizer state sit beside it), so they are reported as None.
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
    # Further members of a shared process: each one's request and process index.
    partners: tuple[tuple[RunRequest, int], ...] = ()

    def members(self) -> list[tuple[RunRequest, int]]:
        return [(self.request, self.process), *self.partners]


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


@dataclasses.dataclass
class _Member:
    """One training of a worker process, and what its windows are counted and sampled by."""

    request: RunRequest
    process: int
    training: Any
    memory: Any
    host: Any
    optimizer_impl: str
    send: Callable[[tuple], None]
    loss_start: float | None = None
    window: int = 0
    loader_window: int = 0


def _work(conn, job: WorkerJob) -> None:
    from nnperf.core.devices import require_available
    from nnperf.engine import allocator

    members = job.members()
    for request, _ in members:
        require_available(request.device, request.precision)
    malloc = allocator.fix_thresholds()  # before the models and data take their memory
    gpu = None
    states: list[_Member] = []
    shared = len(members) > 1
    for index, (request, process) in enumerate(members):
        send = _member_sender(conn, index) if shared else conn.send
        state, gpu = _prepare(job, request, process, send, malloc, gpu, shared)
        states.append(state)
    done: set[int] = set()
    while len(done) < len(states):
        command = conn.recv()
        name, index = (command, 0) if isinstance(command, str) else (command[0], int(command[1]))
        state = states[index]
        if name == "loader":
            state.send(("loader", _loader_row(state)))
            state.loader_window += 1
        elif name == "window":
            state.send(_window_message(state, gpu, shared))
            state.window += 1
        else:
            state.send(("done", _closing(state, shared)))
            done.add(index)


def _member_sender(conn, index: int) -> Callable[[tuple], None]:
    def send(message: tuple) -> None:
        conn.send(("member", index, message))

    return send


def _prepare(job: WorkerJob, request: RunRequest, process: int, send, malloc, gpu, shared: bool):
    """Load, build and warm up one member's training, telling the parent as it goes; the
    data is loaded once for all the members that share it (a group's members do)."""
    from nnperf.engine import timing
    from nnperf.engine.build import build, load_run_data
    from nnperf.engine.step import resolved_optimizer_impl

    if job.model_factory is None:
        job.data, job.model_factory = load_run_data(request)
    data = job.data
    send(
        (
            "loaded",
            {
                "num_classes": int(data.num_classes),
                "input_size": int(data.input_size),
                "train_images": int(len(data.labels)),
            },
        )
    )
    training = build(request, job.model_factory, data, request.seed_of(process))
    params = [p for group in training.optimizer.param_groups for p in group["params"]]
    optimizer_impl = resolved_optimizer_impl(request.settings.optimizer_impl, params)
    memory = timing.DeviceMemoryTracker(training.device)
    if gpu is None:
        gpu = stability.GpuSampler(_cuda_index(training.device))
    environment = None
    if job.collect_environment and not shared:
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
    send(("ready", {"first_step_at_unix": time.time(), "environment": environment}))
    state = _Member(
        request,
        process,
        training,
        memory,
        stability.HostSampler(_own_threads(request)),
        optimizer_impl,
        send,
    )
    for _ in range(request.training.warmup_steps):
        seconds, loss = timing.warmup_step(training, memory)
        if state.loss_start is None:
            state.loss_start = float(loss.float().cpu())
        send(("warmup", seconds))
    memory.end_warmup()
    return state, gpu


def _window_message(state: _Member, gpu, shared: bool) -> tuple:
    """One timed window of `state`'s training: ("window", row, steps)."""
    from nnperf.engine import timing

    request, memory, host = state.request, state.memory, state.host
    before = host.snapshot()
    memory.start_window()
    result = timing.time_window(state.training, request.training.timed_steps, memory)
    peak_memory = memory.end_window()
    after = host.snapshot()
    images = request.batch_size * request.training.timed_steps
    row = {
        "process": state.process,
        "window": state.window,
        "steps": request.training.timed_steps,
        "images": images,
        "window_s": result.window_s,
        "throughput_img_s": images / result.window_s,
        "started_at_unix": result.started_at_unix,
        "ended_at_unix": result.ended_at_unix,
        "loss_end": result.loss_end,
        "peak_memory_device_bytes": None if shared else peak_memory,
        **gpu.window_fields(),
        **host.window_fields(before, after, result.window_s),
    }
    steps = [{"process": state.process, "window": state.window, **step} for step in result.steps]
    return ("window", row, steps)


def _closing(state: _Member, shared: bool) -> dict:
    from nnperf.engine import timing

    memory = state.memory
    return {
        "loss_start": state.loss_start,
        "peak_memory_device_bytes": None if shared else memory.timed_peak_bytes,
        "peak_memory_device_warmup_bytes": None if shared else memory.warmup_peak_bytes,
        "peak_memory_host_bytes": None if shared else timing.peak_host_memory_bytes(),
        "optimizer_impl": state.optimizer_impl,
    }


def _loader_row(state: _Member) -> dict:
    """One loader window (`nnperf.engine.loader`): the feeder alone, as many batches as a
    timed window; the process's first drains what its DataLoader workers hold ready."""
    from nnperf.engine import loader, timing

    request, process, index = state.request, state.process, state.loader_window
    drain = loader.in_flight_batches(request.settings) if index == 0 else 0
    result = timing.time_loader_window(state.training, request.training.timed_steps, drain)
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
