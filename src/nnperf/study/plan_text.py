"""The text `nnperf plan` prints: a plan's notes, one line per stage, and the total.

`render` turns the `Plan` that `nnperf.study.plan.plan_study` built into lines: per stage its
job count, its estimated minutes and where the numbers come from (the sources of
`nnperf.study.estimate_sources`), with `per_job` every job's estimate and its parts, then
the total job time and the wall time on the machine's cores. It computes nothing: every
number is the plan's. The snakemake calls count as jobs of their own stage.
"""

from __future__ import annotations

from typing import Iterable

from nnperf.study.plan_model import STAGES, Part, Plan

STAGE_WIDTH = max(len(stage) for stage in STAGES)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def render(plan: Plan, per_job: bool = False, cores: int | None = None) -> str:
    """The plan as text: notes, one line per stage (jobs, minutes, sources), per-job lines
    under each stage when `per_job`, the total job time, and last the wall time on `cores`
    (default: the machine's)."""
    machine = f"{plan.machine.name} = {plan.machine.description}"
    if plan.timings == plan.machine.name:
        timings = machine
    else:
        timings = f"{plan.timings}, elsewhere {machine}"
    lines = [
        f"nnperf plan: {plan.title}: {plan.configurations} configurations; timings: {timings}",
        "Job time, jobs one after another (measurements never overlap); minutes per stage; "
        "the snakemake calls' own start and preflight count as jobs of their stage.",
    ]
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("")
    lines.append(f"{'stage':<{STAGE_WIDTH}}  {'jobs':>5}  {'min':>6}  source")
    for total in plan.stage_totals():
        sources = " + ".join(total.sources) if total.jobs else "-"
        lines.append(
            f"{total.stage:<{STAGE_WIDTH}}  {total.jobs:>5}  {_minutes(total.seconds):>6}  {sources}"
        )
        if per_job:
            for job in plan.jobs:
                if job.stage == total.stage:
                    lines.append(f"    {job.job}  {job.seconds:.1f} s  = {_describe(job.parts)}")
    lines.append(f"{'total':<{STAGE_WIDTH}}  {len(plan.jobs):>5}  {_minutes(plan.seconds):>6} min")
    cores = cores or plan.machine.cores
    lines.append(
        f"wall time on {cores} cores: {_minutes(plan.wall_seconds(cores))} min (the calls and "
        f"the measuring jobs one after another, the other jobs {cores} at a time)"
    )
    return "\n".join(lines) + "\n"


def _describe(parts: Iterable[Part]) -> str:
    words = []
    for part in parts:
        detail = f"; {part.detail}" if part.detail else ""
        words.append(f"{part.what} {part.seconds:.1f} ({part.source}{detail})")
    return " + ".join(words)
