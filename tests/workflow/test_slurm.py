"""The workflow on a real (single-node) SLURM cluster through snakemake-executor-plugin-slurm.

Boots munged + slurmctld + slurmd on this machine (tests/slurm/cluster.py) with one declared
GPU that does not exist, and runs Snakemake with workflow/profiles/slurm. What is checked:
the sbatch requests the profile makes (a GPU for CUDA measurements only, a whole node per
measurement, the GPU type when pinned), that a job failing at job time (CUDA asked for on a
node without a GPU) surfaces in Snakemake's output with its log paths, that a rerun resumes
without redoing finished runs, and the study's ceilings and tables made through SLURM.

Skips with the reason when the machine cannot run SLURM (not root, packages missing); with
NNPERF_REQUIRE_SLURM=1 (CI) that is a failure instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY_CONFIG, snakemake_env
from slurm.cluster import REQUIRE_ENV_VAR, SlurmCluster, skip_reason

pytestmark = pytest.mark.slurm

PROFILE = REPO / "workflow" / "profiles" / "slurm"
# The profile's first status check waits 20 s, right for a real queue; a local cluster
# answers at once.
FAST_STATUS = ("--slurm-init-seconds-before-status-checks", "1")
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="session")
def slurm_cluster():
    reason = skip_reason()
    if reason:
        if os.environ.get(REQUIRE_ENV_VAR) == "1":
            pytest.fail(f"{REQUIRE_ENV_VAR}=1 but {reason}")
        pytest.skip(reason)
    cluster = SlurmCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def run_on_slurm(workdir: Path, snakefile: Path, *args: str, profile: Path = PROFILE):
    """Snakemake with the slurm profile, under `timeout -k`: on SIGTERM Snakemake waits for
    its running jobs, so only the second, hard kill is sure to end a hung run."""
    command = [
        "timeout",
        "-k",
        "15",
        str(RUN_TIMEOUT_S),
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--workflow-profile",
        str(profile),
        *FAST_STATUS,
        # --cpus-per-task follows threads; a rule asking for more cores than the node has
        # would never be scheduled here.
        "--max-threads",
        str(os.cpu_count()),
        *args,
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=snakemake_env(),
        cwd=workdir,
        timeout=RUN_TIMEOUT_S + 30,
    )


def slurm_jobs(workdir: Path) -> list[dict[str, str]]:
    """Every job SLURM still knows (MinJobAge) that ran in `workdir`, as scontrol fields."""
    out = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"], capture_output=True, text=True, check=True
    ).stdout
    jobs = []
    for line in out.splitlines():
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        if fields.get("WorkDir") == str(workdir):
            jobs.append(fields)
    return jobs


def jobs_of(jobs: list[dict[str, str]], rule: str, **wildcards: str) -> list[dict[str, str]]:
    """Jobs of one rule; the plugin puts rule_<rule>_wildcards_<values joined by _> in Comment."""
    prefix = f"rule_{rule}"
    selected = [
        j
        for j in jobs
        if j.get("Comment", "") == prefix or j.get("Comment", "").startswith(prefix + "_wildcards_")
    ]
    for value in wildcards.values():
        selected = [j for j in selected if f"_{value}" in j["Comment"].removeprefix(prefix)]
    return selected


def requests_gpu(job: dict[str, str]) -> bool:
    return "gpu" in job.get("TresPerJob", "") or "gpu" in job.get("TresPerNode", "")


def exclusive(job: dict[str, str]) -> bool:
    # scontrol's OverSubscribe=NO is how `sbatch --exclusive` shows on the job.
    return job["OverSubscribe"] == "NO"


def explain(result: subprocess.CompletedProcess, cluster: SlurmCluster) -> str:
    return f"rc={result.returncode}\n--- stderr\n{result.stderr[-6000:]}\n{cluster.log_tail(10)}"


# -- the profile on a real cluster ----------------------------------------------------------

# Rules named like the workflow's, so the profile's per-rule resources apply to them. Their
# jobs run nnperf's real job-time device check and record where they ran.
PROFILE_SNAKEFILE = textwrap.dedent("""
    PY = "PYTHONPATH={src} {python} {record}"

    rule complexity:
        output: "results/complexity/{{model}}.json"
        log: "logs/complexity/{{model}}.log"
        shell: "{{PY}} {{output}} > {{log}} 2>&1"

    rule timed_group:
        output: "results/runs/{{device}}/rep{{rep}}.json"
        log: "logs/runs/{{device}}/rep{{rep}}.log"
        resources: bench_slot=1
        shell: "{{PY}} {{output}} --device {{wildcards.device}} > {{log}} 2>&1"

    rule aggregate_runs:
        input: expand("results/runs/cpu/rep{{rep}}.json", rep=[0, 1])
        output: "results/tables/runs.json"
        log: "logs/tables/runs.log"
        shell: "{{PY}} {{output}} --inputs {{input}} > {{log}} 2>&1"
    """)

RECORD_SCRIPT = textwrap.dedent("""
    import argparse, json, os, socket, sys
    from nnperf.core.devices import require_available
    from nnperf.core.errors import NnperfError

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--device")
    parser.add_argument("--inputs", nargs="*", default=[])
    args = parser.parse_args()
    if args.device:
        try:
            require_available(args.device, "fp32")
        except NnperfError as error:
            print(f"nnperf run: error: {error}", file=sys.stderr)
            sys.exit(2)
    doc = {
        "hostname": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "inputs": [json.load(open(p))["slurm_job_id"] for p in args.inputs],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    json.dump(doc, open(args.out, "w"))
    """)


@pytest.fixture
def profile_workflow(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "record.py"
    record.write_text(RECORD_SCRIPT)
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        PROFILE_SNAKEFILE.format(src=REPO / "src", python=sys.executable, record=record)
    )
    return snakefile


def pin_gpu_type(tmp_path: Path, gpu_type: str) -> Path:
    """A copy of the profile with its commented gpu_model line switched on."""
    settings = yaml.safe_load((PROFILE / "config.yaml").read_text())
    pin = f"'{gpu_type}' if wildcards.device == 'cuda' else ''"
    settings["set-resources"]["timed_group"]["gpu_model"] = pin
    pinned = tmp_path / "pinned-profile"
    pinned.mkdir()
    (pinned / "config.yaml").write_text(yaml.safe_dump(settings))
    return pinned


def test_profile_requests_failure_and_resume(slurm_cluster, profile_workflow, tmp_path):
    work = tmp_path / "work"
    cpu_runs = [work / f"results/runs/cpu/rep{rep}.json" for rep in (0, 1)]
    targets = [str(p.relative_to(work)) for p in cpu_runs]
    targets += ["results/runs/cuda/rep0.json", "results/complexity/toy.json"]

    # 1. With the GPU type pinned: CPU reps and the CPU-only stage succeed; the CUDA rep is
    #    scheduled on the declared GPU and fails at job time, as the node has no real one.
    first = run_on_slurm(
        work, profile_workflow, *targets, profile=pin_gpu_type(tmp_path, slurm_cluster.gpu_type)
    )
    assert first.returncode != 0, explain(first, slurm_cluster)
    err = first.stderr
    assert "Error in rule timed_group" in err, explain(first, slurm_cluster)
    assert "logs/runs/cuda/rep0.log" in err
    slurm_log = re.search(r"\S*\.snakemake/slurm_logs/rule_timed_group/cuda_0/\d+\.log", err)
    assert slurm_log, err[-4000:]
    assert Path(slurm_log.group(0)).is_file()
    device_error = (work / "logs/runs/cuda/rep0.log").read_text().strip().splitlines()
    assert device_error == [
        "nnperf run: error: device 'cuda' is not available on this machine (torch sees no GPU)"
    ]
    assert not (work / "results/runs/cuda/rep0.json").exists()

    for path in cpu_runs:
        doc = json.loads(path.read_text())
        assert doc["hostname"] == slurm_cluster.nodename
        assert doc["slurm_job_id"]

    jobs = slurm_jobs(work)
    (cuda_job,) = jobs_of(jobs, "timed_group", device="cuda")
    assert cuda_job["TresPerJob"] == f"gres:gpu:{slurm_cluster.gpu_type}:1"
    assert cuda_job["JobState"] == "FAILED"
    assert exclusive(cuda_job)
    cpu_jobs = jobs_of(jobs, "timed_group", device="cpu")
    assert len(cpu_jobs) == 2
    assert all(not requests_gpu(j) and exclusive(j) for j in cpu_jobs)
    assert {j["JobState"] for j in cpu_jobs} == {"COMPLETED"}
    (complexity_job,) = jobs_of(jobs, "complexity")
    assert not requests_gpu(complexity_job) and not exclusive(complexity_job)
    # each measurement ran alone on the node: their run times do not overlap
    measurement = sorted(cpu_jobs + [cuda_job], key=lambda j: j["StartTime"])
    for before, after in zip(measurement, measurement[1:]):
        assert before["EndTime"] <= after["StartTime"], (before, after)

    # 2. With the profile as committed, a rerun resumes: what was finished is not redone,
    #    the rest is built from it.
    mtimes = [p.stat().st_mtime_ns for p in cpu_runs]
    second = run_on_slurm(work, profile_workflow, "results/tables/runs.json")
    assert second.returncode == 0, explain(second, slurm_cluster)
    assert [p.stat().st_mtime_ns for p in cpu_runs] == mtimes
    assert "rule timed_group:" not in second.stdout + second.stderr
    table = json.loads((work / "results/tables/runs.json").read_text())
    assert table["inputs"] == [json.loads(p.read_text())["slurm_job_id"] for p in cpu_runs]
    assert len(jobs_of(slurm_jobs(work), "timed_group")) == 3


# -- the study ------------------------------------------------------------------------------


def test_tiny_study_through_slurm(slurm_cluster, workdir):
    tiny = yaml.safe_load(TINY_CONFIG.read_text())
    (model,) = tiny["models"][:1]
    tables = [
        workdir / "results/tables/synthetic/runs.csv",
        workdir / "results/tables/synthetic/summary.csv",
    ]
    # The study on CPU, plus one CUDA run asked for by path: the node has no real GPU. And
    # the workflow's own ceilings rule: on CPU it measures with all of the node's cores; on
    # CUDA it is submitted with a GPU request and fails at job time (one Snakemake call for
    # both: each call pays its own start and status checks).
    cuda_run = f"results/runs/synthetic/cuda/{model}/fp32/bs4/baseline.json"
    command = [
        *(str(t.relative_to(workdir)) for t in tables),
        cuda_run,
        "results/ceilings/cpu.json",
        "results/ceilings/cuda.json",
        "--configfile",
        str(TINY_CONFIG),
        "--config",
        "precisions=fp32",
        "batch_sizes=4",
    ]

    # 1. The CPU runs and the tables are made through SLURM; the CUDA rep is submitted with
    #    a GPU request and fails at job time with nnperf's one-line device error.
    first = run_on_slurm(workdir, REPO / "Snakefile", *command)
    assert first.returncode != 0, explain(first, slurm_cluster)
    assert "Error in rule timed_group" in first.stderr, explain(first, slurm_cluster)
    failed_logs = re.findall(r"log: (logs/runs/synthetic/cuda/\S+?\.log)", first.stderr)
    assert failed_logs, first.stderr[-4000:]
    assert "device 'cuda' is not available" in (workdir / failed_logs[0]).read_text()
    assert re.search(
        r"\.snakemake/slurm_logs/rule_timed_group/synthetic_cuda_\S+/\d+\.log", first.stderr
    )
    assert not (workdir / cuda_run).exists()
    assert "Error in rule ceilings" in first.stderr, explain(first, slurm_cluster)
    assert re.search(r"\.snakemake/slurm_logs/rule_ceilings/cuda/\d+\.log", first.stderr)
    assert "device 'cuda' is not available" in (workdir / "logs/ceilings/cuda.log").read_text()
    ceilings = json.loads((workdir / "results/ceilings/cpu.json").read_text())
    assert ceilings["device"] == "cpu" and ceilings["threads"] == os.cpu_count()
    assert ceilings["measured"]["memory_bandwidth_bytes_s"] > 0

    jobs = slurm_jobs(workdir)
    (cpu_ceilings,) = jobs_of(jobs, "ceilings", device="cpu")
    (cuda_ceilings,) = jobs_of(jobs, "ceilings", device="cuda")
    assert cpu_ceilings["JobState"] == "COMPLETED" and cuda_ceilings["JobState"] == "FAILED"
    assert not requests_gpu(cpu_ceilings) and requests_gpu(cuda_ceilings)
    assert exclusive(cpu_ceilings) and exclusive(cuda_ceilings)
    (cuda_job,) = jobs_of(jobs, "timed_group", device="cuda")
    assert requests_gpu(cuda_job) and exclusive(cuda_job)
    # One group job measures every variant of the model at batch 4, interleaved.
    cpu_jobs = jobs_of(jobs, "timed_group", device="cpu")
    assert cpu_jobs and all(not requests_gpu(j) and exclusive(j) for j in cpu_jobs)
    assert {j["JobState"] for j in cpu_jobs} == {"COMPLETED"}
    assert not any(
        requests_gpu(j) for j in jobs if j is not cuda_job and "cuda" not in j["Comment"]
    )

    runs = sorted(
        p
        for p in (workdir / "results/runs/synthetic/cpu").rglob("*.json")
        if "groups" not in p.parts
    )
    assert len(cpu_jobs) == len(tiny["models"])
    assert len(runs) == len(tiny["models"]) * len(tiny["variants"])
    for path in runs:
        doc = json.loads(path.read_text())
        assert doc["status"] == "ok"
        assert doc["environment"]["hostname"] == slurm_cluster.nodename

    table = pd.read_csv(tables[0])
    summary = pd.read_csv(tables[1])
    assert len(summary) == len(tiny["models"]) * len(tiny["variants"])
    # Every configuration's worker processes, one runs.csv row each: the configured two,
    # or fewer where the (tiny) time budget ended the measurement first.
    processes = tiny["timing"]["max_processes"]
    assert ((summary["n_processes"] == processes) | (summary["stop_reason"] == "budget")).all()
    keys = ["device", "model", "precision", "batch_size", "variant", "process"]
    expected = {
        ("cpu", row.model, "fp32", 4, row.variant, process)
        for row in summary.itertuples(index=False)
        for process in range(int(row.n_processes))
    }
    assert {(m, v) for _, m, _, _, v, _ in expected} == {
        (name, variant) for name in tiny["models"] for variant in tiny["variants"]
    }
    assert set(map(tuple, table[keys].itertuples(index=False))) == expected
    assert (table["status"] == "ok").all()
    assert (table["throughput_img_s"] > 0).all()

    # 2. The same command again resumes: only the failed CUDA run is submitted again; the
    #    finished runs and the tables are not touched.
    cpu_ceilings_file = workdir / "results/ceilings/cpu.json"
    finished = {p: p.stat().st_mtime_ns for p in [*runs, *tables, cpu_ceilings_file]}
    second = run_on_slurm(workdir, REPO / "Snakefile", *command)
    assert second.returncode != 0 and "Error in rule timed_group" in second.stderr
    assert {p: p.stat().st_mtime_ns for p in finished} == finished
    jobs = slurm_jobs(workdir)
    assert len(jobs_of(jobs, "timed_group", device="cpu")) == len(cpu_jobs)
    assert len(jobs_of(jobs, "timed_group", device="cuda")) == 2
    assert len(jobs_of(jobs, "ceilings", device="cpu")) == 1
    assert len(jobs_of(jobs, "ceilings", device="cuda")) == 2
