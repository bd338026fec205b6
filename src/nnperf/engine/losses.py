"""A worker process lost without its result, and the process that takes its place.

A worker that ends without sending its result was killed or crashed: most often the kernel's
OOM killer (SIGKILL, which no process can catch, so the worker says nothing), sometimes a
native crash. Failing the whole group for it would throw away every configuration's
processes measured so far (minutes on a GPU), so the measurement (`manager.MeasurementRun`)
starts a new process in the lost one's place, with the same index and seed, once per process
slot: the lost process's windows, steps and loader windows are dropped (its slot is measured
again from its start), and the loss is recorded as codes and numbers (run JSON
`worker_losses`, `nnperf.core.vocab.WORKER_LOSS_FIELDS`). A slot lost a second time fails
the measurement with one line naming how both ended: a loss that repeats is the
configuration's own, not the machine's.
"""

from __future__ import annotations

from nnperf.core.contract import RunRequest
from nnperf.engine.processes import WorkerLost
from nnperf.engine.workerlog import exit_status


def loss_record(lost: WorkerLost, record: dict) -> dict:
    """The loss as the run JSON keeps it (`vocab.WORKER_LOSS_FIELDS`)."""
    return {
        "process": lost.index,
        "signal": lost.signal,
        "exit_code": lost.exit_code,
        "phase": record.get("phase"),
        "round": record.get("round"),
        "pid": record.get("pid"),
    }


def forget_process(result, lost: WorkerLost, record: dict) -> None:
    """Record the loss in `result` (a `manager.Measurement`) and drop what the lost process
    measured: its slot starts again from nothing."""
    index = lost.index
    result.worker_losses.append(loss_record(lost, record))
    result.processes = [r for r in result.processes if r is not record]
    result.windows = [w for w in result.windows if int(w["process"]) != index]
    result.steps = [s for s in result.steps if int(s["process"]) != index]
    result.loader_windows = [w for w in result.loader_windows if int(w["process"]) != index]
    if index == 0:
        # Process 0's one-time steps extend the budget; its replacement pays them again.
        result.one_time_s = 0.0


def _how(lost: WorkerLost) -> str:
    if lost.signal is not None:
        return f"killed by {lost.signal}"
    if lost.exit_code is not None:
        return f"ended with {exit_status(lost.exit_code)}"
    return "ended without a result"


def loss_line(lost: WorkerLost, request: RunRequest) -> str:
    """The job log's line for a first loss: which worker, how, and what happens now."""
    hint = " — the kernel's OOM killer?" if lost.signal == "SIGKILL" else ""
    return (
        f"worker {lost.index} of {request.precision} {request.variant} {_how(lost)}"
        f"{hint}; a new process takes its place (once per process)"
    )


def second_loss(lost: WorkerLost, earlier: WorkerLost) -> str:
    """The one line that fails the measurement when a slot is lost again."""
    hint = " (the kernel's OOM killer?)" if lost.signal == "SIGKILL" else ""
    return f"{lost}; lost twice{hint}, the process it replaced: {_how(earlier)}"
