# Helpers shared by every stage: config validation, wildcard constraints, the matrix and the
# input functions. Rule files hold rules only.

import shlex
import sys
from pathlib import Path

# Use the library of this checkout, whether or not nnperf is pip-installed: every result
# must come from the code whose git commit it records. Jobs get the same via NNPERF.
NNPERF_SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, NNPERF_SRC)

from nnperf import config as study_config
from nnperf import devices as nnperf_devices
from nnperf.errors import NnperfError
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

for note in MATRIX_NOTES:
    print(f"nnperf {note}", file=sys.stderr)


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
    measurement and perturbs it; one on an accelerator (bench_slot serialises those)."""
    return workflow.cores if wildcards.device == "cpu" else 1


def ceilings_threads():
    """CPU threads for the ceilings: those of the timed runs' reference variant, `baseline`.
    null keeps torch's default, as the timed runs do."""
    return config["variants"]["baseline"]["cpu_threads"]


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
    if ceilings_threads() is not None:
        flags.append(f"--threads {ceilings_threads()}")
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


# Notes for the report's "skipped and flagged" section: what the study left out and why.
# Stages append theirs while the Snakefile is read (e.g. profiling when there is no `ncu`);
# the report rule reads the list when the DAG is built.
REPORT_NOTES = [note.removeprefix("note: ").capitalize() for note in MATRIX_NOTES]
if "auto" in config["devices"] and "cuda" not in DEVICES and "mps" not in DEVICES:
    REPORT_NOTES.append("No GPU: devices 'auto' resolved to cpu on the machine that built the DAG.")
if "cuda" not in DEVICES:
    REPORT_NOTES.append(
        "No CUDA device in this study: no Nsight Compute profiles, so no per-kernel table "
        "and no measured rooflines; the roofline points are analytic."
    )


def run_json_files(wildcards=None):
    """The JSON of every timed run of the matrix (none while the timing stage is absent)."""
    if not workflow.is_rule("timed_run"):
        return []
    pattern = "results/runs/{device}/{model}/{precision}/bs{batch_size}/{variant}/rep{rep}.json"
    return [pattern.format(**key.as_dict(), rep=rep) for key in MATRIX for rep in REPS]


def environment_outputs():
    return ["results/tables/environment.csv"] if run_json_files() else []


def machine_comparison_outputs():
    """The cross-machine table and figure, when other machines' results are configured."""
    if not config["report"]["extra_results"] or not workflow.is_rule("aggregate_runs"):
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


# Tables the report reads, and the rule that always writes each when its stage is in the
# workflow. kernels.csv has none: it exists only where profiling is in the DAG, which the
# profiling stage says by putting it into get_final_output().
REPORT_TABLE_RULES = {
    "runs": "aggregate_runs",
    "summary": "aggregate_runs",
    "kernels": None,
    "roofline_points": "roofline_points",
}


def report_inputs(wildcards):
    """What render_report reads: every table, JSON and figure the study builds."""
    study = [path for path in get_final_output() if path not in report_outputs()]
    inputs = {}
    for name, rule_name in REPORT_TABLE_RULES.items():
        path = f"results/tables/{name}.csv"
        if path in study or (rule_name and workflow.is_rule(rule_name)):
            inputs[name] = path
    inputs["environment"] = environment_outputs()
    inputs["complexity"] = complexity_outputs()
    inputs["ceilings"] = (
        expand("results/ceilings/{device}.json", device=DEVICES)
        if workflow.is_rule("ceilings")
        else []
    )
    inputs["figures"] = [
        path
        for path in study + machine_comparison_outputs()
        if path.startswith("results/figures/") and path.endswith(".png")
    ]
    inputs["extra_results"] = config["report"]["extra_results"]
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
            flags.append(flag + "".join(f" {shlex.quote(path)}" for path in paths))
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


def get_final_output():
    """Every file the study asks for; `rule all` builds exactly this."""
    return data_outputs() + complexity_outputs() + ceilings_outputs() + report_outputs()
