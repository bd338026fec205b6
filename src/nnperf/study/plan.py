"""What a study costs before it runs: its jobs, stage by stage, each with an estimate.

`nnperf plan` builds the study's jobs as the workflow does (the matrix, then the part of it
each stage selects: `nnperf.study.selection`) and estimates each job's wall time from one of three
sources, and every estimate says which:

* a machine's defaults (`H100`, `CPU`): the recorded fixed costs of that machine (process
  imports, device init, the ceilings stage, an ncu profile), and assumptions where nothing
  was recorded, labelled "assumed";
* the rehearsal (`nnperf.engine.rehearsal`): a timed run is not estimated by arithmetic but run
  through the real engine (stopping rule, budgets) on a fake clock, with the step timings the
  machine recorded (or an earlier study measured);
* an earlier study's results folder (`MeasuredResults`): its run documents, ncu sidecars,
  operator profiles and training summaries, where it has the configuration.

The estimate is job time: the jobs one after another. Measurements (timed runs, profiles,
training) never overlap (`bench_slot`), so their sum is the floor of the study's wall time;
tables and figures may run beside them. Training is estimated to its last epoch: a run that
reaches its target accuracy earlier ends earlier.

It is not the place to measure anything or to run Snakemake: `plan_study` takes a validated
study and a `Timings` (`nnperf.study.estimate_sources`) and returns a `Plan`;
`nnperf.study.plan_text.render` turns it into text.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from nnperf.core import config as study_config
from nnperf.core import contract, layout, vocab
from nnperf.core.errors import NnperfError
from nnperf.engine import rehearsal
from nnperf.ncu import metrics
from nnperf.study import ceilings_cost, job_requests, selection
from nnperf.study.estimate_sources import (
    ASSUMED,
    BUDGET_BOUND,
    MACHINES,
    Cost,
    Timings,
    timings_from,
)
from nnperf.study.loading import Study
from nnperf.study.plan_profiles import (  # noqa: F401 - re-exported (tests, callers)
    IMAGEFOLDER_PREPARE_S_PER_IMAGE,
    ProfileCosts,
    _key_name,
    dataset_images,
    training_seconds,
)
from nnperf.study.plan_model import (  # noqa: F401 - the plan's shape, re-exported
    CALLS,
    CEILINGS,
    COMPLEXITY,
    DATA,
    MEASURING_RULES,
    NCU,
    OPERATORS,
    REPORT,
    STAGES,
    TIMED_RUNS,
    TRAINING,
    JobEstimate,
    Part,
    Plan,
    StageTotal,
    sources_of,
)

# The machine whose recorded ceilings price a device's ceilings stage in another machine's plan.
DEVICE_RECORDINGS = {"cuda": "h100", "cpu": "cpu"}


def _device_of(job: str) -> str | None:
    """The device a job's name starts its keys with (`ceilings cuda`, `plot_speedup cpu/...`)."""
    words = job.split()
    first = words[1].split("/")[0] if len(words) > 1 else None
    return first if first in vocab.DEVICES else None


class _Planner(ProfileCosts):
    """Builds the job estimates of one study (the state: the study, its timings and notes)."""

    def __init__(
        self,
        study: contract.StudyConfig,
        timings: Timings,
        requests: dict[study_config.RunKey, contract.RunRequest],
    ):
        self.study = study
        self.requests = requests
        self.timings = timings
        self.machine = timings.machine
        # The results paths' name (an ImageFolder's label), as the workflow's {dataset}.
        self.dataset = study.dataset.key
        self.notes: list[str] = []
        self.missing: dict[str, int] = {}
        self._step_timings: dict[study_config.RunKey, tuple[Any, str]] = {}

    def note_missing(self, what: str) -> None:
        if self.timings.measured is not None:
            self.missing[what] = self.missing.get(what, 0) + 1

    # Fixed costs of a job process.
    def fresh_process(self, device: bool) -> list[Part]:
        m = self.machine
        parts = [
            Part("job start", m.job_start.seconds, m.job_start.source),
            Part("imports", m.imports.seconds, m.imports.source),
        ]
        if device:
            parts.append(Part("device init", m.device_init.seconds, m.device_init.source))
        return parts

    def step_timing(self, key: study_config.RunKey) -> tuple[Any, str]:
        """The configuration's rehearsal timing (or None) and its source: the earlier
        study's run document first, then the machine's model."""
        if key in self._step_timings:
            return self._step_timings[key]
        request = self.requests[key]
        timing, source = None, BUDGET_BOUND
        measured = self.timings.measured
        document = measured.run_document(self.dataset, key) if measured else None
        if document is not None:
            try:
                timing = rehearsal.ConfigTiming.from_run_documents([document])
                source = measured.source
            except (NnperfError, KeyError, TypeError, ValueError):
                timing = None
        if timing is None and self.timings.model is not None:
            timing = self.timings.model.timing_for(request)
            if timing is not None:
                source = self.timings.model_source
        self._step_timings[key] = (timing, source)
        return timing, source

    def step_s(self, key: study_config.RunKey) -> tuple[float, float, str]:
        """(steady step seconds, compile seconds, source) of a configuration."""
        timing, source = self.step_timing(key)
        if timing is not None and timing.steady_step_s:
            return float(timing.steady_step_s), float(timing.compile_s or 0.0), source
        fallback = self.machine.fallback_image_s
        return fallback.seconds * key.batch_size, 0.0, fallback.source

    # --- stages --------------------------------------------------------------------------
    def data(self) -> list[JobEstimate]:
        m = self.machine
        if self.study.dataset.name == vocab.IMAGEFOLDER:
            # prepare_dataset decodes and hashes every image once: about 1.1 ms an image
            # (JPEG decode 1.0 ms + hash 0.1 ms, measured on the 2-vCPU development VM), on
            # one core here as an upper bound (it uses up to 8 threads).
            images = sum(dataset_images(self.study.dataset))
            prepare = Cost(images * IMAGEFOLDER_PREPARE_S_PER_IMAGE, ASSUMED)
        else:
            prepare = m.prepare.get(self.dataset, Cost(30.0, ASSUMED))
        parts = (
            Part("job start", m.job_start.seconds, m.job_start.source),
            Part(f"prepare {self.dataset}", prepare.seconds, prepare.source),
        )
        return [JobEstimate(DATA, f"prepare_dataset {self.dataset}", parts)]

    def complexity(self) -> list[JobEstimate]:
        m = self.machine
        return [
            JobEstimate(
                COMPLEXITY,
                f"complexity {model}",
                (
                    *self.fresh_process(device=False),
                    Part("count", m.complexity.seconds, m.complexity.source),
                ),
            )
            for model in self.study.model_names
        ]

    def ceilings(self, devices: list[str]) -> list[JobEstimate]:
        jobs = []
        measured = self.timings.measured
        settings = self.study.ceilings
        for device in devices:
            seconds = measured.ceilings_s(device) if measured else None
            if seconds is not None:
                measure = [Part("measure", seconds, measured.source)]
            else:
                if device == self.machine.device:
                    self.note_missing("ceilings")
                measure = self.ceilings_parts(device, settings)
            parts = (*self.fresh_process(device=device != "cpu"), *measure)
            jobs.append(JobEstimate(CEILINGS, f"ceilings {device}", parts, device))
        return jobs

    def ceilings_parts(self, device: str, settings: contract.CeilingsSettings) -> list[Part]:
        """The ceilings stage priced from `ceilings:` (`nnperf.study.ceilings_cost`) with the
        recorded stage of this machine, or of the machine kind that has `device`."""
        name = self.machine.name if device == self.machine.device else DEVICE_RECORDINGS.get(device)
        if name is None:
            return [Part("measure", ceilings_cost.load_recording("h100").duration_s, ASSUMED)]
        recording = ceilings_cost.load_recording(name)
        source = self.timings.model_source if name == self.machine.name else ASSUMED
        sizes = settings.gemm_sizes or "the device's own sizes"
        return [
            Part(
                "GEMMs",
                recording.gemm_s(settings),
                source,
                f"sizes {sizes}, {settings.trials} trials",
            ),
            Part("STREAM", recording.stream_s(settings), source),
            Part(
                "cache sweep",
                recording.sweep_s(settings),
                source,
                f"{settings.sweep_min_bytes}..{settings.sweep_max_bytes} bytes",
            ),
            Part("setup", recording.setup_s, source, "the recorded stage less its measurements"),
        ]

    def timed_groups(self, matrix: list[study_config.RunKey]) -> list[JobEstimate]:
        """One timed_group job per model x device (rule timed_group): its
        members' processes interleaved by the real engine on a fake clock
        (`rehearsal.replay_group`), measuring on until each member's target and each
        comparison's, or the budgets; then each configuration's files copied out of the group
        (rule timed_run, a localrule)."""
        m = self.machine
        jobs = []
        groups: dict[tuple, list[study_config.RunKey]] = {}
        for key in matrix:
            batches = layout.batch_sizes_key(job_requests.group_of(self.study, key.batch_size))
            groups.setdefault((key.device, key.model, batches), []).append(key)
        for index, ((device, model, batches), in_matrix) in enumerate(groups.items()):
            in_group = job_requests.group_members(
                self.study, device, model, layout.group_batch_sizes(batches)
            )
            members = [key for key in in_group if key in self.requests] or in_matrix
            parts = [Part("job start", m.job_start.seconds, m.job_start.source)]
            if index == 0:
                parts.append(Part("warm server start", m.warm_server.seconds, m.warm_server.source))
            parts += self.group_parts(members)
            name = f"timed_group {device}/{model}/bs{batches}"
            jobs.append(JobEstimate(TIMED_RUNS, name, tuple(parts), device))
            for key in in_matrix:
                copy = Part("job start", m.job_start.seconds, m.job_start.source, "a copy")
                jobs.append(JobEstimate(TIMED_RUNS, f"timed_run {_key_name(key)}", (copy,), device))
        return jobs

    def group_parts(self, members: list[study_config.RunKey]) -> list[Part]:
        timings = [self.step_timing(key) for key in members]
        if self.timings.measured is not None:
            for _, source in timings:
                if source != self.timings.measured.source:
                    self.note_missing("timed runs")
        if any(timing is None for timing, _ in timings):
            # Nothing to replay for some member: each one at its typical run or budget.
            return [self.unrehearsed_run(key, self.requests[key]) for key in members]
        outcome = rehearsal.replay_group(
            [self.requests[key] for key in members], [t for t, _ in timings], seed=0
        )
        statuses = ", ".join(
            f"{d['precision']} bs{d['batch_size']} {d['variant']}: {d['n_processes']} processes, "
            f"{d['stop_reason']}"
            + (
                f" (+{d['processes_for_comparisons']} for comparisons)"
                if d.get("processes_for_comparisons")
                else ""
            )
            for d in outcome.documents
        )
        unresolved = sum(
            1 for row in outcome.comparisons if row["measured"] and not row["resolved"]
        )
        detail = (
            f"{outcome.rounds} rounds, {len(outcome.comparisons)} comparisons "
            f"({unresolved} unresolved); {statuses}"
        )
        source = sources_of(Part("", 1.0, source) for _, source in timings)[0]
        return [Part("interleaved rehearsal", outcome.wall_s, source, detail)]

    def unrehearsed_run(self, key: study_config.RunKey, request: contract.RunRequest) -> Part:
        """A timed run with no step timing to replay: the machine's typical timed run, or its
        budget where that is less or the machine has none."""
        budget = request.timing.max_seconds
        typical = self.machine.timed_run
        if typical is not None and key.device == self.machine.device and typical.seconds < budget:
            return Part(
                "typical timed run", typical.seconds, typical.source, "no step timing known"
            )
        return Part("timing.max_seconds", budget, BUDGET_BOUND, "no step timing known")

    def report(
        self,
        matrix: list[study_config.RunKey],
        devices: list[str],
        chosen: selection.StageSelection,
    ) -> list[JobEstimate]:
        """The table, figure and report jobs (`common.smk` get_final_output's rest)."""
        m = self.machine
        names: list[str] = ["aggregate_runs", "environment_table", "roofline_points"]
        pairs = study_config.unique((key.device, key.model) for key in matrix)
        names += [
            f"plot_{kind} {d}/{model}" for d, model in pairs for kind in layout.RUN_FIGURE_KINDS
        ]
        names += [f"plot_ceilings {device}" for device in devices]
        names += [f"plot_roofline_steps {device}" for device in devices]
        if chosen.ncu:
            names.append("ncu_kernels")
            names += [f"plot_roofline {_key_name(key)}" for key in chosen.ncu]
        names += [
            f"plot_{kind} {_key_name(key)}"
            for key in chosen.operator_profile
            for kind in ("operators", "memory")
        ]
        if chosen.training:
            names.append("training_table")
            trained = study_config.unique((key.device, key.model) for key, _ in chosen.training)
            names += [f"plot_accuracy {d}/{model}" for d, model in trained]
        if self.study.report.extra_results:
            names.append("compare_machines")
        jobs = [
            JobEstimate(
                REPORT,
                name,
                (
                    Part("job start", m.job_start.seconds, m.job_start.source),
                    Part("script", m.script_job.seconds, m.script_job.source),
                ),
            )
            for name in names
        ]
        jobs.append(
            JobEstimate(
                REPORT,
                "render_report",
                (
                    Part("job start", m.job_start.seconds, m.job_start.source),
                    Part("render", m.report_job.seconds, m.report_job.source),
                ),
            )
        )
        return jobs


def plan_study(
    study: Study,
    timings: Timings,
    *,
    ncu_on_path: bool,
    title: str | None = None,
    stages: bool = False,
) -> Plan:
    """Every job of `study` (`nnperf.study.loading.load_study`, its `auto` devices resolved)
    with its estimate, and the `snakemake` calls that run them: one, or with `stages` one per
    stage of `nnperf gpu-study` (`nnperf.study.plan_calls`). `ncu_on_path` decides
    `ncu.enabled: auto` as on the machine that will build the DAG."""
    from nnperf.study.plan_calls import snakemake_calls

    devices = list(study.devices)
    matrix, matrix_notes = study_config.expand_matrix(
        {**study.config, "devices": devices}, detect=lambda: devices[0]
    )
    empty = study_config.empty_matrix_message(matrix, matrix_notes)
    if empty:
        raise NnperfError(empty)
    typed = study.typed
    chosen = selection.select_stages(typed, matrix, ncu_on_path)
    # The timed runs' requests as the workflow builds them, in matrix order.
    requests = dict(zip(matrix, study.run_requests()))
    planner = _Planner(typed, timings, requests)
    jobs = (
        planner.data()
        + planner.complexity()
        + planner.ceilings(devices)
        + planner.timed_groups(matrix)
        + planner.ncu_profiles(chosen.ncu)
        + planner.operator_profiles(chosen.operator_profile)
        + planner.training(chosen.training)
        + planner.report(matrix, devices, chosen)
    )
    jobs = [
        job if job.device else dataclasses.replace(job, device=_device_of(job.job)) for job in jobs
    ]
    jobs = snakemake_calls(jobs, timings.machine, stages) + jobs
    notes = [note.removeprefix("note: ") for note in matrix_notes]
    for device in devices:
        reason = metrics.ncu_exclusion_reason(typed.ncu.enabled, device, ncu_on_path)
        if reason:
            notes.append(reason)
    if timings.measured is not None:
        for what, count in planner.missing.items():
            notes.append(
                f"{timings.measured.root} lacks {count} of the {what}: "
                f"{timings.machine.name} defaults for those"
            )
    unrehearsed = [part.what for job in jobs if job.stage == TIMED_RUNS for part in job.parts]
    if "typical timed run" in unrehearsed:
        notes.append(
            f"no {timings.machine.device} step timings to replay: a timed run counts as "
            f"{timings.machine.name}'s typical one ({timings.machine.timed_run.seconds:g} s), "
            "at most its timing.max_seconds"
        )
    if any(
        part.source == BUDGET_BOUND for job in jobs if job.stage == TIMED_RUNS for part in job.parts
    ):
        notes.append(
            "timed runs with no step timing to replay are counted at their budget, "
            "timing.max_seconds"
        )
    if chosen.training:
        notes.append("training is counted to its last epoch; reaching the target ends it earlier")
    return Plan(
        title=title or typed.study.name,
        timings=timings.name,
        machine=timings.machine,
        configurations=len(matrix),
        jobs=tuple(jobs),
        notes=tuple(notes),
    )


def planned(
    configfiles: Sequence[str] = (),
    config: Sequence[str] = (),
    timings: str | None = None,
    *,
    stages: bool = False,
) -> Plan:
    """The plan `nnperf plan` prints: the study of config/config.yaml, `configfiles` merged
    over it and `config` (KEY=VALUE) last, on `timings` ("h100", "cpu", a results folder;
    None: h100 when the study's devices include cuda, else cpu)."""
    from nnperf.core.devices import detect_best_device
    from nnperf.ncu.command import find_ncu
    from nnperf.study.loading import load_study

    if timings in MACHINES:
        # Planning for that machine: `auto` is its device.
        device = MACHINES[timings].device
        detect = lambda: device  # noqa: E731
    else:
        detect = detect_best_device
    study = load_study(list(configfiles), list(config), detect=detect)
    chosen = timings_from(timings, study.devices)
    # `ncu.enabled: auto` looks for ncu on the machine that builds the DAG: a GPU study is
    # planned for its GPU machine, which has it.
    ncu_on_path = find_ncu() is not None or chosen.machine.device == "cuda"
    return plan_study(study, chosen, ncu_on_path=ncu_on_path, stages=stages)


def total_seconds(
    configfiles: Sequence[str] = (),
    config: Sequence[str] = (),
    timings: str | None = None,
    *,
    stages: bool = False,
    cores: int | None = None,
) -> float:
    """The planned wall time of a study in seconds (`planned(...).wall_seconds(cores)`): what
    a test holds a config file to, e.g. `total_seconds([GPU_STUDY], timings="h100",
    stages=True)` for `nnperf gpu-study` on the recorded H100."""
    return planned(configfiles, config, timings, stages=stages).wall_seconds(cores)
