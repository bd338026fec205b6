# Helpers shared by every stage: config validation, wildcard constraints, the matrix and the
# input functions. Rule files hold rules only.

import dataclasses
import os
import shutil
import sys
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

from nnperf import config as study_config
from nnperf import contract
from nnperf import devices as nnperf_devices
from nnperf import layout
from nnperf import ncu as nnperf_ncu
from nnperf import vocab
from nnperf.codehash import code_hash
from nnperf.config import unique
from nnperf.errors import NnperfError
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


def nnperf_command():
    """How ncu_profile calls the nnperf CLI: the interpreter running Snakemake, so a job
    never picks up another environment's torch from PATH; under `--sdm conda` the rule's
    own environment."""
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return "python -m nnperf"
    return f"'{sys.executable}' -m nnperf"


NNPERF = nnperf_command()

DATASET = STUDY.dataset.name
DATA_DIR = layout.path("dataset", dataset=DATASET)
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

if "auto" in STUDY.devices and "cuda" not in DEVICES and "mps" not in DEVICES:
    REPORT_NOTES.append("No GPU: devices 'auto' resolved to cpu on the machine that built the DAG.")


wildcard_constraints:
    dataset=layout.KEY_PATTERNS["dataset"],
    device=layout.KEY_PATTERNS["device"],
    model=layout.KEY_PATTERNS["model"],
    precision=layout.KEY_PATTERNS["precision"],
    batch_size=layout.KEY_PATTERNS["batch_size"],
    variant=layout.KEY_PATTERNS["variant"],


# --- requests: what each job is asked to do (nnperf.contract), as rule params ------------
# Params must be plain data: Snakemake's change detection records only builtin values, so
# a request crosses as contract.to_dict() and the script rebuilds it with from_dict().
# Measurement rules also take `engine=code_hash(<entry module>)`, which changes with the
# library code they run, so editing the engine re-runs them (nnperf.codehash).


def as_param(request):
    return contract.to_dict(request)


def dataset_request(wildcards):
    dataset = dataclasses.replace(STUDY.dataset, name=wildcards.dataset)
    return as_param(
        contract.DatasetRequest(
            root=layout.path("dataset", dataset=wildcards.dataset), dataset=dataset
        )
    )


def complexity_request(wildcards):
    return as_param(
        contract.ComplexityRequest(model=wildcards.model, dataset=DATASET, training=STUDY.training)
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
        dataset=DATASET,
        data_root=DATA_DIR,
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
    return DATA_DIR


def profile_request(wildcards):
    """The step profiled under ncu: the configuration's process 0 after `ncu.warmup_steps`."""
    training = dataclasses.replace(STUDY.training, warmup_steps=STUDY.ncu.warmup_steps)
    return as_param(contract.ProfileStepRequest(run=run_request_of(wildcards, training)))


def tables_request():
    return as_param(contract.TablesRequest(cv_threshold=STUDY.report.cv_threshold))


def figure_keys(wildcards):
    """The keys a figure's path names, typed (batch_size an integer)."""
    return {
        key: int(value) if key in layout.INTEGER_KEYS else value for key, value in wildcards.items()
    }


def report_request():
    return as_param(
        contract.ReportRequest(
            title=STUDY.study.name,
            description=STUDY.study.description.strip(),
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
    return [DATA_DIR]


def complexity_outputs():
    return [layout.path("complexity", model=model) for model in STUDY.models]


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
    return [layout.path("run", **key.as_dict()) for key in MATRIX]


def timing_outputs():
    """Tables of the timed runs and their figures, one set per (device, model)."""
    pairs = unique((key.device, key.model) for key in MATRIX)
    figures = [
        layout.path("run_figure", kind=kind, device=device, model=model)
        for kind in layout.RUN_FIGURE_KINDS
        for device, model in pairs
    ]
    tables = [layout.path("table", name=name) for name in ("runs", "windows", "summary")]
    return tables + figures


def environment_outputs():
    return [layout.path("table", name="environment")]


def machine_comparison_outputs():
    """The cross-machine table and figure, when other machines' results are configured."""
    if not STUDY.report.extra_results:
        return []
    return [layout.path("table", name="machines_summary"), layout.path("machines_figure")]


def report_outputs():
    return (
        environment_outputs()
        + machine_comparison_outputs()
        + ["reports/summary.html", "reports/summary.md"]
    )


def compare_machines_inputs(wildcards):
    """What compare_machines reads: this machine's tables and the other machines' folders."""
    inputs = {name: layout.path("table", name=name) for name in ("summary", "runs", "environment")}
    return {**inputs, "extra_results": list(STUDY.report.extra_results)}


def report_inputs(wildcards):
    """What render_report reads: every table, JSON and figure the study builds."""
    study = [path for path in get_final_output() if path not in report_outputs()]
    inputs = {
        "runs": layout.path("table", name="runs"),
        "windows": layout.path("table", name="windows"),
        "summary": layout.path("table", name="summary"),
        "roofline_points": layout.path("table", name="roofline_points"),
        "environment": layout.path("table", name="environment"),
        "complexity": complexity_outputs(),
        "ceilings": ceilings_jsons(),
        "run_jsons": run_outputs(),
        "figures": [
            path
            for path in study + machine_comparison_outputs()
            if path.startswith("results/figures/") and path.endswith(".png")
        ],
        "extra_results": list(STUDY.report.extra_results),
    }
    if ncu_keys():
        inputs["kernels"] = layout.path("table", name="kernels")
    return inputs


# --- Nsight Compute profiles and the roofline -------------------------------------------

NCU_ON_PATH = shutil.which("ncu") is not None

for device in DEVICES:
    reason = nnperf_ncu.ncu_exclusion_reason(STUDY.ncu.enabled, device, NCU_ON_PATH)
    if reason:
        add_note(reason)


def ncu_keys():
    """Configurations profiled under ncu: CUDA ones where `ncu.enabled` allows it, at the
    `ncu.batch_sizes` and `ncu.variants` (all of them when null)."""
    sizes, variants = STUDY.ncu.batch_sizes, STUDY.ncu.variants
    return [
        key
        for key in MATRIX
        if nnperf_ncu.ncu_included(STUDY.ncu.enabled, key.device, NCU_ON_PATH)
        and (sizes is None or key.batch_size in sizes)
        and (variants is None or key.variant in variants)
    ]


for name in STUDY.ncu.variants or ():
    if name not in STUDY.variants:
        sys.exit(
            f"nnperf: config ncu.variants names {name!r}, which is not in config variants; "
            f"allowed: {', '.join(STUDY.variants)}"
        )


def profile_csvs():
    return [layout.path("profile_csv", **key.as_dict()) for key in ncu_keys()]


def profile_metas():
    return [layout.path("profile_meta", **key.as_dict()) for key in ncu_keys()]


def roofline_points_inputs(wildcards):
    inputs = {"summary": layout.path("table", name="summary"), "complexity": complexity_outputs()}
    if ncu_keys():
        inputs["kernels"] = layout.path("table", name="kernels")
    return inputs


def plot_roofline_inputs(wildcards):
    inputs = {
        "points": layout.path("table", name="roofline_points"),
        "ceilings": layout.path("ceilings", device=wildcards.device),
    }
    if ncu_keys():
        inputs["kernels"] = layout.path("table", name="kernels")
    return inputs


def ncu_outputs():
    return [layout.path("table", name="kernels")] if ncu_keys() else []


def roofline_outputs():
    """Points and figures: a hierarchical roofline for every profiled configuration and a
    step-level roofline for every device (analytic on CPU and MPS)."""
    figures = [layout.path("roofline_figure", **key.as_dict()) for key in ncu_keys()]
    steps = [layout.path("roofline_steps_figure", device=device) for device in DEVICES]
    return [layout.path("table", name="roofline_points")] + figures + steps


def get_final_output():
    """Every file the study asks for; `rule all` builds exactly this."""
    return (
        data_outputs()
        + complexity_outputs()
        + ceilings_outputs()
        + timing_outputs()
        + ncu_outputs()
        + roofline_outputs()
        + report_outputs()
    )
