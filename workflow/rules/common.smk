# Helpers shared by every stage: config validation, wildcard constraints, the matrix and the
# input functions. Rule files hold rules only.

import dataclasses
import os
import sys
import time
from pathlib import Path

# Use the library of this checkout, whether or not nnperf is pip-installed: every result
# must come from the code whose git commit it records. Jobs (scripts, the ncu process)
# inherit it through PYTHONPATH.
NNPERF_SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, NNPERF_SRC)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        [NNPERF_SRC] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
)

from nnperf.core import contract, layout, vocab
from nnperf.core import config as study_config
from nnperf.core import devices as nnperf_devices
from nnperf.core.codehash import code_hash
from nnperf.core.config import unique
from nnperf.core.errors import NnperfError
from nnperf.core.jobs import failure_causes
from nnperf.ncu import command as nnperf_profiling
from nnperf.ncu import metrics as nnperf_ncu
from nnperf.study import preflight
from nnperf.study.selection import select_stages
from snakemake.common.configfile import load_configfile
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod


def study_layers():
    """The --configfile documents in order, then the --config mapping (see overlay_study)."""
    settings = workflow.config_settings
    return [load_configfile(path) for path in settings.configfiles] + [dict(settings.config)]


try:
    config = study_config.validate(
        study_config.overlay_study(config, study_layers()),
        study_config.load_schema(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"),
    )
    # The typed study: every request below is built from it, never from `config` directly.
    STUDY = contract.from_dict(contract.StudyConfig, config)
except NnperfError as error:
    sys.exit(f"nnperf: {error}")


# `snakemake --report` without a path writes report.html into the working directory, the
# repository root; the study's Snakemake report belongs beside its summary under reports/.
if "--report" in sys.argv[1:]:
    after = sys.argv[sys.argv.index("--report") + 1 :]
    if not after or after[0].startswith("-"):
        sys.exit(
            "nnperf: give --report a path: snakemake --report reports/report.html "
            "(without one Snakemake writes report.html into the repository root)"
        )

# When this run started: failed jobs' logs are the ones written since (print_failure_causes).
RUN_STARTED = time.time()


def stop_if_a_device_is_absent():
    """The `onstart` handler: a device this machine lacks is one line before any job runs,
    not a failed job per configuration minutes later. Only for jobs that will run here (a
    cluster executor submits them elsewhere; dry runs never get here) and need a device.
    Pending CUDA jobs also get `nnperf doctor`'s CUDA checks (torch's CUDA build, the driver,
    NVML, NVTX; ncu and its counters when ncu_profile jobs are pending); torch is imported
    only then."""
    if workflow.non_local_exec and not workflow.remote_exec:
        return
    jobs = list(workflow.dag.needrun_jobs())
    needed = unique(job.wildcards_dict["device"] for job in jobs if "device" in job.wildcards_dict)
    for device in needed:
        reason = nnperf_devices.absent_reason(device)
        if reason:
            sys.exit(f"nnperf: config devices: {reason}")
    if "cuda" in needed:
        profiles = any(job.rule.name == "ncu_profile" for job in jobs)
        problem = preflight.cuda_problem(profile_ncu=profiles)
        if problem:
            sys.exit(f"nnperf: {problem}")


def print_failure_causes():
    """The `onerror` handler: one line per failed job with the cause from its log."""
    causes = failure_causes("logs", RUN_STARTED)
    if causes:
        print(f"nnperf: {len(causes)} failed job(s), and why:", file=sys.stderr)
    for log, cause in causes:
        print(f"  {cause}  [{log}]", file=sys.stderr)


def nnperf_command():
    """How ncu_profile calls the nnperf CLI: the interpreter running Snakemake, so a job
    never picks up another environment's torch from PATH; under `--sdm conda` the rule's
    own environment."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return "python -m nnperf"
    return f"'{sys.executable}' -m nnperf"


NNPERF = nnperf_command()

DATASET = STUDY.dataset.name
PEAKS = "config/peaks.yaml"
MATRIX, MATRIX_NOTES = study_config.expand_matrix(config)
DEVICES = study_config.resolved_devices(config)

# Notes for the report's "skipped and flagged" section: what the study left out and why.
# Stages add theirs while the Snakefile is read; the report rule reads the list.
REPORT_NOTES = []


def add_note(text):
    """Print a note on what the study leaves out, and keep it for the report."""
    print(f"nnperf note: {text}", file=sys.stderr)
    REPORT_NOTES.append(text[:1].upper() + text[1:])


for note in MATRIX_NOTES:
    add_note(note.removeprefix("note: "))

# A study with nothing to measure asks for nothing: no table, figure or report is rebuilt
# from zero runs (Snakemake deletes a job's old outputs before running it), so an empty
# matrix can never cost another study's results.
EMPTY_MATRIX = study_config.empty_matrix_message(MATRIX, MATRIX_NOTES)
if EMPTY_MATRIX:
    print(f"nnperf: {EMPTY_MATRIX}", file=sys.stderr)

if "auto" in STUDY.devices and "cuda" not in DEVICES and "mps" not in DEVICES:
    REPORT_NOTES.append("No GPU: devices 'auto' resolved to cpu on the machine that built the DAG.")


wildcard_constraints:
    dataset=layout.KEY_PATTERNS["dataset"],
    device=layout.KEY_PATTERNS["device"],
    model=layout.KEY_PATTERNS["model"],
    precision=layout.KEY_PATTERNS["precision"],
    batch_size=layout.KEY_PATTERNS["batch_size"],
    variant=layout.KEY_PATTERNS["variant"],
    recipe=layout.KEY_PATTERNS["recipe"],


# --- requests: what each job is asked to do (nnperf.core.contract), as rule params ------------
# Params must be plain data: Snakemake's change detection records only builtin values, so
# a request crosses as contract.to_dict() and the script rebuilds it with from_dict().
# Measurement rules also take `engine=code_hash(<entry module>)`, which changes with the
# library code they run, so editing the engine re-runs them (nnperf.core.codehash).


def as_param(request):
    return contract.to_dict(request)


def this_study(wildcards):
    """Raise unless a study-level file (table, figure, report) is this study's: it is built
    from this study's matrix, so it must name this study's dataset and the matrix must not
    be empty."""
    if EMPTY_MATRIX:
        raise WorkflowError(f"nnperf: {EMPTY_MATRIX}")
    if wildcards.dataset != DATASET:
        raise WorkflowError(
            f"nnperf: a file of dataset {wildcards.dataset!r} belongs to a study of that "
            f"dataset, and this study's dataset is {DATASET!r}: add "
            f"--config dataset={wildcards.dataset} to build it"
        )


def dataset_request(wildcards):
    dataset = dataclasses.replace(STUDY.dataset, name=wildcards.dataset)
    return as_param(
        contract.DatasetRequest(
            root=layout.path("dataset", dataset=wildcards.dataset), dataset=dataset
        )
    )


def complexity_request(wildcards):
    return as_param(
        contract.ComplexityRequest(
            model=wildcards.model, dataset=wildcards.dataset, training=STUDY.training
        )
    )


def ceilings_request(wildcards):
    # CPU roofs are measured at the thread count of the timed runs' reference variant.
    threads = STUDY.variants[vocab.REFERENCE_VARIANT].cpu_threads
    return as_param(
        contract.CeilingsRequest(
            device=wildcards.device,
            settings=STUDY.ceilings,
            peaks_path=PEAKS,
            threads=threads,
        )
    )


def variant_settings(name):
    if name not in STUDY.variants:
        raise NnperfError(
            f"variant {name!r} is not in config variants; allowed: {', '.join(STUDY.variants)}"
        )
    return STUDY.variants[name]


def run_request_of(wildcards, training):
    """The RunRequest of the configuration a path names; an impossible one fails here."""
    study_config.check_runnable(wildcards.device, wildcards.precision)
    return contract.RunRequest(
        device=wildcards.device,
        model=wildcards.model,
        precision=wildcards.precision,
        batch_size=int(wildcards.batch_size),
        variant=wildcards.variant,
        settings=variant_settings(wildcards.variant),
        dataset=wildcards.dataset,
        data_root=layout.path("dataset", dataset=wildcards.dataset),
        training=training,
        timing=STUDY.timing,
    )


def run_request(wildcards):
    return as_param(run_request_of(wildcards, STUDY.training))


def run_data(wildcards):
    """The dataset a run (timed or profiled) reads. Building the request here makes a path
    naming an impossible run (device/precision pair, unknown variant) fail while the DAG is
    built; params are only evaluated when a job is about to run."""
    run_request_of(wildcards, STUDY.training)
    return layout.path("dataset", dataset=wildcards.dataset)


def profile_request(wildcards):
    """The step profiled under ncu: the configuration's process 0 after `ncu.warmup_steps`."""
    training = dataclasses.replace(STUDY.training, warmup_steps=STUDY.ncu.warmup_steps)
    return as_param(contract.ProfileStepRequest(run=run_request_of(wildcards, training)))


def operator_profile_request(wildcards):
    """A few steps of the configuration under torch.profiler (its process 0's seed)."""
    return as_param(
        contract.OperatorProfileRequest(
            run=run_request_of(wildcards, STUDY.training), settings=STUDY.operator_profile
        )
    )


def training_request(wildcards):
    """One configuration trained to accuracy under one recipe of config `recipes`."""
    study_config.check_runnable(wildcards.device, wildcards.precision)
    if wildcards.recipe not in STUDY.recipes:
        raise NnperfError(
            f"recipe {wildcards.recipe!r} is not in config recipes; allowed: "
            f"{', '.join(STUDY.recipes)}"
        )
    recipe = STUDY.recipes[wildcards.recipe]
    return as_param(
        contract.TrainingRunRequest(
            device=wildcards.device,
            model=wildcards.model,
            precision=wildcards.precision,
            batch_size=int(wildcards.batch_size),
            variant=wildcards.variant,
            settings=variant_settings(wildcards.variant),
            recipe=wildcards.recipe,
            convergence=recipe,
            dataset=wildcards.dataset,
            data_root=layout.path("dataset", dataset=wildcards.dataset),
            input_size=recipe.input_size,
        )
    )


def training_checkpoints(wildcards):
    """Where a training run keeps its checkpoints (beside its outputs, not one of them)."""
    return layout.path("training_checkpoints", **wildcards)


def tables_request():
    return as_param(contract.TablesRequest(cv_threshold=STUDY.report.cv_threshold))


def figure_keys(wildcards):
    """The keys a figure's path names, typed (batch_size an integer)."""
    this_study(wildcards)
    return {
        key: int(value) if key in layout.INTEGER_KEYS else value for key, value in wildcards.items()
    }


def report_request():
    return as_param(
        contract.ReportRequest(
            title=STUDY.study.name,
            description=STUDY.study.description.strip(),
            dataset=DATASET,
            notes=tuple(REPORT_NOTES),
            cv_threshold=STUDY.report.cv_threshold,
            extra_results=STUDY.report.extra_results,
        )
    )


def measurement_threads(wildcards):
    """Cores a measurement job holds: all of them on the CPU, so nothing runs beside a CPU
    measurement and perturbs it; on an accelerator one, plus the variant's DataLoader
    workers (bench_slot serialises accelerator measurements).

    On a cluster the submitting Snakemake has no core count (workflow.cores raises) and
    must not ask for the login node's: it asks for one, the slurm profile's --exclusive
    hands the job its whole node, and inside the job (--cores all) this is the node's count.
    """
    if wildcards.device != "cpu":
        # The GPU does the work; the host needs one core plus one per DataLoader worker.
        variant = STUDY.variants.get(wildcards.get("variant", vocab.REFERENCE_VARIANT))
        return 1 + (variant.num_workers if variant else 0)
    if workflow.non_local_exec and not workflow.remote_exec:
        return 1
    try:
        return workflow.cores
    except WorkflowError:
        # No --cores given: a run that executes nothing (`snakemake --report`, --lint).
        return 1


# --- outputs of each stage ---------------------------------------------------------------


def data_outputs():
    return [layout.path("dataset", dataset=DATASET)]


def complexity_outputs():
    return [layout.path("complexity", dataset=DATASET, model=model) for model in STUDY.models]


def table(name):
    """This study's table `name`."""
    return layout.path("table", dataset=DATASET, name=name)


def table_pattern(name):
    """Table `name` of the study a rule's `{dataset}` wildcard names (rule inputs/outputs)."""
    return layout.path("table", dataset="{dataset}", name=name)


def ceilings_outputs():
    return [
        layout.path(kind, device=device)
        for device in DEVICES
        for kind in ("ceilings", "ceilings_figure")
    ]


def ceilings_jsons():
    return [layout.path("ceilings", device=device) for device in DEVICES]


def run_outputs():
    """The run JSON of every configuration in the matrix (one job measures each)."""
    return [layout.path("run", dataset=DATASET, **key.as_dict()) for key in MATRIX]


def study_runs(wildcards):
    """What a study-level table is built from: every run of this study's matrix."""
    this_study(wildcards)
    return run_outputs()


def timing_outputs():
    """Tables of the timed runs and their figures, one set per (device, model)."""
    pairs = unique((key.device, key.model) for key in MATRIX)
    figures = [
        layout.path("run_figure", kind=kind, dataset=DATASET, device=device, model=model)
        for kind in layout.RUN_FIGURE_KINDS
        for device, model in pairs
    ]
    tables = [table(name) for name in ("runs", "windows", "summary")]
    return tables + figures


def environment_outputs():
    return [table("environment")]


def machine_comparison_outputs():
    """The cross-machine table and figure, when other machines' results are configured."""
    if not STUDY.report.extra_results:
        return []
    return [table("machines_summary"), layout.path("machines_figure", dataset=DATASET)]


def report_outputs():
    return (
        environment_outputs()
        + machine_comparison_outputs()
        + [layout.path(kind, dataset=DATASET) for kind in ("summary_html", "summary_md")]
    )


def compare_machines_inputs(wildcards):
    """What compare_machines reads: this machine's tables and the other machines' folders."""
    this_study(wildcards)
    inputs = {name: table(name) for name in ("summary", "runs", "environment")}
    return {**inputs, "extra_results": list(STUDY.report.extra_results)}


def report_inputs(wildcards):
    """What render_report reads: every table, JSON and figure the study builds."""
    this_study(wildcards)
    study = [path for path in get_final_output() if path not in report_outputs()]
    inputs = {
        "runs": table("runs"),
        "windows": table("windows"),
        "summary": table("summary"),
        "roofline_points": table("roofline_points"),
        "profiles": table("profiles"),
        "environment": table("environment"),
        "complexity": complexity_outputs(),
        "ceilings": ceilings_jsons(),
        "run_jsons": run_outputs(),
        "opprofiles": operator_profiles("opprofile"),
        "figures": [
            path
            for path in study + machine_comparison_outputs()
            if path.startswith("results/figures/") and path.endswith(".png")
        ],
        "extra_results": list(STUDY.report.extra_results),
    }
    if ncu_keys():
        inputs["kernels"] = table("kernels")
    if training_keys():
        inputs["training"] = table("training")
    return inputs


# --- Nsight Compute profiles and the roofline -------------------------------------------

# On PATH or where Nsight Compute installs; the ncu jobs run the same executable.
NCU_ON_PATH = nnperf_profiling.find_ncu() is not None
# What ncu, operator profiles and training take of the matrix.
SELECTION = select_stages(STUDY, MATRIX, NCU_ON_PATH)

for device in DEVICES:
    reason = nnperf_ncu.ncu_exclusion_reason(STUDY.ncu.enabled, device, NCU_ON_PATH)
    if reason:
        add_note(reason)


def ncu_keys():
    """Configurations profiled under ncu (nnperf.study.selection)."""
    return list(SELECTION.ncu)


for name in STUDY.ncu.variants or ():
    if name not in STUDY.variants:
        sys.exit(
            f"nnperf: config ncu.variants names {name!r}, which is not in config variants; "
            f"allowed: {', '.join(STUDY.variants)}"
        )


def profiles(kind):
    """The `kind` file of every profiled configuration."""
    return [layout.path(kind, dataset=DATASET, **key.as_dict()) for key in ncu_keys()]


def ncu_kernels_inputs(wildcards):
    this_study(wildcards)
    return {"csvs": profiles("profile_csv"), "metas": profiles("profile_meta")}


def roofline_points_inputs(wildcards):
    this_study(wildcards)
    inputs = {"summary": table("summary"), "complexity": complexity_outputs()}
    if ncu_keys():
        inputs["kernels"] = table("kernels")
    return inputs


def plot_roofline_inputs(wildcards):
    this_study(wildcards)
    inputs = {
        "points": table("roofline_points"),
        "ceilings": layout.path("ceilings", device=wildcards.device),
    }
    if ncu_keys():
        inputs["kernels"] = table("kernels")
        inputs["profiles"] = table("profiles")
    return inputs


def ncu_outputs():
    return [table("kernels")] if ncu_keys() else []


# --- operator profiles (torch.profiler) -------------------------------------------------

for name in STUDY.operator_profile.variants or ():
    if name not in STUDY.variants:
        sys.exit(
            f"nnperf: config operator_profile.variants names {name!r}, which is not in config "
            f"variants; allowed: {', '.join(STUDY.variants)}"
        )
if not STUDY.operator_profile.enabled:
    add_note("operator_profile.enabled is false: no torch.profiler operator profiles")


def operator_profile_keys():
    """Configurations profiled under torch.profiler (nnperf.study.selection)."""
    return list(SELECTION.operator_profile)


def operator_profiles(kind):
    """The `kind` file of every configuration profiled under torch.profiler."""
    return [layout.path(kind, dataset=DATASET, **key.as_dict()) for key in operator_profile_keys()]


# --- training to accuracy -----------------------------------------------------------------

for name in STUDY.convergence.variants or ():
    if name not in STUDY.variants:
        sys.exit(
            f"nnperf: config convergence.variants names {name!r}, which is not in config "
            f"variants; allowed: {', '.join(STUDY.variants)}"
        )
if not STUDY.convergence.enabled:
    add_note("convergence.enabled is false: no configuration is trained to accuracy")


def training_keys():
    """(configuration, recipe) of every training run (nnperf.study.selection)."""
    return list(SELECTION.training)


def training_runs(kind, device=None, model=None):
    """The `kind` file of every training run (of one device and model when given)."""
    return [
        layout.path(kind, dataset=DATASET, recipe=recipe, **key.as_dict())
        for key, recipe in training_keys()
        if (device is None or key.device == device) and (model is None or key.model == model)
    ]


def training_table_inputs(wildcards):
    this_study(wildcards)
    return {"runs": training_runs("training_run"), "summary": table("summary")}


def accuracy_figure_inputs(wildcards):
    figure_keys(wildcards)
    return training_runs("training_epochs", wildcards.device, wildcards.model)


def accuracy_target(wildcards):
    """The target line of the accuracy figure: the recipes' target when they share one."""
    targets = {recipe.target_accuracy for recipe in STUDY.recipes.values()}
    return targets.pop() if len(targets) == 1 else None


def training_outputs():
    if not training_keys():
        return []
    pairs = unique((key.device, key.model) for key, _ in training_keys())
    figures = [
        layout.path("accuracy_figure", dataset=DATASET, device=device, model=model)
        for device, model in pairs
    ]
    return [table("training")] + figures


def operator_profile_outputs():
    return [
        path
        for kind in ("opprofile", "operators_figure", "memory_figure")
        for path in operator_profiles(kind)
    ]


def roofline_outputs():
    """Points and figures: a hierarchical roofline for every profiled configuration and a
    step-level roofline for every device (analytic on CPU and MPS)."""
    figures = profiles("roofline_figure")
    steps = [
        layout.path("roofline_steps_figure", dataset=DATASET, device=device) for device in DEVICES
    ]
    return [table("roofline_points")] + figures + steps


def get_final_output():
    """Every file the study asks for; `rule all` builds exactly this (nothing when the
    matrix is empty: see EMPTY_MATRIX)."""
    if EMPTY_MATRIX:
        return []
    return (
        data_outputs()
        + complexity_outputs()
        + ceilings_outputs()
        + timing_outputs()
        + ncu_outputs()
        + operator_profile_outputs()
        + training_outputs()
        + roofline_outputs()
        + report_outputs()
    )
