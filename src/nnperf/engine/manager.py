"""The parent side of a measurement: the worker processes of one configuration, forked from a
warm parent one after another, driven by the stopping rule under the budget.

Why processes, and why forked: run-to-run variation has a process level (memory layout,
allocator state, cuDNN's algorithm choice, initial weights) that repeating windows inside one
process cannot average away, so a configuration is measured by several processes. Starting
each one fresh would pay Python, torch and torchvision imports every time (9 s warm on the
H100 machine, of which 5.3 s is torchvision pulling in torch._dynamo), so the imports are paid
once and the workers are forked, warm, one after another, as pyperf runs its workers (how they
start and are talked to: `nnperf.engine.processes`). Only one worker exists at a time:
processes of a measurement never overlap.

The parent enforces the budget, worker by worker (`nnperf.engine.driver`).

A worker that ends without its result (killed, by the kernel's OOM killer most often, or
crashed) is replaced by a new process in its slot, once (`nnperf.engine.losses`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from nnperf.core.contract import RunRequest
from nnperf.core.jobs import warn
from nnperf.engine import losses, stopping
from nnperf.engine.driver import Driver
from nnperf.engine.processes import Worker, WorkerLost, worker_starter
from nnperf.engine.worker import WorkerJob, start_method


@dataclasses.dataclass
class Measurement:
    """Everything the processes of one configuration produced (raw; `nnperf.engine.runner`
    turns it into the run document)."""

    status: str = "ok"
    error: str | None = None
    stop_reason: str | None = None
    # The numbers `stop_reason` is stated with (vocab.STOP_NUMBERS; core.wording words them).
    stop_numbers: dict = dataclasses.field(default_factory=dict)
    processes: list[dict] = dataclasses.field(default_factory=list)
    windows: list[dict] = dataclasses.field(default_factory=list)
    steps: list[dict] = dataclasses.field(default_factory=list)
    environment: dict | None = None
    data_info: dict = dataclasses.field(default_factory=dict)
    # A steady step's time, only: a one-time step (stopping.one_time_kinds) is never one.
    single_step_time_s: float | None = None
    single_step_time_is_lower_bound: bool = False
    # Which phase an over-budget verdict came from: a kind of one-time step, or "steady".
    over_budget_phase: str | None = None
    # What makes the measurement unstable beside its windows: (vocab.UNSTABLE_REASONS code,
    # its numbers) pairs, merged into the run document's `unstable_reasons` by the runner.
    notes: list[tuple[str, dict]] = dataclasses.field(default_factory=list)
    started_at_unix: float = 0.0
    ended_at_unix: float = 0.0
    # When the budget's clock started: process 0 up, its data loaded (see driver.Driver.start).
    budget_start_unix: float = 0.0
    # Process 0's one-time steps: bounded on their own, they extend the budget's end.
    one_time_s: float = 0.0
    # Time other configurations' processes ran in between this one's (interleaved runs).
    paused_s: float = 0.0
    # Processes run after the configuration met its own target, for a comparison's interval.
    processes_for_comparisons: int = 0
    start_method: str = "fork"
    # The feeder alone, after the timed windows (`nnperf.engine.loader`): its windows, and
    # the wall time they took, which extends the budget's end like a one-time cost.
    loader_windows: list[dict] = dataclasses.field(default_factory=list)
    loader_s: float = 0.0
    # A worker answered that it measures no loader (a rehearsal): none is asked again.
    loader_unavailable: bool = False
    # Workers lost without their result and replaced (vocab.WORKER_LOSS_FIELDS each).
    worker_losses: list[dict] = dataclasses.field(default_factory=list)

    def clean_windows(self) -> list[dict]:
        """The windows the estimate and the comparison's rounds are made of: every window
        but the disturbed ones (`nnperf.engine.stability.discard_reasons`), which stay in `windows`.
        """
        return [w for w in self.windows if not w.get("discarded")]

    def clean_steps(self) -> list[dict]:
        """The steps of `clean_windows`."""
        left_out = {(w["process"], w["window"]) for w in self.windows if w.get("discarded")}
        return [s for s in self.steps if (s["process"], s["window"]) not in left_out]

    def samples(self) -> list[stopping.WindowSample]:
        return [
            stopping.WindowSample(int(w["process"]), int(w["images"]), float(w["window_s"]))
            for w in self.clean_windows()
        ]


def run_measurement(
    request: RunRequest,
    model_factory: Callable[[], Any] | None = None,
    data: Any = None,
    workflow_dir: str | None = None,
    method: str | None = None,
    *,
    clock: Callable[[], float] = time.time,
    start_worker: Callable[[WorkerJob], Worker] | None = None,
    watch_host: bool = True,
) -> Measurement:
    """Measure one configuration with worker processes until the stopping rule says stop.

    With `model_factory` and `data` given the workers use them (they are pickled to each
    worker); without, each worker loads them from the request (`build.load_run_data`).
    `clock` (unix seconds), `start_worker` and `watch_host` are for a rehearsal on recorded
    timings (`nnperf.engine.rehearsal`): a fake clock, workers that replay, no host to watch.
    """
    method = method or start_method()
    stopping.check_steps(
        request.training.warmup_steps,
        request.training.timed_steps,
        request.settings.compile,
        request.device,
    )
    start_worker = start_worker or worker_starter(method)
    run = MeasurementRun(
        request,
        start_worker,
        clock=clock,
        watch_host=watch_host,
        method=method,
        workflow_dir=workflow_dir,
        model_factory=model_factory,
        data=data,
    )
    while not run.finished:
        run.run_process()
    return run.close()


class MeasurementRun:
    """One configuration's measurement, one worker process at a time.

    `run_measurement` runs it to its end; `nnperf.engine.interleave` alternates the
    processes of several (A B B A ...). While the others run, this one is paused: with
    `count_pauses`, the time between the end of one of its processes and the start of its
    next is not spent from its own budget (`timing.max_seconds` is per configuration).
    """

    def __init__(
        self,
        request: RunRequest,
        start_worker: Callable[[WorkerJob], Worker],
        *,
        clock: Callable[[], float] = time.time,
        watch_host: bool = True,
        method: str = "fork",
        workflow_dir=None,
        model_factory=None,
        data=None,
        count_pauses: bool = False,
    ):
        self.request, self.start_worker, self.clock = request, start_worker, clock
        self.workflow_dir = None if workflow_dir is None else str(workflow_dir)
        self.model_factory, self.data = model_factory, data
        self.count_pauses = count_pauses
        now = clock()
        self.result = Measurement(started_at_unix=now, budget_start_unix=now, start_method=method)
        self.driver = Driver(request, self.result, clock, watch_host)
        self.process = 0
        self.finished = False
        self.last_action: stopping.Action | None = None
        self._idle_since: float | None = None
        # The worker each process slot lost (`_replace`): a slot is replaced once.
        self.losses: dict[int, WorkerLost] = {}

    def run_process(self, round_index: int | None = None) -> stopping.Action:
        """Start the next worker process and drive it to its end; a worker lost without its
        result (killed, crashed) is replaced once (`_replace`)."""
        self.resume()
        while True:
            try:
                action = self._run_worker(round_index)
                break
            except WorkerLost as lost:
                action = self._replace(lost)
                if action is not None:
                    break
        return self.end_process(action)

    def resume(self) -> None:
        """This configuration's clock runs again: with `count_pauses`, the time since its
        last `pause` (others' processes, or others' windows in a shared one) is not its own."""
        if self.count_pauses and self._idle_since is not None:
            self.result.paused_s += self.clock() - self._idle_since
        self._idle_since = None

    def pause(self) -> None:
        self._idle_since = self.clock()

    def end_process(self, action: stopping.Action) -> stopping.Action:
        """Count the process that `action` ended; a stop ends the measurement, `host_busy`
        where the disturbed windows left too few clean ones for an estimate."""
        result = self.result
        self.last_action = action
        self.process += 1
        if action.kind != "process":
            self.finished = True
            if result.status == "ok":
                result.stop_reason = action.reason
                result.stop_numbers = dict(action.numbers)
                if len(result.clean_windows()) < len(result.windows) and not (
                    stopping.enough_clean(stopping.estimate(result.samples()), self.request.timing)
                ):
                    result.status = "host_busy"
        return action

    def job(self) -> WorkerJob:
        """What the next process is asked to do."""
        return WorkerJob(
            request=self.request,
            process=self.process,
            collect_environment=self.process == 0,
            workflow_dir=self.workflow_dir,
            model_factory=self.model_factory,
            data=self.data,
        )

    def open_record(self, worker: Worker, round_index: int | None, **extra) -> dict:
        """The record of the process `worker` runs, appended to the measurement's."""
        record = {
            "process": self.process,
            "seed": self.request.seed_of(self.process),
            "pid": None,
            "status": "ok",
            "started_at_unix": worker.started_at_unix,
            "warmup_step_time_s": [],
            "one_time_step_time_s": {},
        }
        if round_index is not None:
            record["round"] = round_index
        record.update(extra)
        self.result.processes.append(record)
        return record

    def _run_worker(self, round_index: int | None) -> stopping.Action:
        result, clock = self.result, self.clock
        if self.process == 0:
            result.started_at_unix = result.budget_start_unix = clock()
        worker = self.start_worker(self.job())
        record = self.open_record(worker, round_index)
        try:
            return self.driver.drive(worker, record)
        finally:
            worker.kill()
            self.pause()
            record["ended_at_unix"] = self._idle_since

    def _replace(self, lost: WorkerLost) -> stopping.Action | None:
        """After a worker was lost: None to start a new process in its place, or the action
        that ends the measurement when another process does not fit the budget; a slot lost
        the second time fails the measurement (`nnperf.engine.losses`)."""
        earlier = self.losses.get(self.process)
        if earlier is not None:
            raise RuntimeError(losses.second_loss(lost, earlier)) from None
        self.losses[self.process] = lost
        record = self.result.processes[-1]
        losses.forget_process(self.result, lost, record)
        warn(losses.loss_line(lost, self.request))
        if self.process == 0 or self._fits_another():
            return None
        return self.driver.budget_stop()

    def _fits_another(self) -> bool:
        return self.processes_left() > 0

    def processes_left(self) -> int:
        """How many more processes fit: below `timing.max_processes`, each its start and
        minimal windows within what is left of `timing.max_seconds` (the stopping rule's
        own test for a new process, `stopping.process_fits_budget`, counted)."""
        result, timing = self.result, self.request.timing
        if not result.windows or self.process >= timing.max_processes:
            return 0
        idle = self._idle_since if self._idle_since is not None else self.clock()
        remaining = timing.max_seconds - self.driver.spent_s(idle)
        each = stopping.minimal_process_s(
            stopping.process_cost(
                result.processes, result.windows, bool(self.request.settings.compile)
            ),
            max(float(w["window_s"]) for w in result.windows),
            timing,
        )
        if each > 0:
            fit = int(remaining // each)
        else:
            fit = timing.max_processes if remaining >= 0 else 0
        return max(0, min(timing.max_processes - self.process, fit))

    def can_continue(self) -> bool:
        """Whether one more process fits after this measurement stopped at its own target:
        below `timing.max_processes`, and its start and minimal windows within what is left
        of `timing.max_seconds` (the stopping rule's own test for a new process)."""
        return self.result.status == "ok" and self._fits_another()

    def reopen(self) -> None:
        """Measure on after the configuration's own stop, for a comparison's sake."""
        self.finished = False
        self.result.processes_for_comparisons += 1

    def close(self) -> Measurement:
        """The measurement, ended where its last process ended."""
        ended = self._idle_since if self.count_pauses else None
        self.result.ended_at_unix = ended if ended is not None else self.clock()
        return self.result
