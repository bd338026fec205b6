"""The shape of a plan: stages, jobs and the parts of their estimates, and the totals.

`nnperf.study.plan` fills it (`plan_study`), `nnperf.study.plan_calls` adds the snakemake
calls, `nnperf.study.plan_text` prints it. Two totals: job time (every job one after another)
and wall time on the machine's cores (`Plan.wall_seconds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nnperf.core.vocab import MEASURING_RULES
from nnperf.study.estimate_sources import Machine

# Stages in the order a study runs them, as `nnperf plan` prints them.
CALLS = "snakemake calls (+preflight)"
DATA = "data"
COMPLEXITY = "complexity"
CEILINGS = "ceilings"
TIMED_RUNS = "timed runs"
NCU = "ncu profiles (+export)"
OPERATORS = "operator profiles"
TRAINING = "training to accuracy"
REPORT = "tables, figures, report"
STAGES = (CALLS, DATA, COMPLEXITY, CEILINGS, TIMED_RUNS, NCU, OPERATORS, TRAINING, REPORT)
# Measuring jobs hold `bench_slot` and, on a CPU, every core
# (`nnperf.study.job_requests.measurement_threads`), so they run one after another.

# --- estimates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One component of a job's estimate."""

    what: str
    seconds: float
    source: str
    detail: str = ""


@dataclass(frozen=True)
class JobEstimate:
    """One job of the study and its estimated wall time, made of parts."""

    stage: str
    job: str
    parts: tuple[Part, ...]
    # The device the job's keys name (None: a job of no device), for the CUDA preflight.
    device: str | None = None

    @property
    def seconds(self) -> float:
        return sum(part.seconds for part in self.parts)

    @property
    def rule(self) -> str:
        return self.job.split()[0]

    @property
    def measures(self) -> bool:
        return self.rule in MEASURING_RULES

    @property
    def sources(self) -> list[str]:
        return sources_of(self.parts)


def sources_of(parts: Iterable[Part]) -> list[str]:
    """The sources of `parts`, the one contributing most seconds first."""
    totals: dict[str, float] = {}
    for part in parts:
        totals[part.source] = totals.get(part.source, 0.0) + part.seconds
    return [
        source for source, seconds in sorted(totals.items(), key=lambda kv: -kv[1]) if seconds > 0
    ]


@dataclass(frozen=True)
class StageTotal:
    stage: str
    jobs: int
    seconds: float
    sources: list[str]


@dataclass(frozen=True)
class Plan:
    """A study's jobs with their estimates, and what the plan could not estimate exactly."""

    title: str
    timings: str
    machine: Machine
    configurations: int
    jobs: tuple[JobEstimate, ...]
    notes: tuple[str, ...] = field(default=())

    def stage_totals(self) -> list[StageTotal]:
        return [
            StageTotal(
                stage=stage,
                jobs=sum(1 for job in self.jobs if job.stage == stage),
                seconds=sum(job.seconds for job in self.jobs if job.stage == stage),
                sources=sources_of(
                    part for job in self.jobs if job.stage == stage for part in job.parts
                ),
            )
            for stage in STAGES
        ]

    @property
    def seconds(self) -> float:
        """Job time: every job (and every snakemake call's start) one after another."""
        return sum(job.seconds for job in self.jobs)

    def wall_seconds(self, cores: int | None = None) -> float:
        """Wall time on `cores` (default: the machine's): the snakemake calls' starts and
        the measuring jobs one after another (`MEASURING_RULES`: bench_slot, and every core
        on a CPU), the other jobs `cores` at a time. On a GPU machine a measurement holds
        one core and the others may run beside it, so such a study can end sooner."""
        cores = max(1, cores or self.machine.cores)
        serial = sum(job.seconds for job in self.jobs if job.stage == CALLS or job.measures)
        rest = sum(job.seconds for job in self.jobs if not (job.stage == CALLS or job.measures))
        return serial + rest / cores

    def stage_seconds(self, stage: str) -> float:
        return sum(job.seconds for job in self.jobs if job.stage == stage)
