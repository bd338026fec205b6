"""Rehearsal: recorded step timings replayed through the real measurement engine.

nnperf exists to measure GPUs, and most machines it is developed and tested on have none.
What goes wrong on a GPU is mostly timing: a first step that carries seconds of cuDNN
autotuning ahead of 10 ms steps, a compile of 20 s, a CUDA-graph recording step 30 times
slower than the steps after it, a process-to-process spread of 4% from cuDNN's algorithm
choice. None of that needs the GPU to be rehearsed; it needs its timings. So:

* `ConfigTiming` holds what a configuration's worker processes took on real silicon: each
  process's warm-up steps (one-time ones first), its steady step and step-to-step spread.
  `ConfigTiming.from_run_documents` reads them from run documents (each process of each
  document), so any earlier study of a machine is a timing model of it.
* `ReplayWorker` plays those timings to the engine through the worker protocol
  (`nnperf.engine.worker`, received by `processes.Worker`), on a `FakeClock`: the real runner,
  stopping rule, budgets, deadlines and verdicts run unchanged, in milliseconds, with no
  process started.
* `h100_model()` is the recorded H100 (`recordings/h100.json`, from nnperf's own run documents
  on an H100 80GB) with the rules that fill in configurations nobody recorded: another batch
  size scales step times linearly (an upper bound: a step never grows faster than its
  batch) but not the first step, whose autotuning or compilation does not grow with the batch
  (bf16's first eager step at batch 1024, 1.9 s, lies inside its range at 256, 1.5-8.0 s), another precision of a compiled variant scales by the tuned eager steps' ratio, and
  a configuration recorded in one process borrows the process-to-process spread of the
  recorded tuned processes of its precision. Each `ConfigTiming.source` says which rule made
  it.

`replay_group` measures the configurations of one timed group as rule timed_group does
(`interleave.run_group`: processes alternating round by round, measuring on while a
comparison is unresolved) on one fake clock; `nnperf plan` prices a study's timed groups
with it. `cpu_model()` is the 2-core CPU the default study's example was measured on. The
tests drive every configuration of `config/gpu.yaml` through `replay`. What the rehearsal cannot show is anything
the timings do not hold: a crash, an out-of-memory, a driver error.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from nnperf.core.contract import RunRequest
from nnperf.core.vocab import PHASES
from nnperf.engine import processes, stopping, worker

# Where the replayed clock starts (any unix time; the H100 recordings' month).
CLOCK_START_UNIX = 1_795_000_000.0
# A replayed step is never faster than this share of its process's steady step.
FASTEST_STEP_SHARE = 0.5


class FakeClock:
    """Unix seconds that move only when told: the rehearsal's time."""

    def __init__(self, start: float = CLOCK_START_UNIX):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, float(seconds))


@dataclasses.dataclass(frozen=True)
class ProcessTiming:
    """One worker process's recorded timings."""

    steady_step_s: float
    # Step-to-step coefficient of variation inside the process (std / median of its steps).
    step_cv: float = 0.0
    # Its warm-up steps as recorded: the one-time ones first (stopping.one_time_kinds).
    warmup_step_time_s: tuple[float, ...] = ()
    # Worker start to its first step: fork, device init, model build, data.
    start_s: float = 1.0
    # Median phase times of its steps, to split a replayed step into phases.
    phase_time_s: Mapping[str, float] | None = None
    peak_memory_device_bytes: int | None = None

    def warmup_step(self, index: int) -> float:
        """Warm-up step `index` (0-based): as recorded, or steady past the recording."""
        if index < len(self.warmup_step_time_s):
            return float(self.warmup_step_time_s[index])
        return self.steady_step_s

    def scaled(self, factor: float, keep_first: int = 0) -> ProcessTiming:
        """Step times times `factor`; the first `keep_first` warm-up steps kept as they are
        (autotuning and compilation do not grow with the batch)."""
        warmup = tuple(
            s if i < keep_first else s * factor for i, s in enumerate(self.warmup_step_time_s)
        )
        return dataclasses.replace(
            self,
            steady_step_s=self.steady_step_s * factor,
            warmup_step_time_s=warmup,
            phase_time_s=(
                {k: v * factor for k, v in self.phase_time_s.items()} if self.phase_time_s else None
            ),
        )


@dataclasses.dataclass(frozen=True)
class ConfigTiming:
    """The recorded (or derived) timings of one configuration's processes. Process i of a
    replay plays `processes[i % len(processes)]`."""

    processes: tuple[ProcessTiming, ...]
    source: str
    compile_mode: str | bool = False
    environment: Mapping[str, Any] | None = None
    data_info: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: {"num_classes": 10, "input_size": 32, "train_images": 50000}
    )

    @property
    def steady_step_s(self) -> float:
        """The median of the processes' steady steps."""
        return float(statistics.median(p.steady_step_s for p in self.processes))

    @property
    def compile_s(self) -> float:
        """The first process's compilation: its first step less a steady step, where the
        source says the variant compiles (0 for eager)."""
        first = self.processes[0]
        if not self.compile_mode or not first.warmup_step_time_s:
            return 0.0
        return max(0.0, first.warmup_step_time_s[0] - first.steady_step_s)

    @classmethod
    def from_run_documents(
        cls, documents: Iterable[Mapping], source: str | None = None, start_s: float = 1.0
    ) -> ConfigTiming:
        """Every measured process of `documents` (run JSONs of one configuration, `ok`)."""
        documents = [d for d in documents if d.get("status", "ok") == "ok"]
        if not documents:
            raise ValueError("no measured run document to take timings from")
        processes = []
        for document in documents:
            processes.extend(_processes_of(document, start_s))
        first = documents[0]
        compile_mode = (first.get("variant_settings") or {}).get("compile")
        label = source or ", ".join(str(d.get("file", "run document")) for d in documents)
        return cls(
            processes=tuple(processes),
            source=label,
            compile_mode=compile_mode or False,
            environment=first.get("environment"),
            data_info={
                "num_classes": first.get("num_classes") or 10,
                "input_size": first.get("input_size") or 32,
                "train_images": first.get("train_images") or 0,
            },
        )


def _processes_of(document: Mapping, start_s: float) -> list[ProcessTiming]:
    """The processes of one run document: its `processes` records where they carry their
    own steps (nnperf's run documents), else the document as one process."""
    steps = document.get("step_time_s") or {}
    median = float(steps["median"])
    cv = float(steps.get("std") or 0.0) / median
    phases = document.get("phase_time_s")
    peak = document.get("peak_memory_device_bytes")
    records = document.get("processes") or []
    rates = {r.get("process"): r.get("throughput_img_s") for r in records}
    mean_rate = document.get("throughput_img_s")
    if len(records) > 1 and mean_rate and all(rates.values()):
        # Each process's steady step from its own throughput; warm-ups as it recorded them.
        return [
            ProcessTiming(
                steady_step_s=median * mean_rate / rates[r.get("process")],
                step_cv=cv,
                warmup_step_time_s=tuple(r.get("warmup_step_time_s") or ()),
                start_s=float(r.get("fixed_cost_s") or start_s),
                phase_time_s=phases,
                peak_memory_device_bytes=r.get("peak_memory_device_bytes") or peak,
            )
            for r in records
        ]
    return [
        ProcessTiming(
            steady_step_s=median,
            step_cv=cv,
            warmup_step_time_s=tuple(document.get("warmup_step_time_s") or ()),
            start_s=start_s,
            phase_time_s=phases,
            peak_memory_device_bytes=peak,
        )
    ]


# --- the replaying worker --------------------------------------------------------------


class ReplayWorker(processes.Worker):
    """A worker that plays recorded timings to the engine (the protocol of
    `nnperf.engine.worker`): every message arrives when the fake clock says it would have, and
    a deadline the recorded step would miss is an `Overrun`, exactly as a killed process."""

    def __init__(
        self,
        job: worker.WorkerJob,
        timing: ConfigTiming,
        clock: FakeClock,
        rng: np.random.Generator,
    ):
        self.index = job.process
        self.pid = None
        self.job = job
        self.clock = clock
        self.rng = rng
        self.started_at_unix = clock()
        self.timing = timing
        self.process = _process_timing(timing, job.process, job.request)
        self.request = job.request
        self.pending = self._warm_up_events()
        self.window = 0
        self.killed = False

    def _warm_up_events(self) -> list[tuple[float, tuple]]:
        process, request = self.process, self.request
        events = [
            (process.start_s, ("loaded", dict(self.timing.data_info))),
            (
                0.0,
                (
                    "ready",
                    {
                        "first_step_at_unix": None,  # filled in when delivered
                        "environment": (
                            {**(self.timing.environment or {}), "rehearsal": self.timing.source}
                            if self.job.collect_environment
                            else None
                        ),
                    },
                ),
            ),
        ]
        for step in range(request.training.warmup_steps):
            seconds = process.warmup_step(step)
            events.append((seconds, ("warmup", seconds)))
        return events

    def receive(self, deadline_unix: float):
        if not self.pending:
            raise RuntimeError(f"replayed process {self.index} has nothing more to say")
        seconds, message = self.pending.pop(0)
        waited_from = self.clock()
        if waited_from + seconds > deadline_unix:
            self.clock.advance(max(0.0, deadline_unix - waited_from))
            self.kill()
            raise processes.Overrun(self.clock() - waited_from)
        self.clock.advance(seconds)
        if message[0] == "ready":
            message = ("ready", {**message[1], "first_step_at_unix": self.clock()})
        return message

    def send(self, command: str) -> None:
        if command == "window":
            self.pending.append(self._window_event())
        elif command == "loader":
            # Recordings hold no loader windows: the input verdict of a rehearsal is
            # undetermined (nnperf.report.input_verdict), and the engine asks no more.
            self.pending.append((0.0, ("loader", None)))
        elif command == "stop":
            self.pending.append((0.0, ("done", self._closing())))
        else:
            raise RuntimeError(f"replayed process {self.index} got {command!r}")

    def _window_event(self) -> tuple[float, tuple]:
        process, request = self.process, self.request
        n = request.training.timed_steps
        noise = self.rng.normal(0.0, process.step_cv, size=n)
        times = np.maximum(
            process.steady_step_s * (1 + noise), FASTEST_STEP_SHARE * process.steady_step_s
        )
        window_s = float(times.sum())
        started = self.clock()
        images = request.batch_size * n
        row = {
            "process": self.index,
            "window": self.window,
            "steps": n,
            "images": images,
            "window_s": window_s,
            "throughput_img_s": images / window_s,
            "started_at_unix": started,
            "ended_at_unix": started + window_s,
            "loss_end": None,
        }
        steps = [
            {"process": self.index, "window": self.window, "step": i, **_phases(process, t)}
            for i, t in enumerate(times)
        ]
        self.window += 1
        return window_s, ("window", row, steps)

    def _closing(self) -> dict:
        return {
            "loss_start": None,
            "peak_memory_device_bytes": self.process.peak_memory_device_bytes,
            "peak_memory_host_bytes": None,
            "optimizer_impl": self.request.settings.optimizer_impl,
        }

    def kill(self) -> None:
        self.killed = True

    def join(self) -> None:
        pass

    def ended_how(self) -> str:
        return "replayed"


def _process_timing(timing: ConfigTiming, index: int, request: RunRequest) -> ProcessTiming:
    """Process `index`'s timings; a later process of a compiled variant compiles from warm
    caches (`stopping.LATER_COMPILE_SHARE` of the recorded compilation, the share the engine
    plans with: no recording has a second compiled process to replay instead)."""
    process = timing.processes[index % len(timing.processes)]
    one_time = stopping.one_time_kinds(request.settings.compile, request.device)
    if index == 0 or stopping.COMPILATION not in one_time or not process.warmup_step_time_s:
        return process
    first, *rest = process.warmup_step_time_s
    compiling = max(0.0, first - process.steady_step_s)
    warm = process.steady_step_s + stopping.LATER_COMPILE_SHARE * compiling
    return dataclasses.replace(process, warmup_step_time_s=(warm, *rest))


def _phases(process: ProcessTiming, step_s: float) -> dict:
    """A replayed step split into phases in the recorded proportions."""
    recorded = process.phase_time_s or {}
    total = sum(float(recorded.get(p) or 0.0) for p in PHASES)
    shares = (
        {p: float(recorded.get(p) or 0.0) / total for p in PHASES}
        if total > 0
        else {p: (1.0 if p == "forward" else 0.0) for p in PHASES}
    )
    return {
        **{f"{p}_s": float(step_s) * shares[p] for p in PHASES},
        "step_time_s": float(step_s),
        "loss": None,
    }


@dataclasses.dataclass(frozen=True)
class Replay:
    """What the engine made of a replayed configuration."""

    document: dict
    windows: list[dict]
    steps: list[dict]

    @property
    def wall_s(self) -> float:
        """The measurement's wall time on the fake clock: every process, one-time costs in."""
        return float(self.document["ended_at_unix"] - self.document["started_at_unix"])


def replay(request: RunRequest, timing: ConfigTiming, seed: int = 0) -> Replay:
    """Measure `request` with the real engine (`runner.perform_run`) on `timing`'s replayed
    processes and a fake clock. Deterministic for a seed."""
    from nnperf.engine.runner import perform_run

    clock = FakeClock()
    rng = np.random.default_rng(seed)

    def start_worker(job: worker.WorkerJob) -> ReplayWorker:
        return ReplayWorker(job, timing, clock, rng)

    document, windows, steps = perform_run(
        request,
        method="replay",
        clock=clock,
        start_worker=start_worker,
        watch_host=False,
    )
    return Replay(document, windows, steps)


@dataclasses.dataclass(frozen=True)
class GroupReplay:
    """What the engine made of a replayed group (`nnperf.engine.interleave.run_group`): one
    run document per member, the comparisons, the rounds, and the wall time of them all."""

    documents: list[dict]
    comparisons: list[dict]
    rounds: int
    wall_s: float


def replay_group(
    requests: Sequence[RunRequest], timings: Sequence[ConfigTiming], seed: int = 0
) -> GroupReplay:
    """Measure a group (`requests`: one model x device, rule timed_group) as
    `nnperf.engine.runner.group_to_files` does, with `interleave.run_group`: every member's
    processes interleaved round by round, each member's stopping rule and budget, and the
    extra rounds an unresolved comparison takes, on `timings` (one per request, in order)
    replayed on one fake clock. Deterministic for a seed."""
    from nnperf.engine import interleave
    from nnperf.engine.runner import group_name, run_document

    if len(timings) != len(requests):
        raise ValueError(f"{len(requests)} requests but {len(timings)} timings")
    clock = FakeClock()
    rng = np.random.default_rng(seed)
    by_member = {(r.precision, r.batch_size, r.variant): t for r, t in zip(requests, timings)}

    def start_worker(job: worker.WorkerJob) -> ReplayWorker:
        request = job.request
        timing = by_member[(request.precision, request.batch_size, request.variant)]
        return ReplayWorker(job, timing, clock, rng)

    started = clock()
    group = interleave.run_group(
        requests, method="replay", clock=clock, start_worker=start_worker, watch_host=False
    )
    documents = []
    for request, result in zip(requests, group.measurements):
        document = run_document(request, result, result.started_at_unix, result.ended_at_unix)
        document["group"] = group_name(requests)
        documents.append(document)
    return GroupReplay(documents, group.comparisons, group.rounds, clock() - started)


# --- the recorded H100 and its rules -------------------------------------------------------


def load_recorded(name: str = "h100") -> dict:
    """A recorded timing file shipped with nnperf (`nnperf/engine/recordings/<name>.json`)."""
    recordings = resources.files("nnperf.engine").joinpath("recordings")
    text = recordings.joinpath(f"{name}.json").read_text("utf-8")
    return json.loads(text)


def variant_kind(settings) -> str:
    """How a variant's steps behave, as the recordings tell them apart: `baseline` (eager,
    no optimisation toggle), `tuned` (eager, with cudnn.benchmark, channels_last, another
    optimizer implementation or device-resident data: a CPU's tuned variant has no cuDNN)
    or its compile mode."""
    return _kind(dataclasses.asdict(settings))


def _kind_of_document(document: Mapping) -> str:
    return _kind(document.get("variant_settings") or {})


# Eager settings that make a variant `tuned`, and their untuned values.
UNTUNED = {
    "cudnn_benchmark": False,
    "channels_last": False,
    "optimizer_impl": "default",
    "data_path": "dataloader",
}


def _kind(settings: Mapping) -> str:
    if settings.get("compile"):
        return str(settings["compile"])
    tuned = any(settings.get(name, untuned) != untuned for name, untuned in UNTUNED.items())
    return "tuned" if tuned else "baseline"


class TimingModel:
    """Recorded run documents of one machine, and the rules that fill in the rest (module
    docstring). `timing_for(request)` is a `ConfigTiming` or None (nothing to go by)."""

    def __init__(self, documents: Sequence[Mapping], machine: str, start_s: float = 1.0):
        self.documents = list(documents)
        self.machine = machine
        self.start_s = start_s

    def _recorded(self, precision: str, kind: str, batch_size: int) -> list[Mapping]:
        return [
            d
            for d in self.documents
            if d.get("precision") == precision
            and _kind_of_document(d) == kind
            and int(d.get("batch_size") or 0) == batch_size
        ]

    def _timing(self, documents: Sequence[Mapping], source: str) -> ConfigTiming:
        return ConfigTiming.from_run_documents(documents, source=source, start_s=self.start_s)

    def recorded_timing(self, precision: str, kind: str, batch_size: int) -> ConfigTiming | None:
        """The configuration as recorded, None when it was not."""
        found = self._recorded(precision, kind, batch_size)
        if not found:
            return None
        files = ", ".join(str(d.get("file")) for d in found)
        return self._timing(found, f"{self.machine} recorded: {files}")

    def timing_for(self, request: RunRequest) -> ConfigTiming | None:
        """`request`'s timings: recorded, or derived by the module docstring's rules; None
        for a model or device nothing was recorded of (one model's steps say nothing of
        another's)."""
        recorded = [
            d
            for d in self.documents
            if d.get("model", request.model) == request.model
            and d.get("device", request.device) == request.device
        ]
        if len(recorded) < len(self.documents):
            return TimingModel(recorded, self.machine, self.start_s).timing_for(request)
        if not recorded:
            return None
        kind = variant_kind(request.settings)
        precision, batch = request.precision, request.batch_size
        timing = self.recorded_timing(precision, kind, batch)
        if timing is None:
            timing = self._other_batch(precision, kind, batch)
        if timing is None and kind not in ("baseline", "tuned"):
            timing = self._other_precision(precision, kind, batch)
        if timing is None:
            return None
        return self._with_spread(timing, precision)

    def _other_batch(self, precision: str, kind: str, batch: int) -> ConfigTiming | None:
        """The nearest recorded batch size of the same precision and kind, scaled linearly."""
        sizes = sorted(
            {
                int(d["batch_size"])
                for d in self.documents
                if d.get("precision") == precision and _kind_of_document(d) == kind
            },
            key=lambda size: (abs(size - batch), -size),
        )
        if not sizes:
            return None
        base = self.recorded_timing(precision, kind, sizes[0])
        factor = batch / sizes[0]
        return ConfigTiming(
            processes=tuple(p.scaled(factor, keep_first=1) for p in base.processes),
            source=f"{base.source}; scaled linearly from batch {sizes[0]} to {batch} (an upper bound)",
            compile_mode=base.compile_mode,
            environment=base.environment,
            data_info=base.data_info,
        )

    def _other_precision(self, precision: str, kind: str, batch: int) -> ConfigTiming | None:
        """A compiled variant recorded at another precision, scaled by the ratio of the two
        precisions' tuned eager steps at batch 256."""
        others = [
            d.get("precision")
            for d in self.documents
            if _kind_of_document(d) == kind and d.get("precision") != precision
        ]
        for other in dict.fromkeys(sorted(others, key=lambda p: p != "bf16")):
            mine = self.recorded_timing(precision, "tuned", 256)
            theirs = self.recorded_timing(other, "tuned", 256)
            base = self._other_batch(other, kind, batch)
            if mine is None or theirs is None or base is None:
                continue
            factor = mine.steady_step_s / theirs.steady_step_s
            return ConfigTiming(
                processes=tuple(p.scaled(factor, keep_first=1) for p in base.processes),
                source=(
                    f"{base.source}; {other} scaled to {precision} by the tuned eager steps' "
                    f"ratio {factor:.2f}"
                ),
                compile_mode=base.compile_mode,
                environment=base.environment,
                data_info=base.data_info,
            )
        return None

    def _with_spread(self, timing: ConfigTiming, precision: str) -> ConfigTiming:
        """A configuration recorded in one process gets the process-to-process spread of the
        recorded tuned processes of its precision (cuDNN's per-process algorithm choice)."""
        if len(timing.processes) > 1:
            return timing
        reference = self.recorded_timing(precision, "tuned", 256)
        if reference is None or len(reference.processes) < 2:
            return timing
        mean = statistics.mean(p.steady_step_s for p in reference.processes)
        (only,) = timing.processes
        processes = tuple(
            dataclasses.replace(only, steady_step_s=only.steady_step_s * p.steady_step_s / mean)
            for p in reference.processes
        )
        return dataclasses.replace(
            timing,
            processes=processes,
            source=f"{timing.source}; process spread of {precision} tuned",
        )


def cpu_model() -> TimingModel:
    """The recorded 2-core CPU VM: the default study's example (`recordings/cpu.json`, made
    by `nnperf.study.cpu_recording` from reports/examples/cpu-default-study)."""
    recorded = load_recorded("cpu")
    return TimingModel(
        recorded["runs"], machine="2-core CPU", start_s=float(recorded["process_start_s"])
    )


def h100_model() -> TimingModel:
    """The recorded NVIDIA H100 80GB (module docstring)."""
    recorded = load_recorded("h100")
    return TimingModel(recorded["runs"], machine="H100", start_s=float(recorded["process_start_s"]))
