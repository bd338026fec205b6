# Helpers shared by every stage: config validation, wildcard constraints, the matrix and the
# input functions. Rule files hold rules only.

import json
import shlex
import shutil
import sys
from pathlib import Path

# Use the library of this checkout, whether or not nnperf is pip-installed: every result
# must come from the code whose git commit it records. Jobs get the same via NNPERF.
NNPERF_SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, NNPERF_SRC)

from nnperf import config as study_config
from nnperf import devices as nnperf_devices
from nnperf import ncu as nnperf_ncu
from nnperf.config import unique
from nnperf.errors import NnperfError
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

try:
    config = study_config.validate(
        config,
        study_config.load_schema(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"),
    )
except NnperfError as error:
    sys.exit(f"nnperf: {error}")


def nnperf_command():
    """How jobs call the nnperf CLI.

    Normally the interpreter running Snakemake, so a job never picks up another
    environment's torch from PATH; under `--sdm conda` the rule's own environment.
    """
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        python = "python"
    else:
        python = sys.executable
    return f"PYTHONPATH='{NNPERF_SRC}'${{PYTHONPATH:+:$PYTHONPATH}} '{python}' -m nnperf"


NNPERF = nnperf_command()

DATASET = config["dataset"]["name"]
DATA_DIR = f"resources/data/{DATASET}"
MATRIX, MATRIX_NOTES = study_config.expand_matrix(config)
DEVICES = study_config.resolved_devices(config)
REPS = list(range(config["reps"]))

# Notes for the report's "skipped and flagged" section: what the study left out and why.
# Stages add theirs while the Snakefile is read; the report rule reads the list.
REPORT_NOTES = []


def add_note(text):
    """Print a note on what the study leaves out, and keep it for the report."""
    print(f"nnperf note: {text}", file=sys.stderr)
    REPORT_NOTES.append(text[:1].upper() + text[1:])


for note in MATRIX_NOTES:
    add_note(note.removeprefix("note: "))


wildcard_constraints:
    dataset="synthetic|cifar10|cifar100",
    device="|".join(nnperf_devices.DEVICES),
    model=r"[a-z0-9_]+",
    precision="|".join(nnperf_devices.PRECISIONS),
    batch_size=r"\d+",
    variant=r"[a-z][a-z0-9_]*",
    rep=r"\d+",


def dataset_flags():
    """Command-line flags of `nnperf prepare-dataset` for the configured dataset."""
    data = config["dataset"]
    flags = [
        f"--synthetic-train-images {data['synthetic']['train_images']}",
        f"--synthetic-test-images {data['synthetic']['test_images']}",
        f"--seed {data['synthetic']['seed']}",
    ]
    if data["source"]:
        flags.append(f"--source '{data['source']}'")
    if data["md5"]:
        flags.append(f"--md5 {data['md5']}")
    return " ".join(flags)


def complexity_outputs():
    return expand("results/complexity/{model}.json", model=config["models"])


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
        variant = config["variants"].get(wildcards.get("variant", "baseline"), {})
        return 1 + variant.get("num_workers", 0)
    if workflow.non_local_exec and not workflow.remote_exec:
        return 1
    try:
        return workflow.cores
    except WorkflowError:
        # No --cores given: a run that executes nothing (`snakemake --report`, --lint).
        return 1


def ceilings_flags():
    """Command-line flags of `nnperf ceilings` from the `ceilings:` config section."""
    settings = config["ceilings"]
    flags = [
        "--gemm-sizes " + " ".join(str(size) for size in settings["gemm_sizes"]),
        f"--trials {settings['trials']}",
        f"--sweep-min-bytes {settings['sweep_min_bytes']}",
        f"--sweep-max-bytes {settings['sweep_max_bytes']}",
    ]
    if settings["bandwidth_bytes"] is not None:
        flags.append(f"--bandwidth-bytes {settings['bandwidth_bytes']}")
    # The thread count of the timed runs' reference variant; null keeps torch's default.
    threads = config["variants"]["baseline"]["cpu_threads"]
    if threads is not None:
        flags.append(f"--threads {threads}")
    return " ".join(flags)


def ceilings_outputs():
    return expand(
        [
            "results/ceilings/{device}.json",
            "results/figures/ceilings/{device}_sweep.png",
        ],
        device=DEVICES,
    )


def data_outputs():
    return [DATA_DIR]


# One timed run: one rep of one configuration. Paths carry the keys in the fixed order.
RUN_STEM = "results/runs/{device}/{model}/{precision}/bs{batch_size}/{variant}/rep{rep}"
RUN_FIGURE_KINDS = ("throughput", "breakdown", "speedup")


def run_outputs():
    """The run JSON of every rep of every configuration in the matrix."""
    return [RUN_STEM.format(**key.as_dict(), rep=rep) + ".json" for key in MATRIX for rep in REPS]


def timed_run_data(wildcards):
    """The dataset a timed run reads; a path naming an impossible pair fails here, clearly."""
    study_config.check_runnable(wildcards.device, wildcards.precision)
    return DATA_DIR


def variant_settings_json(wildcards):
    """The variant's toggles (schema defaults filled in) as one JSON object for the shell."""
    variants = config["variants"]
    if wildcards.variant not in variants:
        raise NnperfError(
            f"variant {wildcards.variant!r} is not in config variants; "
            f"allowed: {', '.join(variants)}"
        )
    # Values are booleans, integers, null and enum strings: no quote can break the shell.
    return json.dumps(variants[wildcards.variant], sort_keys=True, separators=(",", ":"))


def optimizer_flags():
    """Flags of `nnperf run` and `nnperf step` for the optimiser of the `training:` section."""
    training = config["training"]
    return " ".join(
        [
            f"--optimizer {training['optimizer']}",
            f"--lr {training['lr']}",
            f"--momentum {training['momentum']}",
            f"--weight-decay {training['weight_decay']}",
            f"--seed {training['seed']}",
            "--augment" if training["augment"] else "--no-augment",
        ]
    )


def training_flags():
    """Command-line flags of `nnperf run` from the `training:` config section."""
    training = config["training"]
    window = f"--warmup-steps {training['warmup_steps']} --timed-steps {training['timed_steps']}"
    return f"{window} {optimizer_flags()}"


def timing_outputs():
    """Tables of the timed runs and their figures, one set per (device, model)."""
    pairs = unique((key.device, key.model) for key in MATRIX)
    figures = [
        f"results/figures/{kind}/{device}/{model}.png"
        for kind in RUN_FIGURE_KINDS
        for device, model in pairs
    ]
    return ["results/tables/runs.csv", "results/tables/summary.csv"] + figures


if "auto" in config["devices"] and "cuda" not in DEVICES and "mps" not in DEVICES:
    REPORT_NOTES.append("No GPU: devices 'auto' resolved to cpu on the machine that built the DAG.")


def environment_outputs():
    return ["results/tables/environment.csv"]


def machine_comparison_outputs():
    """The cross-machine table and figure, when other machines' results are configured."""
    if not config["report"]["extra_results"]:
        return []
    return [
        "results/tables/machines_summary.csv",
        "results/figures/machines/throughput.png",
    ]


def report_outputs():
    return (
        environment_outputs()
        + machine_comparison_outputs()
        + ["reports/summary.html", "reports/summary.md"]
    )


def report_inputs(wildcards):
    """What render_report reads: every table, JSON and figure the study builds."""
    study = [path for path in get_final_output() if path not in report_outputs()]
    inputs = {
        "runs": "results/tables/runs.csv",
        "summary": "results/tables/summary.csv",
        "roofline_points": "results/tables/roofline_points.csv",
        "environment": environment_outputs(),
        "complexity": complexity_outputs(),
        "ceilings": expand("results/ceilings/{device}.json", device=DEVICES),
        "figures": [
            path
            for path in study + machine_comparison_outputs()
            if path.startswith("results/figures/") and path.endswith(".png")
        ],
        "extra_results": config["report"]["extra_results"],
    }
    if ncu_keys():
        inputs["kernels"] = "results/tables/kernels.csv"
    return inputs


def render_report_flags(wildcards, input):
    """Command-line flags of `nnperf render-report` for the inputs present."""
    flags = []
    for name in ("runs", "summary", "kernels", "roofline_points"):
        if name in input.keys():
            flags.append(f"--{name.replace('_', '-')} {shlex.quote(input[name])}")
    for name, flag in (
        ("environment", "--environment"),
        ("complexity", "--complexity"),
        ("ceilings", "--ceilings"),
        ("figures", "--figures"),
        ("extra_results", "--extra-results"),
    ):
        paths = list(input[name]) if name in input.keys() else []
        if name == "environment":
            flags.extend(f"{flag} {shlex.quote(path)}" for path in paths)
        elif paths or name == "figures":
            flags.append(" ".join([flag, *(shlex.quote(path) for path in paths)]))
    flags += [f"--note {shlex.quote(note)}" for note in REPORT_NOTES]
    flags += [
        f"--cv-threshold {config['report']['cv_threshold']}",
        f"--title {shlex.quote(config['study']['name'])}",
        f"--description {shlex.quote(config['study']['description'].strip())}",
    ]
    return " ".join(flags)


def compare_machines_flags(wildcards, input):
    return " ".join(
        [
            f"--summary {shlex.quote(input.summary)}",
            f"--runs {shlex.quote(input.runs)}",
            f"--environment {shlex.quote(input.environment)}",
            "--extra-results",
            *(shlex.quote(path) for path in input.extra_results),
        ]
    )


# --- Nsight Compute profiles and the roofline -------------------------------------------

NCU_ON_PATH = shutil.which("ncu") is not None
PROFILE = "results/profiles/{device}/{model}/{precision}/bs{batch_size}/{variant}"

for device in DEVICES:
    reason = nnperf_ncu.ncu_exclusion_reason(config["ncu"]["enabled"], device, NCU_ON_PATH)
    if reason:
        add_note(reason)


def ncu_keys():
    """Configurations profiled under ncu: CUDA ones where `ncu.enabled` allows it, at the
    `ncu.batch_sizes` (all batch sizes when null)."""
    sizes = config["ncu"]["batch_sizes"]
    return [
        key
        for key in MATRIX
        if nnperf_ncu.ncu_included(config["ncu"]["enabled"], key.device, NCU_ON_PATH)
        and (sizes is None or key.batch_size in sizes)
    ]


def profile_csvs():
    return [PROFILE.format(**key.as_dict()) + ".csv" for key in ncu_keys()]


def profile_metas():
    return [PROFILE.format(**key.as_dict()) + ".ncu.json" for key in ncu_keys()]


def ncu_step_flags(wildcards):
    """Flags of `nnperf step` (timing stage) for the profiled configuration."""
    return (
        f"--device {wildcards.device} --model {wildcards.model}"
        f" --precision {wildcards.precision} --batch-size {wildcards.batch_size}"
        f" --variant {wildcards.variant} --dataset {DATASET} --data-root {DATA_DIR}"
        f" --warmup-steps {config['ncu']['warmup_steps']}"
        f" --variant-settings '{variant_settings_json(wildcards)}' {optimizer_flags()}"
    )


def roofline_points_inputs(wildcards):
    inputs = {"summary": "results/tables/summary.csv", "complexity": complexity_outputs()}
    if ncu_keys():
        inputs["kernels"] = "results/tables/kernels.csv"
    return inputs


def roofline_points_flags(wildcards, input):
    flags = [f"--complexity {' '.join(input.complexity)}", f"--summary {input.summary}"]
    if "kernels" in input.keys():
        flags.append(f"--kernels {input.kernels}")
    return " ".join(flags)


def plot_roofline_inputs(wildcards):
    inputs = {
        "points": "results/tables/roofline_points.csv",
        "ceilings": f"results/ceilings/{wildcards.device}.json",
    }
    if ncu_keys():
        inputs["kernels"] = "results/tables/kernels.csv"
    return inputs


def plot_roofline_flags(wildcards, input):
    flags = [f"--ceilings {input.ceilings}"]
    if "kernels" in input.keys():
        flags.append(f"--kernels {input.kernels}")
    return " ".join(flags)


def ncu_outputs():
    return ["results/tables/kernels.csv"] if ncu_keys() else []


def roofline_outputs():
    """Points and figures: a hierarchical roofline for every profiled configuration and a
    step-level roofline for every device (analytic on CPU and MPS)."""
    figure = "results/figures/roofline/{device}/{model}/{precision}/bs{batch_size}/{variant}.png"
    figures = [figure.format(**key.as_dict()) for key in ncu_keys()]
    steps = expand("results/figures/roofline_steps/{device}.png", device=DEVICES)
    return ["results/tables/roofline_points.csv"] + figures + steps


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
