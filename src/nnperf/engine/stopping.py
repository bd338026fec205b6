"""How much measuring is enough: the two-level estimate and the adaptive stopping rule.

A configuration is measured at two levels (Kalibera & Jones, "Rigorous benchmarking in
reasonable time", 2013): worker **processes** (each with its own memory layout, allocator
state, cuDNN algorithm choice, initial weights) and, inside each, timed **windows** of
`timed_steps` steps. Throughput varies at both levels, and repeating the cheap level (a
window) cannot average away the variation of the expensive one (a process). So:

* `estimate()` takes every window measured so far and returns the throughput (mean of the
  per-process throughputs), its 95% confidence interval (a t-interval over the logs of the
  process throughputs, exponentiated; with a single process, over its windows, which says
  nothing about the process level and is labelled so), and the variance at each level with
  the dominant one. On the log scale the interval is asymmetric and never reaches zero: two
  processes at t = 12.7 put a symmetric one below zero (an H200 gave -476 to 11,471 img/s
  around 5,497), and a throughput cannot be negative.
* `next_action()` is the stopping rule, in the spirit of NVBench (stop when the relative noise
  is under a threshold, with a minimum time and a timeout) and pyperf (worker processes x
  values): stop once the CI half-width is within `target_ci` of the estimate after
  `min_seconds` of windows and `min_processes` processes; otherwise spend the budget where it
  shrinks the interval most. Each process runs the Kalibera-Jones optimal number of windows,
  sqrt(process cost / window cost x within-process variance / between-process variance),
  clamped to [min_windows, max_windows]; a window or a process that would not fit in what is
  left of `max_seconds` is not started. When the process level dominates and the processes
  the target needs at the measured spread (`processes_needed`) cannot be had, it stops early
  (`target_unreachable`) and says how many it would take, instead of spending the budget on
  an interval that cannot get there: the process-level spread of cuDNN's per-process
  algorithm choice (about 4% on the H100) puts 1% dozens of processes away.
* `one_time_kinds()` names the one-time costs of a process's first steps (allocation and
  autotuning, compilation, CUDA-graph recording), which the engine bounds on their own and
  keeps out of every projection of the steady step.

Both are pure functions of numbers, so the rule is tested with synthetic noisy timers;
`nnperf.engine.manager` runs them against real processes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

from nnperf.core import ratios
from nnperf.core.contract import TimingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.wording import ONE_TIME_WHAT

CONFIDENCE = 0.95
# Processes measured before windows per process follow the Kalibera-Jones optimum.
PROCESSES_BEFORE_OPTIMAL = 3


@dataclasses.dataclass(frozen=True)
class WindowSample:
    """One timed window, as the stopping rule sees it."""

    process: int
    images: int
    seconds: float

    @property
    def throughput(self) -> float:
        return self.images / self.seconds


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Throughput of a configuration from its windows so far."""

    throughput: float | None
    ci_low: float | None
    ci_high: float | None
    method: str | None  # "processes", "windows" or None (no interval from one window)
    between_processes: float | None  # variance component of process throughputs, (img/s)^2
    within_process: float | None  # pooled variance of windows inside a process, (img/s)^2
    n_processes: int
    n_windows: int
    timed_s: float

    @property
    def half_width_rel(self) -> float | None:
        """The larger relative distance of a bound from the estimate: the interval is
        asymmetric (log scale), so this is its wider side, what `timing.target_ci` is judged
        against (run JSON `ci_half_width_rel`)."""
        if self.ci_low is None or self.ci_high is None or not self.throughput:
            return None
        return max(self.ci_high - self.throughput, self.throughput - self.ci_low) / self.throughput

    @property
    def dominant_level(self) -> str | None:
        """The level whose variation contributes most to the estimate's variance."""
        if self.between_processes is None or self.within_process is None:
            return None
        per_process_windows = self.n_windows / self.n_processes
        window_part = self.within_process / per_process_windows
        return "process" if self.between_processes > window_part else "window"


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value, e.g. 12.706 for df=1 at 95% (scipy.stats)."""
    return ratios.t_critical(df, confidence)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    mean = _mean(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def by_process(windows: Sequence[WindowSample]) -> dict[int, list[WindowSample]]:
    groups: dict[int, list[WindowSample]] = {}
    for window in windows:
        groups.setdefault(window.process, []).append(window)
    return groups


def process_throughputs(windows: Sequence[WindowSample]) -> dict[int, float]:
    """Each process's throughput: its images over its timed seconds (what it sustained)."""
    return {
        process: sum(w.images for w in group) / sum(w.seconds for w in group)
        for process, group in by_process(windows).items()
    }


def log_interval(rates: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A t-interval over the logs of `rates` (two or more, all positive), exponentiated:
    (exp(m - h), exp(m + h)) with m the mean log and h = t(n - 1) x s_log / sqrt(n). It holds
    the geometric mean and lies in (0, inf); its relative width is what a symmetric interval's
    is to first order (s_log ~ s / mean)."""
    logs = [math.log(rate) for rate in rates]
    centre = _mean(logs)
    half = t_quantile(len(logs) - 1, confidence) * math.sqrt(_variance(logs) / len(logs))
    return math.exp(centre - half), math.exp(centre + half)


def estimate(windows: Sequence[WindowSample], confidence: float = CONFIDENCE) -> Estimate:
    """The configuration's throughput, CI and variance components from `windows`."""
    groups = by_process(windows)
    timed_s = sum(w.seconds for w in windows)
    if not windows:
        return Estimate(None, None, None, None, None, None, 0, 0, 0.0)
    process_rates = list(process_throughputs(windows).values())
    throughput = _mean(process_rates)
    within_df = sum(len(g) - 1 for g in groups.values())
    within = (
        sum(
            sum((w.throughput - _mean([x.throughput for x in g])) ** 2 for w in g)
            for g in groups.values()
        )
        / within_df
        if within_df
        else None
    )
    between = None
    low = high = method = None
    if len(groups) >= 2:
        spread = _variance(process_rates)
        mean_windows = len(windows) / len(groups)
        # Kalibera & Jones' estimator of the process-level component: the variance of the
        # process means less what their own windows' noise puts into it (never below 0).
        between = max(0.0, spread - (within or 0.0) / mean_windows)
        (low, high), method = log_interval(process_rates, confidence), "processes"
    elif len(windows) >= 2:
        (low, high), method = log_interval([w.throughput for w in windows], confidence), "windows"
    return Estimate(
        throughput=throughput,
        ci_low=low,
        ci_high=high,
        method=method,
        between_processes=between,
        within_process=within,
        n_processes=len(groups),
        n_windows=len(windows),
        timed_s=timed_s,
    )


def optimal_windows(
    current: Estimate, process_cost_s: float, window_cost_s: float, timing: TimingSettings
) -> int:
    """Windows per process that minimise the CI for a given time (Kalibera & Jones):
    sqrt(c_process / c_window x within / between), clamped to the configured range.

    Until three processes have run: min_windows. Before two the between-process variance
    is unknown; and the t-interval over two processes has one degree of freedom (t = 12.7,
    against 4.3 with three), so a third process narrows it more than any number of windows.
    No between-process variation at all: windows are the cheaper way to shrink the CI.
    """
    if current.between_processes is None or current.within_process is None:
        return timing.min_windows
    if current.n_processes < PROCESSES_BEFORE_OPTIMAL and timing.max_processes >= 3:
        return timing.min_windows
    if current.between_processes <= 0:
        return timing.max_windows
    ratio = (process_cost_s / max(window_cost_s, 1e-9)) * (
        current.within_process / current.between_processes
    )
    return max(timing.min_windows, min(timing.max_windows, math.ceil(math.sqrt(ratio))))


@dataclasses.dataclass(frozen=True)
class Action:
    """What to do next: run another `window` in the current process, start a new
    `process`, or `stop` (with a reason from vocab.STOP_REASONS and the numbers it is stated
    with, vocab.STOP_NUMBERS; `nnperf.core.wording.stop_sentence` words them)."""

    kind: str
    reason: str | None = None
    numbers: dict = dataclasses.field(default_factory=dict)


def processes_needed(
    process_rates: Sequence[float], target_ci: float, confidence: float = CONFIDENCE
) -> int | None:
    """Processes the interval over process throughputs (`log_interval`) needs to reach
    `target_ci` at the spread `process_rates` show: the smallest n with
    t(n - 1) x s_log / sqrt(n) <= log(1 + target_ci), its wider (upper) side within the
    target. None from fewer than two processes."""
    if len(process_rates) < 2:
        return None
    logs = [math.log(rate) for rate in process_rates]
    return processes_for_spread(math.sqrt(_variance(logs)), 1.0, math.log1p(target_ci), confidence)


def processes_for_spread(
    spread: float, mean: float, target_ci: float, confidence: float = CONFIDENCE
) -> int:
    """`processes_needed` from a process-throughput standard deviation and mean."""
    if spread <= 0 or mean <= 0:
        return 2
    # The normal approximation is a lower bound of n (t > z); walk up from it.
    n = max(2, math.ceil((1.96 * spread / (target_ci * mean)) ** 2))
    while t_quantile(n - 1, confidence) * spread / math.sqrt(n) > target_ci * mean:
        n += 1
    return n


# One-sided confidence of the spread's lower bound that an early stop is judged at: the
# spread of three processes is itself uncertain, and stopping on an overestimate would give
# up on a target that was within reach.
SPREAD_CONFIDENCE = 0.9


def chi2_quantile(df: int, p: float) -> float:
    """The p-quantile of the chi-square distribution with `df` degrees of freedom."""
    if df < 1 or not 0 < p < 1:
        raise ValueError(f"chi2_quantile needs df >= 1 and 0 < p < 1, got {df}, {p}")
    return float(scipy_stats.chi2.ppf(p, df))


def spread_lower_bound(process_rates: Sequence[float], confidence: float = SPREAD_CONFIDENCE):
    """A one-sided lower confidence bound of the process-to-process standard deviation:
    s x sqrt((n - 1) / chi2_confidence(n - 1))."""
    n = len(process_rates)
    spread = math.sqrt(_variance(process_rates))
    return spread * math.sqrt((n - 1) / chi2_quantile(n - 1, confidence))


def unreachable_target(
    current: Estimate,
    process_rates: Sequence[float],
    *,
    process_cost_s: float,
    window_cost_s: float,
    remaining_s: float,
    timing: TimingSettings,
    target_ci: float,
) -> dict | None:
    """Why the target cannot be reached in what is left (the stop numbers that say so), or
    None while it still may be.

    Judged only once `PROCESSES_BEFORE_OPTIMAL` processes (and `min_processes`) have run,
    so the spread is estimated from more than one degree of freedom, at the spread's lower
    confidence bound (`spread_lower_bound`), only when the process level dominates (when
    windows dominate, more windows still narrow the interval) and only while another
    process could still be started (the last one runs to its window cap as before).

    One judgement, whether or not the configuration still serves a comparison of its
    interleaved group (`nnperf.engine.interleave`, which holds it open for an open one
    regardless, and lets it go once none is). Judged at the measured spread instead, a
    configuration that no comparison holds would stop sooner only where the count is a coin
    toss, and would often stop one that makes it: in the default study's recorded processes
    (2-vCPU VM, bs16), fp32 tuned reached 2.9% at 19 processes, while the measured spread of
    its first 3 to 14 asked for 22-39 where about 21 fit (the lower bound: 13-19); and on
    synthetic configurations that need 27 of 40 processes, 39% were cut against 6% at the
    bound, while those truly out of reach stop after a median of 9 processes either way.
    """
    if current.n_processes < max(timing.min_processes, PROCESSES_BEFORE_OPTIMAL):
        return None
    if current.dominant_level != "process" or current.n_processes >= timing.max_processes:
        return None
    mean = _mean(process_rates)
    within = current.within_process or 0.0
    windows_each = current.n_windows / current.n_processes
    # The process-level variance at the lower bound of the spread of process means, less
    # what their windows' noise put into it; then the variance of a process mean at the
    # best the window cap allows: what the target is judged against.
    low = spread_lower_bound(process_rates)
    between_low = max(0.0, low**2 - within / windows_each)
    best = between_low + within / timing.max_windows
    # On the log scale of the interval (`log_interval`): s_log ~ s / mean.
    needed = processes_for_spread(math.sqrt(best) / mean, 1.0, math.log1p(target_ci))
    per_process = minimal_process_s(process_cost_s, window_cost_s, timing)
    more = int(max(0.0, remaining_s) // per_process) if per_process > 0 else timing.max_processes
    reachable = min(timing.max_processes, current.n_processes + more)
    if needed <= reachable:
        return None
    # The count is judged at the lower bound, so it is a floor: the point spread
    # (`processes_needed`) asks for more.
    return {
        "process_spread_rel": math.sqrt(current.between_processes or 0.0) / mean,
        "spread_low_rel": math.sqrt(best) / mean,
        "processes_needed_low": needed,
        "processes_needed": processes_needed(process_rates, target_ci),
        "target_ci": target_ci,
        "max_processes": timing.max_processes,
        "processes_fit": current.n_processes + more,
    }


def rounds_to_resolve(log_ratios: Sequence[float], tolerance: float) -> int | None:
    """Rounds a comparison's paired interval (`nnperf.core.ratios.paired_ratio`: a t-interval
    over per-round log ratios) needs to be resolved at the centre measured so far: to exclude
    1 (half-width under the centre's distance from 0) or to lie within +/-`tolerance` of 1,
    whichever asks fewer, at the round-to-round spread's lower bound (`spread_lower_bound`),
    so a floor. None from fewer than `PROCESSES_BEFORE_OPTIMAL` rounds."""
    if len(log_ratios) < PROCESSES_BEFORE_OPTIMAL:
        return None
    centre = _mean(log_ratios)
    separate = abs(centre)
    tie = min(math.log1p(tolerance) - centre, centre - math.log1p(-tolerance))
    half = max(separate, tie)  # > 0: at least half the band's width
    return processes_for_spread(spread_lower_bound(log_ratios), 1.0, half)


# A comparison is given up once the chance that the rounds left resolve it is below this.
RESOLVE_CHANCE = 0.1


def chance_to_resolve(log_ratios: Sequence[float], tolerance: float, rounds_left: int) -> float:
    """The chance that after `rounds_left` more rounds the paired interval is resolved.

    Its centre then is today's plus what the new rounds bring: with n rounds measured at
    spread s and m more, it is normal around today's centre with variance s^2 m / (n (n+m))
    (the new rounds' own noise and the centre's uncertainty, both shrunk by m / (n+m)). Its
    half-width is t(n+m-1) x s / sqrt(n+m), at the spread's lower bound. Resolved: the centre
    beyond the half-width (the interval excludes 1) or within the band less it (a tie). A
    centre taken as exact would give up early on a ratio three rounds put near the band's
    edge by chance; this gives up where the centre is known well enough to say it stays.
    """
    n, m = len(log_ratios), rounds_left
    centre = _mean(log_ratios)
    spread = math.sqrt(_variance(log_ratios))
    half = t_quantile(n + m - 1) * spread_lower_bound(log_ratios) / math.sqrt(n + m)
    drift = spread * math.sqrt(m / (n * (n + m)))
    if drift <= 0:
        return 1.0  # rounds that agree exactly: nothing to give up on
    normal = scipy_stats.norm(centre, drift)
    chance = normal.sf(half) + normal.cdf(-half)
    low, high = math.log1p(-tolerance) + half, math.log1p(tolerance) - half
    if low < high:
        chance += normal.cdf(high) - normal.cdf(low)
    return float(chance)


def comparison_out_of_reach(
    log_ratios: Sequence[float], tolerance: float, rounds_left: int
) -> dict | None:
    """The numbers that say a comparison cannot be resolved in the `rounds_left` its members'
    budgets still fit beside the `log_ratios` it has (`chance_to_resolve` under
    `RESOLVE_CHANCE`; `rounds_to_resolve` says how many it would take), or None while it may
    be, and before `PROCESSES_BEFORE_OPTIMAL` rounds. The group driver
    (`nnperf.engine.interleave`) then stops holding its members open for it."""
    rounds = len(log_ratios)
    if rounds < PROCESSES_BEFORE_OPTIMAL or rounds_left <= 0:
        return None
    if chance_to_resolve(log_ratios, tolerance, rounds_left) >= RESOLVE_CHANCE:
        return None
    return {
        "rounds_needed": rounds_to_resolve(log_ratios, tolerance),
        "rounds_fit": rounds + rounds_left,
    }


def next_action(
    windows: Sequence[WindowSample],
    *,
    current_process: int,
    elapsed_s: float,
    process_cost_s: float,
    timing: TimingSettings,
    target_ci: float,
    window_cost_s: float | None = None,
) -> Action:
    """The stopping rule (module docstring); called after every window.

    `windows` are the clean ones (a disturbed window is left out, so the process measures
    another in its place). `current_process` is the index of the process whose window just
    ended, `elapsed_s` the configuration's wall time so far and `process_cost_s` what
    starting a process costs (fork, model build, warm-up: measured on the processes so
    far); `window_cost_s` what a window costs, disturbed ones included (the longest of
    `windows` when None).
    """
    current = estimate(windows)
    groups = by_process(windows)
    in_current = len(groups.get(current_process, []))
    window_cost = window_cost_s
    if window_cost is None:
        window_cost = max(w.seconds for w in windows) if windows else 0.0
    remaining = timing.max_seconds - elapsed_s
    enough_processes = current.n_processes >= timing.min_processes
    enough_windows = all(len(g) >= timing.min_windows for g in groups.values())
    relative = current.half_width_rel
    spent = {"spent_s": elapsed_s, "budget_s": timing.max_seconds}
    reached = {"ci_half_width_rel": relative, "target_ci": target_ci}
    if (
        enough_processes
        and enough_windows
        and current.timed_s >= timing.min_seconds
        and relative is not None
        and relative <= target_ci
    ):
        return Action("stop", "ci_target", {**reached, **spent})
    budget = Action("stop", "budget", {**reached, **spent})
    window_fits = window_cost <= remaining
    if in_current >= timing.min_windows:
        why = unreachable_target(
            current,
            list(process_throughputs(windows).values()),
            process_cost_s=process_cost_s,
            window_cost_s=window_cost,
            remaining_s=remaining,
            timing=timing,
            target_ci=target_ci,
        )
        if why is not None:
            return Action("stop", "target_unreachable", {**reached, **spent, **why})
    if in_current < timing.min_windows:
        return Action("window") if window_fits else budget
    wanted = optimal_windows(current, process_cost_s, window_cost, timing)
    more_processes = current_process + 1 < timing.max_processes
    process_fits = process_fits_budget(process_cost_s, window_cost, remaining, timing)
    if in_current >= wanted or in_current >= timing.max_windows:
        if more_processes and process_fits:
            return Action("process")
        if in_current < timing.max_windows and window_fits:
            return Action("window")
        if not more_processes and in_current >= timing.max_windows:
            return Action(
                "stop", "max_processes", {**reached, "max_processes": timing.max_processes}
            )
        return budget
    if window_fits:
        return Action("window")
    return budget


def enough_clean(current: Estimate, timing: TimingSettings) -> bool:
    """Whether the clean windows make an estimate the stopping rule could have stopped on:
    an interval, from `timing.min_processes` processes (or all the processes allowed). A
    configuration whose disturbed windows left it short of this ends `host_busy`."""
    wanted = min(timing.min_processes, timing.max_processes)
    return current.method is not None and current.n_processes >= wanted


def process_fits_budget(
    process_cost_s: float, window_cost_s: float, remaining_s: float, timing: TimingSettings
) -> bool:
    """Whether another process fits in what is left of `timing.max_seconds`: its start and its
    minimal windows (the one test the stopping rule and an interleaved group's comparisons,
    `nnperf.engine.manager`, both start a process by)."""
    return minimal_process_s(process_cost_s, window_cost_s, timing) <= remaining_s


def minimal_process_s(process_cost_s: float, window_cost_s: float, timing: TimingSettings):
    """What one more process costs at the least: its start and `timing.min_windows` windows."""
    return process_cost_s + timing.min_windows * window_cost_s


# --- per-step statistics -------------------------------------------------------------


# The one-time costs a worker process's first steps carry, in order (see one_time_kinds).
FIRST_STEP, COMPILATION, RECORDING = "first_step", "compile", "recording"
ONE_TIME_KINDS = (FIRST_STEP, COMPILATION, RECORDING)
# torch.compile modes that capture CUDA graphs (`triton.cudagraphs` in
# torch._inductor.list_mode_options(); max-autotune implies them).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def one_time_kinds(compile_mode, device: str = "cuda") -> tuple[str, ...]:
    """What a worker process's first steps carry before its steps are steady, one kind per
    step: an eager first step allocates and, under cudnn.benchmark, autotunes every
    convolution (1.5-12 s on the H100 against 10-30 ms steps); a compiled one compiles
    forward and backward; CUDA graphs are recorded on the call after the one that compiles
    (torch's cudagraph trees warm up, then record: 0.5 s at batch 1024 against 15 ms); only
    CUDA has CUDA graphs."""
    if not compile_mode:
        return (FIRST_STEP,)
    if compile_mode in CUDA_GRAPH_MODES and device == "cuda":
        return (COMPILATION, RECORDING)
    return (COMPILATION,)


def check_steps(
    warmup_steps: int, timed_steps: int, compile_mode=False, device: str = "cuda"
) -> None:
    """One-line errors for step counts the protocol cannot use."""
    one_time = one_time_kinds(compile_mode, device)
    if warmup_steps < len(one_time):
        detail = " and ".join(ONE_TIME_WHAT[kind] for kind in one_time)
        raise NnperfError(
            f"warmup_steps {warmup_steps!r} is not allowed; allowed: an integer >= "
            f"{len(one_time)} (the first {len(one_time)} step(s) carry {detail}, which must "
            "not land in a timed window)"
        )
    if timed_steps < 1:
        raise NnperfError(f"timed_steps {timed_steps!r} is not allowed; allowed: an integer >= 1")


def compile_time(warmup_step_time_s: Sequence[float], steady_step_s: float) -> float:
    """Warm-up time above steady state: sum(warm-up steps) - their count x steady step time.

    torch.compile compiles lazily inside the first calls (forward, then backward,
    recompiles, CUDA-graph recording), so this catches all of it without reaching into
    torch._dynamo's private counters.
    """
    return max(0.0, float(sum(warmup_step_time_s)) - len(warmup_step_time_s) * steady_step_s)


def step_time_stats(values) -> dict:
    """median, mean, std (sample), min, max, p10, p90 of per-step times."""
    data = np.asarray(values, dtype=float)
    return {
        "median": float(np.median(data)),
        "mean": float(np.mean(data)),
        "std": float(np.std(data, ddof=1)) if data.size > 1 else None,
        "min": float(np.min(data)),
        "max": float(np.max(data)),
        "p10": float(np.percentile(data, 10)),
        "p90": float(np.percentile(data, 90)),
    }


# What a later process of a compiled variant pays for compilation, as a share of the first
# one's, until a later process has been measured: the engine plans with it (`process_cost`)
# and the rehearsal replays it (`nnperf.engine.rehearsal`), one number so that the two cannot
# disagree. Inductor's FX-graph and autotune caches, shared by the processes of a machine,
# spare the code generation, not Dynamo's tracing nor the guards. Measured by the gpu-check
# on an H200 (reports/examples/h200-gpu-check, runs.csv): bf16 CUDA graphs compiled in 23.0 s
# cold, then 4.9 s in the second process (0.21); fp16's processes after it took 4.1 and
# 3.4 s (0.18, 0.15 of the cold one). Rounded up, because a share planned too low starts a
# process that the budget then cuts off mid-compilation, while one planned too high only
# stops a process earlier.
LATER_COMPILE_SHARE = 0.25


def process_cost(processes: list[dict], windows: list[dict], compiled: bool = False) -> float:
    """What starting one more process is expected to cost: worker start to its first window.

    Once a second process has run, the mean over the processes after the first (they start
    with warm compile caches). Before, the first process's cost; for a compiled variant with
    its compilation cut to LATER_COMPILE_SHARE.
    """
    costs = {}
    for record in processes:
        first_window = next(
            (w["started_at_unix"] for w in windows if w["process"] == record["process"]),
            None,
        )
        if first_window is not None:
            # A member of a shared process waits for its partners between its warm-up and
            # its first window (`nnperf.engine.sharing`): no cost of its own.
            waited = record.get("waited_s") or 0.0
            costs[record["process"]] = first_window - record["started_at_unix"] - waited
    if not costs:
        return 0.0
    later = [cost for process, cost in costs.items() if process > 0]
    if later:
        return sum(later) / len(later)
    compiling = processes[0].get("one_time_step_time_s", {}).get(COMPILATION)
    if not compiled or compiling is None:
        return costs[0]
    return costs[0] - (1 - LATER_COMPILE_SHARE) * compiling
