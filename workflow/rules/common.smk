# Helpers shared by every stage: config validation, wildcard constraints, the matrix and the
# input functions. Rule files hold rules only.

import functools
import os
import sys
import time
from pathlib import Path

# Use the library of this checkout (NNPERF_HOME, configfile.smk), whether or not nnperf is
# pip-installed: every result must come from the code whose git commit it records
# (nnperf.study.session). nnperf's own files are found there too; the study's paths (results,
# data, the config's relative paths) are relative to the folder Snakemake runs in.
NNPERF_SRC = str(NNPERF_HOME / "src")
sys.path.insert(0, NNPERF_SRC)

from nnperf.core import codehash, contract, layout
from nnperf.core import config as study_config
from nnperf.core.codehash import code_hash
from nnperf.core.config import unique
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey
from nnperf.core.vocab import MEASURING_RULES
from nnperf.ncu import command as nnperf_profiling
from nnperf.report.folders import extra_results_inputs
from nnperf.study import job_requests, session
from nnperf.study.loading import module_study
from nnperf.study.scope import scope_of
from snakemake.common.configfile import load_configfile
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

# Jobs (scripts, the ncu process) inherit it through PYTHONPATH.
os.environ.update(PYTHONPATH=session.library_pythonpath(NNPERF_SRC, os.environ))


def study_layers():
    """The --configfile documents in order, then the --config mapping (see overlay_study);
    used as a module, the user's config (`config:`) comes first."""
    settings = workflow.config_settings
    given = [dict(config)] if CONFIG_FROM_MODULE else []
    return (
        given + [load_configfile(path) for path in settings.configfiles] + [dict(settings.config)]
    )


try:
    validated = study_config.validate(
        study_config.overlay_study(
            module_study(config, NNPERF_HOME) if CONFIG_FROM_MODULE else config, study_layers()
        ),
        study_config.load_schema(NNPERF_HOME / "workflow/schemas/config.schema.yaml"),
    )
    if CONFIG_FROM_MODULE:
        # `snakemake --report` renders workflow.rst with the main Snakefile's config: the
        # very mapping the user's Snakefile passed as `config:`, so it becomes the study.
        config.clear()
        config.update(validated)
    else:
        config = validated
    # The typed study: every request below is built from it, never from `config` directly.
    STUDY = contract.from_dict(contract.StudyConfig, config)
    # What the study covers here: its matrix, devices, each stage's selection, its notes.
    # `ncu` on PATH or where Nsight Compute installs; the ncu jobs run the same executable.
    SCOPE = scope_of(config, STUDY, ncu_on_path=nnperf_profiling.find_ncu() is not None)
    # The files of other machines' folders that the report and the comparison read: their
    # rules' inputs, so an edited table re-runs them; a folder that is not a results folder
    # of this dataset stops here (nnperf.report.folders.extra_results_inputs).
    EXTRA_RESULTS = extra_results_inputs(STUDY.report.extra_results, SCOPE.dataset)
except NnperfError as error:
    sys.exit(f"nnperf: {error}")

REPORT_PATH_PROBLEM = session.report_path_problem(sys.argv[1:])
if REPORT_PATH_PROBLEM:
    sys.exit(f"nnperf: {REPORT_PATH_PROBLEM}")

for line in SCOPE.messages:
    if SCOPE.empty_message and line == f"nnperf: {SCOPE.empty_message}":
        continue
    print(line, file=sys.stderr)
# A study with nothing to measure stops here, before any job (so no finished result is
# touched), with its one line and a non-zero exit: a typo in a key is not a success.
if SCOPE.empty_message:
    sys.exit(f"nnperf: {SCOPE.empty_message}")


def unmeasured_on(device):
    """Whether a timed run of the study on `device` has no result yet."""
    return any(
        not Path(layout.path("run", dataset=SCOPE.dataset, **key.as_dict())).exists()
        for key in SCOPE.matrix
        if key.device == device
    )


# A device this machine lacks (devices=cuda on a laptop): a run of the study here stops now,
# its one line the last thing printed (the onstart check comes after Snakemake's banner and
# job table); a dry run or a cluster submission notes it. Not in a job's own Snakemake call.
if workflow.is_main_process:
    ABSENT_NOTES, ABSENT_PROBLEM = session.absent_device_lines(
        SCOPE.devices,
        runs_here=session.runs_the_whole_study_here(session.snakemake_invocation()),
        unmeasured=unmeasured_on,
    )
    if ABSENT_PROBLEM:
        sys.exit(f"nnperf: {ABSENT_PROBLEM}")
    for line in ABSENT_NOTES:
        print(f"nnperf note: {line}", file=sys.stderr)

# Measurements hold a bench_slot each so that none overlaps another; profiles/default limits
# it to 1. A run without that profile (a user's project, where Snakemake looks for the user's
# own profiles: docs/own-project.md) gets the same limit here rather than none.
if "bench_slot" not in workflow.global_resources:
    workflow.register_resource("bench_slot", 1)

# The measuring jobs (nnperf.core.vocab.MEASURING_RULES) and the jobs that make their inputs
# run before figures and tables whenever both are ready. A measuring job holds every core on
# a CPU, so without this a free core went to a plot, then another, and the next measurement
# waited until two plots happened to end together: 97 s of a 621 s default study on 2 cores
# passed between one measurement's end and the next one's start. Figures run at the end,
# two at a time.
MEASURING_PRIORITY = 10

# When this run started: failed jobs' logs are the ones written since (print_failure_causes).
RUN_STARTED = time.time()


def stop_if_a_device_is_absent():
    """The `onstart` handler: a device this machine lacks is one line before any job runs
    (nnperf.study.session.absent_device_problem); what the jobs run without (NVML) is a
    warning line, and they run. Only for jobs that will run here (a cluster executor submits
    them elsewhere; dry runs never get here)."""
    if workflow.non_local_exec and not workflow.remote_exec:
        return
    # Only measuring jobs touch their device: a figure of CUDA results needs no CUDA.
    jobs = [job for job in workflow.dag.needrun_jobs() if job.rule.name in MEASURING_RULES]
    needed = unique(job.wildcards_dict["device"] for job in jobs if "device" in job.wildcards_dict)
    profiles = any(job.rule.name == "ncu_profile" for job in jobs)
    problem = session.absent_device_problem(
        needed,
        profiles_ncu=profiles,
        warn=lambda line: print(f"nnperf warning: {line}", file=sys.stderr),
    )
    if problem:
        sys.exit(f"nnperf: {problem}")


def print_failure_causes():
    """The `onerror` handler: one line per failed job with the cause from its log."""
    for line in session.failure_lines("logs", RUN_STARTED):
        print(line, file=sys.stderr)


def after(handler, then):
    """`handler` (one Snakemake already holds), then `then`: nnperf's once only, though a
    user's Snakefile includes this file once per `use rule` statement."""
    if getattr(handler, "nnperf", False):
        return handler

    def both(log):
        handler(log)
        then()

    both.nnperf = True
    return both


if not workflow.modifier.is_main_snakefile():
    # Snakemake takes `onstart:`/`onerror:` from the main Snakefile only (Workflow.onstart),
    # so used as a module the Snakefile's handlers would never run. A user's own handlers,
    # defined after `use rule`, replace these (docs/own-project.md).
    workflow._onstart = after(workflow._onstart, stop_if_a_device_is_absent)
    workflow._onerror = after(workflow._onerror, print_failure_causes)


# How ncu_profile calls the nnperf CLI (nnperf.study.session.nnperf_command).
NNPERF = session.nnperf_command(
    sys.executable, conda=DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
)

DATASET = SCOPE.dataset
PEAKS = session.checkout_file(NNPERF_HOME, job_requests.PEAKS)
DEVICES = list(SCOPE.devices)
MATRIX = list(SCOPE.matrix)
# Notes for the report's "skipped and flagged" section: what the study left out and why.
REPORT_NOTES = list(SCOPE.notes)


wildcard_constraints:
    dataset=layout.KEY_PATTERNS["dataset"],
    device=layout.KEY_PATTERNS["device"],
    model=layout.KEY_PATTERNS["model"],
    precision=layout.KEY_PATTERNS["precision"],
    batch_size=layout.KEY_PATTERNS["batch_size"],
    batch_sizes=layout.KEY_PATTERNS["batch_sizes"],
    variant=layout.KEY_PATTERNS["variant"],
    recipe=layout.KEY_PATTERNS["recipe"],


# --- requests: what each job is asked to do (nnperf.study.job_requests), as rule params ------
# Params must be plain data: Snakemake's change detection records only builtin values, so
# a request crosses as contract.to_dict() and the script rebuilds it with from_dict().
# Every rule also takes `code=script_code(<its script>)`, which changes with the library code
# its script runs, so an edit re-runs exactly the jobs that run it (nnperf.core.codehash).
# A request that cannot be built (an impossible configuration) fails with one line.


def script_code(script):
    """The hash of the nnperf code workflow/scripts/<script>.py runs: a rule parameter, so
    Snakemake's `params` trigger re-runs its jobs when that code changes."""
    return codehash.script_code(NNPERF_HOME / "workflow" / "scripts" / f"{script}.py")


def as_param(request):
    return contract.to_dict(request)


def one_line(function):
    """An input or params function whose NnperfError (a path naming an impossible run, another
    study's file) ends Snakemake with that one line, the last it prints: SystemExit passes
    through Snakemake, which would wrap an exception in a ~15-line InputFunctionException."""

    @functools.wraps(function)
    def checked(wildcards):
        try:
            return function(wildcards)
        except NnperfError as error:
            sys.exit(f"nnperf: {error}")

    return checked


@one_line
def this_study(wildcards):
    """Stop unless a study-level file (table, figure, report) is this study's."""
    SCOPE.check_dataset(wildcards.dataset)


@one_line
def dataset_request(wildcards):
    return as_param(job_requests.dataset_request(STUDY, wildcards.dataset))


@one_line
def complexity_request(wildcards):
    return as_param(job_requests.complexity_request(STUDY, wildcards.model, wildcards.dataset))


@one_line
def model_code(wildcards):
    """The user's source file the model is built from ([] but for a models: entry with a
    factory): editing it re-runs every job that builds the model."""
    return job_requests.model_code(STUDY, wildcards.model)


@one_line
def ceilings_request(wildcards):
    return as_param(job_requests.ceilings_request(STUDY, wildcards.device, PEAKS))


@one_line
def run_request(wildcards):
    key = RunKey.from_wildcards(wildcards)
    return as_param(job_requests.run_request(STUDY, key, wildcards.dataset))


@one_line
def run_data(wildcards):
    """The dataset a run (timed or profiled) reads. Building the request here makes a path
    naming an impossible run (device/precision pair, unknown variant) fail while the DAG is
    built; params are only evaluated when a job is about to run."""
    job_requests.run_request(STUDY, RunKey.from_wildcards(wildcards), wildcards.dataset)
    return job_requests.data_root(wildcards.dataset)


@one_line
def profile_request(wildcards):
    key = RunKey.from_wildcards(wildcards)
    return as_param(job_requests.profile_request(STUDY, key, wildcards.dataset))


@one_line
def operator_profile_request(wildcards):
    key = RunKey.from_wildcards(wildcards)
    return as_param(job_requests.operator_profile_request(STUDY, key, wildcards.dataset))


@one_line
def training_request(wildcards):
    key = RunKey.from_wildcards(wildcards)
    return as_param(job_requests.training_request(STUDY, key, wildcards.recipe, wildcards.dataset))


def training_checkpoints(wildcards):
    """Where a training run keeps its checkpoints (beside its outputs, not one of them)."""
    return layout.path("training_checkpoints", **wildcards)


def tables_request():
    return as_param(job_requests.tables_request(STUDY))


def figure_keys(wildcards):
    """The keys a figure's path names, typed (batch_size an integer)."""
    this_study(wildcards)
    return layout.typed_keys(wildcards)


def report_request():
    return as_param(job_requests.report_request(STUDY, REPORT_NOTES))


def accuracy_target(wildcards):
    """The target line of the accuracy figure: the recipes' target when they share one."""
    return job_requests.accuracy_target(STUDY)


def measurement_threads(wildcards):
    """Cores a measurement job holds (nnperf.study.job_requests.measurement_threads)."""
    variant = wildcards.get("variant")
    return job_requests.measurement_threads(STUDY, wildcards.device, variant, job_cores())


def job_cores():
    """The cores a job may count on.

    On a cluster the submitting Snakemake has no core count (workflow.cores raises) and
    must not ask for the login node's: it asks for one, the slurm profile's --exclusive
    hands the job its whole node, and inside the job (--cores all) this is the node's count.
    """
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
    return [layout.path("complexity", dataset=DATASET, model=model) for model in STUDY.model_names]


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


def run_files():
    """Every configuration's files and its group's folder, all asked for by the study:
    Snakemake does not rebuild a missing file that only up-to-date jobs read, so as targets a
    run file deleted by hand is copied again from its group, and a deleted group is measured
    again (docs/recovery.md)."""
    kinds = ("run", "run_windows", "run_steps")
    members = [layout.path(k, dataset=DATASET, **key.as_dict()) for key in MATRIX for k in kinds]
    groups = unique(
        layout.path(
            "run_group",
            dataset=DATASET,
            device=key.device,
            model=key.model,
            batch_sizes=layout.batch_sizes_key(job_requests.group_of(STUDY, key.batch_size)),
        )
        for key in MATRIX
    )
    return groups + members


def study_run_tables(wildcards):
    """Every configuration's windows and steps tables: inputs of the aggregation, which checks
    them (nnperf.core.files.check_run_tables), so one edited or cut short is refused there."""
    this_study(wildcards)
    kinds = ("run_windows", "run_steps")
    return [layout.path(k, dataset=DATASET, **key.as_dict()) for key in MATRIX for k in kinds]


def timing_outputs():
    """Tables of the timed runs and their figures, one set per (device, model)."""
    pairs = unique((key.device, key.model) for key in MATRIX)
    figures = [
        layout.path("run_figure", kind=kind, dataset=DATASET, device=device, model=model)
        for kind in layout.RUN_FIGURE_KINDS
        for device, model in pairs
    ]
    tables = [table(name) for name in ("runs", "windows", "summary")]
    return run_files() + tables + figures


def environment_outputs():
    return [table("environment")]


def comparisons_outputs():
    return [table("comparisons")]


def machine_comparison_outputs():
    """The cross-machine table and figure, when other machines' results are configured."""
    if not STUDY.report.extra_results:
        return []
    return [table("machines_summary"), layout.path("machines_figure", dataset=DATASET)]


def report_outputs():
    return (
        environment_outputs()
        + comparisons_outputs()
        + machine_comparison_outputs()
        + [layout.path(kind, dataset=DATASET) for kind in ("summary_html", "summary_md")]
    )


def compare_machines_inputs(wildcards):
    """What compare_machines reads: this machine's tables and the other machines' files."""
    this_study(wildcards)
    inputs = {name: table(name) for name in ("summary", "runs", "environment")}
    return {**inputs, "extra_results": EXTRA_RESULTS}


def comparisons_inputs(wildcards):
    """What comparisons_table reads: this machine's tables and the other machines' files."""
    this_study(wildcards)
    inputs = {name: table(name) for name in ("summary", "runs", "environment")}
    if training_keys():
        inputs["training"] = table("training")
    return {**inputs, "extra_results": EXTRA_RESULTS}


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
        "comparisons": table("comparisons"),
        "complexity": complexity_outputs(),
        "ceilings": ceilings_jsons(),
        "run_jsons": run_outputs(),
        "opprofiles": operator_profiles("opprofile"),
        "figures": [
            path
            for path in study + machine_comparison_outputs()
            if path.startswith("results/figures/") and path.endswith(".png")
        ],
        "extra_results": EXTRA_RESULTS,
    }
    if ncu_keys():
        inputs["kernels"] = table("kernels")
    if training_keys():
        inputs["training"] = table("training")
    return inputs


# --- Nsight Compute profiles and the roofline -------------------------------------------


def ncu_keys():
    """Configurations profiled under ncu (nnperf.study.selection)."""
    return list(SCOPE.selection.ncu)


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


def operator_profile_keys():
    """Configurations profiled under torch.profiler (nnperf.study.selection)."""
    return list(SCOPE.selection.operator_profile)


def operator_profiles(kind):
    """The `kind` file of every configuration profiled under torch.profiler."""
    return [layout.path(kind, dataset=DATASET, **key.as_dict()) for key in operator_profile_keys()]


# --- training to accuracy -----------------------------------------------------------------


def training_keys():
    """(configuration, recipe) of every training run (nnperf.study.selection)."""
    return list(SCOPE.selection.training)


def training_runs(kind, device=None, model=None):
    """The `kind` file of every training run (of one device and model when given)."""
    return [
        layout.path(kind, dataset=DATASET, recipe=recipe, **key.as_dict())
        for key, recipe in training_keys()
        if (device is None or key.device == device) and (model is None or key.model == model)
    ]


def pretrained_recipes():
    """(model, weights name) of every training run that starts from pretrained weights read
    from torch hub's cache (a recipe's `pretrained` without `pretrained_path`)."""
    return unique(
        (key.model, STUDY.recipes[recipe].pretrained)
        for key, recipe in training_keys()
        if STUDY.recipes[recipe].pretrained and STUDY.recipes[recipe].pretrained_path is None
    )


def weights_pattern():
    """Rule download_weights' output: a weights file in torch hub's cache, where torchvision
    and the training job look (nnperf.workload.models.hub_weights_path). Only a study with
    pretrained weights imports torch for it while the DAG is built."""
    if not pretrained_recipes():
        return "resources/weights/{weights_file}"
    from nnperf.workload import models

    return str(Path(models.hub_cache_dir()) / "checkpoints" / "{weights_file}")


@one_line
def weights_url(wildcards):
    """The URL download_weights fetches a weights file from, torchvision's URL of the
    recipe's weights that the file is named after."""
    from nnperf.workload import models

    urls = models.weights_urls(pretrained_recipes())
    if wildcards.weights_file not in urls:
        raise NnperfError(
            f"no recipe's pretrained weights are named {wildcards.weights_file}; "
            f"allowed: {', '.join(urls) or 'none (no recipe sets pretrained)'}"
        )
    return urls[wildcards.weights_file]


@one_line
def pretrained_weights_input(wildcards):
    """The weights file a training run starts from: its recipe's pretrained_path (which must
    exist) or torch hub's cached copy (rule download_weights fetches it); none without
    pretrained weights."""
    recipe = STUDY.recipes[wildcards.recipe]
    if recipe.pretrained is None:
        return []
    from nnperf.workload import models

    return [str(models.weights_input(wildcards.model, recipe.pretrained, recipe.pretrained_path))]


def training_table_inputs(wildcards):
    this_study(wildcards)
    return {"runs": training_runs("training_run"), "summary": table("summary")}


def accuracy_figure_inputs(wildcards):
    figure_keys(wildcards)
    return training_runs("training_epochs", wildcards.device, wildcards.model)


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
    """Every file the study asks for; `rule all` builds exactly this."""
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


# --- timed runs: a group of configurations measured together -------------------------------


def group_requests(wildcards):
    """The members of a timed group (nnperf.study.job_requests.group_members), as params."""
    requests = job_requests.group_requests(
        STUDY,
        wildcards.dataset,
        wildcards.device,
        wildcards.model,
        layout.group_batch_sizes(wildcards.batch_sizes),
    )
    return [as_param(request) for request in requests]


def group_data(wildcards):
    """The dataset a group reads; building its requests here fails a path naming no
    configuration of the study while the DAG is built."""
    group_requests(wildcards)
    return job_requests.data_root(wildcards.dataset)


def group_threads(wildcards):
    """Cores a group's job holds: the most any of its members' variants needs."""
    members = job_requests.group_members(
        STUDY,
        wildcards.device,
        wildcards.model,
        layout.group_batch_sizes(wildcards.batch_sizes),
    )
    variants = {key.variant for key in members} or {None}
    return max(
        job_requests.measurement_threads(STUDY, wildcards.device, variant, job_cores())
        for variant in variants
    )


def run_group(wildcards):
    """The folder of the group that measured a configuration (rule timed_group), which
    holds every batch size of the study, or this one alone where the study lacks it."""
    batch_sizes = job_requests.group_of(STUDY, int(wildcards.batch_size))
    return layout.path(
        "run_group",
        dataset=wildcards.dataset,
        device=wildcards.device,
        model=wildcards.model,
        batch_sizes=layout.batch_sizes_key(batch_sizes),
    )
