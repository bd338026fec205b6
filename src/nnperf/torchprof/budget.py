"""How many warm-up and profiled steps an operator profile runs, and what it may spend.

The budget (`operator_profile.max_seconds`) is for steady steps; the one-time steps of a
process (`nnperf.engine.step.one_time_steps`: allocation, cuDNN autotuning, compilation,
CUDA-graph recording) are bounded on their own (`ONE_TIME_MAX_S`). These are pure functions
of the settings and a step time, apart from the job (`nnperf.torchprof.profile`) so that the
plan is tested without running a step and `nnperf plan` can ask the same questions.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnperf.core.contract import OperatorProfileSettings, VariantSettings
from nnperf.engine.step import one_time_steps

# A profiled step also records every operator with its shapes and allocations, and the
# layer ranges: measured at 1.1x an unprofiled step for resnet18_cifar on a CPU (0.31 vs
# 0.30 s at batch 16, fp32); budgeted at 1.5x so a plan does not overrun.
PROFILED_STEP_COST = 1.5
# A profile without any warm-up step would time allocator growth and first-call setup.
MIN_WARMUP_STEPS = 1
# The one-time steps (`nnperf.engine.step.one_time_steps`: allocation, cuDNN autotuning,
# compilation, CUDA-graph recording) are not paid from operator_profile.max_seconds, which
# budgets steady steps, but they are bounded on their own. On an H100 (shared/h100) they took
# 1.5-12 s (cuDNN autotuning), 17-21 s (torch.compile) and 199 s (max-autotune) for
# resnet18_cifar; three times the slowest leaves room for a larger model or a slower host,
# and past it a profile is not worth the wait (nor may a runaway autotune hold the job).
ONE_TIME_MAX_S = 600.0
# `single_step_time_s.source` and OverBudget's source when the one-time steps ended it.
ONE_TIME_SOURCE = "one-time steps"
# On CUDA the profiler's first session pays CUPTI's initialisation inside the steps it
# records; one step is profiled and thrown away first (as torch.profiler.schedule's warmup).
PROFILER_WARMUP_STEPS = {"cuda": 1}


def one_time_limit_s(settings: OperatorProfileSettings) -> float:
    """Seconds the one-time steps may take in all: `ONE_TIME_MAX_S`, or the profile's own
    budget when that is larger (a profile granted an hour may autotune for one)."""
    return max(ONE_TIME_MAX_S, settings.max_seconds)


def profile_one_time_steps(variant: VariantSettings, device: str, warmup_steps: int) -> int:
    """How many first warm-up steps of a profile are one-time steps. A compiled variant's
    always run (a profile of compilation or graph recording is no profile of the step);
    an eager variant's first step only when warm-up steps are asked for at all (with
    `warmup_steps: 0` the settings ask for a cold profile)."""
    steps = one_time_steps(variant, device)
    return steps if variant.compile else min(steps, warmup_steps)


def one_time_work(variant: VariantSettings, device: str) -> str:
    """What the one-time steps of `variant` do, for messages."""
    if variant.compile:
        graphs = one_time_steps(variant, device) > 1
        return "torch.compile compilation" + (" and CUDA-graph recording" if graphs else "")
    if device == "cuda" and variant.cudnn_benchmark:
        return "cuDNN autotuning and allocation"
    return "first-call setup and allocation"


@dataclass(frozen=True)
class StepPlan:
    """How many more warm-up and profiled steps a profile runs."""

    warmup_steps: int
    profiled_steps: int


def plan_steps(
    step_time_s: float,
    settings: OperatorProfileSettings,
    spent_s: float = 0.0,
    warmups_done: int = 0,
    profiler_warmup_steps: int = 0,
) -> StepPlan | None:
    """The warm-up and profiled steps still to run that fit in what is left of
    `settings.max_seconds`, at `step_time_s` per step (a profiled step costs
    `PROFILED_STEP_COST` times that; profiler warm-up steps count as profiled ones).

    At least `MIN_WARMUP_STEPS` warm-up steps in all (fewer only when the settings ask for
    fewer) and one profiled step must fit, or the answer is None (over budget). Warm-up
    steps are kept before profiled ones: a profile of a cold step misleads more than a
    profile of one step.
    """
    left = settings.max_seconds - spent_s
    profiled_cost = step_time_s * PROFILED_STEP_COST
    fixed_cost = profiled_cost * (1 + profiler_warmup_steps)
    wanted_warmup = max(settings.warmup_steps - warmups_done, 0)
    needed_warmup = _needed_warmup(settings, warmups_done)
    if minimal_cost_s(step_time_s, settings, warmups_done, profiler_warmup_steps) > left:
        return None
    if step_time_s > 0:
        warmup = min(wanted_warmup, int((left - fixed_cost) // step_time_s))
        extra = int((left - warmup * step_time_s - fixed_cost) // profiled_cost)
    else:
        warmup, extra = wanted_warmup, settings.steps
    return StepPlan(
        warmup_steps=max(warmup, needed_warmup),
        profiled_steps=max(1, min(settings.steps, 1 + extra)),
    )


def _needed_warmup(settings: OperatorProfileSettings, warmups_done: int) -> int:
    return max(min(settings.warmup_steps, MIN_WARMUP_STEPS) - warmups_done, 0)


def minimal_cost_s(
    step_time_s: float,
    settings: OperatorProfileSettings,
    warmups_done: int = 0,
    profiler_warmup_steps: int = 0,
) -> float:
    """Seconds of the least a profile still needs (`plan_steps`): the warm-up steps it
    cannot do without, and one profiled step with the profiler's warm-up steps before it."""
    profiled_cost = step_time_s * PROFILED_STEP_COST * (1 + profiler_warmup_steps)
    return _needed_warmup(settings, warmups_done) * step_time_s + profiled_cost


class OverBudget(Exception):
    """The profile cannot fit its budget: its steady steps (`step_time_s`, from `source`)
    in `operator_profile.max_seconds`, or its one-time steps in `one_time_limit_s` (then
    `step_time_s` is None: a one-time step is no step time)."""

    def __init__(self, message: str, step_time_s: float | None, source: str):
        super().__init__(message)
        self.step_time_s = step_time_s
        self.source = source


def over_budget_message(
    step_time_s: float,
    settings: OperatorProfileSettings,
    source: str,
    warmups_done: int = 0,
    profiler_warmup_steps: int = 0,
) -> str:
    needed = minimal_cost_s(step_time_s, settings, warmups_done, profiler_warmup_steps)
    return (
        f"the warm-up and profiled steps still needed take about {needed:.1f} s at the "
        f"{source}'s {step_time_s:.3g} s per step; operator_profile.max_seconds is "
        f"{settings.max_seconds:g} s"
    )


def one_time_message(times: list[float], limit_s: float, work: str) -> str:
    steps = "step" if len(times) == 1 else f"{len(times)} steps"
    return (
        f"the one-time cost ({work}) took {sum(times):.3g} s in the first {steps}, past "
        f"the {limit_s:g} s a profile allows for it (ONE_TIME_MAX_S or "
        "operator_profile.max_seconds); no steady step was measured"
    )
