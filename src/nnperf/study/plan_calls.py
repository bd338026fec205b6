"""What each `snakemake` call of a study costs besides its jobs: its own start and, when CUDA
jobs are pending, the preflight its `onstart` handler runs.

Every call builds the DAG before its first job (`Machine.snakemake_start`). Where the jobs it
is about to run include a CUDA device, `onstart` (`stop_if_a_device_is_absent` in
workflow/rules/common.smk) runs `nnperf.study.preflight`'s checks in Snakemake's own process:
torch imported, CUDA initialised, nvidia-smi, ncu's version, NVML; with ncu_profile jobs
pending also the counter probe, a fresh python under ncu. Only measuring jobs count
(`nnperf.core.vocab.MEASURING_RULES`): a figure of CUDA results needs no CUDA. A plain
`snakemake` run is one call; `nnperf gpu-study` runs the doctor's checks once (a stage of its
own, `preflight`) and then one call per stage (`nnperf.study.stages.STAGES`, each `--until`
its rules; the last, `snakemake --report`, runs no job), whose onstart skips the checks
(`nnperf.study.session.PREFLIGHT_DONE_ENV`).
"""

from __future__ import annotations

from typing import Sequence

from nnperf.study.estimate_sources import Machine
from nnperf.study.plan_model import CALLS, JobEstimate, Part

# Jobs an `--until` call runs on the way to its rules (their inputs, not named by the stage).
UPSTREAM = {"timed_group": "timed_run", "profile_request": "ncu_profile"}


def preflight_parts(jobs: Sequence[JobEstimate], machine: Machine) -> list[Part]:
    """The CUDA preflight that `jobs` need: none unless a measuring job runs on CUDA."""
    m = machine
    if not any(job.measures and job.device == "cuda" for job in jobs):
        return []
    parts = [
        Part("preflight: import torch", m.preflight_torch.seconds, m.preflight_torch.source),
        Part("preflight: CUDA init", m.preflight_cuda_init.seconds, m.preflight_cuda_init.source),
        Part(
            "preflight: nvidia-smi, ncu, NVML", m.preflight_tools.seconds, m.preflight_tools.source
        ),
    ]
    if any(job.rule == "ncu_profile" for job in jobs):
        parts.append(Part("preflight: ncu probe", m.ncu_probe.seconds, m.ncu_probe.source))
    return parts


def call_estimate(
    name: str, jobs: Sequence[JobEstimate], machine: Machine, preflight: bool = True
) -> JobEstimate:
    """One call that runs `jobs`: its start, and the preflight where they need it (unless
    its caller ran that already: `preflight` False)."""
    m = machine
    parts = [Part("snakemake start", m.snakemake_start.seconds, m.snakemake_start.source)]
    if preflight:
        parts += preflight_parts(jobs, machine)
    return JobEstimate(CALLS, f"snakemake {name}", tuple(parts))


def snakemake_calls(
    jobs: Sequence[JobEstimate], machine: Machine, stages: bool = False
) -> list[JobEstimate]:
    """The calls that run `jobs`: one (`snakemake`), or with `stages` one per stage of
    `nnperf gpu-study`, a stage with no job to run costing only its start."""
    if not stages:
        return [call_estimate("(one call)", jobs, machine)]
    from nnperf.study.stages import STAGES

    calls, left = [], list(jobs)
    once = preflight_parts(jobs, machine)
    if once:
        calls.append(JobEstimate(CALLS, "nnperf gpu-study preflight (once)", tuple(once)))
    for stage in STAGES:
        if stage.report:
            parts = (
                Part(
                    "snakemake start",
                    machine.snakemake_start.seconds,
                    machine.snakemake_start.source,
                ),
                Part("report", machine.report_call.seconds, machine.report_call.source),
            )
            calls.append(JobEstimate(CALLS, f"snakemake --report ({stage.name})", parts))
            continue
        if stage.until:
            mine = [job for job in left if UPSTREAM.get(job.rule, job.rule) in stage.until]
        else:
            mine = left
        left = [job for job in left if job not in mine]
        calls.append(call_estimate(f"--until ({stage.name})", mine, machine, preflight=False))
    return calls
