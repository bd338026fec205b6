"""One configuration's operator profile: a few training steps under torch.profiler, any device.

The timed runs say how fast a step is; this says where its time and memory go, one level
above the kernels Nsight Compute explains: which operators and layers the step spends its
time in, how much of it the device is busy (and so whether the host or the device bounds
it), and what the peak memory holds. It runs apart from the timed runs (its own job; the
workflow serialises it with them), so the profiler never perturbs a timed number.

The job: build the configuration's training exactly as the timed runs do
(`build.load_run_data`, `build.build`, process 0's seed), put a profiler range around each
module's forward call (forward pre/post hooks, named by module path:
`nnperf.torchprof.analysis` groups operators by layer with them, backward included), warm up,
then run `settings.steps` steps under `torch.profiler.profile` (CPU activity, plus CUDA on a
GPU; shapes and allocations recorded; Python stacks when `settings.with_stack`). Each step is
a `record_function` range `nnperf_step#<i>` with one range per phase inside
(`nnperf_phase:<phase>`, the phases of the timed runs); the device is synchronised before
the first step and inside the last one, never between steps, so the host runs ahead of the
device as it does in the timed runs. Between backward and the optimizer step the job notes
the addresses and sizes of the gradient storages, which is how the memory analysis tells
gradients from other allocations. The trace is exported (gzipped Chrome-trace JSON, with
the configuration's keys under `nnperf` at its top level) and analysed from that file
(`nnperf.torchprof.analysis.analyse`), so the tables can always be recomputed from the trace.

Viewing a trace: open the `.json.gz` in Perfetto (https://ui.perfetto.dev, "Open trace
file"; it reads gzip) or `chrome://tracing`. TensorBoard's profiler plugin (pip package
torch-tb-profiler) reads traces named `*.pt.trace.json.gz` from a run folder, as
`torch.profiler.tensorboard_trace_handler` writes them: copy or link the file to
`<logdir>/<run>/<name>.pt.trace.json.gz` and run `tensorboard --logdir <logdir>`.

The budget (`settings.max_seconds`) is for steady steps. The first warm-up steps of a process
carry one-time costs (`nnperf.engine.step.one_time_steps`: allocation, cuDNN autotuning,
compilation, CUDA-graph recording; on an H100 seconds to minutes against steady steps of
milliseconds): they run outside the budget, bounded on their own (`ONE_TIME_MAX_S`), and are
never taken as the step time. The steady steps are planned from the timed runs' steady step
when given, else from the latest warm-up step after the one-time ones.

Statuses (`nnperf.torchprof.analysis.PROFILE_STATUSES`): `ok`; `oom` when building, warming up or a
profiled step runs out of memory (a result, as in the timed runs); `over_budget` when the
warm-up steps still needed after the one-time ones and one profiled step cannot fit in
`settings.max_seconds` (decided before building when the timed runs' step time is given,
else after the first steady warm-up step, so such a configuration costs its one-time steps
and at most one steady step; otherwise the steps that fit are run, fewer than asked when
needed, and the profiled steps stop at the budget's deadline), or when the one-time steps
pass their own bound (then `single_step_time_s` is null: no steady step was measured);
`unsupported` when the profiler cannot run here (a torch build without Kineto, a profiler
start or export that raises, as a CUPTI failure can). Every status writes every output
(empty tables, an empty trace), with a one-line reason in `error`. A CUPTI failure that does not raise (torch then only warns and
records no CUDA activity) leaves the host-side tables intact: the status stays `ok` and a
note says the device side is missing; so does MPS, whose kernels torch.profiler does not
record.

This module is the job and its files; the step plan and budget are `nnperf.torchprof.budget`,
the profiled steps and their ranges `nnperf.torchprof.steps`. What it is not: the analysis
(`nnperf.torchprof.analysis`), the report's sentences (`nnperf.report.sections.operators`) or
the figures (`nnperf.report.plots.operators`).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import pandas as pd
import torch

from nnperf.core.contract import OperatorProfileRequest, OperatorProfileSettings, to_dict
from nnperf.core.errors import NnperfError
from nnperf.core.files import atomic_path, load_json, write_csv, write_json
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.engine.build import RunData, build, free_after_oom, load_run_data, one_line
from nnperf.engine.runner import expected_step_time, label
from nnperf.engine.step import Training, is_out_of_memory
from nnperf.engine.timing import synchronize
from nnperf.torchprof.analysis import Analysis, analyse, empty_tables
from nnperf.torchprof import memory as step_memory
from nnperf.torchprof.budget import (
    ONE_TIME_MAX_S,
    ONE_TIME_SOURCE,
    PROFILER_WARMUP_STEPS,
    OverBudget,
    StepPlan,
    one_time_limit_s,
    one_time_message,
    one_time_work,
    over_budget_message,
    plan_steps,
    profile_one_time_steps,
)
from nnperf.torchprof.steps import (
    LayerRanges,
    ProfiledSteps,
    ProfilerUnavailable,
    layer_modules,
    profile_steps,
)

# The budget's and the steps' names that callers know from here (the job's module).
__all__ = [
    "ONE_TIME_MAX_S",
    "ONE_TIME_SOURCE",
    "PROFILE_KIND",
    "LayerRanges",
    "OperatorProfile",
    "OverBudget",
    "describe_outcome",
    "one_time_limit_s",
    "operator_profile_to_files",
    "perform_operator_profile",
    "plan_steps",
    "profile_one_time_steps",
    "profile_steps",
    "timed_step",
    "warm_up",
    "write_outputs",
]

PROFILE_KIND = "operator_profile"


# --- the job ------------------------------------------------------------------------------


def timed_step(training: Training) -> float:
    """One warm-up step, synchronised on both sides (as `nnperf.engine.timing.warmup_step`); its
    wall time."""
    synchronize(training.device)
    start = time.perf_counter()
    training.step()
    synchronize(training.device)
    return time.perf_counter() - start


@dataclass(frozen=True)
class Budget:
    """What is left for the profiled steps: how many, until when (`time.perf_counter`), and
    the step time they were planned with (None: unknown)."""

    plan: StepPlan
    deadline: float
    step_time_s: float | None


def warm_up(
    training: Training,
    settings: OperatorProfileSettings,
    one_time: int,
    expected_s: float | None,
    times: list[float],
    work: str = "first-call setup and allocation",
) -> Budget:
    """Warm-up steps, their times appended to `times`; returns what is left for the
    profiled steps.

    The first `one_time` steps carry one-time costs (`work`; `profile_one_time_steps`):
    they run outside `settings.max_seconds`, bounded on their own by `one_time_limit_s`
    (checked as each ends: a step in this process cannot be stopped safely halfway), and
    are never taken as the step time. The rest are planned from the timed runs' steady
    step when given, else from the latest warm-up step after the one-time ones (the first
    of them runs unplanned: it is what tells the step time).

    Raises OverBudget when the one-time steps pass their bound, or when the warm-up steps
    still needed and one profiled step cannot fit in `settings.max_seconds`.
    """
    profiler_warmup = PROFILER_WARMUP_STEPS.get(training.device.type, 0)
    limit = one_time_limit_s(settings)
    while len(times) < one_time:
        times.append(timed_step(training))
        if sum(times) > limit:
            raise OverBudget(one_time_message(times, limit, work), None, ONE_TIME_SOURCE)
    budget_start = time.perf_counter()
    source = "timed runs" if expected_s is not None else "warm-up step"
    latest = expected_s

    def plan() -> StepPlan:
        spent = time.perf_counter() - budget_start
        planned = plan_steps(latest, settings, spent, len(times), profiler_warmup)
        if planned is None:
            message = over_budget_message(latest, settings, source, len(times), profiler_warmup)
            raise OverBudget(message, latest, source)
        return planned

    while len(times) < max(settings.warmup_steps, one_time):
        if latest is not None and plan().warmup_steps == 0:
            break
        times.append(timed_step(training))
        if expected_s is None:
            latest = times[-1]
    deadline = budget_start + settings.max_seconds
    if latest is None:  # no step time to go by: the profiled steps check as they go
        return Budget(StepPlan(0, settings.steps), deadline, None)
    return Budget(plan(), deadline, latest)


@dataclass
class OperatorProfile:
    """A profile's outputs: the document, the four tables and the gzipped trace."""

    document: dict
    tables: dict[str, pd.DataFrame]
    trace: bytes


def empty_trace(metadata: Mapping) -> bytes:
    """A valid, empty Chrome trace carrying the configuration's keys and status."""
    return gzip.compress(json.dumps({"traceEvents": [], "nnperf": dict(metadata)}).encode())


def _check_keys(request: OperatorProfileRequest, document: Mapping | None, what: str) -> None:
    if not document:
        return
    keys = request.run.keys()
    mismatched = [k for k in (*CONFIG_KEYS, "dataset") if k in document and document[k] != keys[k]]
    if mismatched:
        key = mismatched[0]
        raise NnperfError(
            f"the {what} is for {key} {document[key]!r}, the profile for {keys[key]!r}; "
            "allowed: the same configuration's file"
        )


# A profile's notes are codes with their numbers (`{"code": ..., ...}`), worded by the report
# (`nnperf.report.wording.details.PROFILE_NOTES`).
NOTE_CODES = ("mps_no_kernels", "no_cuda_kernels", "layers_fused", "steps_cut")


def _device_notes(device: str, analysis: Analysis) -> list[dict]:
    if device == "mps":
        return [{"code": "mps_no_kernels"}]
    if device != "cpu" and analysis.summary.get("device_busy_time_s") is None:
        # CUPTI unavailable or failed to initialise (the job's log says which).
        return [{"code": "no_cuda_kernels"}]
    return []


@dataclass
class StepsRun:
    """What building, warming up and profiling left behind, however it ended."""

    status: str = "ok"
    error: str | None = None
    notes: list[dict] = field(default_factory=list)
    warmup_times: list[float] = field(default_factory=list)
    # How many of the first warm-up steps are one-time steps (`profile_one_time_steps`).
    one_time_steps: int = 0
    single_step: dict | None = None
    profiled: ProfiledSteps | None = None
    module_types: dict[str, str] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)


def run_steps(
    request: OperatorProfileRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: RunData,
    expected_s: float | None,
    metadata: Mapping,
) -> StepsRun:
    """Build, warm up and profile within the budget; an allocation failure, a budget that
    cannot fit and a profiler that cannot run end it with their status, anything else
    propagates (the job must fail with its cause)."""
    run, settings = request.run, request.settings
    compiled = bool(run.settings.compile)
    one_time = profile_one_time_steps(run.settings, run.device, settings.warmup_steps)
    result = StepsRun(one_time_steps=one_time)
    ranges = None
    training = None
    try:
        profiler_warmup = PROFILER_WARMUP_STEPS.get(run.device, 0)
        # The one-time steps are not paid from the budget: only the steady steps must fit.
        if (
            expected_s is not None
            and plan_steps(expected_s, settings, 0, one_time, profiler_warmup) is None
        ):
            message = over_budget_message(
                expected_s, settings, "timed runs", one_time, profiler_warmup
            )
            raise OverBudget(message, expected_s, "timed runs")
        clock = time.perf_counter()
        training = build(run, model_factory, data, run.seed_of(0))
        modules = layer_modules(training, compiled) if settings.label_layers else []
        result.module_types = {name: type(module).__name__ for name, module in modules}
        ranges = LayerRanges(modules)
        if settings.label_layers and not modules:
            result.notes.append({"code": "layers_fused"})
        result.cost["build_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        budget = warm_up(
            training,
            settings,
            one_time,
            expected_s,
            result.warmup_times,
            one_time_work(run.settings, run.device),
        )
        one_time_s = sum(result.warmup_times[:one_time])
        result.cost["warmup_s"] = time.perf_counter() - clock - one_time_s
        clock = time.perf_counter()
        result.profiled = profile_steps(
            training,
            budget.plan.profiled_steps,
            settings.with_stack,
            metadata,
            deadline=budget.deadline,
            step_time_s=budget.step_time_s,
        )
        result.cost["profile_s"] = time.perf_counter() - clock
        profiled = result.profiled.steps
        if profiled < settings.steps or len(result.warmup_times) < settings.warmup_steps:
            result.notes.append(
                {
                    "code": "steps_cut",
                    "warmup_steps": len(result.warmup_times),
                    "profiled_steps": profiled,
                    "max_seconds": settings.max_seconds,
                }
            )
    except OverBudget as exc:
        result.status, result.error = "over_budget", str(exc)
        if exc.step_time_s is not None:
            result.single_step = {"seconds": exc.step_time_s, "source": exc.source}
    except ProfilerUnavailable as exc:
        result.status, result.error = "unsupported", str(exc)
    except Exception as exc:  # noqa: BLE001 - only OOM is swallowed
        if not is_out_of_memory(exc):
            raise
        result.status, result.error = "oom", one_line(exc)
    finally:
        if ranges is not None:
            ranges.remove()
    if result.warmup_times:
        result.cost["one_time_s"] = sum(result.warmup_times[:one_time])
    if result.status == "oom":
        del training
        free_after_oom(run.device)
    return result


def perform_operator_profile(
    request: OperatorProfileRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: RunData,
    timed_run: Mapping | None = None,
    complexity: Mapping | None = None,
    workflow_dir=None,
) -> OperatorProfile:
    """Build, warm up, profile and analyse one configuration (module docstring); returns
    its document, tables and trace. `timed_run` (the configuration's run document) gives
    the step time the budget is planned with and the profile is checked against;
    `complexity` (the model's complexity document) the memory estimates."""
    from nnperf.core.environment import collect_environment

    _check_keys(request, timed_run, "timed run document")
    if complexity and complexity.get("model") not in (None, request.run.model):
        raise NnperfError(
            f"the complexity document is for model {complexity.get('model')!r}, the profile "
            f"for {request.run.model!r}; allowed: the same model's file"
        )
    run, settings = request.run, request.settings
    started_at = time.time()
    metadata = {**run.keys(), "kind": PROFILE_KIND, "settings": to_dict(settings)}
    expected = expected_step_time(timed_run)
    steps = run_steps(request, model_factory, data, expected, metadata)
    tables = empty_tables()
    trace = empty_trace({**metadata, "status": steps.status, "error": steps.error})
    memory, summary = None, {}
    if steps.profiled is not None:
        clock = time.perf_counter()
        trace = steps.profiled.trace
        analysis = analyse(
            json.loads(gzip.decompress(trace)),
            run.device,
            inventory={**steps.profiled.inventory, "batch_size": run.batch_size},
            depth=settings.layer_depth,
            module_types=steps.module_types,
            timed_step_time_s=expected if timed_run and timed_run.get("status") == "ok" else None,
        )
        steps.notes += _device_notes(run.device, analysis)
        memory, summary = analysis.memory, analysis.summary
        tables = {
            "operators": analysis.operators,
            "layers": analysis.layers,
            "steps": analysis.steps,
            "memory": step_memory.memory_table(memory, complexity),
        }
        steps.cost["analysis_s"] = time.perf_counter() - clock
    document = {
        "kind": PROFILE_KIND,
        "status": steps.status,
        "error": steps.error,
        "notes": steps.notes,
        **run.keys(),
        "variant_settings": to_dict(run.settings),
        "training": to_dict(run.training),
        "settings": to_dict(settings),
        "input_size": data.input_size,
        "profiler": {
            "api": "torch.profiler.profile",
            "activities": ["cpu", "cuda"] if run.device == "cuda" else ["cpu"],
            "record_shapes": True,
            "profile_memory": True,
            "with_stack": settings.with_stack,
            "layer_ranges": bool(steps.module_types),
            "profiler_warmup_steps": PROFILER_WARMUP_STEPS.get(run.device, 0),
        },
        "warmup_steps_run": len(steps.warmup_times),
        "warmup_step_time_s": steps.warmup_times,
        # The first of the warm-up steps carry one-time costs (their sum: cost.one_time_s).
        "one_time_steps": steps.one_time_steps,
        # The last warm-up step after the one-time ones, unprofiled, synchronised.
        "unprofiled_step_time_s": (
            steps.warmup_times[-1]
            if len(steps.warmup_times) > max(steps.one_time_steps, 1)
            else None
        ),
        "profiled_steps": steps.profiled.steps if steps.profiled is not None else 0,
        "single_step_time_s": steps.single_step,
        "timed_run": (
            {
                "status": timed_run.get("status"),
                "step_time_s": expected,
                "throughput_img_s": timed_run.get("throughput_img_s"),
            }
            if timed_run
            else None
        ),
        "summary": summary,
        "memory": memory,
        "saved_activation_estimate_bytes": step_memory.saved_activation_estimate(
            complexity, run.batch_size
        ),
        "cost": steps.cost,
        "environment": collect_environment(
            device=run.device,
            precision=run.precision,
            settings=run.settings,
            workflow_dir=workflow_dir,
        ),
        "started_at_unix": started_at,
        "ended_at_unix": time.time(),
    }
    return OperatorProfile(document=document, tables=tables, trace=trace)


def write_outputs(
    profile: OperatorProfile,
    *,
    out_json: str | os.PathLike,
    out_trace: str | os.PathLike,
    out_operators: str | os.PathLike,
    out_layers: str | os.PathLike,
    out_steps: str | os.PathLike,
    out_memory: str | os.PathLike,
) -> None:
    """Every output of a profile, atomically; the document last (it says the rest is there)."""
    with atomic_path(out_trace) as tmp:
        tmp.write_bytes(profile.trace)
    for name, path in (
        ("operators", out_operators),
        ("layers", out_layers),
        ("steps", out_steps),
        ("memory", out_memory),
    ):
        write_csv(path, profile.tables[name])
    write_json(out_json, profile.document)


def operator_profile_to_files(
    request: OperatorProfileRequest,
    *,
    out_json: str | os.PathLike,
    out_trace: str | os.PathLike,
    out_operators: str | os.PathLike,
    out_layers: str | os.PathLike,
    out_steps: str | os.PathLike,
    out_memory: str | os.PathLike,
    run_json: str | os.PathLike | None = None,
    complexity_json: str | os.PathLike | None = None,
    workflow_dir: str | os.PathLike | None = None,
) -> dict:
    """The job (a future rule `operator_profile`): the configuration's data and model by
    name, its timed-run and complexity documents when given, the profile, every output
    written. A status other than `ok` is one line on stderr; returns the document."""
    from nnperf.core.devices import require_available

    run = request.run
    require_available(run.device, run.precision)
    timed_run = load_json(run_json, what="run document") if run_json else None
    complexity = load_json(complexity_json, what="complexity document") if complexity_json else None
    run_data, model_factory = load_run_data(run)
    profile = perform_operator_profile(
        request, model_factory, run_data, timed_run, complexity, workflow_dir=workflow_dir
    )
    write_outputs(
        profile,
        out_json=out_json,
        out_trace=out_trace,
        out_operators=out_operators,
        out_layers=out_layers,
        out_steps=out_steps,
        out_memory=out_memory,
    )
    print(
        describe_outcome(request, profile.document),
        file=sys.stdout if profile.document["status"] == "ok" else sys.stderr,
    )
    return profile.document


def describe_outcome(request: OperatorProfileRequest, document: Mapping) -> str:
    """One line for the job's log."""
    name = label(request.run)
    if document["status"] != "ok":
        return f"{name}: operator profile {document['status']}: {document['error']}"
    summary = document.get("summary") or {}
    memory = document.get("memory") or {}
    share = summary.get("busy_share")
    return (
        f"{name}: profiled {document['profiled_steps']} steps, "
        f"{summary.get('step_time_s', float('nan')):.4g} s per step, "
        f"{summary.get('busy_kind')} busy {share if share is None else f'{share:.0%}'}, "
        f"peak {memory.get('peak_allocated_bytes', 0) / 2**20:.1f} MiB"
    )
