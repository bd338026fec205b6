"""One configuration's measurement, from request to documents, OOM and over-budget included.

`perform_run()` measures a configuration with worker processes and adaptive repetition
(`nnperf.engine.manager` drives them, `nnperf.engine.stopping` decides when to stop) and
returns the run JSON document, the per-window rows and the per-step rows. An allocation
failure is a result (`status: "oom"`), and so is a configuration whose warm-up and minimal
windows cannot fit in `timing.max_seconds` (`status: "over_budget"`, with the step time it
showed); both get null numbers. Any other failure propagates (the job must fail with its
cause).

`perform_run()` takes the model and data as arguments (a zero-argument model factory and
uint8 arrays), so the engine runs on anything and its tests need no files. The file edge is
`run_to_files()` (rule `timed_run`, `nnperf run`): its workers load the prepared dataset and
the model by name (`nnperf.engine.build.load_run_data()`), and it writes the documents. This
process imports no torch: the workers (`nnperf.engine.worker`) load the data and the model,
check the device and train.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import sys
import time
from typing import Callable, Mapping, Sequence

from nnperf.core import layout, ratios, stats, vocab
from nnperf.core.contract import RunRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import copy_table, write_csv, write_json
from nnperf.core.vocab import LOADER_WINDOW_COLUMNS, PHASES, STEP_CSV_COLUMNS, WINDOW_CSV_COLUMNS
from nnperf.core.wording import out_of_reach_sentence
from nnperf.engine import loader, manager, stability, stopping, worker
from nnperf.engine.build import RunData


def _number(value: float) -> float | None:
    """A statistic for the JSON document: NaN (no data) becomes null."""
    return None if value is None or math.isnan(value) else float(value)


def _median(values) -> float | None:
    return _number(stats.median(list(values)))


def _quantiles(values) -> dict:
    q1, median, q3 = stats.quartiles(values)
    cv = stats.coefficient_of_variation(values)
    return {"median": _number(median), "q1": _number(q1), "q3": _number(q3), "cv": _number(cv)}


def estimate_fields(result: manager.Measurement, request: RunRequest) -> dict:
    """The run document's numbers from the windows (`nnperf.engine.stopping` has the maths)."""
    current = stopping.estimate(result.samples())
    clean = result.clean_windows()
    rates = _quantiles([w["throughput_img_s"] for w in clean])
    relative = current.half_width_rel
    windows = len(clean)
    optimal = None
    if current.between_processes is not None:
        optimal = stopping.optimal_windows(
            current,
            stopping.process_cost(result.processes, result.windows, bool(request.settings.compile)),
            max((w["window_s"] for w in result.windows), default=0.0),
            request.timing,
        )
    return {
        "throughput_img_s": current.throughput,
        "throughput_img_s_ci95_low": current.ci_low,
        "throughput_img_s_ci95_high": current.ci_high,
        "ci_half_width_rel": relative,
        "ci_method": current.method,
        "ci_target_met": bool(relative is not None and relative <= request.target_ci),
        "throughput_img_s_median": rates["median"],
        "throughput_img_s_q1": rates["q1"],
        "throughput_img_s_q3": rates["q3"],
        "throughput_img_s_cv": rates["cv"],
        "variance": {
            "between_processes": current.between_processes,
            "within_process": current.within_process,
            "dominant_level": current.dominant_level,
            "optimal_windows_per_process": optimal,
        },
        "n_processes": current.n_processes,
        "n_windows": windows,
        "images_timed": int(sum(w["images"] for w in clean)),
        # Windows left out as disturbed (each measured again, within the budget), by cause.
        "discarded_windows": len(result.windows) - len(clean),
        "discarded_causes": stability.discard_counts(result.windows),
        "timed_window_s": current.timed_s,
    }


def step_fields(result: manager.Measurement, request: RunRequest) -> dict:
    """Step and phase times over every timed step; compile and warm-up times per process."""
    clean_steps = result.clean_steps()
    step_times = [row["step_time_s"] for row in clean_steps]
    steady = _median(step_times)
    compiled = bool(request.settings.compile)
    rates = stopping.process_throughputs(result.samples())
    loader_rates = loader.process_rates(result.loader_windows)
    compile_times = []
    for record in result.processes:
        process = record["process"]
        warmup = record.get("warmup_step_time_s") or []
        own_steady = _median(r["step_time_s"] for r in clean_steps if r["process"] == process)
        record["compile_time_s"] = (
            stopping.compile_time(warmup, own_steady)
            if compiled and own_steady and warmup
            else None
        )
        # Its first step (compilation included) and the sum of its warm-up steps.
        record["first_step_time_s"] = warmup[0] if warmup else None
        record["warmup_time_s"] = float(sum(warmup)) if warmup else None
        mine = [w for w in result.windows if w["process"] == process]
        record["n_windows"] = sum(1 for w in mine if not w.get("discarded"))
        record["n_discarded_windows"] = len(mine) - record["n_windows"]
        record["throughput_img_s"] = rates.get(process)
        record["loader_rate_img_s"] = loader_rates.get(process)
        record["n_loader_windows"] = sum(
            1 for w in result.loader_windows if w["process"] == process
        )
        compile_times.append(record["compile_time_s"])
    first = result.processes[0] if result.processes else {}
    first_warmup = first.get("warmup_step_time_s") or []
    one_time = first.get("one_time_step_time_s") or {}
    later = [c for c in compile_times[1:] if c is not None]
    # Steady steps only: an over-budget verdict reached in a one-time step has none.
    single = steady if result.status in ("ok", "host_busy") else result.single_step_time_s
    return {
        "step_time_s": stopping.step_time_stats(step_times) if step_times else None,
        "phase_time_s": (
            {phase: _median(r[f"{phase}_s"] for r in clean_steps) for phase in PHASES}
            if step_times
            else None
        ),
        # Of the timed steps' summed time (nnperf.engine.loader.data_wait_share).
        "data_wait_share": loader.data_wait_share(clean_steps),
        "single_step_time_s": single,
        "single_step_time_is_lower_bound": bool(result.single_step_time_is_lower_bound),
        "compile_time_s": compile_times[0] if compile_times else None,
        "compile_time_s_later": _median(later) if later else None,
        "first_step_time_s": first.get("first_step_time_s"),
        "warmup_time_s": first.get("warmup_time_s"),
        "warmup_step_time_s": list(first_warmup),
        # Process 0's one-time steps (stopping.one_time_kinds), each bounded on its own.
        "one_time_s": float(result.one_time_s),
        "one_time_step_time_s": dict(one_time),
        "recording_time_s": one_time.get(stopping.RECORDING),
        "over_budget_phase": result.over_budget_phase,
    }


def cost_fields(result: manager.Measurement, process_started_at: float | None) -> dict:
    """What the measurement cost: fixed costs before the first warm-up step, and the share of
    the job's wall time spent inside timed windows."""
    first = result.processes[0] if result.processes else {}
    first_step_at = first.get("first_step_at_unix")
    started = process_started_at if process_started_at is not None else result.started_at_unix
    timed = sum(w["window_s"] for w in result.windows)
    # Interleaved with other configurations (nnperf.engine.interleave): their processes' time
    # in between is not this one's.
    wall = result.ended_at_unix - started - result.paused_s
    return {
        "fixed_cost_s": first_step_at - started if first_step_at is not None else None,
        "process_fixed_cost_s": _median(r.get("fixed_cost_s") for r in result.processes),
        "elapsed_s": result.ended_at_unix - result.started_at_unix - result.paused_s,
        "paused_s": result.paused_s,
        "processes_for_comparisons": result.processes_for_comparisons,
        "duty_cycle": timed / wall if wall > 0 else None,
        "process_started_at_unix": process_started_at,
        "start_method": result.start_method,
    }


def perform_run(
    request: RunRequest,
    model_factory: Callable | None = None,
    data: RunData | None = None,
    workflow_dir=None,
    process_started_at: float | None = None,
    method: str | None = None,
    **engine,
) -> tuple[dict, list[dict], list[dict]]:
    """Measure one configuration; returns (run document, window rows, step rows).

    Without `model_factory`/`data` each worker loads them by name (`load_run_data`); this
    process then never imports torch. Given, they must pickle (they are sent to the workers).
    `method` is how workers start (`worker.start_method()` when None, or `worker.WARM`);
    `engine` passes a rehearsal's clock and workers on (`manager.run_measurement`).
    """
    clock = engine.get("clock", time.time)
    started_at = clock()
    result = manager.run_measurement(
        request, model_factory, data, workflow_dir=workflow_dir, method=method, **engine
    )
    document = run_document(request, result, started_at, clock(), process_started_at, workflow_dir)
    return document, document["windows"], result.steps


def _merge_note(numbers: dict, code: str, note: dict) -> None:
    """Add one process's note (`manager.Measurement.notes`) to the run's unstable numbers:
    processes are counted, their seconds and the host's load kept at the worst."""
    counted = {"process_stopped_at_budget": "stopped_processes", "process_oom": "oom_processes"}
    if code in counted:
        numbers[counted[code]] = numbers.get(counted[code], 0) + 1
    for name, value in note.items():
        worst = numbers.get(name)
        numbers[name] = value if worst is None or name == "cores" else max(worst, value)


def run_document(
    request: RunRequest,
    result: manager.Measurement,
    started_at: float,
    ended_at: float,
    process_started_at: float | None = None,
    workflow_dir=None,
) -> dict:
    """The run document of one configuration's measurement (`nnperf.core.vocab.RUN_KIND`)."""
    windows = stability.flag_windows(result.windows)
    unstable, reasons, unstable_numbers = stability.instability(windows)
    for code, numbers in result.notes:
        reasons += [code] if code not in reasons else []
        _merge_note(unstable_numbers, code, numbers)
    document = {
        "kind": vocab.RUN_KIND,
        "status": result.status,
        "error": result.error,
        "stop_reason": result.stop_reason,
        "stop_numbers": result.stop_numbers,
        **request.header(),
        "num_classes": result.data_info.get("num_classes"),
        "input_size": result.data_info.get("input_size"),
        "train_images": result.data_info.get("train_images"),
        **estimate_fields(result, request),
        **step_fields(result, request),
        **cost_fields(result, process_started_at),
        # The feeder alone, after the timed windows (nnperf.engine.loader).
        **loader.loader_fields(result.loader_windows, result.loader_s),
        "unstable": bool(unstable or result.notes),
        "unstable_reasons": reasons,
        "unstable_numbers": unstable_numbers,
        "loss_start": (result.processes[0].get("loss_start") if result.processes else None),
        "loss_end": windows[-1]["loss_end"] if windows else None,
        # The timed steps' peak apart from the warm-up's (autotuning, compilation, graph
        # recording: nnperf.engine.timing.DeviceMemoryTracker), the largest of any process.
        "peak_memory_device_bytes": _max(
            r.get("peak_memory_device_bytes") for r in result.processes
        ),
        "peak_memory_device_warmup_bytes": _max(
            r.get("peak_memory_device_warmup_bytes") for r in result.processes
        ),
        "peak_memory_host_bytes": _max(r.get("peak_memory_host_bytes") for r in result.processes),
        "processes": result.processes,
        # Workers lost without a result and replaced (nnperf.engine.losses).
        "worker_losses": [
            {field: loss.get(field) for field in vocab.WORKER_LOSS_FIELDS}
            for loss in result.worker_losses
        ],
        "windows": [{column: row.get(column) for column in WINDOW_CSV_COLUMNS} for row in windows],
        "loader_windows": [
            {column: row.get(column) for column in LOADER_WINDOW_COLUMNS}
            for row in result.loader_windows
        ],
        "environment": result.environment or _parent_environment(request, result, workflow_dir),
        "started_at_unix": started_at,
        "ended_at_unix": ended_at,
    }
    return document


def _max(values) -> int | None:
    known = [int(v) for v in values if v is not None]
    return max(known) if known else None


def _parent_environment(request: RunRequest, result: manager.Measurement, workflow_dir) -> dict:
    """The environment record when process 0 could not send one (killed or out of memory);
    the workers are gone, so touching the device here is safe."""
    from nnperf.core.environment import collect_environment

    impl = next(
        (r.get("optimizer_impl") for r in result.processes if r.get("optimizer_impl")), None
    )
    return collect_environment(
        device=request.device,
        precision=request.precision,
        settings=request.settings,
        optimizer_impl_resolved=impl,
        workflow_dir=workflow_dir,
    )


def steps_frame(steps: list[dict]):
    """The per-step CSV table (exact columns, even when empty)."""
    import pandas as pd

    return pd.DataFrame(steps, columns=list(STEP_CSV_COLUMNS))


def windows_frame(windows: list[dict]):
    """The per-window CSV table (exact columns, even when empty)."""
    import pandas as pd

    return pd.DataFrame(windows, columns=list(WINDOW_CSV_COLUMNS))


# --- the file edge ---------------------------------------------------------------------------


def expected_step_time(run_document: Mapping | None) -> float | None:
    """The timed runs' steady step time: the median of a measured configuration (of its clean
    windows for a `host_busy` one: a plan, never a reported number), or the steady step an
    over-budget one showed (a lower bound where it was cut off); None
    otherwise, and None for a configuration that ended over budget in a one-time step
    (its first step, compilation or recording says nothing about the step time)."""
    if not run_document:
        return None
    if run_document.get("status") in ("ok", "host_busy"):
        steps = run_document.get("step_time_s") or {}
        median = steps.get("median") if isinstance(steps, Mapping) else None
        return float(median) if median else None
    single = run_document.get("single_step_time_s")
    return float(single) if single else None


def label(request: RunRequest) -> str:
    """How logs name a configuration: `resnet18_cifar cpu fp32 bs32 baseline`."""
    return f"{request.model} {request.device} {request.precision} bs{request.batch_size} {request.variant}"


def run_to_files(
    request: RunRequest,
    out_json: str | os.PathLike,
    out_windows: str | os.PathLike,
    out_steps: str | os.PathLike,
    workflow_dir: str | os.PathLike | None = None,
) -> dict:
    """One configuration's measurement -> run JSON, per-window CSV and per-step CSV.

    `workflow_dir` is the checkout whose git commit the document records (not part of the
    request: a moved checkout must not change what a run is). An out-of-memory or
    over-budget configuration is written like any other and says so on stderr.
    """
    from nnperf.engine import warmserver

    process_started_at = worker.process_started_at_unix()
    document, windows, steps = perform_run(
        request,
        workflow_dir=workflow_dir,
        process_started_at=process_started_at,
        method=worker.WARM if warmserver.enabled() else None,
    )
    write_csv(out_steps, steps_frame(steps))
    write_csv(out_windows, windows_frame(windows))
    write_json(out_json, document)
    stream = sys.stdout if document["status"] == "ok" else sys.stderr
    print(describe_outcome(request, document), file=stream)
    return document


def group_name(requests: Sequence[RunRequest]) -> str:
    """What a group is called in run documents (`layout.group_name`); its configurations
    must share dataset, device and model."""
    places = {(r.dataset, r.device, r.model) for r in requests}
    if len(places) != 1:
        raise NnperfError(
            "a group's configurations must share dataset, device and model; got "
            + ", ".join(sorted("/".join(place) for place in places))
        )
    return layout.group_name(*places.pop(), [r.batch_size for r in requests])


def group_to_files(
    requests: Sequence[RunRequest],
    folder: str | os.PathLike,
    workflow_dir: str | os.PathLike | None = None,
) -> list[dict]:
    """The configurations of one group, measured by interleaved processes
    (`nnperf.engine.interleave`) -> each member's run JSON and CSVs, and the group's
    comparisons, in `folder` (`nnperf.core.layout.group_member`)."""
    from nnperf.engine import interleave, warmserver

    name = group_name(requests)
    process_started_at = worker.process_started_at_unix()
    group = interleave.run_group(
        requests,
        workflow_dir=workflow_dir,
        method=worker.WARM if warmserver.enabled() else None,
    )
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    labels = [label(request) for request in requests]
    documents = []
    for i, (request, result) in enumerate(zip(requests, group.measurements)):
        document = run_document(
            request,
            result,
            result.started_at_unix,
            result.ended_at_unix,
            process_started_at if i == 0 else None,
            workflow_dir,
        )
        document["group"] = name
        document["interleaved_with"] = [other for j, other in enumerate(labels) if j != i]
        document["comparisons_out_of_reach"] = interleave.out_of_reach_with(
            group.comparisons, request, name
        )
        member = functools.partial(
            layout.group_member,
            folder,
            precision=request.precision,
            batch_size=request.batch_size,
            variant=request.variant,
        )
        write_csv(member("run_steps"), steps_frame(result.steps))
        write_csv(member("run_windows"), windows_frame(document["windows"]))
        write_json(member("run"), document)
        stream = sys.stdout if document["status"] == "ok" else sys.stderr
        print(describe_outcome(request, document), file=stream)
        documents.append(document)
    write_json(
        os.path.join(folder, layout.GROUP_COMPARISONS),
        {
            "kind": COMPARISONS_KIND,
            "group": name,
            "rounds": group.rounds,
            "members": labels,
            "comparisons": group.comparisons,
        },
    )
    for row in group.comparisons:
        if row["measured"]:
            print(comparison_line(row))
    return documents


def comparison_line(row: Mapping) -> str:
    """A group's comparison (a comparisons.json row) in the job's log."""
    a, b = ("{precision} bs{batch_size} {variant}".format(**row[side]) for side in "ab")
    line = f"{a} vs {b}: {ratios.ratio_text(ratios.RatioCI.from_dict(row))}"
    if row.get("verdict") == ratios.OUT_OF_REACH:
        numbers = (row["ratio_n"], row.get("rounds_needed"), row.get("rounds_fit"))
        line += "; " + out_of_reach_sentence(*numbers)
    return line


def copy_member(folder: str | os.PathLike, request: RunRequest, outputs: Mapping[str, str]) -> None:
    """One member's files out of its group's folder, to the configuration's own paths
    (`outputs`: run, run_windows, run_steps); a member the group did not measure is an error
    naming it."""
    for kind, target in outputs.items():
        source = layout.group_member(
            os.fspath(folder), kind, request.precision, request.batch_size, request.variant
        )
        if not os.path.isfile(source):
            raise NnperfError(
                f"{source} is missing: the group {os.fspath(folder)} did not measure "
                f"{label(request)}; re-run its job (delete the folder)"
            )
        if kind == "run":
            shutil.copyfile(source, target)
        else:
            copy_table(source, target, f"measure the group again: snakemake --forcerun {folder}")
    with open(outputs["run"], encoding="utf-8") as handle:
        document = json.load(handle)
    stream = sys.stdout if document.get("status") == "ok" else sys.stderr
    print(f"measured in group {document.get('group')}", file=sys.stdout)
    print(describe_outcome(request, document), file=stream)


COMPARISONS_KIND = "comparisons"


def describe_outcome(request: RunRequest, document: dict) -> str:
    """One line for the job's log."""
    from nnperf.core.wording import (
        count_of,
        stop_numbers_of,
        stop_sentence,
        unstable_numbers_of,
        unstable_sentences,
    )

    name = label(request)
    why = stop_sentence(
        document.get("stop_reason"), stop_numbers_of(document), document.get("over_budget_phase")
    )
    if document["status"] == "oom":
        return f"{name}: out of memory: {document['error']}"
    if document["status"] == "over_budget":
        return f"{name}: over budget: {why}"
    discarded = _discarded_text(document)
    if document["status"] == "host_busy":
        return (
            f"{name}: host busy: too few clean windows for an estimate "
            f"({count_of(document['n_windows'], 'clean window')} in "
            f"{count_of(document['n_processes'], 'process')}){discarded}"
        )
    relative = document["ci_half_width_rel"]
    ci = f" +/- {relative:.1%}" if relative is not None else " (no CI: one window)"
    reasons = unstable_sentences(document.get("unstable_reasons"), unstable_numbers_of(document))
    flags = f"; unstable: {'; '.join(reasons)}" if document["unstable"] else ""
    return (
        f"{name}: {document['throughput_img_s']:.1f} img/s{ci} "
        f"({count_of(document['n_processes'], 'process')} x "
        f"{count_of(document['n_windows'], 'window')}, "
        f"stopped: {document['stop_reason']}, duty cycle {document['duty_cycle']:.0%}){flags}"
        + (f"; {why}" if why else "")
        + discarded
        + _input_text(document)
    )


def _discarded_text(document: dict) -> str:
    """`; 3 disturbed windows measured again (host_overloaded 3)` where there were any."""
    total = document.get("discarded_windows") or 0
    if not total:
        return ""
    causes = document.get("discarded_causes") or {}
    named = ", ".join(f"{code} {n}" for code, n in causes.items() if n)
    return f"; {total} disturbed window(s) measured again ({named})"


def _input_text(document: dict) -> str:
    """`; loader alone 5210.3 img/s, data wait 0.4% of the step` where measured."""
    parts = []
    if document.get("loader_rate_img_s") is not None:
        parts.append(f"loader alone {document['loader_rate_img_s']:.1f} img/s")
    if document.get("data_wait_share") is not None:
        parts.append(f"data wait {document['data_wait_share']:.1%} of the step")
    return "; " + ", ".join(parts) if parts else ""
