"""Why a measurement was noisy: the likely causes of one configuration's spread, ranked.

A configuration that missed its CI target (`ci_target_met` false) is read through what its
windows recorded beside each throughput (`vocab.WINDOW_CSV_COLUMNS`). Each candidate cause
is a test on that record, and each found cause is one short sentence:

* **drift** (`drift`): window throughput against time (`scipy.stats.linregress`), significant
  (p < `ALPHA`) and large against the target (a change over the run of at least
  `DRIFT_SHARE_OF_TARGET` of it): a machine warming up, a cache filling, a neighbour
  arriving.
* **host load** (`host_load`), **steal** (`steal`), **clock** (`clock`): throughput falls
  as other processes use cores (`other_cores`), as the hypervisor steals CPU time
  (`steal_share`), or follows the SM clock (`sm_clock_mhz`; throttled windows where the
  clock does not vary). The same regression, against the recorded covariate, so load too
  small to flag a window (`nnperf.engine.stability`) still shows when it costs speed.
* **a process level split in two** (`bimodal`): sorted process means with a gap wider than
  either side's range, two processes or more on each side (cuDNN choosing one of two
  algorithms per process does this).
* **process level** (`process_level`): the processes differ by more than their windows
  explain (one-way ANOVA over processes), with no split.
* **window noise** (`window_noise`): none of the above; the sentence says so, with the CV
  of the windows within one process.
* **shared slowdowns** (`shared_slowdown`, `shared_slowdown()`): read from the group rather
  than the windows. Interleaved, a configuration's process of round *r* ran beside the other
  configurations' processes of round *r*; when its process throughputs rise and fall with
  theirs (each relative to its own mean; a regression of log rates, significant), the
  process level is the machine's capacity changing under all of them (a VM's host, a shared
  physical core, a power limit), not the configuration. It leads where found: the paired
  comparisons cancel it, a configuration's own CI cannot, and nothing recorded inside the
  machine (load, steal, clock) need show it.

Causes are ranked by the share of the window throughputs' variance each accounts for (r²
of the regression, eta² of the process grouping). A process-level difference that lines up
with time reads as drift too; both are then named, ranked. What the target would take comes
last: the processes it needs at the measured process spread
(`nnperf.engine.stopping.processes_for_spread`) and their seconds at this run's cost per
process. Data in, data out: `explain()` takes one run document's windows and processes,
`noise_columns()` gives summary.csv's `noise_cause` and `noise_detail`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from nnperf.core import stats
from nnperf.core.wording import count_of, missing
from nnperf.engine.stopping import processes_for_spread
from nnperf.report.format import fmt_duration, fmt_pct

CAUSES = (
    "shared_slowdown",
    "drift",
    "host_load",
    "steal",
    "clock",
    "bimodal",
    "process_level",
    "window_noise",
    "none",
)
# How a note names each cause.
CAUSE_LABELS = {
    "shared_slowdown": "the machine slowing under the whole group",
    "drift": "drift over time",
    "host_load": "host load",
    "steal": "CPU steal",
    "clock": "the clock",
    "bimodal": "a process level split in two",
    "process_level": "the process level",
    "window_noise": "window-level noise, no external cause found",
    "none": "unknown, no windows recorded",
}
# Significance level of every test: several causes are tested per configuration, so a
# stricter level than 5% keeps chance findings out of the report.
ALPHA = 0.01
# Drift counts when the change it makes over the run is at least this share of the target.
DRIFT_SHARE_OF_TARGET = 0.5
# A split of the process means counts when its gap is at least this share of the target.
SPLIT_SHARE_OF_TARGET = 0.5
# Target assumed where the document names none (the CPU default, vocab.DEFAULT_TARGET_CI).
FALLBACK_TARGET = 0.03
# The thresholds `nnperf.engine.stability` flags a window at (OVERLOAD_TOLERANCE_CORES,
# STEAL_LIMIT), restated: that module samples NVML (through torch), which the report's
# torch-free environment must not reach.
OVERLOAD_TOLERANCE_CORES = 0.25
STEAL_LIMIT = 0.05
# Fewest windows a regression is read from.
MIN_WINDOWS = 4


@dataclasses.dataclass(frozen=True)
class Cause:
    """One likely cause: its code (`CAUSES`), its sentence, and the share of the window
    variance it accounts for (what ranks it)."""

    code: str
    sentence: str
    share: float


def window_frame(windows: Sequence[Mapping]) -> pd.DataFrame:
    """The windows as numbers (throughput, time, covariates), those without a throughput
    left out; `throttled` is whether the window recorded a throttle reason."""
    frame = pd.DataFrame(list(windows))
    if frame.empty or "throughput_img_s" not in frame:
        return pd.DataFrame(columns=["process", "window", "throughput_img_s"])
    numeric = ("throughput_img_s", "started_at_unix", "other_cores", "steal_share", "sm_clock_mhz")
    for name in numeric:
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else np.nan
    throttle = frame["throttle_reasons"] if "throttle_reasons" in frame else pd.Series(dtype=object)
    frame["throttled"] = [
        isinstance(t, str) and bool(t.strip()) for t in throttle.reindex(frame.index)
    ]
    frame = frame[np.isfinite(frame["throughput_img_s"]) & (frame["throughput_img_s"] > 0)]
    return frame.reset_index(drop=True)


def _p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else "p<0.01" if p < 0.01 else f"p={p:.2f}"


def _signed_pct(value: float) -> str:
    return ("+" if value >= 0 else "\u2212") + fmt_pct(abs(value))


def _fit(x: pd.Series, y: pd.Series):
    """linregress of y on x where both are known and x varies, else None."""
    known = np.isfinite(x.to_numpy(dtype=float)) & np.isfinite(y.to_numpy(dtype=float))
    xs, ys = x.to_numpy(dtype=float)[known], y.to_numpy(dtype=float)[known]
    if len(xs) < MIN_WINDOWS or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    return scipy_stats.linregress(xs, ys)


def _time_fits(frame: pd.DataFrame, minutes: pd.Series) -> list:
    """The two regressions drift is read from: the windows within each process against
    time (both centred on the process's own means, one slope pooled over the processes),
    and the process means against the process's mean time. Windows of one process are not
    independent of each other's process, so a regression of every window on time would
    take one slow process for a trend; these two do not."""
    rates, process = frame["throughput_img_s"], frame["process"]
    within = _fit(
        minutes - minutes.groupby(process).transform("mean"),
        rates - rates.groupby(process).transform("mean"),
    )
    means = frame.assign(_minutes=minutes).groupby("process")[["_minutes", "throughput_img_s"]]
    means = means.mean()
    between = _fit(means["_minutes"], means["throughput_img_s"]) if len(means) >= 3 else None
    return [fit for fit in (within, between) if fit is not None]


def drift(frame: pd.DataFrame, target: float) -> Cause | None:
    """Throughput that moves with time, within processes or from one process to the next,
    significantly and by at least `DRIFT_SHARE_OF_TARGET` of the target over the run."""
    minutes = (frame["started_at_unix"] - frame["started_at_unix"].min()) / 60
    if not np.isfinite(minutes.to_numpy(dtype=float)).any():
        return None
    significant = [fit for fit in _time_fits(frame, minutes) if fit.pvalue < ALPHA]
    fit = _fit(minutes, frame["throughput_img_s"])
    if not significant or fit is None:
        return None
    p_value = min(f.pvalue for f in significant)
    # Relative to where the fitted line starts: "fell 9% over the run" reads from the start.
    start = float(frame["throughput_img_s"].mean()) - fit.slope * float(minutes.mean())
    per_minute = fit.slope / start
    change = per_minute * float(minutes.max())
    if abs(change) < DRIFT_SHARE_OF_TARGET * target:
        return None
    sentence = (
        f"Drift: throughput {'fell' if change < 0 else 'rose'} {fmt_pct(abs(change))} over the "
        f"run (slope {_signed_pct(per_minute)}/min, {_p_text(p_value)})."
    )
    trend = fit.slope * (minutes - minutes.mean())
    share = float(trend.var() / frame["throughput_img_s"].var())
    return Cause("drift", sentence, min(share, 1.0))


def detrended(frame: pd.DataFrame, target: float) -> pd.DataFrame:
    """The windows with the drift over time taken out of their throughput (unchanged when
    there is no drift), so a trend is not read a second time as processes that differ."""
    if drift(frame, target) is None:
        return frame
    minutes = (frame["started_at_unix"] - frame["started_at_unix"].min()) / 60
    trend = _fit(minutes, frame["throughput_img_s"]).slope * (minutes - minutes.mean())
    return frame.assign(throughput_img_s=frame["throughput_img_s"] - trend)


def _slower_share(frame: pd.DataFrame, hit: pd.Series) -> float:
    """How much slower the windows in `hit` ran than the others (0.11: 11% slower)."""
    rates = frame["throughput_img_s"]
    if not hit.any() or hit.all():
        return math.nan
    return 1 - float(rates[hit].mean()) / float(rates[~hit].mean())


def _falls_with(
    frame: pd.DataFrame, column: str, limit: float, code: str, opening: str, past_limit: str
) -> Cause | None:
    """Throughput that falls as `column` rises (a significant negative slope): `opening`
    starts the sentence, and the windows past `limit` (`past_limit` names them) are compared
    with the rest."""
    fit = _fit(frame[column], frame["throughput_img_s"])
    if fit is None or fit.slope >= 0 or fit.pvalue >= ALPHA:
        return None
    sentence = f"{opening} (r² {fit.rvalue**2:.2f}, {_p_text(fit.pvalue)})"
    hit = frame[column] > limit
    slower = _slower_share(frame, hit)
    if np.isfinite(slower):
        sentence += (
            f"; the {count_of(hit.sum(), 'window')} {past_limit} ran {fmt_pct(slower)} slower "
            "than the rest"
        )
    return Cause(code, sentence + ".", fit.rvalue**2)


def host_load(frame: pd.DataFrame) -> Cause | None:
    """Throughput that falls as other processes use more cores."""
    return _falls_with(
        frame,
        "other_cores",
        OVERLOAD_TOLERANCE_CORES,
        "host_load",
        f"Host load: other processes used up to {frame['other_cores'].max():.1f} cores during "
        "the windows and throughput fell as they did",
        f"beside more than {OVERLOAD_TOLERANCE_CORES} of a core of other work",
    )


def steal(frame: pd.DataFrame) -> Cause | None:
    """Throughput that falls as the hypervisor steals more CPU time."""
    return _falls_with(
        frame,
        "steal_share",
        STEAL_LIMIT,
        "steal",
        f"Steal: the hypervisor took up to {fmt_pct(frame['steal_share'].max())} of the CPU "
        "time and throughput fell as it did",
        f"with more than {fmt_pct(STEAL_LIMIT)} steal",
    )


def clock(frame: pd.DataFrame) -> Cause | None:
    """Throughput that follows the SM clock; or, at one clock, throttled windows slower."""
    clocks = frame["sm_clock_mhz"]
    fit = _fit(clocks, frame["throughput_img_s"])
    throttled = int(frame["throttled"].sum())
    tail = f", {throttled} windows throttled" if throttled else ""
    if fit is not None and fit.slope > 0 and fit.pvalue < ALPHA:
        sentence = (
            f"Clock: the SM clock ranged {clocks.min():.0f}–{clocks.max():.0f} MHz{tail}, and "
            f"throughput followed it (r² {fit.rvalue**2:.2f}, {_p_text(fit.pvalue)})."
        )
        return Cause("clock", sentence, fit.rvalue**2)
    fit = _fit(frame["throttled"].astype(float), frame["throughput_img_s"])
    if fit is None or fit.slope >= 0 or fit.pvalue >= ALPHA:
        return None
    sentence = (
        f"Clock: {throttled} windows were throttled and ran "
        f"{fmt_pct(_slower_share(frame, frame['throttled']))} slower than the rest "
        f"({_p_text(fit.pvalue)})."
    )
    return Cause("clock", sentence, fit.rvalue**2)


def _eta_squared(frame: pd.DataFrame, groups: pd.Series) -> float:
    """The share of the window throughputs' variance between `groups` (sum of squares)."""
    rates = frame["throughput_img_s"]
    total = float(((rates - rates.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    means = rates.groupby(groups).transform("mean")
    return float(((means - rates.mean()) ** 2).sum()) / total


def split(process_means: Sequence[float], target: float) -> tuple[list[float], list[float]] | None:
    """The two groups of a process level split in two, or None: the widest gap between
    sorted process means, two or more processes on each side, wider than either side's
    range and than `SPLIT_SHARE_OF_TARGET` of the target."""
    means = sorted(float(m) for m in process_means if np.isfinite(m))
    if len(means) < 4:
        return None
    cut = max(range(2, len(means) - 1), key=lambda i: means[i] - means[i - 1])
    low, high = means[:cut], means[cut:]
    gap = high[0] - low[-1]
    if gap <= max(np.ptp(low), np.ptp(high)) or gap < SPLIT_SHARE_OF_TARGET * target * np.mean(
        means
    ):
        return None
    return low, high


def process_causes(frame: pd.DataFrame, target: float) -> list[Cause]:
    """A process level split in two (`split`), else processes that differ by more than
    their windows explain (one-way ANOVA), else nothing."""
    groups = [g["throughput_img_s"].to_numpy() for _, g in frame.groupby("process")]
    if len(groups) < 2:
        return []
    means = frame.groupby("process")["throughput_img_s"].mean()
    halves = split(means.tolist(), target)
    if halves is not None:
        low, high = halves
        share = _eta_squared(frame, frame["process"].map(means >= high[0]))
        sentence = (
            f"A process level split in two: {len(low)} processes at about "
            f"{np.mean(low):.3g} img/s and {len(high)} at about {np.mean(high):.3g} "
            f"({fmt_pct(high[0] / low[-1] - 1)} apart, wider than either group's spread): each "
            "process settles in one of two states, such as cuDNN choosing one of two algorithms."
        )
        return [Cause("bimodal", sentence, share)]
    if any(len(g) < 2 for g in groups):
        return []
    result = scipy_stats.f_oneway(*groups)
    if not result.pvalue < ALPHA:
        return []
    sentence = (
        f"Process level: the {len(groups)} processes settle at different speeds "
        f"({means.min():.3g}–{means.max():.3g} img/s, more apart than their windows explain, "
        f"one-way ANOVA {_p_text(result.pvalue)}): memory layout, thread placement or "
        "algorithm choice differ from process to process."
    )
    return [Cause("process_level", sentence, _eta_squared(frame, frame["process"]))]


def within_process_cv(frame: pd.DataFrame) -> float:
    """The pooled CV of the windows within one process (each relative to its process mean)."""
    relative = frame["throughput_img_s"] / frame.groupby("process")["throughput_img_s"].transform(
        "mean"
    )
    return stats.coefficient_of_variation(relative)


def causes(windows: Sequence[Mapping], target: float | None = None) -> list[Cause]:
    """Every likely cause of the windows' spread, the one accounting for most first; window
    noise when no external cause is found; `none` when there are no windows to read."""
    frame = window_frame(windows)
    target = FALLBACK_TARGET if target is None or not target > 0 else float(target)
    if len(frame) < 2:
        return [Cause("none", "No windows were recorded to read the noise from.", 0.0)]
    found = [
        cause
        for cause in (drift(frame, target), host_load(frame), steal(frame), clock(frame))
        if cause is not None
    ]
    found += process_causes(detrended(frame, target), target)
    if not found:
        found.append(
            Cause(
                "window_noise",
                "No external cause found: the windows of one process vary with a CV of "
                f"{fmt_pct(within_process_cv(frame))}, with no drift, host load, steal or clock "
                "change that follows them; more windows and processes narrow the CI.",
                0.0,
            )
        )
    return sorted(found, key=lambda cause: -cause.share)


def shared_slowdown(
    own: Mapping[int, float], others: Sequence[Mapping[int, float]]
) -> Cause | None:
    """Process throughputs (`own`, by round) that follow the other configurations measured in
    the same rounds (`others`, one mapping of round to rate per configuration): the
    machine's capacity moving under the whole group (module docstring). Each configuration is
    taken relative to its own mean, so precisions and variants of different speeds compare."""
    relative = [
        {r: rate / float(np.mean(list(rates.values()))) for r, rate in rates.items()}
        for rates in others
        if len(rates) >= 2
    ]
    if not relative:
        return None
    rounds = sorted(r for r in own if any(r in rel for rel in relative))
    group = pd.Series(
        [float(np.mean([rel[r] for rel in relative if r in rel])) for r in rounds], index=rounds
    )
    mine = pd.Series([float(own[r]) for r in rounds], index=rounds)
    fit = _fit(np.log(group), np.log(mine))
    if fit is None or fit.slope <= 0 or fit.pvalue >= ALPHA:
        return None
    slowest = float(group.min() / group.median())
    sentence = (
        f"Shared slowdowns: its processes rose and fell with the "
        f"{count_of(len(relative), 'other configuration')} measured beside them, round by "
        f"round (r² {fit.rvalue**2:.2f}, {_p_text(fit.pvalue)}; the group's slowest round "
        f"{fmt_pct(1 - slowest)} under its median): the machine's capacity changed under all "
        "of them (a virtual machine's host, a shared core, a power limit), which nothing "
        "recorded inside it need show. The paired comparisons cancel it; this "
        "configuration's own CI cannot, short of measuring through more such episodes."
    )
    return Cause("shared_slowdown", sentence, fit.rvalue**2)


def with_shared_slowdown(columns: Mapping, found: Cause | None) -> dict:
    """summary.csv's `noise_cause`/`noise_detail` with a shared slowdown put first (it
    explains the process level the windows' causes name)."""
    if found is None or missing(columns.get("noise_cause")):
        return dict(columns)
    return {
        "noise_cause": found.code,
        "noise_detail": f"{found.sentence} {columns.get('noise_detail') or ''}".strip(),
    }


def process_cost_s(processes: Sequence[Mapping]) -> float | None:
    """Median seconds a measured worker process took, start to end (None: not recorded)."""
    spans = [
        float(p["ended_at_unix"]) - float(p["started_at_unix"])
        for p in processes
        if p.get("started_at_unix") is not None and p.get("ended_at_unix") is not None
    ]
    return float(np.median(spans)) if spans else None


def target_sentence(
    process_rates: Sequence[float], target: float | None, cost_s: float | None = None
) -> str | None:
    """What the target would take: processes at the measured process spread
    (`processes_for_spread`), and their time at `cost_s` per process."""
    rates = [float(r) for r in process_rates if r is not None and np.isfinite(float(r))]
    if target is None or not target > 0:
        return None
    if len(rates) < 2:
        return (
            f"The {fmt_pct(target)} target needs at least two processes: with "
            f"{len(rates)} the process-to-process spread is unmeasured."
        )
    mean, spread = float(np.mean(rates)), float(np.std(rates, ddof=1))
    needed = processes_for_spread(spread, mean, target)
    text = (
        f"At the measured process spread (RSD {fmt_pct(spread / mean)}), the "
        f"{fmt_pct(target)} target would take {needed} processes"
    )
    if needed > len(rates):
        text += f", {needed - len(rates)} more than the {len(rates)} measured"
        if cost_s is not None and cost_s > 0:
            text += (
                f" (about {fmt_duration((needed - len(rates)) * cost_s)} more at "
                f"{fmt_duration(cost_s)} per process)"
            )
    else:
        text += f", no more than the {len(rates)} measured: the windows within them are the noise"
    return text + "."


def explain(
    windows: Sequence[Mapping],
    processes: Sequence[Mapping],
    target: float | None = None,
) -> tuple[str, str]:
    """(cause code, detail): the top cause's code and every cause's sentence, ranked, then
    what the target would take."""
    found = causes(windows, target)
    rates = [p.get("throughput_img_s") for p in processes if p.get("throughput_img_s") is not None]
    sentences = [cause.sentence for cause in found]
    needs = target_sentence(rates, target, process_cost_s(processes))
    if needs:
        sentences.append(needs)
    return found[0].code, " ".join(sentences)


def noise_columns(document: Mapping) -> dict:
    """summary.csv's `noise_cause` and `noise_detail` for a run document that measured and
    missed its CI target; both None otherwise."""
    if document.get("status") != "ok" or document.get("ci_target_met") is not False:
        return {"noise_cause": None, "noise_detail": None}
    code, detail = explain(
        document.get("windows") or [],
        document.get("processes") or [],
        (document.get("timing") or {}).get("target_ci"),
    )
    return {"noise_cause": code, "noise_detail": detail}


def unresolved_comparison(
    a_rates: Sequence[float],
    b_rates: Sequence[float],
    *,
    paired: bool,
    within: float | None,
    target: float,
    rounds: Sequence[float] | None = None,
) -> str | None:
    """Why a comparison stayed unresolved (its interval neither excludes 1 nor lies within
    `target` of it: `RatioCI.resolved`), and what resolving it would take; None when it is
    resolved. `a_rates`/`b_rates` are the processes the interval was built from: pairs by
    round (`rounds`) where `paired`, else each configuration's own.

    Paired, the noise is the spread of the per-round log ratios (what a shared drift or a
    neighbour did not cancel), and a trend of the ratio over the rounds (one configuration
    slowing more than the other under the same load) is named; apart, it is both
    configurations' process spreads. Then the pairs (or processes each) that spread needs
    for +/-`target` (`processes_for_spread`, on the log scale for pairs)."""
    if within is not None and within <= target:
        return None
    a = np.asarray([float(r) for r in a_rates], dtype=float)
    b = np.asarray([float(r) for r in b_rates], dtype=float)
    target_text = f"the {fmt_pct(target)} target"
    if paired:
        if a.size < 2:
            return f"Unresolved: {count_of(a.size, 'paired round')}; {target_text} needs two."
        logs = np.log(a / b)
        spread = float(np.std(logs, ddof=1))
        text = (
            f"Unresolved against {target_text}: over {count_of(a.size, 'paired round')} the "
            f"ratio varies from round to round by {fmt_pct(math.expm1(spread))} (RSD)"
        )
        if rounds is not None and a.size >= 3:
            fit = _fit(pd.Series(list(rounds), dtype=float), pd.Series(logs))
            if fit is not None and fit.pvalue < ALPHA:
                text += (
                    f", and it drifts over the rounds ({_signed_pct(math.expm1(fit.slope))} "
                    f"per round, {_p_text(fit.pvalue)}): one configuration slows more than the "
                    "other under the same conditions"
                )
        needed = processes_for_spread(spread, 1.0, math.log1p(target))
        unit, measured = "paired rounds", a.size
    else:
        if a.size < 2 or b.size < 2:
            return (
                f"Unresolved: measured apart, {count_of(min(a.size, b.size), 'process')} on one "
                f"side; {target_text} needs two on each."
            )
        spreads = [float(np.std(x, ddof=1) / np.mean(x)) for x in (a, b)]
        text = (
            f"Unresolved against {target_text}: measured apart (not interleaved), so each "
            f"side's process spread (RSD {fmt_pct(spreads[0])} and {fmt_pct(spreads[1])}) "
            "and whatever changed between them stay in the ratio"
        )
        # A ratio's relative variance is about the sum of its two means' relative variances.
        needed = processes_for_spread(math.hypot(*spreads), 1.0, target)
        unit, measured = "processes each", min(a.size, b.size)
    text += f"; at that spread, ±{fmt_pct(target)} would take ~{needed} {unit}"
    if needed > measured:
        text += f", {needed - measured} more than measured"
    return text + "."


def window_label(window: Mapping) -> str:
    """`p1w3`: process 1's window 3."""
    return f"p{window.get('process')}w{window.get('window')}"


def spread_columns(windows: Sequence[Mapping]) -> dict:
    """pyperf-style spread of a configuration's window throughputs: min and max, and the
    windows outside Tukey's fences (`nnperf.core.stats.tukey_outliers`, 1.5 IQR beyond the
    quartiles, as pyperf's `stats` counts outliers): their count and which ("p1w3, p2w0")."""
    rated = [w for w in windows if w.get("throughput_img_s") is not None]
    rates = [float(w["throughput_img_s"]) for w in rated]
    finite = [r for r in rates if np.isfinite(r)]
    outliers = stats.tukey_outliers(rates)
    return {
        "throughput_img_s_min": min(finite) if finite else None,
        "throughput_img_s_max": max(finite) if finite else None,
        "outliers": len(outliers) if finite else None,
        "outlier_windows": ", ".join(window_label(rated[i]) for i in outliers),
    }
